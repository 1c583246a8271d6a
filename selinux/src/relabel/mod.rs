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

mod tracker;
mod walk;

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    set_raw(&cpath(path), &v)
}

/// Sets the label of `path` itself; `value` ends with NUL, as libselinux stores it.
fn set_raw(path: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: path is NUL-terminated; value is valid for value.len() bytes.
    let r = unsafe {
        libc::lsetxattr(
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

/// After this many entries of one directory in a row whose labels differed, the rest of that
/// directory is written without reading each label first: a tree labeled otherwise (a first
/// relabel, a restored backup) pays a read and a write per entry, and the read is a third of
/// it (the VM benchmark; `chcon -R` never reads). Writing a label that was already right
/// changes nothing but the inode's ctime; a write refused is checked by a read, so an entry
/// that was right is never reported as an error. Dry runs always read.
const BLIND_AFTER: usize = 16;

/// Stack size of a relabel worker thread.
const WORKER_STACK: usize = 256 << 10;

/// Gives this thread its own working directory (`unshare(CLONE_FS)`), so it may `chdir` without
/// moving the process's. `false` where that is refused (a seccomp filter): use full paths then.
fn private_cwd() -> bool {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS).is_ok()
}

/// Checks (and unless `dry_run`, fixes) the labels of the grouped entries; returns the report and,
/// when `collect`, the paths that differ.
/// A file with more than one link is not relabeled: its label is the inode's, so a hard link
/// made in the tree to a host file (`/etc/shadow`, on the same filesystem) would carry the
/// shared label to the host file too. Asked only of an entry whose label is to change (one
/// `fstatat` on the held directory, never a path); reported, not an error (a container that
/// links its own files in a tree must not stop the step, and kubelet with it). A failed
/// `fstatat` counts as linked (skipped).
fn hardlinked(dir: &OwnedFd, name: &CStr, full: &dyn Fn() -> PathBuf) -> Option<PathError> {
    use nix::fcntl::AtFlags;
    match nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => (st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1).then(|| {
            PathError {
                path: full(),
                error: format!(
                    "not relabeled: it has {} hard links (a link elsewhere would get the label too)",
                    st.st_nlink
                ),
            }
        }),
        // Removed since it was listed: nothing to label (the write below finds it gone).
        Err(nix::errno::Errno::ENOENT) => None,
        Err(e) => Some(PathError {
            path: full(),
            error: format!("not relabeled: its link count cannot be read: {e}"),
        }),
    }
}

fn check_entries(
    groups: &[Group],
    target: &[u8],
    dry_run: bool,
    collect: bool,
) -> (Report, Vec<PathBuf>) {
    let want = &target[..target.len() - 1];
    let threads = std::env::var("NODECTL_RELABEL_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(8)
        });
    // Split the groups into `threads` runs of about the same number of entries.
    let total: usize = groups.iter().map(|g| g.names.len()).sum();
    let per = total.div_ceil(threads.max(1)).max(512);
    let mut parts: Vec<&[Group]> = Vec::new();
    let (mut start, mut acc) = (0, 0);
    for (i, g) in groups.iter().enumerate() {
        acc += g.names.len();
        if acc >= per {
            parts.push(&groups[start..=i]);
            start = i + 1;
            acc = 0;
        }
    }
    if start < groups.len() {
        parts.push(&groups[start..]);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| {
                // A small stack: the worker needs little, and a 2 MiB one (the default) is what
                // glibc caches after the thread ends.
                std::thread::Builder::new()
                    .stack_size(WORKER_STACK)
                    .spawn_scoped(s, move || {
                        let mut r = Report::default();
                        let mut differ = Vec::new();
                        let mut buf = vec![0u8; 256];
                        let relative = private_cwd();
                        for g in part {
                            // Into the held directory: never a path resolved again. Without a
                            // private working directory, through the descriptor's /proc link (the
                            // directory itself, whatever its path has become).
                            let dir_ok = relative && nix::unistd::fchdir(g.fd.as_raw_fd()).is_ok();
                            let via_fd =
                                PathBuf::from(format!("/proc/self/fd/{}", g.fd.as_raw_fd()));
                            // Labels of this directory's entries that differed in a row.
                            let mut streak = 0;
                            for name in &g.names {
                                r.examined += 1;
                                let os = std::ffi::OsStr::from_bytes(name.as_bytes());
                                let full = || g.dir.join(os);
                                let abs;
                                let p: &CStr = if dir_ok {
                                    name
                                } else {
                                    abs = cpath(&via_fd.join(os));
                                    &abs
                                };
                                // (a hard-linked file is never written blind: its label is
                                // read first, below, and left as it is when it differs)
                                if !dry_run
                                    && streak >= BLIND_AFTER
                                    && hardlinked(&g.fd, name, &full).is_none()
                                {
                                    match set_raw(p, target) {
                                        Ok(()) => {
                                            r.changed += 1;
                                            if collect {
                                                differ.push(full());
                                            }
                                            continue;
                                        }
                                        // Removed since it was listed: nothing to label.
                                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                                            continue
                                        }
                                        // Refused (a label this process may not relabel
                                        // from): an error only if it was not right already,
                                        // as without the blind write; read it below.
                                        Err(_) => streak = 0,
                                    }
                                }
                                match get_raw(p, &mut buf) {
                                    Ok(have) if have == want => streak = 0,
                                    Ok(_) => {
                                        if let Some(e) = hardlinked(&g.fd, name, &full) {
                                            r.skipped.push(e);
                                            continue;
                                        }
                                        streak += 1;
                                        if !dry_run {
                                            if let Err(e) = set_raw(p, target) {
                                                r.errors.push(PathError {
                                                    path: full(),
                                                    error: format!("setting label: {e}"),
                                                });
                                                continue;
                                            }
                                        }
                                        r.changed += 1;
                                        if collect {
                                            differ.push(full());
                                        }
                                    }
                                    // Removed since it was listed: nothing to label.
                                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                                    Err(e) => r.errors.push(PathError {
                                        path: full(),
                                        error: format!("reading label: {e}"),
                                    }),
                                }
                            }
                        }
                        (r, differ)
                    })
                    .expect("spawning a relabel worker")
            })
            .collect();
        let mut report = Report::default();
        let mut differ = Vec::new();
        for h in handles {
            let (r, d) = h.join().expect("relabel worker");
            report.merge(r);
            differ.extend(d);
        }
        (report, differ)
    })
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
