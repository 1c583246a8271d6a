//! Changing what an existing file's metadata is, through a descriptor opened without following
//! a symlink, in its directory opened safely (`nodectl audit --fix`; see `at`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::{werr, WriteError, Writer};

/// Opens an existing file or directory for reading without following a symlink in its place
/// (`ELOOP`), nor blocking on a FIFO planted there.
pub(crate) fn open_nofollow(real: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(real)
}

impl Writer<'_> {
    /// Sets the mode of an existing file or directory through a descriptor opened without
    /// following a symlink (a link in its place is refused, never followed).
    pub fn set_mode(&self, node_path: &Path, mode: u32) -> Result<(), WriteError> {
        let at = self.place(node_path)?;
        let f = open_nofollow(&at.via).map_err(werr(&at.real, "open"))?;
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(werr(&at.real, "chmod"))
    }

    /// Sets owner, group and mode of an existing file or directory through one descriptor opened
    /// without following a symlink (owner first, so the mode never opens it to the old owner).
    pub fn set_owner_and_mode(
        &self,
        node_path: &Path,
        uid: u32,
        gid: u32,
        mode: u32,
    ) -> Result<(), WriteError> {
        let at = self.place(node_path)?;
        let f = open_nofollow(&at.via).map_err(werr(&at.real, "open"))?;
        super::fchown(&f, &at.real, uid, gid)?;
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(werr(&at.real, "chmod"))
    }
}
