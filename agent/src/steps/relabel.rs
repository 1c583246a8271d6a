//! The `relabel` step: the managed trees kept at the shared container label, credentials kept
//! at their private one.

use std::path::PathBuf;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use crate::engine::{Change, Cx, Observation, Step};

/// Keeps the managed trees (`selinux.relabel`) at their label: shared `container_file_t:s0`.
/// One tracker per tree lives as long as the step (the daemon's life): after a first full scan,
/// a check reads only entries that changed since (inotify), so a pass with nothing changed costs
/// no label reads at all.
#[derive(Default)]
pub(crate) struct Relabel {
    trackers:
        std::sync::Mutex<std::collections::HashMap<PathBuf, nodectl_selinux::relabel::Tracker>>,
}

/// A node credential to relabel: held, its label now and the one it should have.
struct PrivateFix {
    held: crate::fsio::HeldEntry,
    cur: nodectl_selinux::Context,
    want: nodectl_selinux::Context,
}

impl Relabel {
    pub fn label() -> nodectl_selinux::Context {
        nodectl_selinux::Context::shared_container_file()
    }

    /// Private files that carry a container-readable label now, with the label they should
    /// have (the policy default), each held by its descriptor (`fsio::hold_with_children`: its
    /// mode and link count read from it, its label read and written through it); and the
    /// entries left as they are (a file with more than one link), with why.
    fn private_fixes(cx: &Cx) -> (Vec<PrivateFix>, Vec<String>) {
        let (mut out, mut left) = (Vec::new(), Vec::new());
        for p in crate::credentials::paths(&cx.settings) {
            let held = match crate::fsio::hold_with_children(&cx.root, &p) {
                Ok(h) => h,
                Err(e) => {
                    left.push(format!("{}: not checked: {e}", cx.root.path(&p).display()));
                    continue;
                }
            };
            for h in held {
                let Ok(Some(cur)) = cx.labeler.get_fd(&h.fd, &h.real) else {
                    continue;
                };
                // Any type containers read (container_ro_file_t, container_share_t, ... too).
                if !cur.is_container_readable() {
                    continue;
                }
                // A bootstrap kubeconfig of a container type may be a container's (planted in a
                // tree it can write, at its own level or one it chose, `s0` included):
                // relabeling it would make it look placed by root. It is left as it is and
                // never used (`kubeconfig::trusted_file`) until an operator restores its label
                // (`restorecon`); the audit reports it as container-readable meanwhile.
                if h.node == cx.settings.bootstrap_kubeconfig {
                    continue;
                }
                // A hard link: the label is the inode's, another name's too (issue 51, 4).
                if h.linked() {
                    left.push(format!(
                        "{}: not relabeled: it has {} hard links (a link elsewhere would get the label too)",
                        h.real.display(),
                        h.nlink
                    ));
                    continue;
                }
                if let Some(want) = cx.labeler.private_for(&h.node, h.mode) {
                    if want != cur {
                        out.push(PrivateFix { held: h, cur, want });
                    }
                }
            }
        }
        (out, left)
    }

    fn run(
        &self,
        cx: &Cx,
        dry_run: bool,
    ) -> anyhow::Result<Vec<(PathBuf, nodectl_selinux::relabel::Report)>> {
        let mut trackers = self.trackers.lock().expect("relabel trackers");
        trackers.retain(|t, _| cx.settings.relabel.iter().any(|x| cx.root.path(x) == *t));
        let mut out = Vec::new();
        let private: Vec<PathBuf> = crate::credentials::paths(&cx.settings)
            .iter()
            .map(|p| cx.root.path(p))
            .collect();
        for tree in &cx.settings.relabel {
            let real = cx.root.path(tree);
            if !real.exists() {
                continue;
            }
            let exclude: Vec<PathBuf> = private
                .iter()
                .filter(|p| p.starts_with(&real))
                .cloned()
                .collect();
            if trackers
                .get(&real)
                .is_some_and(|t| t.exclude() != exclude.as_slice())
            {
                trackers.remove(&real);
            }
            let tracker = match trackers.entry(real.clone()) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(
                    nodectl_selinux::relabel::Tracker::new(&real, &Self::label())
                        .with_context(|| format!("watching {}", real.display()))?
                        .with_exclude(exclude),
                ),
            };
            out.push((tree.clone(), tracker.check(&cx.labeler, dry_run)));
        }
        Ok(out)
    }
}

