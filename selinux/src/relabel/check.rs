//! Checking and writing the labels of listed entries, split across worker threads (see the
//! module docs). Reads go by name in the held directory; every write goes through a descriptor
//! of the entry itself ([`set_held`]), so its link count and its label are the same inode's.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::walk::Group;
use super::{cpath, get_raw, set_xattr, PathError, Report};

/// After this many entries of one directory in a row whose labels differed, the rest of that
/// directory is written without reading each label first: a tree labeled otherwise (a first
/// relabel, a restored backup) pays a read and a write per entry, and the read is a third of
/// it (the VM benchmark; `chcon -R` never reads). Writing a label that was already right
/// changes nothing but the inode's ctime; a write refused is checked by a read, so an entry
/// that was right is never reported as an error. Dry runs always read.
pub(super) const BLIND_AFTER: usize = 16;

/// Stack size of a relabel worker thread.
const WORKER_STACK: usize = 256 << 10;

/// Gives this thread its own working directory (`unshare(CLONE_FS)`), so it may `chdir` without
/// moving the process's. `false` where that is refused (a seccomp filter): use full paths then.
fn private_cwd() -> bool {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS).is_ok()
}

/// A file with more than one link is not relabeled: its label is the inode's, so a hard link
/// made in the tree to a host file (`/etc/shadow`, on the same filesystem) would carry the
/// shared label to the host file too. Reported, not an error (a container that links its own
/// files in a tree must not stop the step, and kubelet with it).
fn linked_error(path: PathBuf, nlink: u64) -> PathError {
    PathError {
        path,
        error: format!(
            "not relabeled: it has {nlink} hard links (a link elsewhere would get the label too)"
        ),
    }
}

/// The link count as a dry run reports it: one `fstatat` on the held directory (nothing is
/// written, so a swap after it changes nothing). A failed `fstatat` counts as linked (skipped).
fn hardlinked(dir: &OwnedFd, name: &CStr, full: &dyn Fn() -> PathBuf) -> Option<PathError> {
    use nix::fcntl::AtFlags;
    match nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => (st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1)
            .then(|| linked_error(full(), st.st_nlink)),
        // Removed since it was listed: nothing to label.
        Err(nix::errno::Errno::ENOENT) => None,
        Err(e) => Some(PathError {
            path: full(),
            error: format!("not relabeled: its link count cannot be read: {e}"),
        }),
    }
}

/// What writing a label through the entry's own descriptor came to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Held {
    Written,
    /// Not written: the entry (not a directory) has this many hard links.
    Linked(u64),
    /// Removed since it was listed: nothing to label.
    Gone,
}

/// Labels `name` in the held directory `dir` through a descriptor of the entry itself, opened
/// `O_PATH | O_NOFOLLOW` (a symlink is labeled itself; a FIFO or a device is not opened): the
/// link count is read from that descriptor and the label written through it, so the entry cannot
/// be swapped for a hard link to a host file between the check and the write (issue 51, 4).
/// `value` ends with NUL, as libselinux stores it. `fsetxattr` refuses `O_PATH` descriptors
/// (`EBADF`, kernels 6.1 to 6.18), so the write goes through the descriptor's `/proc` link, which
/// resolves to that inode and nothing else (not followed further), as libselinux's
/// `fsetfilecon_raw` does; `in_proc_fd`: this thread's working directory is `/proc/PID/fd`, so
/// the link is one component away.
fn set_held(dir: BorrowedFd<'_>, name: &CStr, value: &[u8], in_proc_fd: bool) -> io::Result<Held> {
    use nix::fcntl::OFlag;
    let fd = match nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) {
        // SAFETY: openat returned a new descriptor, owned from here on.
        Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
        Err(nix::errno::Errno::ENOENT) => return Ok(Held::Gone),
        Err(e) => return Err(e.into()),
    };
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1 {
        return Ok(Held::Linked(st.st_nlink));
    }
    #[cfg(test)]
    if let Some(hook) = BEFORE_WRITE.lock().expect("hook").as_ref() {
        hook(name);
    }
    let via = if in_proc_fd {
        CString::new(fd.as_raw_fd().to_string())
    } else {
        CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
    };
    set_xattr(&via.expect("no NUL in a number"), value, true)?;
    Ok(Held::Written)
}

/// Tests: runs between the link count's check and the write (where a swap is the race).
#[cfg(test)]
pub(super) static BEFORE_WRITE: std::sync::Mutex<Option<Hook>> = std::sync::Mutex::new(None);

#[cfg(test)]
pub(super) type Hook = Box<dyn Fn(&CStr) + Send>;

