//! The `secrets` step: bundles from the inbox, checked whole, placed with their final owner,
//! mode and label (the pure parser and layout are in [`super::bundle`]).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use super::fileset::FileSet;
use crate::config::Role;
use crate::engine::{Change, Cx, Observation, Step};
use crate::fsio::{DirSpec, FileSpec};

/// How long a bundle must be left alone (no modification) before it is read: a bundle copied in
/// place (scp) is complete once its writer stopped. Renaming a finished file into the inbox is
/// always safe.
pub(crate) const BUNDLE_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Bootstrap secrets: bundles dropped into the inbox are checked whole, then every file is placed
/// with its final owner, mode and label through the one atomic write; the bundle is then removed
/// from the inbox. On a controller, kubelet waits until the control plane's certificates are in
/// place.
pub(crate) struct Secrets;

impl Secrets {
    /// Regular, non-hidden files in the inbox, by name (node paths).
    fn bundles(cx: &Cx) -> anyhow::Result<Vec<PathBuf>> {
        let inbox = &cx.settings.secrets_inbox;
        let real = cx.root.path(inbox);
        let entries = match std::fs::read_dir(&real) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(e).with_context(|| format!("reading the inbox {}", real.display()))
            }
        };
        let mut out = Vec::new();
        for e in entries {
            let e = e.with_context(|| real.display().to_string())?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !e.file_type()?.is_file() {
                continue;
            }
            out.push(inbox.join(name));
        }
        out.sort();
        Ok(out)
    }

    /// The files a bundle places, checked whole (nothing is placed from an invalid bundle).
    fn fileset(cx: &Cx, bundle: &Path) -> anyhow::Result<FileSet> {
        let real = cx.root.path(bundle);
        // Bounded: read at most one byte more than a bundle may hold (the parser refuses it).
        let mut bytes = Vec::new();
        crate::fsio::open_nofollow(&real)
            .and_then(|f| {
                use std::io::Read;
                f.take(super::bundle::MAX_BUNDLE_BYTES as u64 + 1)
                    .read_to_end(&mut bytes)
            })
            .with_context(|| format!("reading {}", real.display()))?;
        let records = super::bundle::parse(&bytes, bundle)?;
        let plan = super::bundle::plan(
            &records,
            super::bundle::TYPHOON_LAYOUT,
            cx.settings.role,
            &cx.settings.bootstrap_kubeconfig,
            bundle,
        )?;
        let owner = |name: &str, what: &Path| {
            crate::accounts::resolve(&cx.root, name).map_err(|e| {
                anyhow::anyhow!(
                    "{}: {e} (owner of {}); nothing was placed",
                    bundle.display(),
                    what.display()
                )
            })
        };
        let mut set = FileSet::default();
        for d in &plan.dirs {
            let (uid, gid) = owner(d.owner, &d.dest)?;
            set.dirs.push(DirSpec {
                path: d.dest.clone(),
                mode: d.mode,
                uid,
                gid,
                label: d.label.clone(),
            });
        }
        for f in plan.files {
            let (uid, gid) = owner(f.owner, &f.dest)?;
            set.files.push(FileSpec {
                path: f.dest,
                content: f.content,
                mode: f.mode,
                uid,
                gid,
                label: f.label,
                temps_of: None,
            });
        }
        Ok(set)
    }

    /// Still being written: not closed nor renamed in as far as the kernel told the daemon,
    /// and modified less than a second ago (the fallback rule).
    fn settling(cx: &Cx, bundle: &Path) -> bool {
        if cx.settled.is_settled(&cx.root.path(bundle)) {
            return false;
        }
        std::fs::metadata(cx.root.path(bundle))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < BUNDLE_SETTLE)
    }

    /// On a controller the control plane needs its certificates before kubelet starts.
    fn controller_ready(cx: &Cx) -> bool {
        cx.settings.role != Role::Controller || cx.root.path("/etc/kubernetes/pki/ca.crt").exists()
    }
}

impl Step for Secrets {
    fn id(&self) -> &'static str {
        "secrets"
    }
    fn description(&self) -> &'static str {
        "bootstrap secrets from the inbox, placed with final owner, mode and label"
    }
    fn deps(&self) -> &'static [&'static str] {
        &["node-files"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let bundles = Self::bundles(cx)?;
            let mut changes = Vec::new();
            if !cx.root.path(&cx.settings.secrets_inbox).exists() {
                changes.push(Change::new(
                    format!(
                        "create directory {} (0700)",
                        cx.settings.secrets_inbox.display()
                    ),
                    "missing: the inbox exists before the bundle comes, so nodectld is told the moment it is complete",
                ));
            }
            for b in &bundles {
                if Self::settling(cx, b) {
                    cx.recheck_in(BUNDLE_SETTLE);
                    return Ok(Observation::Waiting(format!(
                        "{} to be completely written (modified less than {}s ago)",
                        b.display(),
                        BUNDLE_SETTLE.as_secs()
                    )));
                }
                let t = std::time::Instant::now();
                let set = Self::fileset(cx, b)?;
                let read = t.elapsed();
                changes.extend(set.changes(cx)?);
                tracing::debug!(
                    target: "nodectl::engine",
                    "secrets: {} read and checked in {:.1} ms, compared with the node in {:.1} ms",
                    b.display(),
                    read.as_secs_f64() * 1e3,
                    (t.elapsed() - read).as_secs_f64() * 1e3
                );
                changes.push(Change::new(
                    format!("remove {} from the inbox", b.display()),
                    format!("its {} files are placed", set.files.len()),
                ));
            }
            if !changes.is_empty() {
                return Ok(Observation::Changes(changes));
            }
            if !Self::controller_ready(cx) {
                return Ok(Observation::Waiting(format!(
                    "the bootstrap assets bundle in {} (a controller needs /etc/kubernetes/pki)",
                    cx.settings.secrets_inbox.display()
                )));
            }
            Ok(Observation::Converged(format!(
                "no bundle pending in {}",
                cx.settings.secrets_inbox.display()
            )))
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            // Created when missing, left as it is otherwise (provisioning may have made it
            // writable for the user its copy runs as).
            let inbox = &cx.settings.secrets_inbox;
            if !cx.root.path(inbox).exists() {
                cx.writer().ensure_dir(&DirSpec::new(inbox.clone(), 0o700))?;
            }
            for b in Self::bundles(cx)? {
                if Self::settling(cx, &b) {
                    continue;
                }
                // Checked whole before anything is written.
                let t = std::time::Instant::now();
                let set = Self::fileset(cx, &b)?;
                let read = t.elapsed();
                set.apply(cx)?;
                let placed = t.elapsed();
                tracing::info!(bundle = %b.display(), files = set.files.len(), "placed {} files from {}", set.files.len(), b.display());
                cx.writer().remove(&b)?;
                tracing::debug!(
                    target: "nodectl::engine",
                    "secrets: {} read again in {:.1} ms, directories and files placed in {:.1} ms, removed in {:.1} ms",
                    b.display(),
                    read.as_secs_f64() * 1e3,
                    (placed - read).as_secs_f64() * 1e3,
                    (t.elapsed() - placed).as_secs_f64() * 1e3
                );
            }
            Ok(())
        }
        .boxed()
    }
}
