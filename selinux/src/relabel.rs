//! Keeping trees at one label: read every label, write only those that differ.
//!
//! [`relabel_tree`] scans a whole tree. It never follows symlinks (a link gets its own label),
//! never enters another filesystem (pod volumes mounted under /var/lib/kubelet stay untouched),
//! and reports unreadable entries per path instead of stopping. The hot path is one `lgetxattr`
//! per entry compared byte for byte with the target (what `lgetfilecon_raw` reads, without its
//! allocations), and one `lsetxattr` where it differs (what `lsetfilecon_raw` writes), split
//! across the machine's cores.
//!
//! [`Tracker`] is what the daemon keeps between passes: after one full scan it watches the tree's
//! directories with inotify (a label change raises `IN_ATTRIB`, a new entry `IN_CREATE` or
//! `IN_MOVED_TO`), so the next check reads only what changed since: nothing, when nothing did.
//! A lost event (queue overflow) or a watch it cannot add makes the next check a full scan.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::AtFlags;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use nix::sys::stat::{fstat, fstatat, FileStat};
use serde::{Deserialize, Serialize};

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
    /// This check scanned the whole tree (first check, or events were lost).
    pub full_scan: bool,
}

impl Report {
    fn merge(&mut self, o: Report) {
        self.examined += o.examined;
        self.changed += o.changed;
        self.other_filesystems += o.other_filesystems;
        self.errors.extend(o.errors);
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

/// Entries grouped by their directory, which is held open: workers `fchdir` into it once and use
/// the one-component `names` (path lookup of a single component per call, as `chcon -R`'s fts
/// does). No path is resolved again after the listing, so a directory swapped for a symlink
/// meanwhile cannot lead a worker outside the tree.
#[derive(Debug)]
struct Group {
    /// Where the directory was (reports only).
    dir: PathBuf,
    fd: OwnedFd,
    names: Vec<CString>,
}

/// At most this many directories are held open by a walk: it hands its groups over in batches.
const BATCH_DIRS: usize = 256;

fn cname(n: &std::ffi::OsStr) -> CString {
    CString::new(n.as_bytes()).expect("no NUL in file names")
}

/// `lstat` of `name` in the directory `dir`.
fn stat_at(dir: RawFd, name: &CStr) -> io::Result<FileStat> {
    fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io::Error::from)
}

fn is_dir(st: &FileStat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// A walk over directory descriptors: lists a tree on its filesystem, never following a symlink
/// (subdirectories are opened component by component with `O_NOFOLLOW` from the walk's root),
/// and hands the entries, grouped by directory, to `sink` in batches of [`BATCH_DIRS`].
struct Walk<'a> {
    exclude: &'a [PathBuf],
    report: Report,
    /// Every directory the walk opened.
    on_dir: &'a mut dyn FnMut(&Path),
    sink: &'a mut dyn FnMut(Vec<Group>, &mut Report),
    batch: Vec<Group>,
}

impl<'a> Walk<'a> {
    fn new(
        exclude: &'a [PathBuf],
        on_dir: &'a mut dyn FnMut(&Path),
        sink: &'a mut dyn FnMut(Vec<Group>, &mut Report),
    ) -> Self {
        Walk {
            exclude,
            report: Report::default(),
            on_dir,
            sink,
            batch: Vec::new(),
        }
    }

    fn err(&mut self, path: &Path, what: &str, e: io::Error) {
        self.report.errors.push(PathError {
            path: path.to_path_buf(),
            error: format!("{what}: {e}"),
        });
    }

