//! Where a write happens: the directory of a node path, opened from the root without following a
//! symlink someone else could have planted, and held open while the entry in it is changed.
//!
//! nodectld writes into trees that others may write (uid `etcd` owns `/etc/ssl/etcd`; a root
//! container with a hostPath may write `/etc/kubernetes`). The directory is opened in one
//! `openat2(RESOLVE_NO_SYMLINKS)` call, or (a symlink on the way, or no `openat2` here) each
//! component with `O_NOFOLLOW | O_DIRECTORY` relative to the one before; the entry is then reached
//! by name through the held descriptor (`*at` calls on it, or for a few rarer operations
//! `/proc/self/fd/<n>/<name>`: the directory itself whatever its path has become) and never
//! followed when it is a symlink. A symlink among the directories is
//! followed only at the top of the filesystem as the OS lays it out (a link directly in `/` or
//! `/var`, owned by root: Fedora CoreOS's `/opt -> var/opt`, `/var/run -> ../run`), its target
//! resolved the same way; anywhere deeper it is refused (`ELOOP`).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nodectl_selinux::beneath::{open_child_dir, open_dir_nofollow};

use crate::root::Root;

/// At most this many symlinks followed while opening one directory.
const MAX_HOPS: usize = 8;

/// A node path's directory, held open, and the entry's name in it.
#[derive(Clone)]
pub(super) struct Located {
    dir: Arc<OwnedFd>,
    /// The path as the node sees it under the root (for messages).
    pub(super) real: PathBuf,
    /// The entry through the held directory (`/proc/self/fd/<n>/<name>`).
    pub(super) via: PathBuf,
    /// The entry's name in the held directory (for `*at` calls on it).
    pub(super) name: CString,
}

impl Located {
    /// The held directory itself (`/proc/self/fd/<n>`).
    pub(super) fn dir_via(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
    }

    /// The held directory.
    pub(super) fn dir_fd(&self) -> &OwnedFd {
        &self.dir
    }

    /// The held directory, shared (a batch keeps it for the next file in it).
    pub(super) fn dir_arc(&self) -> Arc<OwnedFd> {
        self.dir.clone()
    }

    /// What is at the entry, by name in the held directory (no path resolved again): nothing,
    /// something other than a regular file, or the regular file opened for reading (never
    /// through a symlink, nor opened when the lstat says it is a device or a FIFO).
    pub(super) fn open_file(&self) -> io::Result<Entry> {
        use nix::errno::Errno;
        use nix::fcntl::{AtFlags, OFlag};
        use nix::sys::stat::{fstatat, Mode, SFlag};
        let dir = Some(self.dir.as_raw_fd());
        let st = match fstatat(dir, self.name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(Entry::Missing),
            Err(e) => return Err(e.into()),
        };
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Ok(Entry::Other);
        }
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let f = match nix::fcntl::openat(dir, self.name.as_c_str(), flags, Mode::empty()) {
            // SAFETY: openat returned a new descriptor that nothing else owns.
            Ok(fd) => unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) },
            // (replaced between the two calls: gone, or a symlink now)
            Err(Errno::ENOENT) => return Ok(Entry::Missing),
            Err(Errno::ELOOP) => return Ok(Entry::Other),
            Err(e) => return Err(e.into()),
        };
        Ok(if f.metadata()?.is_file() {
            Entry::File(f)
        } else {
            Entry::Other
        })
    }

    /// fsync of the held directory (a rename or an unlink in it made durable).
    pub(super) fn sync_dir(&self) -> io::Result<()> {
        nix::unistd::fsync(self.dir.as_raw_fd()).map_err(io::Error::from)
    }
}

/// What [`Located::open_file`] found at an entry.
pub(super) enum Entry {
    Missing,
    /// A directory, symlink, device, FIFO or socket.
    Other,
    File(std::fs::File),
}

/// Locates `node_path` (absolute) under `root`: its directory opened safely (see the module
/// docs); `NotFound` when a directory on the way does not exist.
pub(super) fn locate(root: &Root, node_path: &Path) -> io::Result<Located> {
    let parent = node_path.parent().unwrap_or(Path::new("/"));
    located_in(Arc::new(open_node_dir(root, parent)?), root, node_path)
}

/// `node_path` in its directory `dir`, already open.
pub(super) fn located_in(dir: Arc<OwnedFd>, root: &Root, node_path: &Path) -> io::Result<Located> {
    let name = node_path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let via = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    Ok(Located {
        dir,
        real: root.path(node_path),
        via,
        name: cstr(name)?,
    })
}

