//! Opening directories without ever following a symlink: each path component is opened with
//! `O_NOFOLLOW | O_DIRECTORY` relative to the descriptor of the one before (what
//! `openat2(RESOLVE_NO_SYMLINKS)` does in one call, on every kernel). A root daemon working in
//! trees that other users and containers may write uses these, so a directory swapped for a
//! symlink (to `/etc`, say) makes the open fail (`ELOOP`/`ENOTDIR`) instead of leading it
//! outside the tree.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Opens the directory `name` (one component) in the directory `dir`; a symlink is refused.
pub fn open_child_dir(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let fd = openat(Some(dir), name, dir_flags(), Mode::empty()).map_err(io::Error::from)?;
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn component(name: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Opens `rel` below the directory `base`, every component a real directory (no symlink, no
/// `..`). An empty `rel` opens `base` again.
pub fn open_dir_beneath(base: RawFd, rel: &Path) -> io::Result<OwnedFd> {
    let mut cur: Option<OwnedFd> = None;
    for c in rel.components() {
        let name = match c {
            Component::Normal(n) => component(n)?,
            Component::CurDir => continue,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not a relative path below the directory",
                ))
            }
        };
        let at = cur.as_ref().map_or(base, std::os::fd::AsRawFd::as_raw_fd);
        cur = Some(open_child_dir(at, &name)?);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => open_child_dir(base, c"."),
    }
}

/// Opens the absolute directory `path`, no component of it a symlink.
pub fn open_dir_nofollow(path: &Path) -> io::Result<OwnedFd> {
    let rel = path
        .strip_prefix("/")
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not an absolute path"))?;
    let root = open_child_dir(libc::AT_FDCWD, c"/")?;
    open_dir_beneath(std::os::fd::AsRawFd::as_raw_fd(&root), rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_are_refused_on_every_component() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("top");
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::fs::create_dir_all(d.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(d.path().join("outside"), top.join("link")).unwrap();
        let fd = open_dir_nofollow(&top).unwrap();
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        assert!(open_dir_beneath(raw, Path::new("a/b")).is_ok());
        assert!(open_dir_beneath(raw, Path::new("")).is_ok());
        let e = open_dir_beneath(raw, Path::new("link")).unwrap_err();
        // (O_DIRECTORY|O_NOFOLLOW on a symlink: ENOTDIR; ELOOP on some kernels)
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)),
            "{e}"
        );
        assert!(open_dir_beneath(raw, Path::new("a/../link")).is_err());
        assert!(open_dir_nofollow(&top.join("link")).is_err());
        assert!(open_dir_nofollow(&top.join("link/x")).is_err());
        assert!(open_dir_nofollow(Path::new("relative")).is_err());
    }
}
