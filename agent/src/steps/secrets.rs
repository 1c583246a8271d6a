//! The `secrets` step: bundles from the inbox, checked whole, placed with their final owner,
//! mode and label (the pure parser and layout are in [`super::bundle`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use super::bundle::CONTROL_PLANE_CA;
use super::fileset::{written_list, FileSet};
use super::inbox::bundle_names;
use super::inbox::{inbox_trusted, open_for_writing};
use crate::config::Role;
use crate::engine::{Change, Cx, Observation, Step};
use crate::fsio::DirSpec;
use libc::S_IFDIR;

/// How long a bundle must be left alone (no modification) before it is read: a bundle copied in
/// place (scp) is complete once its writer stopped. Renaming a finished file into the inbox is
/// always safe.
pub(crate) const BUNDLE_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// When the pass that makes the directories ahead of a bundle comes, after one that put them
/// off for their labels: past the look-ahead that follows a waiting pass.
const AHEAD_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// Bootstrap secrets: bundles dropped into the inbox are checked whole, then every file is placed
/// with its final owner, mode and label through the one atomic write; the bundle is then removed
/// from the inbox. On a controller, kubelet waits until the control plane's certificates are in
/// place.
#[derive(Default)]
pub(crate) struct Secrets {
    /// The bundle `observe` read and checked, for `apply` in the same pass (the engine observes,
    /// then applies) to place without reading, parsing and checking it again: used only while
    /// the file is the same one unchanged (device, inode, size, modification and change times
    /// of the descriptor read), taken by `apply`, dropped when no bundle is pending.
    read: std::sync::Mutex<Option<ReadBundle>>,
    /// The bundle being read and checked on a thread of its own from the pass's start
    /// ([`Step::start_ahead`]) while the steps before this one run; `read` waits for it and
    /// uses it under the same rule as `read`'s.
    reading: std::sync::Mutex<Option<std::thread::JoinHandle<Option<ReadBundle>>>>,
    /// The directories `observe` found to make ahead of the bundle, for the `apply` that follows
    /// it (only that one makes them).
    ahead_due: std::sync::Mutex<Option<FileSet>>,
    /// Set once the directories made ahead were put off until their default labels are looked
    /// up (`ahead`): at most once, so a lookup that keeps failing never delays them again.
    ahead_put_off: std::sync::atomic::AtomicBool,
    /// Set when making them failed: left to the bundle's pass from then on (which reports why),
    /// so a waiting controller keeps waiting instead of failing.
    ahead_failed: std::sync::atomic::AtomicBool,
}

/// A bundle as read and checked, and which file it was.
struct ReadBundle {
    path: PathBuf,
    id: BundleId,
    set: Arc<FileSet>,
}

