//! New directories: made hidden, given their metadata, renamed into place (see
//! [`Writer::ensure_dir`]).

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;
use nodectl_selinux::Context;

use super::{at, fchown, label_err, werr, DirSpec, WriteError, Writer};
use crate::util::crash_point;

/// Numbers temp directory names within this process.
static TMP_DIRS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Writer<'_> {
    /// Label, owner, mode of a held directory.
    pub(super) fn set_dir_meta(
        &self,
        d: &File,
        spec: &DirSpec,
        real: &Path,
        label: Option<&Context>,
    ) -> Result<(), WriteError> {
        if let Some(l) = label {
            self.labeler
                .set_on_fd(d, real, l)
                .map_err(|e| label_err(real, e))?;
        }
        if self.chown {
            fchown(d, real, spec.uid, spec.gid)?;
        }
        d.set_permissions(fs::Permissions::from_mode(spec.mode))
            .map_err(werr(real, "chmod"))
    }

    /// A new directory appears with its final label, owner and mode, or not at all: made as a
    /// hidden temp directory (born labeled and 0700), its metadata set, then renamed into
    /// place, so a crash at any instant leaves no directory under the final name with other
    /// metadata (it would stay so: a parent nodectl created is not managed afterwards). `false`:
    /// something appeared at the name meanwhile (its metadata is then fixed in place).
    pub(super) fn create_dir_renamed(
        &self,
        spec: &DirSpec,
        at: &at::Located,
        label: Option<&Context>,
    ) -> Result<bool, WriteError> {
        let name = spec.path.file_name().unwrap_or_default().to_string_lossy();
        // what a crash left of an earlier attempt (empty directories of ours only)
        let stale = format!(".{name}.nodectl-dir-");
        for e in fs::read_dir(at.dir_via()).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(&stale) {
                let _ = fs::remove_dir(e.path());
            }
        }
        // The temp directory made, opened and renamed by name in the held directory (`*at`
        // calls on its descriptor: no path resolved again).
        let tmp = format!(
            ".{name}.nodectl-dir-{}-{}",
            std::process::id(),
            TMP_DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let dir = Some(at.dir_fd().as_raw_fd());
        let rmdir = || {
            let _ = nix::unistd::unlinkat(dir, tmp.as_str(), UnlinkatFlags::RemoveDir);
        };
        self.labeler
            .create_with(label, &at.real, || {
                nix::sys::stat::mkdirat(dir, tmp.as_str(), Mode::from_bits_truncate(0o700))
                    .map_err(io::Error::from)
            })
            .map_err(|e| label_err(&at.real, e))?;
        crash_point!("fsio::mkdir");
        let opened = std::ffi::CString::new(tmp.as_str())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
            .and_then(|c| nodectl_selinux::beneath::open_child_dir(at.dir_fd().as_raw_fd(), &c));
        let d = match opened {
            Ok(fd) => File::from(fd),
            Err(e) => {
                rmdir();
                return Err(werr(&at.real, "open directory")(e));
            }
        };
        // (born with its label, read back: the metadata left to set are owner and mode)
        let unborn = label.filter(|l| !self.born_with(&d, &at.real, l));
        if let Err(e) = self.set_dir_meta(&d, spec, &at.real, unborn) {
            rmdir();
            return Err(e);
        }
        crash_point!("fsio::dirmeta");
        match nix::fcntl::renameat2(
            dir,
            tmp.as_str(),
            dir,
            at.name.as_c_str(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => {
                crash_point!("fsio::dirrename");
                self.sync_later(at.clone())
                    .map_err(werr(&at.real, "fsync directory"))?;
                Ok(true)
            }
            Err(nix::errno::Errno::EEXIST) => {
                rmdir();
                Ok(false)
            }
            Err(e) => {
                rmdir();
                Err(werr(&at.real, "rename")(io::Error::from(e)))
            }
        }
    }
}
