//! Keeping trees at one label: read every label, write only those that differ.
//!
//! [`relabel_tree`] scans a whole tree. It never follows symlinks (a link gets its own label),
//! never enters another filesystem (pod volumes mounted under /var/lib/kubelet stay untouched),
//! and reports unreadable entries per path instead of stopping. The hot path is one `lgetxattr`
//! per entry compared byte for byte with the target (what `lgetfilecon_raw` reads, without its
//! allocations), and one `lsetxattr` where it differs (what `lsetfilecon_raw` writes), split
//! across the machine's cores; in a directory whose labels differ run after run, the rest is
//! written without the read (`BLIND_AFTER`).
//!
//! [`Tracker`] is what the daemon keeps between passes: after one full scan it watches the tree's
//! directories with inotify (a label change raises `IN_ATTRIB`, a new entry `IN_CREATE` or
//! `IN_MOVED_TO`), so the next check reads only what changed since: nothing, when nothing did.
//! A lost event (queue overflow) or a watch it cannot add makes the next check a full scan.

mod check;
mod tracker;
mod walk;

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use check::check_entries;
#[cfg(test)]
use check::BLIND_AFTER;
pub use tracker::{Tracker, FULL_SCAN_EVERY};
use walk::{Group, Walk};

use crate::{Context, Labeler};

const XATTR: &CStr = c"security.selinux";

/// One path that could not be read or labeled, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathError {
    pub path: PathBuf,
    pub error: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub examined: u64,
    /// Labels written (or, in a dry run, that would be).
    pub changed: u64,
    /// Directories not entered because they are another filesystem.
    pub other_filesystems: u64,
    pub errors: Vec<PathError>,
    /// Entries left as they are on purpose (a file with more than one hard link): reported, not
    /// errors.
    #[serde(default)]
    pub skipped: Vec<PathError>,
    /// This check scanned the whole tree (first check, or events were lost).
    pub full_scan: bool,
}