/// What identifies a bundle's content without reading it: a rename in, a rewrite or a touch
/// each change one of these.
#[derive(PartialEq, Eq, Clone, Copy)]
struct BundleId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl BundleId {
    fn of(m: &std::fs::Metadata) -> BundleId {
        use std::os::unix::fs::MetadataExt;
        BundleId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

impl Secrets {
    /// The bundle's files (see [`Secrets::fileset`]): as `observe` read them when the bundle is
    /// still the same file unchanged (`keep`: kept for `apply`), else read now; whether it was
    /// reused, and what identifies the file read.
    fn read(
        &self,
        cx: &Cx,
        bundle: &Path,
        keep: bool,
    ) -> anyhow::Result<(Arc<FileSet>, bool, BundleId)> {
        let ahead = self.reading.lock().expect("secrets reading").take();
        let ahead = ahead.and_then(|h| h.join().ok().flatten());
        let (f, id) = Self::open(&cx.root, bundle)?;
        let mut read = self.read.lock().expect("secrets read");
        let cached = read
            .take()
            .or(ahead)
            .filter(|r| r.path == bundle && r.id == id);
        let reused = cached.is_some();
        let set = match cached {
            Some(r) => r.set,
            None => Arc::new(Self::fileset(&cx.root, &cx.settings, bundle, f)?),
        };
        if keep {
            *read = Some(ReadBundle {
                path: bundle.to_path_buf(),
                id,
                set: set.clone(),
            });
        }
        Ok((set, reused, id))
    }

    /// Regular, non-hidden files in the inbox, by name (node paths). The inbox must be root's
    /// alone (see [`inbox_trusted`]).
    fn bundles(cx: &Cx) -> anyhow::Result<Vec<PathBuf>> {
        let inbox = &cx.settings.secrets_inbox;
        let real = cx.root.path(inbox);
        inbox_trusted(&real)
            .map_err(|why| anyhow::anyhow!("the inbox {}: {why}", inbox.display()))?;
        let names =
            bundle_names(&real).with_context(|| format!("reading the inbox {}", real.display()))?;
        // (those whose removal this pass queued count as gone)
        Ok(names
            .into_iter()
            .map(|n| inbox.join(n))
            .filter(|b| !cx.deferred.removing(b))
            .collect())
    }

    /// The files a bundle places, checked whole (nothing is placed from an invalid bundle).
    fn fileset(
        root: &crate::root::Root,
        settings: &crate::config::Settings,
        bundle: &Path,
        f: std::fs::File,
    ) -> anyhow::Result<FileSet> {
        let real = root.path(bundle);
        // Bounded: read at most one byte more than a bundle may hold (the parser refuses it).
        let mut bytes = Vec::new();
        {
            use std::io::Read;
            f.take(super::bundle::MAX_BUNDLE_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
        }
        .with_context(|| format!("reading {}", real.display()))?;
        Self::fileset_of(root, settings, &bytes, bundle)
    }

    /// The files a bundle's bytes place, checked whole (records, Typhoon's layout, the role,
    /// owners); `bundle` names it in errors. `nodectl import` checks a bundle with it before
    /// handing it to nodectld, so an operator sees a refusal at once.
    pub(crate) fn fileset_of(
        root: &crate::root::Root,
        settings: &crate::config::Settings,
        bytes: &[u8],
        bundle: &Path,
    ) -> anyhow::Result<FileSet> {
        let records = super::bundle::parse(bytes, bundle)?;
        let plan = super::bundle::plan(
            &records,
            super::bundle::TYPHOON_LAYOUT,
            settings.role,
            &settings.bootstrap_kubeconfig,
            bundle,
        )?;
        FileSet::of_plan(root, plan, bundle)
    }

    /// The bundle opened (never through a symlink), and which file it is. Only root's: a
    /// bundle places static pod manifests and keys as root, so one another user owns (moved in
    /// with `sudo mv`, or written by that user) is refused, checked on the descriptor read.
    fn open(root: &crate::root::Root, bundle: &Path) -> anyhow::Result<(std::fs::File, BundleId)> {
        use std::os::unix::fs::MetadataExt;
        let real = root.path(bundle);
        let f = crate::fsio::open_nofollow(&real)
            .with_context(|| format!("reading {}", real.display()))?;
        let m = f
            .metadata()
            .with_context(|| format!("reading {}", real.display()))?;
        if m.uid() != 0 || m.mode() & 0o022 != 0 {
            anyhow::bail!(
                "{}: owned by uid {} with mode {:04o}: only a bundle root owns and alone may write \
                 is placed; hand it over with `sudo nodectl import FILE`; nothing was placed",
                bundle.display(),
                m.uid(),
                m.mode() & 0o7777
            );
        }
        Ok((f, BundleId::of(&m)))
    }

    /// On a controller waiting for its bundle: the directories it fills in any case
    /// ([`super::ahead::ahead_dirs`]), to make now; none elsewhere, nor where an owner is
    /// unknown or making them failed once (the bundle's pass reports that when it comes).
    ///
    /// Their default labels come from the look-ahead after a waiting pass (`warm_labels`): a
    /// pass that would open a file_contexts handle for them (the first, 100-300 ms under QEMU
    /// TCG) puts them off once and asks for a pass right after that look-ahead instead.
    fn ahead(&self, cx: &Cx, observing: bool) -> FileSet {
        use std::sync::atomic::Ordering;
        // (controller_ready: also on any node that is not a controller)
        if self.ahead_failed.load(Ordering::Relaxed) || Self::controller_ready(cx) {
            return FileSet::default();
        }
        let dirs = super::ahead::ahead_dirs(&cx.settings);
        let unknown = cx.labeler.caches()
            && dirs
                .iter()
                .any(|d| d.label.is_none() && !cx.labeler.knows_default(&d.dest, S_IFDIR));
        // (decided by an observe: an apply that finds them unknown leaves them to the observe
        // after it, which puts them off)
        if unknown && !self.ahead_put_off.load(Ordering::Relaxed) {
            if observing {
                self.ahead_put_off.store(true, Ordering::Relaxed);
                cx.recheck_in(AHEAD_AFTER);
            }
            return FileSet::default();
        }
        let plan = super::bundle::Plan {
            dirs,
            files: Vec::new(),
        };
        FileSet::of_plan(
            &cx.root,
            plan,
            Path::new("directories made ahead of the bundle"),
        )
        .unwrap_or_default()
    }

    /// What making the directories ahead would change (see [`Secrets::ahead`]): best effort, an
    /// error leaves them to the bundle's pass.
    fn ahead_changes(&self, cx: &Cx) -> Option<(FileSet, Vec<Change>)> {
        let set = self.ahead(cx, true);
        if set.dirs.is_empty() {
            return None;
        }
        match set.changes(cx) {
            Ok(c) if !c.is_empty() => Some((set, c)),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!("secrets: directories ahead of the bundle left to its pass: {e:#}");
                None
            }
        }
    }

    /// Still being written: not closed nor renamed in as far as the kernel told the daemon,
    /// and held open for writing (a read lease refused: however long ago it was modified) or
    /// modified less than a second ago (the fallback rule).
    fn settling(cx: &Cx, bundle: &Path) -> bool {
        if cx.settled.is_settled(&cx.root.path(bundle)) {
            return false;
        }
        if open_for_writing(&cx.root.path(bundle)) == Some(true) {
            return true;
        }
        std::fs::metadata(cx.root.path(bundle))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < BUNDLE_SETTLE)
    }

    /// On a controller the control plane needs its certificates before kubelet starts.
    fn controller_ready(cx: &Cx) -> bool {
        cx.settings.role != Role::Controller || cx.root.path(CONTROL_PLANE_CA).exists()
    }
}

impl Step for Secrets {
    fn id(&self) -> &'static str {
        "secrets"
    }
    fn description(&self) -> &'static str {
        "bootstrap secrets from the inbox, placed with final owner, mode and label"
    }
    /// None: its files are born with their own owner, mode and label, and the directories it
    /// needs it makes itself (node-files' `/etc/kubernetes` label is the directory's, not
    /// theirs). So a bundle's pass places it first, before the steps that only check what
    /// earlier passes made (issue 38: arrival -> every file placed).
    fn deps(&self) -> &'static [&'static str] {
        &[]
    }
    /// The first bundle that has settled, read and checked on a thread from the pass's start
    /// (a bundle's pass: 9-15 ms under QEMU TCG; with this step first in a pass, only the other
    /// steps' `start_ahead` runs beside it); an error is left for `observe`, which reads it
    /// again and reports it.
    fn start_ahead(&self, cx: &Cx) {
        let Some(b) = Self::bundles(cx)
            .ok()
            .and_then(|bs| bs.into_iter().find(|b| !Self::settling(cx, b)))
        else {
            return;
        };
        let (root, settings) = (cx.root.clone(), cx.settings.clone());
        let spawned = std::thread::Builder::new()
            .name("secrets-read".into())
            .spawn(move || {
                let (f, id) = Self::open(&root, &b).ok()?;
                let set = Self::fileset(&root, &settings, &b, f).ok()?;
                Some(ReadBundle {
                    path: b,
                    id,
                    set: Arc::new(set),
                })
            });
        *self.reading.lock().expect("secrets reading") = spawned.ok();
    }

    /// A bundle read ahead for an `observe` that did not come (the step blocked) is not kept
    /// in memory past the pass.
    fn end_ahead(&self) {
        if let Some(h) = self.reading.lock().expect("secrets reading").take() {
            drop(h.join());
        }
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let start = std::time::Instant::now();
            // (what an earlier observe kept is for the apply that followed it only)
            self.read.lock().expect("secrets read").take();
            self.ahead_due.lock().expect("secrets ahead").take();
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
                        "{} to be completely written (open for writing, or modified less than {}s ago)",
                        b.display(),
                        BUNDLE_SETTLE.as_secs()
                    )));
                }
                let t = std::time::Instant::now();
                let (set, _, _) = self.read(cx, b, true)?;
                let read = t.elapsed();
                if cx.applying() {
                    // (a pass: apply compares each file with the node as it stages it, and
                    // names the ones it wrote; comparing here too cost a bundle's pass 9.5 ms
                    // of its 117 under QEMU TCG, issue 38 (a))
                    changes.push(Change::new(
                        format!("place {} files from {}", set.files.len(), b.display()),
                        "each with its owner, mode and label, compared with the node as it is placed",
                    ));
                } else {
                    changes.extend(set.changes(cx)?);
                }
                tracing::debug!(
                    target: "nodectl::engine",
                    "secrets: {} found in {:.1} ms, read and checked in {:.1} ms, compared with the node in {:.1} ms",
                    b.display(),
                    (t - start).as_secs_f64() * 1e3,
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
            if let Some((set, ahead)) = self.ahead_changes(cx) {
                *self.ahead_due.lock().expect("secrets ahead") = Some(set);
                return Ok(Observation::Changes(
                    ahead
                        .into_iter()
                        .map(|c| Change::new(c.what, format!("{}; made ahead of the bundle, which fills it", c.why)))
                        .collect(),
                ));
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
            // Created when missing (0700); one made otherwise is refused by `bundles`.
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
                let (set, reused, id) = self.read(cx, &b, false)?;
                let read = t.elapsed();
                let written = set.apply(cx)?;
                let placed = t.elapsed();
                // (one line for the bundle, each file named: not a journal entry per file in the
                // seconds its static pods start)
                tracing::info!(
                    bundle = %b.display(),
                    files = set.files.len(),
                    written = written.len(),
                    "placed {} files from {} ({})",
                    set.files.len(),
                    b.display(),
                    written_list(&written, set.files.len())
                );
                // Not synced: a bundle back after a crash is placed again, changing nothing, and
                // removed then. Removed once the directory syncs of its files' renames succeeded
                // (in the background, off kubelet's way; the check after this apply counts it as
                // removed, and the pass's end waits for it).
                // Only the file read: one renamed in over it or rewritten since is left for
                // the next pass.
                cx.writer()
                    .discard_after_syncs(&b, self.id(), move |m| BundleId::of(m) == id)?;
                tracing::debug!(
                    target: "nodectl::engine",
                    "secrets: {} {} in {:.1} ms, directories and files placed in {:.1} ms, its removal queued in {:.1} ms",
                    b.display(),
                    if reused { "as read before (the same file unchanged)" } else { "read again" },
                    read.as_secs_f64() * 1e3,
                    (placed - read).as_secs_f64() * 1e3,
                    (t.elapsed() - placed).as_secs_f64() * 1e3
                );
            }
            // Those observe found, or (an observe that stopped at the inbox or the bundles) those
            // missing now; none once a bundle placed the control plane's CA.
            let due = self.ahead_due.lock().expect("secrets ahead").take();
            let set = due.unwrap_or_else(|| self.ahead(cx, false));
            if !set.dirs.is_empty() {
                if let Err(e) = set.apply(cx) {
                    self.ahead_failed.store(true, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!("secrets: the directories ahead of the bundle were not made (left to its pass, which reports why): {e:#}");
                }
            }
            Ok(())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::super::ahead::{bundle_label_paths, should_warm, typhoon_records, warm_labels};
    use super::*;
    use crate::config::Settings;
    use libc::{S_IFDIR, S_IFREG};

    fn controller() -> Settings {
        let host = crate::host::Host::generic();
        Settings::from_toml("[node]\nrole = \"controller\"\n", &host, "c1")
    }

    /// A one-record bundle (the kubeconfig, `content`) written aside in `inbox`, dated back
    /// (a bundle modified within the last second still settles) and renamed in as `assets`.
    fn drop_bundle(inbox: &Path, content: &str) {
        let aside = inbox.join(".assets");
        std::fs::write(&aside, format!("##### kubelet/kubeconfig\n{content}\n")).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
        let f = std::fs::File::options().write(true).open(&aside).unwrap();
        f.set_modified(old).unwrap();
        std::fs::rename(&aside, inbox.join("assets")).unwrap();
    }

    #[test]
    fn typhoons_records_all_have_a_place_and_only_the_private_ones_are_looked_up_ahead() {
        let s = controller();
        // Every name terraform-render-bootstrap writes has a place on a controller: a name the
        // layout refused would leave the whole list unplanned (and nothing looked up ahead).
        let records = typhoon_records();
        let plan = super::super::bundle::plan(
            &records,
            super::super::bundle::TYPHOON_LAYOUT,
            Role::Controller,
            &s.bootstrap_kubeconfig,
            Path::new("t"),
        )
        .expect("Typhoon's names plan on a controller");
        assert_eq!(plan.files.len(), records.len());

        let paths = bundle_label_paths(&s);
        let has = |p: &str, kind: u32| paths.contains(&(PathBuf::from(p), kind));
        for (p, kind) in [
            ("/etc/ssl/etcd", S_IFDIR),
            ("/etc/ssl/etcd/etcd", S_IFDIR),
            ("/etc/ssl/etcd/etcd/peer.key", S_IFREG),
            ("/etc/ssl/etcd/etcd/server.crt", S_IFREG),
            ("/opt/bootstrap/assets/manifests/coredns", S_IFDIR),
            (
                "/opt/bootstrap/assets/manifests/coredns/deployment.yaml",
                S_IFREG,
            ),
            (
                "/opt/bootstrap/assets/manifests/bootstrap-token.yaml",
                S_IFREG,
            ),
            (super::super::kubelet::KUBELET_CA, S_IFREG),
            (super::super::kubelet::KUBELET_ENV, S_IFREG),
        ] {
            assert!(
                has(p, kind),
                "{p} ({kind:o}) not looked up ahead: {paths:?}"
            );
        }
        assert!(has(&s.bootstrap_kubeconfig.display().to_string(), S_IFREG));
        // Shared files carry their label in the layout: nothing to look up.
        assert!(
            !paths
                .iter()
                .any(|(p, _)| p.starts_with("/etc/kubernetes/pki")
                    || p.starts_with("/etc/kubernetes/manifests")),
            "{paths:?}"
        );
        // Each (path, type) once.
        let mut uniq = paths.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), paths.len());
    }

    #[test]
    fn labels_are_looked_up_ahead_only_on_a_controller_still_waiting_for_its_bundle() {
        let none = || Ok(Vec::new());
        let c = Role::Controller;
        assert!(should_warm(c, true, true, false, &none()));
        assert!(!should_warm(Role::Worker, true, true, false, &none()));
        // no SELinux (or a scratch root), or answers that would not stay cached
        assert!(!should_warm(c, false, true, false, &none()));
        assert!(!should_warm(c, true, false, false, &none()));
        // the control plane's CA is placed: no bundle is awaited
        assert!(!should_warm(c, true, true, true, &none()));
        // a bundle in the inbox: its pass is under way
        assert!(!should_warm(
            c,
            true,
            true,
            false,
            &Ok(vec!["assets".into()])
        ));
        // an inbox that cannot be read
        let unreadable = Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert!(!should_warm(c, true, true, false, &unreadable));
    }

    /// Issue 37, 8: whoever may write the inbox or owns a bundle chooses what nodectld places
    /// as root: an inbox others may write (or a symlink) and a bundle another user owns or
    /// others may write are refused, each naming the fix.
    #[test]
    fn only_roots_inbox_and_roots_bundles_are_read() {
        use std::os::unix::fs::{chown, symlink, PermissionsExt};
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let d = tempfile::tempdir().unwrap();
        let inbox = d.path().join("inbox");
        inbox_trusted(&inbox).unwrap();
        std::fs::create_dir(&inbox).unwrap();
        for ok in [0o700, 0o755] {
            mode(&inbox, ok);
            inbox_trusted(&inbox).unwrap();
        }
        mode(&inbox, 0o1777);
        assert!(inbox_trusted(&inbox).unwrap_err().contains("mode 1777"));
        mode(&inbox, 0o700);
        chown(&inbox, Some(1000), None).unwrap();
        let e = inbox_trusted(&inbox).unwrap_err();
        assert!(
            e.contains("owned by uid 1000") && e.contains("chmod 0700"),
            "{e}"
        );
        chown(&inbox, Some(0), None).unwrap();
        let link = d.path().join("link");
        symlink(&inbox, &link).unwrap();
        assert!(inbox_trusted(&link)
            .unwrap_err()
            .contains("not a directory"));

        let root = crate::root::Root::new(d.path());
        let b = inbox.join("assets");
        std::fs::write(&b, "##### x\n").unwrap();
        mode(&b, 0o600);
        Secrets::open(&root, Path::new("/inbox/assets")).unwrap();
        chown(&b, Some(1000), Some(1000)).unwrap();
        let e = Secrets::open(&root, Path::new("/inbox/assets"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("owned by uid 1000") && e.contains("sudo nodectl import"),
            "{e}"
        );
        chown(&b, Some(0), Some(0)).unwrap();
        mode(&b, 0o666);
        let e = Secrets::open(&root, Path::new("/inbox/assets"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("mode 0666"), "{e}");
    }

    #[test]
    fn a_bundle_is_a_regular_file_not_hidden_and_a_missing_inbox_holds_none() {
        let d = tempfile::tempdir().unwrap();
        let inbox = d.path().join("inbox");
        assert!(bundle_names(&inbox).unwrap().is_empty());
        std::fs::create_dir(&inbox).unwrap();
        std::fs::write(inbox.join(".assets"), "being written").unwrap();
        std::fs::create_dir(inbox.join("a-directory")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", inbox.join("a-link")).unwrap();
        assert!(bundle_names(&inbox).unwrap().is_empty());
        std::fs::write(inbox.join("assets"), "##### x\n").unwrap();
        std::fs::write(inbox.join("b"), "##### x\n").unwrap();
        assert_eq!(bundle_names(&inbox).unwrap(), ["assets", "b"]);
        // and with that, a controller does not look up ahead
        let names = bundle_names(&inbox);
        assert!(!should_warm(Role::Controller, true, true, false, &names));
    }

    #[test]
    fn a_bundle_read_ahead_is_used_only_while_it_is_the_same_file() {
        let (d, cx) = Cx::scratch();
        let s = Secrets::default();
        let inbox = d.path().join("var/lib/nodectl/inbox");
        std::fs::create_dir_all(&inbox).unwrap();
        let bundle = cx.settings.secrets_inbox.join("assets");
        let drop_in = |content: &str| drop_bundle(&inbox, content);
        // none in the inbox: nothing started
        s.start_ahead(&cx);
        assert!(s.reading.lock().unwrap().is_none());
        drop_in("first");
        s.start_ahead(&cx);
        assert!(s.reading.lock().unwrap().is_some());
        let (set, reused, _) = s.read(&cx, &bundle, true).unwrap();
        assert!(reused, "read ahead, not again");
        assert_eq!(set.files[0].content, b"first\n");
        *s.read.lock().unwrap() = None;
        // renamed in over it after the read ahead was done: read again
        s.start_ahead(&cx);
        while !s.reading.lock().unwrap().as_ref().unwrap().is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop_in("second");
        let (set, reused, _) = s.read(&cx, &bundle, false).unwrap();
        assert!(!reused, "another file is read again");
        assert_eq!(set.files[0].content, b"second\n");
        // not taken by an observe (a blocked step): dropped at the pass's end
        s.start_ahead(&cx);
        s.end_ahead();
        assert!(s.reading.lock().unwrap().is_none());
        // a bundle still being written is not read ahead
        std::fs::write(inbox.join("assets"), "##### kubelet/kubeconfig\nthird\n").unwrap();
        s.start_ahead(&cx);
        assert!(s.reading.lock().unwrap().is_none());
    }

    #[tokio::test]
    async fn a_plan_lists_each_file_a_pass_names_the_bundle_and_apply_names_what_it_wrote() {
        let (d, cx) = Cx::scratch();
        let s = Secrets::default();
        let inbox = d.path().join("var/lib/nodectl/inbox");
        std::fs::create_dir_all(&inbox).unwrap();
        drop_bundle(&inbox, "secret-bytes");
        let whats = |o: Observation| match o {
            Observation::Changes(c) => c.into_iter().map(|c| c.what).collect::<Vec<_>>(),
            other => panic!("changes expected, got {other:?}"),
        };
        // a plan: file by file
        let plan = whats(s.observe(&cx).await.unwrap());
        assert!(
            plan.contains(&"write /etc/kubernetes/kubeconfig (0600)".to_string()),
            "{plan:?}"
        );
        // a pass: the bundle whole (apply compares each file as it stages it)
        cx.applying
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let pass = whats(s.observe(&cx).await.unwrap());
        assert_eq!(
            pass,
            [
                "place 1 files from /var/lib/nodectl/inbox/assets",
                "remove /var/lib/nodectl/inbox/assets from the inbox"
            ]
        );
        s.apply(&cx).await.unwrap();
        let kubeconfig = d.path().join("etc/kubernetes/kubeconfig");
        assert_eq!(
            std::fs::read_to_string(kubeconfig).unwrap(),
            "secret-bytes\n"
        );
        let w = [PathBuf::from("/etc/kubernetes/kubeconfig")];
        assert_eq!(written_list(&w, 1), "1 written: /etc/kubernetes/kubeconfig");
        assert_eq!(
            written_list(&w, 3),
            "1 written: /etc/kubernetes/kubeconfig; 2 already in place"
        );
        assert_eq!(written_list(&[], 3), "all already in place");
    }

    #[tokio::test]
    async fn apply_places_what_observe_read_only_while_the_bundle_is_the_same_file() {
        let (d, cx) = Cx::scratch();
        let s = Secrets::default();
        let inbox = d.path().join("var/lib/nodectl/inbox");
        std::fs::create_dir_all(&inbox).unwrap();
        let kubeconfig = d.path().join("etc/kubernetes/kubeconfig");
        // written aside, dated back (a bundle modified within the last second still settles),
        // renamed in
        let drop_in = |content: &str| drop_bundle(&inbox, content);
        drop_in("first");
        assert!(matches!(
            s.observe(&cx).await.unwrap(),
            Observation::Changes(_)
        ));
        assert!(s.read.lock().unwrap().is_some(), "kept for apply");
        // another bundle renamed in over it between observe and apply: apply reads that one
        drop_in("second");
        s.apply(&cx).await.unwrap();
        assert_eq!(std::fs::read_to_string(&kubeconfig).unwrap(), "second\n");
        assert!(s.read.lock().unwrap().is_none(), "nothing kept after apply");
        // its removal is queued behind the directory syncs: observed as gone already, removed
        // by the pass's end
        assert!(!matches!(
            s.observe(&cx).await.unwrap(),
            Observation::Changes(_)
        ));
        cx.deferred.wait().unwrap();
        assert!(!inbox.join("assets").exists());
        // the same file unchanged: apply places what observe read, and keeps nothing after
        drop_in("third");
        assert!(matches!(
            s.observe(&cx).await.unwrap(),
            Observation::Changes(_)
        ));
        let (_, reused, _) = s
            .read(&cx, &cx.settings.secrets_inbox.join("assets"), true)
            .unwrap();
        assert!(reused, "the same file unchanged is not read again");
        s.apply(&cx).await.unwrap();
        assert_eq!(std::fs::read_to_string(&kubeconfig).unwrap(), "third\n");
        assert!(s.read.lock().unwrap().is_none());
        assert!(matches!(
            s.observe(&cx).await.unwrap(),
            Observation::Converged(_) | Observation::Waiting(_)
        ));
        // one renamed in over it before its removal is done is not removed: the next pass
        // places it (the removal held behind a directory sync until then)
        cx.deferred.wait().unwrap();
        drop_in("fourth");
        let release = cx.deferred.hold(Ok(()));
        s.apply(&cx).await.unwrap();
        assert_eq!(std::fs::read_to_string(&kubeconfig).unwrap(), "fourth\n");
        drop_in("fifth");
        drop(release);
        cx.deferred.wait().unwrap();
        assert!(inbox.join("assets").exists(), "a bundle not read is kept");
        s.apply(&cx).await.unwrap();
        cx.deferred.wait().unwrap();
        assert_eq!(std::fs::read_to_string(&kubeconfig).unwrap(), "fifth\n");
        assert!(!inbox.join("assets").exists());
    }

    /// A controller's pass on a scratch root with an `etcd` user, its inbox made, and `files`
    /// (path under the root, content) written; systemd offline.
    fn controller_cx(files: &[(&str, &str)]) -> (tempfile::TempDir, Cx) {
        let d = tempfile::tempdir().unwrap();
        let accounts = [
            (
                "etc/passwd",
                "root:x:0:0::/root:/bin/sh\netcd:x:232:232::/var/lib/etcd:/sbin/nologin\n",
            ),
            ("etc/group", "root:x:0:\netcd:x:232:\n"),
        ];
        for (f, c) in accounts.iter().chain(files) {
            std::fs::create_dir_all(d.path().join(f).parent().unwrap()).unwrap();
            std::fs::write(d.path().join(f), c).unwrap();
        }
        std::fs::create_dir_all(d.path().join("var/lib/nodectl/inbox")).unwrap();
        let sd = nodectl_units::systemd::Systemd::Offline(nodectl_units::systemd::Offline::new(
            d.path(),
        ));
        let root = crate::root::Root::new(d.path());
        let cx = Cx::new(root, crate::host::Host::generic(), controller(), sd);
        (d, cx)
    }

    #[tokio::test]
    async fn a_waiting_controller_makes_the_directories_its_bundle_fills_ahead() {
        let (d, cx) = controller_cx(&[]);
        let s = Secrets::default();
        let Observation::Changes(c) = s.observe(&cx).await.unwrap() else {
            panic!("the directories are to be made")
        };
        let mut made: Vec<&str> = c.iter().map(|c| c.what.as_str()).collect();
        made.sort_unstable();
        assert_eq!(
            made,
            [
                "create directory /etc/kubernetes/pki (0700)",
                "create directory /etc/ssl/etcd (0700)",
                "create directory /etc/ssl/etcd/etcd (0700)",
                "create directory /opt/bootstrap/assets (0700)",
                "create directory /opt/bootstrap/assets/manifests (0700)",
            ],
            "{c:?}"
        );
        s.apply(&cx).await.unwrap();
        use std::os::unix::fs::MetadataExt;
        let etcd = std::fs::metadata(d.path().join("etc/ssl/etcd/etcd")).unwrap();
        assert_eq!(
            (etcd.mode() & 0o7777, etcd.uid(), etcd.gid()),
            (0o700, 232, 232)
        );
        assert!(std::fs::read_dir(d.path().join("etc/kubernetes/pki"))
            .unwrap()
            .next()
            .is_none());
        // then it waits, changing nothing more, until the bundle comes
        assert!(matches!(
            s.observe(&cx).await.unwrap(),
            Observation::Waiting(_)
        ));
        // where one cannot be made (a file in its place), the controller waits as before: the
        // bundle's pass reports it
        let (_d2, cx2) = controller_cx(&[("etc/ssl/etcd", "not a directory")]);
        let s2 = Secrets::default();
        let seen = s2.observe(&cx2).await.unwrap();
        assert!(matches!(seen, Observation::Waiting(_)), "{seen:?}");
        // a worker makes none
        let (_w, worker) = Cx::scratch();
        assert!(Secrets::default().ahead(&worker, true).dirs.is_empty());
    }

    #[test]
    fn nothing_is_opened_where_labels_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let root = crate::root::Root::new(d.path());
        let host = crate::host::Host::generic();
        // A scratch root: its labeler skips labels (and caches nothing).
        let labeler = nodectl_selinux::Labeler::new(root.dir(), &host.selinux);
        assert!(labeler.skipped().is_some() && !labeler.caches());
        assert!(warm_labels(&root, &controller(), &labeler).is_empty());
        assert!(labeler.opened().is_empty());
    }
}