/// Opens the node directory `node_dir` under `root` (see the module docs).
fn open_node_dir(root: &Root, node_dir: &Path) -> io::Result<OwnedFd> {
    #[cfg(test)]
    OPENED.with(|n| n.set(n.get() + 1));
    let mut want = normal(node_dir)?;
    // In one call where no symlink is on the way (openat2 refuses any); the walk below answers
    // for the rest: a symlink the OS laid out to follow, a refusal, or no openat2 here.
    let whole: PathBuf = want
        .iter()
        .map(|c| OsStr::from_bytes(c.as_bytes()))
        .collect();
    match open_dir_nofollow(&root.dir().join(whole)) {
        Ok(fd) => return Ok(fd),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    for _ in 0..=MAX_HOPS {
        match walk(root, &want)? {
            Ok(fd) => return Ok(fd),
            Err(next) => want = next,
        }
    }
    Err(io::Error::from_raw_os_error(libc::ELOOP))
}

/// The normal components of an absolute node path (`..` refused).
fn normal(p: &Path) -> io::Result<Vec<CString>> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(cstr(n)),
            Component::RootDir | Component::CurDir => None,
            _ => Some(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "`..` in a node path",
            ))),
        })
        .collect()
}

fn cstr(n: &OsStr) -> io::Result<CString> {
    CString::new(n.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Opens the components one by one: the directory, or the path to resolve instead when an
/// allowed symlink was met (its target, then the rest).
fn walk(root: &Root, want: &[CString]) -> io::Result<Result<OwnedFd, Vec<CString>>> {
    let mut cur = open_dir_nofollow(root.dir())?;
    for (i, name) in want.iter().enumerate() {
        match open_child_dir(cur.as_raw_fd(), name) {
            Ok(fd) => cur = fd,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                let next = follow(cur.as_raw_fd(), &want[..i], name, &want[i + 1..])?;
                return Ok(Err(next));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Ok(cur))
}

/// `name` in the directory `dir` (at node path `above`) is not a directory: when it is a symlink
/// the OS laid out (in `/` or `/var`, root's), the node path to resolve instead; else `ELOOP`.
fn follow(
    dir: std::os::fd::RawFd,
    above: &[CString],
    name: &CString,
    rest: &[CString],
) -> io::Result<Vec<CString>> {
    use nix::sys::stat::{fstatat, SFlag};
    let st = fstatat(
        Some(dir),
        name.as_c_str(),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(io::Error::from)?;
    let is_link = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK;
    let top = above.is_empty() || (above.len() == 1 && above[0].as_bytes() == b"var");
    if !is_link {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    if !top || st.st_uid != 0 {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let target = nix::fcntl::readlinkat(Some(dir), name.as_c_str()).map_err(io::Error::from)?;
    let target = Path::new(&target);
    let mut next: Vec<CString> = if target.is_absolute() {
        Vec::new()
    } else {
        above.to_vec()
    };
    for c in target.components() {
        match c {
            Component::Normal(n) => next.push(cstr(n)?),
            Component::ParentDir => {
                next.pop();
            }
            _ => {}
        }
    }
    next.extend_from_slice(rest);
    Ok(next)
}

#[cfg(test)]
thread_local! {
    /// How many node directories this thread opened (tests count them).
    pub(super) static OPENED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_os_links_are_followed_deeper_links_refused() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("var/opt/cni")).unwrap();
        std::fs::create_dir_all(r.join("run/lock")).unwrap();
        std::fs::create_dir_all(r.join("etc/ssl/outside")).unwrap();
        std::os::unix::fs::symlink("var/opt", r.join("opt")).unwrap();
        std::os::unix::fs::symlink("../run", r.join("var/run")).unwrap();
        std::os::unix::fs::symlink("/etc/ssl/outside", r.join("etc/ssl/etcd")).unwrap();
        let root = Root::new(r);
        let me_root = nix::unistd::geteuid().is_root();
        let l = locate(&root, Path::new("/opt/cni/x"));
        let l2 = locate(&root, Path::new("/var/run/lock/y"));
        if me_root {
            let l = l.unwrap();
            assert!(std::fs::write(&l.via, "a").is_ok());
            assert!(r.join("var/opt/cni/x").is_file());
            let l2 = l2.unwrap();
            std::fs::write(&l2.via, "b").unwrap();
            assert!(r.join("run/lock/y").is_file());
        } else {
            // (links not owned by root are not followed, even at the top)
            assert!(l.is_err() && l2.is_err());
        }
        let e = locate(&root, Path::new("/etc/ssl/etcd/etcd/peer.key"))
            .err()
            .unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        assert!(locate(&root, Path::new("/etc/../x")).is_err());
        let e = locate(&root, Path::new("/missing/dir/f")).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