impl Report {
    fn merge(&mut self, o: Report) {
        self.examined += o.examined;
        self.changed += o.changed;
        self.other_filesystems += o.other_filesystems;
        self.errors.extend(o.errors);
        self.skipped.extend(o.skipped);
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_else(|_| c"/nonexistent\u{1}".to_owned())
}

/// The raw label of `path` itself, into `buf` (without the trailing NUL).
fn get_raw<'b>(path: &CStr, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    loop {
        // SAFETY: path is NUL-terminated; buf is valid for buf.len() bytes.
        let n = unsafe {
            libc::lgetxattr(
                path.as_ptr(),
                XATTR.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n >= 0 {
            let v = &buf[..n as usize];
            return Ok(v.strip_suffix(&[0]).unwrap_or(v));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) {
            let len = buf.len() * 2;
            buf.resize(len, 0);
            continue;
        }
        if e.raw_os_error() == Some(libc::ENODATA) {
            return Ok(&[]);
        }
        return Err(e);
    }
}

/// The label stored on `path` itself (its `security.selinux` attribute), read raw: it works
/// whether or not the running kernel enforces SELinux (an audit of a mounted root, a scratch
/// root). `None` when the file has none.
pub fn stored_label(path: &Path) -> io::Result<Option<String>> {
    let mut buf = vec![0u8; 256];
    let v = get_raw(&cpath(path), &mut buf)?;
    Ok((!v.is_empty()).then(|| String::from_utf8_lossy(v).into_owned()))
}

/// Stores `label` on `path` itself, raw (fixtures and scratch roots; nodectld labels through
/// [`crate::Labeler`]).
pub fn set_stored_label(path: &Path, label: &str) -> io::Result<()> {
    let mut v = label.as_bytes().to_vec();
    v.push(0);
    set_xattr(&cpath(path), &v, false)
}

/// Sets the label of `path` (`value` ends with NUL, as libselinux stores it): of the entry
/// itself (`lsetxattr`), or where `follow`, of what a `/proc` descriptor link leads to
/// (`setxattr`).
fn set_xattr(path: &CStr, value: &[u8], follow: bool) -> io::Result<()> {
    let set = if follow {
        libc::setxattr
    } else {
        libc::lsetxattr
    };
    // SAFETY: path is NUL-terminated; value is valid for value.len() bytes.
    let r = unsafe {
        set(
            path.as_ptr(),
            XATTR.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn target_bytes(target: &Context) -> Vec<u8> {
    let mut v = target.to_string().into_bytes();
    v.push(0);
    v
}

/// `path` is one of `exclude` or below one.
fn excluded(exclude: &[PathBuf], path: &Path) -> bool {
    exclude.iter().any(|x| path.starts_with(x))
}

/// Relabels everything under `top` to `target` (a full scan). `dry_run` counts what would
/// change without writing. Does nothing when `labeler` skips labels.
pub fn relabel_tree(labeler: &Labeler, top: &Path, target: &Context, dry_run: bool) -> Report {
    relabel_tree_except(labeler, top, &[], target, dry_run)
}

/// As [`relabel_tree`], leaving the `exclude` paths (and what is below them) alone.
pub fn relabel_tree_except(
    labeler: &Labeler,
    top: &Path,
    exclude: &[PathBuf],
    target: &Context,
    dry_run: bool,
) -> Report {
    if labeler.skipped().is_some() {
        return Report::default();
    }
    let target = target_bytes(target);
    let mut on_dir = |_: &Path| {};
    let mut sink = |batch: Vec<Group>, report: &mut Report| {
        report.merge(check_entries(&batch, &target, dry_run, false).0);
    };
    let mut walk = Walk::new(exclude, &mut on_dir, &mut sink);
    walk.tree(top);
    let mut report = walk.finish();
    report.full_scan = true;
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HostSelinux, Mode};

    const SHARED: &str = "system_u:object_r:container_file_t:s0";
    const HOST: &str = "system_u:object_r:etc_t:s0";

    fn labeler() -> Labeler {
        Labeler::new(
            Path::new("/"),
            &HostSelinux {
                mode: Mode::Enforcing,
                mls: true,
                policy: None,
            },
        )
    }

    fn label(p: &Path) -> String {
        stored_label(p).unwrap().unwrap_or_default()
    }

    /// A tree and a directory outside it holding "host files", labeled: (tempdir, tree, outside).
    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        let outside = d.path().join("outside");
        fs_create(&tree.join("sub/deeper"));
        fs_create(&outside);
        for f in [tree.join("sub/a"), tree.join("sub/deeper/b")] {
            std::fs::write(&f, "x").unwrap();
        }
        for f in ["shadow", "newfile"] {
            std::fs::write(outside.join(f), "secret").unwrap();
        }
        for p in [&outside, &outside.join("shadow"), &outside.join("newfile")] {
            set_stored_label(p, HOST).expect("security.selinux xattrs (the tests run as root)");
        }
        (d, tree, outside)
    }

    fn fs_create(p: &Path) {
        std::fs::create_dir_all(p).unwrap();
    }

    fn outside_labels(outside: &Path) -> Vec<String> {
        ["", "shadow", "newfile"]
            .iter()
            .map(|f| label(&outside.join(f)))
            .collect()
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_never_leads_a_check_outside_the_tree() {
        let (_d, tree, outside) = setup();
        let target = Context::shared_container_file();
        let mut t = Tracker::new(&tree, &target).unwrap();
        let r = t.check(&labeler(), false);
        assert!(r.full_scan && r.errors.is_empty(), "{r:?}");
        assert_eq!(label(&tree.join("sub/deeper/b")), SHARED);
        // Someone who may write in the tree moves a watched directory away and puts a symlink
        // to the host's files in its place, then writes in the moved directory: its watch
        // still reports the old path, tree/sub/newfile, which now leads through the symlink.
        std::fs::rename(tree.join("sub"), tree.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("sub")).unwrap();
        std::fs::write(tree.join("moved/newfile"), "y").unwrap();
        let r = t.check(&labeler(), false);
        assert!(!r.full_scan, "{r:?}");
        assert_eq!(outside_labels(&outside), [HOST, HOST, HOST], "{r:?}");
        // The symlink is labeled itself, the moved directory's new file too (a full scan).
        assert_eq!(label(&tree.join("sub")), SHARED);
        let mut fresh = Tracker::new(&tree, &target).unwrap();
        let r = fresh.check(&labeler(), false);
        assert!(r.errors.is_empty(), "{r:?}");
        assert_eq!(label(&tree.join("moved/newfile")), SHARED);
        assert_eq!(outside_labels(&outside), [HOST, HOST, HOST]);
        // A one-shot relabel of the tree does not enter the symlink either.
        relabel_tree(&labeler(), &tree, &target, false);
        assert_eq!(outside_labels(&outside), [HOST, HOST, HOST]);
    }

    #[test]
    fn a_directory_labeled_otherwise_is_written_whole_and_a_dry_run_counts_exactly() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        fs_create(&tree);
        // 3 x BLIND_AFTER entries labeled otherwise and as many already right, in whatever
        // order the directory lists them.
        let n = 3 * BLIND_AFTER;
        for i in 0..2 * n {
            let f = tree.join(format!("f{i}"));
            std::fs::write(&f, "x").unwrap();
            set_stored_label(&f, if i % 2 == 0 { HOST } else { SHARED }).expect("xattrs (root)");
        }
        set_stored_label(&tree, SHARED).unwrap();
        let target = Context::shared_container_file();
        let dry = relabel_tree(&labeler(), &tree, &target, true);
        assert_eq!(
            (dry.examined, dry.changed),
            (2 * n as u64 + 1, n as u64),
            "{dry:?}"
        );
        let r = relabel_tree(&labeler(), &tree, &target, false);
        assert!(r.errors.is_empty(), "{r:?}");
        // every wrong label written; right ones after a run of wrong ones may be written again
        assert!(r.changed >= n as u64 && r.changed <= 2 * n as u64, "{r:?}");
        for i in 0..2 * n {
            assert_eq!(label(&tree.join(format!("f{i}"))), SHARED, "f{i}");
        }
        let again = relabel_tree(&labeler(), &tree, &target, false);
        assert_eq!(again.changed, 0, "{again:?}");
        // all labeled otherwise: past the first BLIND_AFTER the rest are written unread
        for i in 0..2 * n {
            set_stored_label(&tree.join(format!("f{i}")), HOST).unwrap();
        }
        let r = relabel_tree(&labeler(), &tree, &target, false);
        assert_eq!((r.changed, r.errors.len()), (2 * n as u64, 0), "{r:?}");
        for i in 0..2 * n {
            assert_eq!(label(&tree.join(format!("f{i}"))), SHARED, "f{i}");
        }
    }

    /// Issue 37, 11: a hard link in the tree to a host file is skipped and reported, whether
    /// the label is read first or written blind; the host file keeps its label.
    #[test]
    fn a_hard_link_to_a_host_file_is_reported_not_relabeled() {
        for blind in [false, true] {
            let (_d, tree, outside) = setup();
            if blind {
                for i in 0..2 * BLIND_AFTER {
                    let f = tree.join(format!("sub/f{i:03}"));
                    std::fs::write(&f, "x").unwrap();
                    set_stored_label(&f, HOST).unwrap();
                }
            }
            std::fs::hard_link(outside.join("shadow"), tree.join("sub/zz-shadow")).unwrap();
            let r = relabel_tree(&labeler(), &tree, &Context::shared_container_file(), false);
            assert_eq!(outside_labels(&outside), [HOST, HOST, HOST], "{r:?}");
            assert!(r.errors.is_empty(), "reported, not an error: {r:?}");
            assert_eq!(r.skipped.len(), 1, "{r:?}");
            assert_eq!(r.skipped[0].path, tree.join("sub/zz-shadow"));
            assert!(r.skipped[0].error.contains("2 hard links"), "{r:?}");
            assert_eq!(label(&tree.join("sub/a")), SHARED);
        }
    }

    /// Issue 51, 4: the entry is swapped for a hard link to a host file between its link
    /// count's check and the label's write (the hook runs there): the write goes to the inode
    /// that was checked, never to the host file, whether the label was read first or not.
    #[test]
    fn an_entry_swapped_for_a_hard_link_after_its_check_does_not_carry_the_label_out() {
        for blind in [false, true] {
            let (_d, tree, outside) = setup();
            if blind {
                for i in 0..4 * BLIND_AFTER {
                    let f = tree.join(format!("sub/f{i:03}"));
                    std::fs::write(&f, "x").unwrap();
                    set_stored_label(&f, HOST).unwrap();
                }
            }
            let victim = tree.join("sub/zz-victim");
            std::fs::write(&victim, "x").unwrap();
            set_stored_label(&victim, HOST).unwrap();
            let (shadow, sub) = (outside.join("shadow"), tree.join("sub"));
            let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let f2 = fired.clone();
            *check::BEFORE_WRITE.lock().unwrap() = Some(Box::new(move |name: &CStr| {
                if name == c"zz-victim" && !f2.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    std::fs::hard_link(&shadow, sub.join(".swap")).unwrap();
                    std::fs::rename(sub.join(".swap"), sub.join("zz-victim")).unwrap();
                }
            }));
            let r = relabel_tree(&labeler(), &tree, &Context::shared_container_file(), false);
            *check::BEFORE_WRITE.lock().unwrap() = None;
            assert!(
                fired.load(std::sync::atomic::Ordering::SeqCst),
                "the swap happened"
            );
            assert_eq!(outside_labels(&outside), [HOST, HOST, HOST], "{r:?}");
            assert!(r.errors.is_empty(), "{r:?}");
            // The name now leads to the host file (nlink 2): the next check leaves it, reported.
            let again = relabel_tree(&labeler(), &tree, &Context::shared_container_file(), false);
            assert_eq!(outside_labels(&outside), [HOST, HOST, HOST], "{again:?}");
            assert_eq!(again.skipped.len(), 1, "{again:?}");
            assert_eq!(again.skipped[0].path, victim);
        }
    }

    #[test]
    fn a_tree_whose_top_is_a_symlink_is_not_entered() {
        let (d, _tree, outside) = setup();
        let link = d.path().join("linked-tree");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let target = Context::shared_container_file();
        let r = relabel_tree(&labeler(), &link.join("shadow"), &target, false);
        assert_eq!(r.changed, 0, "{r:?}");
        assert_eq!(r.errors.len(), 1, "{r:?}");
        let mut t = Tracker::new(&link, &target).unwrap();
        t.check(&labeler(), false);
        assert_eq!(outside_labels(&outside), [HOST, HOST, HOST]);
    }
}
