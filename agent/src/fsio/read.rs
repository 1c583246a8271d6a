//! Opening files nodectld reads in trees others can write: by descriptor, from the root, never
//! through a symlink on the way (see `at`), at the entry at most one link to a file beside it.

use std::fs::File;
use std::io;
use std::path::Path;

use super::at;
use crate::root::Root;

/// Opens the regular file at `node_path` for reading without following a symlink, neither on
/// the way (see `at`: a link in a directory's place is refused) nor at the entry (`O_NOFOLLOW`):
/// `None` when it or a directory on the way is missing; an error when something other than a
/// regular file is there. For files nodectld trusts by their owner, mode and label, which it
/// then checks on this descriptor.
pub(crate) fn open_regular(root: &Root, node_path: &Path) -> io::Result<Option<File>> {
    let at = match at::locate(root, node_path) {
        Ok(at) => at,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match at.open_file()? {
        at::Entry::Missing => Ok(None),
        at::Entry::Other => Err(io::Error::other(
            "not a regular file (a symlink, directory or device is there)",
        )),
        at::Entry::File(f) => Ok(Some(f)),
    }
}

/// [`open_regular`], but a symlink at the entry that names a file in the same directory (a bare
/// name, or an absolute path in this directory: `kubelet-client-current.pem` as kubelet and the
/// credential store make it) is followed once, in the directory already held: no path resolved
/// again, never out of the directory, never a second link. Any other symlink is an error.
pub(crate) fn open_regular_or_sibling(root: &Root, node_path: &Path) -> io::Result<Option<File>> {
    use nix::errno::Errno;
    use std::os::fd::AsRawFd as _;
    let at = match at::locate(root, node_path) {
        Ok(at) => at,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let at = match nix::fcntl::readlinkat(Some(at.dir_fd().as_raw_fd()), at.name.as_c_str()) {
        Err(Errno::EINVAL) => at,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
        Ok(target) => {
            let target = Path::new(&target);
            let dir = node_path.parent().unwrap_or(Path::new("/"));
            let sibling = match (target.parent(), target.file_name()) {
                (Some(p), Some(n)) if p.as_os_str().is_empty() || p == dir => n,
                _ => {
                    return Err(io::Error::other(format!(
                        "a symlink to {} (only one naming a file in its own directory is followed)",
                        target.display()
                    )))
                }
            };
            at::located_in(at.dir_arc(), root, &dir.join(sibling))?
        }
    };
    match at.open_file()? {
        at::Entry::Missing => Ok(None),
        at::Entry::Other => Err(io::Error::other(
            "not a regular file (a symlink, directory or device is there)",
        )),
        at::Entry::File(f) => Ok(Some(f)),
    }
}