/// This process's `/proc/PID/fd` (the descriptor table its threads share), held; `None` without
/// /proc (writes then fail and are reported).
fn proc_fd_dir() -> Option<OwnedFd> {
    use nix::fcntl::OFlag;
    let path = format!("/proc/{}/fd", std::process::id());
    let fd = nix::fcntl::open(
        path.as_str(),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    // SAFETY: open returned a new descriptor, owned from here on.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One worker thread's state: its report, the paths that differ, its read buffer.
struct Worker<'t> {
    target: &'t [u8],
    dry_run: bool,
    collect: bool,
    r: Report,
    differ: Vec<PathBuf>,
    buf: Vec<u8>,
    /// The thread has a working directory of its own (`private_cwd`).
    relative: bool,
    /// `/proc/self/fd`, held: writes `fchdir` into it once per directory that has any.
    proc_fd: Option<OwnedFd>,
}

/// An entry of a group to write: its index, and whether its label was not read (blind).
type Pending = (usize, bool);

impl Worker<'_> {
    /// Into the held directory: never a path resolved again. Without a private working
    /// directory, through the descriptor's /proc link (the directory itself, whatever its path
    /// has become).
    fn enter(&self, g: &Group) -> bool {
        self.relative && nix::unistd::fchdir(g.fd.as_raw_fd()).is_ok()
    }

    /// Whether the label of `name` in `g` is the target's: read by the name itself in the
    /// directory entered, or via the directory's /proc link.
    fn read_label(&mut self, g: &Group, name: &CStr, entered: bool) -> io::Result<bool> {
        let abs;
        let p: &CStr = if entered {
            name
        } else {
            let via = PathBuf::from(format!("/proc/self/fd/{}", g.fd.as_raw_fd()));
            abs = cpath(&via.join(std::ffi::OsStr::from_bytes(name.to_bytes())));
            &abs
        };
        let want = self.target.len() - 1;
        get_raw(p, &mut self.buf).map(|have| have == &self.target[..want])
    }

    fn changed(&mut self, path: impl FnOnce() -> PathBuf) {
        self.r.changed += 1;
        if self.collect {
            self.differ.push(path());
        }
    }

    /// Reads the group's labels (those not written blind) and lists the entries to write.
    fn read_group(&mut self, g: &Group, entered: bool) -> Vec<Pending> {
        let mut pending = Vec::new();
        // Labels of this directory's entries that differed in a row.
        let mut streak = 0;
        for (i, name) in g.names.iter().enumerate() {
            self.r.examined += 1;
            let full = || g.dir.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
            // (a hard-linked file is not written blind: the write finds it linked, its label
            // is read after, and it is left as it is when that differs)
            if !self.dry_run && streak >= BLIND_AFTER {
                pending.push((i, true));
                continue;
            }
            match self.read_label(g, name, entered) {
                Ok(true) => streak = 0,
                Ok(false) if self.dry_run => match hardlinked(&g.fd, name, &full) {
                    Some(e) => self.r.skipped.push(e),
                    None => {
                        streak += 1;
                        self.changed(full);
                    }
                },
                Ok(false) => {
                    streak += 1;
                    pending.push((i, false));
                }
                // Removed since it was listed: nothing to label.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => self.r.errors.push(PathError {
                    path: full(),
                    error: format!("reading label: {e}"),
                }),
            }
        }
        pending
    }

    /// Writes the pending entries of `g`, each through its own descriptor, from `/proc/self/fd`
    /// when the thread may change directory. Returns the blind writes that did not happen, with
    /// why: their labels are read next.
    fn write_group(&mut self, g: &Group, pending: &[Pending]) -> Vec<(usize, PathError)> {
        let in_proc = self.relative
            && self
                .proc_fd
                .as_ref()
                .is_some_and(|p| nix::unistd::fchdir(p.as_raw_fd()).is_ok());
        let mut recheck = Vec::new();
        for &(i, blind) in pending {
            let name = &g.names[i];
            let full = || g.dir.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
            let e = match set_held(g.fd.as_fd(), name, self.target, in_proc) {
                Ok(Held::Written) => {
                    self.changed(full);
                    continue;
                }
                Ok(Held::Gone) => continue,
                Ok(Held::Linked(n)) => {
                    if !blind {
                        self.r.skipped.push(linked_error(full(), n));
                        continue;
                    }
                    linked_error(full(), n)
                }
                Err(e) => PathError {
                    path: full(),
                    error: format!("setting label: {e}"),
                },
            };
            if blind {
                recheck.push((i, e));
            } else {
                self.r.errors.push(e);
            }
        }
        recheck
    }

    /// A blind write that did not happen is reported only when the label was not right already.
    fn recheck(&mut self, g: &Group, recheck: Vec<(usize, PathError)>) {
        let entered = self.enter(g);
        for (i, why) in recheck {
            match self.read_label(g, &g.names[i], entered) {
                Ok(true) => {}
                Ok(false) if why.error.starts_with("not relabeled") => self.r.skipped.push(why),
                Ok(false) => self.r.errors.push(why),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => self.r.errors.push(PathError {
                    path: why.path,
                    error: format!("reading label: {e}"),
                }),
            }
        }
    }

    fn group(&mut self, g: &Group) {
        let entered = self.enter(g);
        let pending = self.read_group(g, entered);
        if pending.is_empty() {
            return;
        }
        let recheck = self.write_group(g, &pending);
        if !recheck.is_empty() {
            self.recheck(g, recheck);
        }
    }
}

/// Checks (and unless `dry_run`, fixes) the labels of the grouped entries; returns the report and,
/// when `collect`, the paths that differ.
pub(super) fn check_entries(
    groups: &[Group],
    target: &[u8],
    dry_run: bool,
    collect: bool,
) -> (Report, Vec<PathBuf>) {
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
                        let relative = private_cwd();
                        let mut w = Worker {
                            target,
                            dry_run,
                            collect,
                            r: Report::default(),
                            differ: Vec::new(),
                            buf: vec![0u8; 256],
                            relative,
                            proc_fd: (relative && !dry_run).then(proc_fd_dir).flatten(),
                        };
                        for g in part {
                            w.group(g);
                        }
                        (w.r, w.differ)
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
