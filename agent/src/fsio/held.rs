//! Entries held by an `O_PATH` descriptor, to read and change their label through it: the node
//! credentials' relabel (`steps/relabel.rs`). The entry is opened by name in its held directory
//! (see `at`), never through a symlink, and never opened for reading (a FIFO or a device planted
//! there is not touched); its type, mode and link count come from that descriptor, and the label
//! is read and written through it (libselinux's `fgetfilecon_raw`/`fsetfilecon_raw` go through
//! the descriptor's `/proc/self/fd` link for an `O_PATH` descriptor): what was checked is what
//! is labeled, whatever the name leads to by then (issue 51, 4).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::at;
use crate::root::Root;

/// At most this many entries of one directory are held (the credential directories hold a few).
const MAX_CHILDREN: usize = 1024;

/// An entry held by an `O_PATH | O_NOFOLLOW` descriptor.
pub(crate) struct HeldEntry {
    /// The node path.
    pub node: PathBuf,
    /// The path under the root (messages).
    pub real: PathBuf,
    pub fd: OwnedFd,
    /// `st_mode` from the descriptor.
    pub mode: u32,
    /// `st_nlink` from the descriptor.
    pub nlink: u64,
}

impl HeldEntry {
    /// A file (not a directory) with more than one name: its label is also another name's.
    pub(crate) fn linked(&self) -> bool {
        self.mode & libc::S_IFMT != libc::S_IFDIR && self.nlink > 1
    }
}

fn hold_at(dir: RawFd, name: &CStr, node: PathBuf, real: PathBuf) -> io::Result<Option<HeldEntry>> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match nix::fcntl::openat(Some(dir), name, flags, nix::sys::stat::Mode::empty()) {
        // SAFETY: openat returned a new descriptor that nothing else owns.
        Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
        Err(nix::errno::Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    Ok(Some(HeldEntry {
        node,
        real,
        fd,
        mode: st.st_mode,
        nlink: st.st_nlink,
    }))
}

/// `node_path` held, and when it is a directory each entry in it (at most [`MAX_CHILDREN`]):
/// empty when it (or a directory on the way) does not exist. A symlink among the directories is
/// refused as `at` refuses it; one at an entry is held itself, never followed.
pub(crate) fn hold_with_children(root: &Root, node_path: &Path) -> io::Result<Vec<HeldEntry>> {
    let located = match at::locate(root, node_path) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let dir = located.dir_fd().as_raw_fd();
    let Some(top) = hold_at(dir, &located.name, node_path.into(), located.real.clone())? else {
        return Ok(Vec::new());
    };
    let is_dir = top.mode & libc::S_IFMT == libc::S_IFDIR;
    let mut out = vec![top];
    if !is_dir {
        return Ok(out);
    }
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let listing = match nix::dir::Dir::openat(
        Some(dir),
        located.name.as_c_str(),
        flags,
        nix::sys::stat::Mode::empty(),
    ) {
        Ok(d) => d,
        // (replaced since it was held: what was held is labeled, nothing below it)
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => {
            return Ok(out)
        }
        Err(e) => return Err(e.into()),
    };
    let sub = listing.as_raw_fd();
    let mut listing = listing;
    for entry in listing.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if out.len() > MAX_CHILDREN {
            return Err(io::Error::other(format!(
                "more than {MAX_CHILDREN} entries in {}",
                located.real.display()
            )));
        }
        let os = std::ffi::OsStr::from_bytes(name.to_bytes());
        if let Some(h) = hold_at(sub, name, node_path.join(os), located.real.join(os))? {
            out.push(h);
        }
    }
    Ok(out)
}