    fn push(&mut self, g: Group) {
        if g.names.is_empty() {
            return;
        }
        self.batch.push(g);
        if self.batch.len() >= BATCH_DIRS {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        if !batch.is_empty() {
            (self.sink)(batch, &mut self.report);
        }
    }

    /// The end: the last batch handed over, the walk's report.
    fn finish(mut self) -> Report {
        self.flush();
        self.report
    }

    /// `top` (absolute) and everything below it; no component of `top` may be a symlink.
    fn tree(&mut self, top: &Path) {
        let (Some(parent), Some(name)) = (top.parent(), top.file_name()) else {
            return;
        };
        match crate::beneath::open_dir_nofollow(parent) {
            Ok(fd) => self.entry(fd, parent, cname(name)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => self.err(top, "open (symlinks are not followed)", e),
        }
    }

    /// `name` in the open directory `parent` (at `parent_path`), and when it is a directory
    /// everything below it on its filesystem.
    fn entry(&mut self, parent: OwnedFd, parent_path: &Path, name: CString) {
        let path = parent_path.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
        if excluded(self.exclude, &path) {
            return;
        }
        let st = match stat_at(parent.as_raw_fd(), &name) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return self.err(&path, "stat", e),
        };
        let below = if is_dir(&st) {
            match crate::beneath::open_child_dir(parent.as_raw_fd(), &name) {
                Ok(fd) => Some(fd),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(e) => return self.err(&path, "open directory (symlinks are not followed)", e),
            }
        } else {
            None
        };
        self.push(Group {
            dir: parent_path.to_path_buf(),
            fd: parent,
            names: vec![name],
        });
        if let Some(fd) = below {
            self.below(&path, fd, st.st_dev);
        }
    }

    /// Everything below the open directory `base` (at `path`) on the filesystem `dev`.
    /// Directories still to list are kept as paths relative to `base` and opened from it
    /// component by component when their turn comes, so few descriptors are open at a time.
    fn below(&mut self, path: &Path, base: OwnedFd, dev: u64) {
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let dpath = path.join(&rel);
            let fd = match crate::beneath::open_dir_beneath(base.as_raw_fd(), &rel) {
                Ok(fd) => fd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    self.err(&dpath, "open directory (symlinks are not followed)", e);
                    continue;
                }
            };
            // The directory opened is the one listed, on this filesystem (a mount appearing
            // since is not entered).
            match fstat(fd.as_raw_fd()) {
                Ok(st) if st.st_dev == dev => {}
                Ok(_) => {
                    self.report.other_filesystems += 1;
                    continue;
                }
                Err(e) => {
                    self.err(&dpath, "stat", e.into());
                    continue;
                }
            }
            (self.on_dir)(&dpath);
            let names = self.list(&dpath, &fd, dev, &rel, &mut stack);
            self.push(Group {
                dir: dpath,
                fd,
                names,
            });
        }
    }

    /// The entries of the open directory `fd` to label; subdirectories on `dev` go on `stack`.
    fn list(
        &mut self,
        dpath: &Path,
        fd: &OwnedFd,
        dev: u64,
        rel: &Path,
        stack: &mut Vec<PathBuf>,
    ) -> Vec<CString> {
        let mut names = Vec::new();
        let dir = nix::unistd::dup(fd.as_raw_fd()).and_then(nix::dir::Dir::from_fd);
        let mut dir = match dir {
            Ok(d) => d,
            Err(e) => {
                self.err(dpath, "read directory", e.into());
                return names;
            }
        };
        for entry in dir.iter() {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    self.err(dpath, "read directory", e.into());
                    break;
                }
            };
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let os = std::ffi::OsStr::from_bytes(name.to_bytes());
            if !self.exclude.is_empty() && excluded(self.exclude, &dpath.join(os)) {
                continue;
            }
            let dir_entry = match entry.file_type() {
                Some(t) => t == nix::dir::Type::Directory,
                None => stat_at(fd.as_raw_fd(), name).is_ok_and(|st| is_dir(&st)),
            };
            if dir_entry {
                match stat_at(fd.as_raw_fd(), name) {
                    Ok(st) if st.st_dev != dev => {
                        self.report.other_filesystems += 1;
                        continue;
                    }
                    Ok(_) => stack.push(rel.join(os)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        self.err(&dpath.join(os), "stat", e);
                        continue;
                    }
                }
            }
            names.push(name.to_owned());
        }
        names
    }
}

/// `path` is one of `exclude` or below one.
fn excluded(exclude: &[PathBuf], path: &Path) -> bool {
    exclude.iter().any(|x| path.starts_with(x))
}

/// Gives this thread its own working directory (`unshare(CLONE_FS)`), so it may `chdir` without
/// moving the process's. `false` where that is refused (a seccomp filter): use full paths then.
fn private_cwd() -> bool {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS).is_ok()
}

