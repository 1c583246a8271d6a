//! The tree kept at one label across passes (see the module docs).

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

use super::walk::{cname, is_dir, stat_at, Group, Walk};
use super::{check_entries, excluded, target_bytes, Report};
use crate::{Context, Labeler};

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

    /// Watches the directory `dir` of the tree, opened from the tree's top `top` (held open by
    /// the caller, once for all the directories it watches) without following symlinks.
    fn watch(&mut self, top: &io::Result<OwnedFd>, dir: &Path) {
        if self.watched.contains(dir) {
            return;
        }
        let opened = match (top, dir.strip_prefix(&self.top)) {
            (Ok(top), Ok(rel)) => crate::beneath::open_dir_beneath(top.as_raw_fd(), rel),
            (Err(e), _) => Err(e
                .raw_os_error()
                .map_or_else(|| io::Error::from(e.kind()), io::Error::from_raw_os_error)),
            (_, Err(_)) => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        };
        let added = opened.and_then(|fd| {
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
            let (ino, watched) = (&self.ino, &self.watched);
            let mut on_dir = |d: &Path| found_dirs.push(d.to_path_buf());
            let mut sink = |batch: Vec<Group>, report: &mut Report| {
                // Where the entries are watched our writes raise an event each: read them while
                // the workers write, so the queue (fs.inotify.max_queued_events) cannot
                // overflow on a large relabel, and collect the paths written, whose events are
                // not changes. A dry run collects its findings for the apply. Elsewhere (a first
                // scan) nothing is collected: 20k paths cost more than the labels.
                let watched_here = batch.iter().any(|g| watched.contains(&g.dir));
                let collect = dry_run || watched_here;
                let (r, d) = if dry_run || !watched_here {
                    check_entries(&batch, &target, dry_run, collect)
                } else {
                    std::thread::scope(|s| {
                        let worker = s.spawn(|| check_entries(&batch, &target, false, true));
                        while !worker.is_finished() {
                            read_queue(ino, &mut events);
                            std::thread::sleep(std::time::Duration::from_millis(2));
                        }
                        worker.join().expect("relabel worker")
                    })
                };
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
            let pending = std::mem::take(&mut self.pending_dirs);
            if !pending.is_empty() {
                let top = crate::beneath::open_dir_nofollow(&self.top);
                for d in pending {
                    self.watch(&top, &d);
                }
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
