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
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
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

/// Entries grouped by their directory: workers `chdir` into `dir` once and use the one-component
/// `names` (path lookup of a single component per call, as `chcon -R`'s fts does).
#[derive(Debug, Default)]
struct Group {
    dir: PathBuf,
    names: Vec<CString>,
}

fn group_of(groups: &mut Vec<Group>, path: &Path) {
    let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let name = path
        .file_name()
        .map(|n| CString::new(n.as_bytes()).expect("no NUL in file names"))
        .unwrap_or_else(|| c".".to_owned());
    match groups.last_mut() {
        Some(g) if g.dir == dir => g.names.push(name),
        _ => groups.push(Group {
            dir,
            names: vec![name],
        }),
    }
}

/// Lists `top` and everything below it on its filesystem, grouped by directory; `on_dir` sees
/// every directory.
fn walk(
    top: &Path,
    exclude: &[PathBuf],
    out: &mut Vec<Group>,
    report: &mut Report,
    on_dir: &mut dyn FnMut(&Path),
) {
    if excluded(exclude, top) {
        return;
    }
    let err = |report: &mut Report, path: &Path, what: &str, e: io::Error| {
        report.errors.push(PathError {
            path: path.to_path_buf(),
            error: format!("{what}: {e}"),
        })
    };
    let meta = match fs::symlink_metadata(top) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => return err(report, top, "stat", e),
    };
    group_of(out, top);
    if !meta.is_dir() {
        return;
    }
    let dev = meta.dev();
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        on_dir(&dir);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                err(report, &dir, "read directory", e);
                continue;
            }
        };
        let mut group = Group {
            dir: dir.clone(),
            names: Vec::new(),
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    err(report, &dir, "read directory", e);
                    continue;
                }
            };
            if !exclude.is_empty() && excluded(exclude, &entry.path()) {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => {
                    let path = entry.path();
                    match fs::symlink_metadata(&path) {
                        Ok(m) if m.dev() != dev => {
                            report.other_filesystems += 1;
                            continue;
                        }
                        Ok(_) => stack.push(path),
                        Err(e) => {
                            err(report, &path, "stat", e);
                            continue;
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    err(report, &entry.path(), "file type", e);
                    continue;
                }
            }
            group
                .names
                .push(CString::new(entry.file_name().as_bytes()).expect("no NUL in file names"));
        }
        if !group.names.is_empty() {
            out.push(group);
        }
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
                        let dir_ok = relative && std::env::set_current_dir(&g.dir).is_ok();
                        for name in &g.names {
                            r.examined += 1;
                            let full = || g.dir.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
                            let abs;
                            let p: &CStr = if dir_ok {
                                name
                            } else {
                                abs = cpath(&full());
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
    let mut report = Report {
        full_scan: true,
        ..Report::default()
    };
    let mut entries = Vec::new();
    walk(top, exclude, &mut entries, &mut report, &mut |_| {});
    let (r, _) = check_entries(&entries, &target_bytes(target), dry_run, false);
    report.merge(r);
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

const WATCH: AddWatchFlags = AddWatchFlags::IN_ATTRIB
    .union(AddWatchFlags::IN_CREATE)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DONT_FOLLOW)
    .union(AddWatchFlags::IN_ONLYDIR);

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

    fn watch(&mut self, dir: &Path) {
        if self.watched.contains(dir) {
            return;
        }
        match self.ino.add_watch(dir, WATCH) {
            Ok(wd) => {
                self.dirs.insert(wd, dir.to_path_buf());
                self.watched.insert(dir.to_path_buf());
            }
            // Without a watch this directory's changes would go unseen: scan fully next time.
            Err(_) => self.last_full = None,
        }
    }

    /// Reads queued events into the dirty set.
    fn drain(&mut self) {
        while let Ok(events) = self.ino.read_events() {
            if events.is_empty() {
                break;
            }
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
    }

    /// Checks the tree: fully the first time, after lost events and at least hourly; else only
    /// what changed since the last check. Unless `dry_run`, writes the labels that differ. Does
    /// nothing when `labeler` skips labels.
    pub fn check(&mut self, labeler: &Labeler, dry_run: bool) -> Report {
        if labeler.skipped().is_some() {
            return Report::default();
        }
        self.drain();
        let mut report = Report::default();
        let mut entries = Vec::new();
        let mut found_dirs = Vec::new();
        let full = self
            .last_full
            .is_none_or(|t| t.elapsed() >= FULL_SCAN_EVERY);
        if full {
            report.full_scan = true;
            self.last_full = Some(std::time::Instant::now());
            self.dirty.clear();
            self.pending_dirs.clear();
            let top = self.top.clone();
            walk(&top, &self.exclude, &mut entries, &mut report, &mut |d| {
                found_dirs.push(d.to_path_buf())
            });
        } else {
            for p in std::mem::take(&mut self.dirty) {
                if excluded(&self.exclude, &p) {
                    continue;
                }
                let new_dir = fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir())
                    && !self.watched.contains(&p);
                if new_dir {
                    walk(&p, &self.exclude, &mut entries, &mut report, &mut |d| {
                        found_dirs.push(d.to_path_buf())
                    });
                } else {
                    group_of(&mut entries, &p);
                }
            }
        }
        self.pending_dirs.extend(found_dirs);
        let target = self.target.clone();
        let (r, differ) = if dry_run || !self.pending_dirs.is_empty() {
            // Not yet watched where this scan found the entries: writes raise no events. A
            // change someone makes meanwhile to an entry the scan already passed is caught by
            // the next full scan.
            // Paths are only needed to carry a dry run's findings to the apply.
            check_entries(&entries, &target, dry_run, dry_run)
        } else {
            // Watched: our writes raise an event each. Read them while the workers write, so
            // the queue (fs.inotify.max_queued_events) cannot overflow on a large relabel.
            std::thread::scope(|s| {
                let worker = s.spawn(|| check_entries(&entries, &target, false, true));
                while !worker.is_finished() {
                    self.drain();
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                worker.join().expect("relabel worker")
            })
        };
        report.merge(r);
        let differ: BTreeSet<PathBuf> = differ.into_iter().collect();
        if dry_run && !differ.is_empty() {
            // Still to be written by the apply that follows.
            self.dirty.extend(differ);
        } else {
            // (A dry run that found nothing to write is not followed by an apply: watch now.)
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