fn relabel_errors(
    reports: &[(PathBuf, nodectl_selinux::relabel::Report)],
) -> Option<anyhow::Error> {
    let errors: Vec<String> = reports
        .iter()
        .flat_map(|(_, r)| r.errors.iter())
        .map(|e| format!("{}: {}", e.path.display(), e.error))
        .collect();
    (!errors.is_empty()).then(|| {
        let shown: Vec<&str> = errors.iter().take(5).map(String::as_str).collect();
        anyhow::anyhow!(
            "{} path(s) could not be relabeled: {}{}",
            errors.len(),
            shown.join("; "),
            if errors.len() > 5 { "; ..." } else { "" }
        )
    })
}

impl Step for Relabel {
    fn id(&self) -> &'static str {
        "relabel"
    }
    fn description(&self) -> &'static str {
        "managed trees carry their SELinux label (read first, written only where it differs)"
    }
    fn deps(&self) -> &'static [&'static str] {
        &[]
    }
    /// After a bundle is placed in a pass (its files are born labeled; the check that follows
    /// reads only what changed), but not held back while a controller waits for its bundle or
    /// a bundle was refused: the trees' first full scan comes before the bundle, off its path
    /// to kubelet.
    fn after(&self) -> &'static [&'static str] {
        &["secrets"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            if let Some(why) = cx.labeler.skipped() {
                return Ok(Observation::Converged(format!("labels skipped: {why}")));
            }
            let t = std::time::Instant::now();
            let reports = self.run(cx, true)?;
            if let Some(e) = relabel_errors(&reports) {
                return Err(e);
            }
            let trees = t.elapsed();
            let (private, private_left) = Self::private_fixes(cx);
            tracing::debug!(
                target: "nodectl::engine",
                "relabel: {} entries checked in {:.1} ms ({}), node credentials' labels in {:.1} ms",
                reports.iter().map(|(_, r)| r.examined).sum::<u64>(),
                trees.as_secs_f64() * 1e3,
                if reports.iter().any(|(_, r)| r.full_scan) { "full scan" } else { "changed since the last check" },
                (t.elapsed() - trees).as_secs_f64() * 1e3
            );
            let mut changes = Vec::new();
            let mut examined = 0;
            for (tree, r) in &reports {
                examined += r.examined;
                if r.changed > 0 {
                    changes.push(Change::new(
                        format!(
                            "relabel {} entries under {} to {}",
                            r.changed,
                            tree.display(),
                            Self::label()
                        ),
                        format!(
                            "{} of {} entries carry another label",
                            r.changed, r.examined
                        ),
                    ));
                }
            }
            for f in private {
                changes.push(Change::new(
                    format!("relabel {} to {}", f.held.real.display(), f.want),
                    format!("a node credential labeled {} is readable by containers", f.cur),
                ));
            }
            let how = if reports.iter().any(|(_, r)| r.full_scan) {
                "checked"
            } else {
                "changed since the last check"
            };
            let skipped: Vec<String> = reports
                .iter()
                .flat_map(|(_, r)| &r.skipped)
                .map(|e| format!("{}: {}", e.path.display(), e.error))
                .chain(private_left)
                .collect();
            let skipped = if skipped.is_empty() {
                String::new()
            } else {
                format!("; {} left as they are: {}", skipped.len(), skipped.join("; "))
            };
            Ok(if changes.is_empty() {
                Observation::Converged(format!(
                    "{examined} entries {how}, all labeled {}{skipped}",
                    Self::label()
                ))
            } else {
                Observation::Changes(changes)
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let reports = self.run(cx, false)?;
            let (fixes, left) = Self::private_fixes(cx);
            for f in fixes {
                // Through the descriptor the link count was read from (fsetfilecon).
                cx.labeler.set_on_fd(&f.held.fd, &f.held.real, &f.want)?;
                tracing::info!(path = %f.held.real.display(), "relabeled a node credential from {} to {} (not readable by containers)", f.cur, f.want);
            }
            for l in left {
                tracing::warn!("relabel: {l}");
            }
            for (tree, r) in &reports {
                tracing::info!(tree = %tree.display(), examined = r.examined, changed = r.changed, errors = r.errors.len(), "relabeled {} of {} entries under {}", r.changed, r.examined, tree.display());
                for e in &r.skipped {
                    tracing::warn!(path = %e.path.display(), "relabel: {}", e.error);
                }
            }
            match relabel_errors(&reports) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
        .boxed()
    }
}
