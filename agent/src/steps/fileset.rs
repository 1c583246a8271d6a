//! A set of files and directories a step owns, diffed and written through the one atomic write.

use std::path::{Path, PathBuf};

use super::kubelet::MANAGED_HEADER;
use super::relabel::Relabel;
use crate::engine::{Change, Cx};
use crate::fsio::{DirSpec, FileSpec};

/// A set of directories and files a step owns, plus files it removes when it wrote them.
#[derive(Default)]
pub(crate) struct FileSet {
    pub(crate) dirs: Vec<DirSpec>,
    pub(crate) files: Vec<FileSpec>,
    /// Files removed when present and carrying [`MANAGED_HEADER`] (never an operator's file).
    pub(crate) remove_if_ours: Vec<PathBuf>,
}

impl FileSet {
    /// A plan's directories and files with their owners' ids (each owner looked up once: a
    /// bundle names two or three for its 22 files, and each lookup reads the passwd and group
    /// files). `what` names the bundle in messages.
    pub(crate) fn of_plan(
        root: &crate::root::Root,
        plan: super::bundle::Plan,
        what: &Path,
    ) -> anyhow::Result<FileSet> {
        let mut known = std::collections::HashMap::new();
        let mut owner = |name: &'static str, of: &Path| {
            if let Some(ids) = known.get(name) {
                return Ok(*ids);
            }
            let ids = crate::accounts::resolve(root, name).map_err(|e| {
                anyhow::anyhow!(
                    "{}: {e} (owner of {}); nothing was placed",
                    what.display(),
                    of.display()
                )
            })?;
            known.insert(name, ids);
            Ok::<_, anyhow::Error>(ids)
        };
        let mut set = FileSet::default();
        for d in plan.dirs {
            let (uid, gid) = owner(d.owner, &d.dest)?;
            set.dirs.push(DirSpec {
                path: d.dest,
                mode: d.mode,
                uid,
                gid,
                label: d.label,
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

    pub(crate) fn changes(&self, cx: &Cx) -> anyhow::Result<Vec<Change>> {
        self.prefetch_labels(cx);
        let w = cx.writer();
        let mut out = Vec::new();
        // (one batch: each directory opened once)
        w.batched(|| {
            for d in &self.dirs {
                let diff = w.check_dir(d)?;
                if !diff.is_empty() {
                    let what = if diff.missing {
                        format!("create directory {} ({:04o})", d.path.display(), d.mode)
                    } else {
                        format!("fix directory {}", d.path.display())
                    };
                    out.push(Change::new(what, diff.to_string()));
                }
            }
            for f in &self.files {
                let diff = w.check(f)?;
                if !diff.is_empty() {
                    let what = if diff.missing {
                        format!("write {} ({:04o})", f.path.display(), f.mode)
                    } else if diff.content {
                        format!("update {}", f.path.display())
                    } else {
                        format!("fix {}", f.path.display())
                    };
                    out.push(Change::new(what, diff.to_string()));
                }
            }
            Ok(())
        })?;
        for p in &self.remove_if_ours {
            if is_ours(&cx.root.path(p)) {
                out.push(Change::new(
                    format!("remove {}", p.display()),
                    "written by nodectl and no longer wanted by the settings",
                ));
            }
        }
        Ok(out)
    }

    /// The policy's default labels of everything here without a label of its own, looked up
    /// in one batch (one file_contexts open where the paths span many subsets).
    fn prefetch_labels(&self, cx: &Cx) {
        const S_IFDIR: u32 = 0o040000;
        const S_IFREG: u32 = 0o100000;
        let defaults: Vec<(&Path, u32)> = self
            .dirs
            .iter()
            .filter(|d| d.label.is_none())
            .map(|d| (d.path.as_path(), S_IFDIR))
            .chain(
                self.files
                    .iter()
                    .filter(|f| f.label.is_none())
                    .map(|f| (f.path.as_path(), S_IFREG)),
            )
            .collect();
        cx.labeler.prefetch(&defaults);
    }

    /// Applies; returns the node paths of the files written or removed.
    pub(crate) fn apply(&self, cx: &Cx) -> anyhow::Result<Vec<PathBuf>> {
        let w = cx.writer();
        let mut changed = Vec::new();
        // One batch: the new directories made durable with the files, before their renames.
        w.batched(|| {
            for d in &self.dirs {
                w.ensure_dir(d)?;
            }
            // Staged together, synced together, renamed in the order listed.
            for (f, o) in self.files.iter().zip(w.write_all(&self.files)?) {
                if o != crate::fsio::Outcome::Unchanged {
                    changed.push(f.path.clone());
                }
            }
            Ok(())
        })?;
        for p in &self.remove_if_ours {
            if is_ours(&cx.root.path(p)) {
                w.remove(p)?;
                changed.push(p.clone());
            }
        }
        Ok(changed)
    }
}

/// The label of a path inside a managed tree (`selinux.relabel`), so what nodectld creates there
/// is born with the label the relabel step keeps; `None` elsewhere (the policy's default).
pub(crate) fn managed_label(cx: &Cx, path: &Path) -> Option<nodectl_selinux::Context> {
    cx.settings
        .relabel
        .iter()
        .any(|t| path.starts_with(t))
        .then(Relabel::label)
}

pub(crate) fn is_ours(real: &Path) -> bool {
    std::fs::read_to_string(real).is_ok_and(|t| t.starts_with(MANAGED_HEADER))
}

pub(crate) fn summary(n: usize, what: &str) -> String {
    format!("{n} {what} in place")
}

/// What a placement wrote, for its log line: paths (never content), or that all was in place.
pub(crate) fn written_list(written: &[PathBuf], of: usize) -> String {
    if written.is_empty() {
        return "all already in place".into();
    }
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    let rest = if written.len() < of {
        format!("; {} already in place", of - written.len())
    } else {
        String::new()
    };
    format!("{} written: {}{rest}", written.len(), names.join(", "))
}
