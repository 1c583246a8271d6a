//! A file's next version under a temp name in its held directory, created and renamed by
//! `openat`/`renameat` on the directory's descriptor: no path is resolved again, not even
//! `/proc/self/fd/<n>` (each of those walks procfs: `self`, `fd`, the descriptor's link; under
//! QEMU TCG a batch of 22 files made ~110 such walks on the bundle's way to kubelet, issue 18).

use std::collections::hash_map::RandomState;
use std::ffi::CString;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::at::Located;

/// Names tried before giving up (each a fresh random suffix; `O_EXCL` refuses a taken one).
const ATTEMPTS: usize = 16;

/// A temp file `.<name>.nodectl-XXXXXX` (mode 0600) in a held directory, removed when dropped
/// unless [`Temp::persist`] renamed it over its target.
pub(super) struct Temp {
    file: File,
    dir: Arc<OwnedFd>,
    /// `None` once renamed.
    name: Option<CString>,
}

impl Temp {
    /// Creates the temp file for `at`'s entry in its directory, never through a symlink.
    pub(super) fn create_for(at: &Located) -> io::Result<Temp> {
        let target = at.name.to_string_lossy();
        for _ in 0..ATTEMPTS {
            let name = CString::new(format!(".{target}.nodectl-{}", suffix()))
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            let flags = OFlag::O_RDWR
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            let mode = Mode::from_bits_truncate(0o600);
            match nix::fcntl::openat(Some(at.dir_fd().as_raw_fd()), name.as_c_str(), flags, mode) {
                Ok(fd) => {
                    // SAFETY: openat returned a new descriptor that nothing else owns.
                    let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
                    return Ok(Temp {
                        file,
                        dir: at.dir_arc(),
                        name: Some(name),
                    });
                }
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free temp file name",
        ))
    }

    /// The open temp file.
    pub(super) fn file(&self) -> &File {
        &self.file
    }

    /// Renames the temp file over `at`'s entry: both names in the held directory, wherever its
    /// path now leads. On failure the temp file is removed (when dropped).
    pub(super) fn persist(mut self, at: &Located) -> io::Result<()> {
        let name = self.name.as_deref().expect("not renamed yet");
        nix::fcntl::renameat(
            Some(self.dir.as_raw_fd()),
            name,
            Some(at.dir_fd().as_raw_fd()),
            at.name.as_c_str(),
        )?;
        self.name = None;
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let _ = nix::unistd::unlinkat(
                Some(self.dir.as_raw_fd()),
                name.as_c_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

/// Six random letters and digits (std's randomly keyed hasher: no generator of our own).
fn suffix() -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let mut x = h.finish();
    (0..6)
        .map(|_| {
            let c = CHARS[(x % CHARS.len() as u64) as usize] as char;
            x /= CHARS.len() as u64;
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::path::Path;

    #[test]
    fn a_temp_file_is_renamed_over_its_target_or_removed() {
        let d = tempfile::tempdir().unwrap();
        let root = crate::root::Root::new(d.path());
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        let at = super::super::at::locate(&root, Path::new("/etc/f")).unwrap();
        let t = Temp::create_for(&at).unwrap();
        t.file().write_all(b"new").unwrap();
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(d.path().join("etc"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let n = names();
        assert_eq!(n.len(), 1);
        assert!(n[0].starts_with(".f.nodectl-") && n[0].len() == ".f.nodectl-".len() + 6);
        t.persist(&at).unwrap();
        assert_eq!(names(), vec!["f".to_string()]);
        assert_eq!(std::fs::read(d.path().join("etc/f")).unwrap(), b"new");
        // Dropped without a rename: gone; a symlink at a temp name is never followed (O_EXCL).
        drop(Temp::create_for(&at).unwrap());
        assert_eq!(names(), vec!["f".to_string()]);
        assert_ne!(suffix(), suffix());
    }
}