/// Checks (and unless `dry_run`, fixes) the labels of the grouped entries; returns the report and,
/// when `collect`, the paths that differ.
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
                s.spawn(move || {
                    let mut r = Report::default();
                    let mut differ = Vec::new();
                    let mut buf = vec![0u8; 256];
                    let relative = private_cwd();
                    for g in part {
                        // Into the held directory: never a path resolved again. Without a
                        // private working directory, through the descriptor's /proc link (the
                        // directory itself, whatever its path has become).
                        let dir_ok = relative && nix::unistd::fchdir(g.fd.as_raw_fd()).is_ok();
                        let via_fd = PathBuf::from(format!("/proc/self/fd/{}", g.fd.as_raw_fd()));
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
                            match get_raw(p, &mut buf) {
                                Ok(have) if have == want => {}
                                Ok(_) => {
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

/// A full scan at least this often, whatever the events said.
pub const FULL_SCAN_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// A tree kept at one label across passes (see the module docs).
pub struct Tracker {
    top: PathBuf,
    target: Vec<u8>,
    ino: Inotify,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    watched: BTreeSet<PathBuf>,
    /// Entries that changed (or differ) since the last check.
    dirty: BTreeSet<PathBuf>,
    /// Directories found by a scan, watched once that scan's labels are written (so our own
    /// writes raise no events to read back).
    pending_dirs: Vec<PathBuf>,
    last_full: Option<std::time::Instant>,
    /// Paths (and what is below them) left alone: another label is theirs.
    exclude: Vec<PathBuf>,
}

/// Added through the held directory's `/proc/self/fd` link (which must be followed to reach
/// it), so never by a path that could lead elsewhere.
const WATCH: AddWatchFlags = AddWatchFlags::IN_ATTRIB
    .union(AddWatchFlags::IN_CREATE)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_ONLYDIR);

/// Reads the queued events (without acting on them).
fn read_queue(ino: &Inotify, into: &mut Vec<InotifyEvent>) {
    while let Ok(events) = ino.read_events() {
        if events.is_empty() {
            break;
        }
        into.extend(events);
    }
}

/// The path no longer leads to an entry of the tree without following a link (or is gone).
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR))
}

impl Tracker {
    pub fn new(top: &Path, target: &Context) -> io::Result<Self> {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(io::Error::from)?;
        Ok(Tracker {
            top: top.to_path_buf(),
            target: target_bytes(target),
            ino,
            dirs: HashMap::new(),
            watched: BTreeSet::new(),
            dirty: BTreeSet::new(),
            pending_dirs: Vec::new(),
            last_full: None,
            exclude: Vec::new(),
        })
    }

    /// Leaves these paths (and what is below them) alone.
    pub fn with_exclude(mut self, exclude: Vec<PathBuf>) -> Self {
        self.exclude = exclude;
        self.last_full = None;
        self
    }

    pub fn exclude(&self) -> &[PathBuf] {
        &self.exclude
    }

    /// The directory `dir` of the tree, opened from the top without following symlinks.
    fn open_in_tree(&self, dir: &Path) -> io::Result<OwnedFd> {
        let rel = dir
            .strip_prefix(&self.top)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let top = crate::beneath::open_dir_nofollow(&self.top)?;
        crate::beneath::open_dir_beneath(top.as_raw_fd(), rel)
    }

    fn watch(&mut self, dir: &Path) {
        if self.watched.contains(dir) {
            return;
        }
        let added = self.open_in_tree(dir).and_then(|fd| {
            let via_fd = format!("/proc/self/fd/{}", fd.as_raw_fd());
            self.ino
                .add_watch(via_fd.as_str(), WATCH)
                .map_err(io::Error::from)
        });
        match added {
            Ok(wd) => {
                self.dirs.insert(wd, dir.to_path_buf());
                self.watched.insert(dir.to_path_buf());
            }
            // Gone or replaced since the scan: its parent's event brings it back.
            Err(e) if gone(&e) => {}
            // Without a watch this directory's changes would go unseen: scan fully next time.
            Err(_) => self.last_full = None,
        }
    }

    /// Acts on events read: lost events mean a full scan; changed entries are dirty.
    fn absorb(&mut self, events: Vec<InotifyEvent>) {
        for ev in events {
            if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                self.last_full = None;
                continue;
            }
            if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                if let Some(d) = self.dirs.remove(&ev.wd) {
                    self.watched.remove(&d);
                }
                continue;
            }
            let Some(dir) = self.dirs.get(&ev.wd) else {
                continue;
            };
            let p = match &ev.name {
                Some(n) if !n.is_empty() => dir.join(n),
                _ => dir.clone(),
            };
            self.dirty.insert(p);
        }
    }

    /// Reads queued events into the dirty set.
    fn drain(&mut self) {
        let mut events = Vec::new();
        read_queue(&self.ino, &mut events);
        self.absorb(events);
    }

    /// The dirty entries: each opened from its directory, reached from the top without
    /// following symlinks; a new directory is walked, anything else labeled itself.
    fn walk_dirty(&self, walk: &mut Walk, dirty: BTreeSet<PathBuf>) {
        let top = match crate::beneath::open_dir_nofollow(&self.top) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return walk.err(&self.top, "open (symlinks are not followed)", e),
        };
        let mut group: Option<Group> = None;
        for p in dirty {
            if excluded(walk.exclude, &p) {
                continue;
            }
            let Ok(rel) = p.strip_prefix(&self.top) else {
                continue;
            };
            let (parent_path, name) = match (p.parent(), p.file_name()) {
                (Some(d), Some(n)) => (d.to_path_buf(), cname(n)),
                _ => continue,
            };
            if group.as_ref().is_some_and(|g| g.dir != parent_path) {
                walk.push(group.take().expect("checked"));
            }
            let parent = match group.take() {
                Some(g) => g,
                None => {
                    let opened = match rel.parent() {
                        // The top itself: from its parent, symlinks refused all the way.
                        None => crate::beneath::open_dir_nofollow(&parent_path),
                        Some(r) => crate::beneath::open_dir_beneath(top.as_raw_fd(), r),
                    };
                    match opened {
                        Ok(fd) => Group {
                            dir: parent_path.clone(),
                            fd,
                            names: Vec::new(),
                        },
                        Err(e) if gone(&e) => continue,
                        Err(e) => {
                            walk.err(&p, "open directory (symlinks are not followed)", e);
                            continue;
                        }
                    }
                }
            };
            let new_dir = !self.watched.contains(&p)
                && stat_at(parent.fd.as_raw_fd(), &name).is_ok_and(|st| is_dir(&st));
            if new_dir {
                // The group so far, then the new directory with everything below it.
                let fd = match nix::unistd::dup(parent.fd.as_raw_fd()) {
                    // SAFETY: dup returned a new descriptor that nothing else owns.
                    Ok(fd) => unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
                    Err(e) => {
                        walk.err(&p, "dup", e.into());
                        continue;
                    }
                };
                walk.push(parent);
                walk.entry(fd, &parent_path, name);
            } else {
                let mut g = parent;
                g.names.push(name);
                group = Some(g);
            }
        }
        if let Some(g) = group {
            walk.push(g);
        }
    }

    /// Checks the tree: fully the first time, after lost events and at least hourly; else only
    /// what changed since the last check. Unless `dry_run`, writes the labels that differ. Does
    /// nothing when `labeler` skips labels.
    pub fn check(&mut self, labeler: &Labeler, dry_run: bool) -> Report {
        if labeler.skipped().is_some() {
            return Report::default();
        }
        self.drain();
        let full = self
            .last_full
            .is_none_or(|t| t.elapsed() >= FULL_SCAN_EVERY);
        let dirty = if full {
            self.last_full = Some(std::time::Instant::now());
            self.dirty.clear();
            self.pending_dirs.clear();
            None
        } else {
            Some(std::mem::take(&mut self.dirty))
        };
        let target = self.target.clone();
        let (mut found_dirs, mut differ, mut events) = (Vec::new(), Vec::new(), Vec::new());
        let mut report = {
            let ino = &self.ino;
            let mut on_dir = |d: &Path| found_dirs.push(d.to_path_buf());
            let mut sink = |batch: Vec<Group>, report: &mut Report| {
                // Where the entries are watched our writes raise an event each: read them while
                // the workers write, so the queue (fs.inotify.max_queued_events) cannot
                // overflow on a large relabel. Paths that differ are collected: a dry run's
                // findings go to the apply, an apply's own events are not changes.
                let (r, d) = std::thread::scope(|s| {
                    let worker = s.spawn(|| check_entries(&batch, &target, dry_run, true));
                    while !dry_run && !worker.is_finished() {
                        read_queue(ino, &mut events);
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    worker.join().expect("relabel worker")
                });
                report.merge(r);
                differ.extend(d);
            };
            let mut walk = Walk::new(&self.exclude, &mut on_dir, &mut sink);
            match dirty {
                None => walk.tree(&self.top),
                Some(d) => self.walk_dirty(&mut walk, d),
            }
            walk.finish()
        };
        report.full_scan = full;
        self.absorb(events);
        self.pending_dirs.extend(found_dirs);
        let differ: BTreeSet<PathBuf> = differ.into_iter().collect();
        if dry_run && !differ.is_empty() {
            // Still to be written by the apply that follows.
            self.dirty.extend(differ);
        } else {
            // Watched once their labels are written (a dry run that found nothing to write is
            // not followed by an apply: watch now).
            for d in std::mem::take(&mut self.pending_dirs) {
                self.watch(&d);
            }
            // Our own writes' events are not changes to look at again.
            self.drain();
            for p in &differ {
                self.dirty.remove(p);
            }
        }
        for e in &report.errors {
            self.dirty.insert(e.path.clone());
        }
        report
    }
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
