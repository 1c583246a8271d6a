//! The secrets inbox: which directory and which files in it nodectld reads bundles from.

use std::path::Path;

/// The inbox, when it exists, is a directory root owns and nobody else may write: whoever may
/// put a file in it chooses what nodectld places as root (static pod manifests, keys). nodectld
/// makes it so (0700) when it is missing; one made otherwise beforehand is refused, not used.
pub(super) fn inbox_trusted(real: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = match std::fs::symlink_metadata(real) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    if !m.is_dir() {
        return Err("not a directory (a symlink is not followed)".into());
    }
    if m.uid() != 0 || m.mode() & 0o022 != 0 {
        return Err(format!(
            "owned by uid {} with mode {:04o}: others could drop a bundle nodectld places as \
             root; make it root's alone (`chown root:root`, `chmod 0700`); no bundle is read",
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// The bundles in the inbox directory `real`: its regular, non-hidden files (a file being
/// written aside is hidden until renamed in), by name, sorted; none when it does not exist.
pub(super) fn bundle_names(real: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(real) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !e.file_type()?.is_file() {
            continue;
        }
        out.push(name);
    }
    out.sort();
    Ok(out)
}

/// Whether anyone holds the file at `real` open for writing, as the kernel knows it: a read
/// lease (`fcntl(F_SETLEASE, F_RDLCK)`) is refused with `EAGAIN` while any descriptor of the
/// file is open for writing (fcntl(2), "Leases"), and one granted is released at once (nobody
/// who opens it meanwhile waits on it for longer than that). `None` where the kernel cannot say:
/// no lease on this filesystem (`EINVAL`), no right to one, the file gone. A symlink is not
/// followed.
pub(super) fn open_for_writing(real: &Path) -> Option<bool> {
    use std::os::fd::AsRawFd;
    let f = crate::fsio::open_nofollow(real).ok()?;
    // SAFETY: fcntl on a descriptor this function holds open.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) } == 0 {
        // SAFETY: as above; the lease is ours.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
        return Some(false);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::open_for_writing;

    #[test]
    fn a_file_open_for_writing_is_told_from_one_closed_or_only_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("assets");
        let w = std::fs::File::create(&p).unwrap();
        assert_eq!(open_for_writing(&p), Some(true), "held open for writing");
        let r = std::fs::File::open(&p).unwrap();
        drop(w);
        assert_eq!(open_for_writing(&p), Some(false), "only read now");
        drop(r);
        assert_eq!(open_for_writing(&p), Some(false), "closed");
        // (a lease granted is released: a writer opens it at once)
        let t = std::time::Instant::now();
        drop(std::fs::OpenOptions::new().write(true).open(&p).unwrap());
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(open_for_writing(&d.path().join("gone")), None);
        std::os::unix::fs::symlink(&p, d.path().join("link")).unwrap();
        assert_eq!(
            open_for_writing(&d.path().join("link")),
            None,
            "not followed"
        );
    }
}
