//! The pass lock: `nodectl apply` and nodectld never run a pass at once (issue 40). An
//! exclusive `flock` on `/run/nodectl/pass.lock` under the root, taken for the pass and released
//! when the [`PassLock`] is dropped (or the process dies: the kernel drops a dead holder's
//! lock, so a crashed pass never leaves it held). The directory and the file are reached from the
//! root without following a symlink ([`super::at`]); the file is created `0600` with
//! `O_NOFOLLOW`, and refused unless it is a regular file.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::root::Root;

/// Where the lock is (a node path).
pub const PASS_LOCK: &str = "/run/nodectl/pass.lock";

/// The pass lock, held until dropped.
#[derive(Debug)]
pub struct PassLock {
    _fd: OwnedFd,
}

fn open(root: &Root) -> io::Result<OwnedFd> {
    use nix::errno::Errno;
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    // /run/nodectl (and /run, under a scratch root) made if missing, each from the root by
    // descriptor (0755, as /run is)
    for dir in ["/run", "/run/nodectl"] {
        let d = super::at::locate(root, Path::new(dir))?;
        match nix::sys::stat::mkdirat(
            Some(d.dir_fd().as_raw_fd()),
            d.name.as_c_str(),
            Mode::from_bits_truncate(0o755),
        ) {
            Ok(()) => {
                // its mode as /run's, whatever the umask (nodectld's UMask=0077 made it 0700:
                // the fragments in /run/nodectl/config.d unreadable to other users' nodectl)
                let fd = nix::fcntl::openat(
                    Some(d.dir_fd().as_raw_fd()),
                    d.name.as_c_str(),
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )?;
                // SAFETY: openat returned a new descriptor that nothing else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(0o755))?;
            }
            Err(Errno::EEXIST) => {}
            Err(e) => {
                return Err(io::Error::new(
                    io::Error::from(e).kind(),
                    format!("{}: {e}", d.real.display()),
                ))
            }
        }
    }
    let loc = super::at::locate(root, Path::new(PASS_LOCK))?;
    let flags =
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let fd = nix::fcntl::openat(
        Some(loc.dir_fd().as_raw_fd()),
        loc.name.as_c_str(),
        flags,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("{}: {e}", loc.real.display()),
        )
    })?;
    // SAFETY: openat returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    if nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
        != nix::sys::stat::SFlag::S_IFREG
    {
        return Err(io::Error::other(format!(
            "{}: not a regular file",
            loc.real.display()
        )));
    }
    Ok(fd)
}

fn flock(fd: &OwnedFd, wait: bool) -> io::Result<bool> {
    let op = libc::LOCK_EX | if wait { 0 } else { libc::LOCK_NB };
    loop {
        // SAFETY: flock on a descriptor this process owns.
        if unsafe { libc::flock(fd.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::Interrupted => continue,
            e if e.raw_os_error() == Some(libc::EWOULDBLOCK) => return Ok(false),
            e => return Err(e),
        }
    }
}

/// The lock if it is free now; `None` when another process holds it.
pub fn try_pass_lock(root: &Root) -> io::Result<Option<PassLock>> {
    let fd = open(root)?;
    Ok(flock(&fd, false)?.then_some(PassLock { _fd: fd }))
}

/// The lock, once it is free, waiting on this thread (`nodectl audit --fix`); `waiting` is
/// called first if another process holds it.
pub fn pass_lock_blocking(root: &Root, waiting: impl FnOnce()) -> io::Result<PassLock> {
    if let Some(l) = try_pass_lock(root)? {
        return Ok(l);
    }
    waiting();
    let fd = open(root)?;
    flock(&fd, true)?;
    Ok(PassLock { _fd: fd })
}

/// The lock, once it is free, asking again every `every` while another process holds it
/// (`waiting` is called once first): a wait that can be cancelled (nodectld's, which a stop
/// signal ends; a blocked thread would keep the runtime from shutting down).
pub async fn pass_lock_retrying(
    root: &Root,
    every: std::time::Duration,
    waiting: impl FnOnce(),
) -> io::Result<PassLock> {
    let mut waiting = Some(waiting);
    loop {
        if let Some(l) = try_pass_lock(root)? {
            return Ok(l);
        }
        if let Some(w) = waiting.take() {
            w();
        }
        tokio::time::sleep(every).await;
    }
}

/// The lock, once it is free; `waiting` is called first if another process holds it. The wait
/// runs on a blocking thread, which nothing cancels: for a process that exits when it gives up
/// (`nodectl apply`).
pub async fn pass_lock(root: &Root, waiting: impl FnOnce()) -> io::Result<PassLock> {
    if let Some(l) = try_pass_lock(root)? {
        return Ok(l);
    }
    waiting();
    let fd = open(root)?;
    let fd = tokio::task::spawn_blocking(move || flock(&fd, true).map(|_| fd))
        .await
        .map_err(io::Error::other)??;
    Ok(PassLock { _fd: fd })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_at_a_time_and_a_dropped_lock_is_free() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::new(d.path());
        let held = try_pass_lock(&root).unwrap().expect("free at first");
        assert!(try_pass_lock(&root).unwrap().is_none(), "held");
        let next = {
            let root = root.clone();
            let task = tokio::spawn(async move { pass_lock(&root, || {}).await.unwrap() });
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            assert!(!task.is_finished(), "waits while held");
            drop(held);
            task.await.unwrap()
        };
        drop(next);
        assert!(try_pass_lock(&root).unwrap().is_some());
        let meta = std::fs::symlink_metadata(d.path().join("run/nodectl/pass.lock")).unwrap();
        assert!(meta.is_file());
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_symlink_in_its_place_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("run/nodectl")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("run/nodectl/pass.lock")).unwrap();
        let e = try_pass_lock(&Root::new(d.path())).unwrap_err();
        assert!(e.to_string().contains("pass.lock"), "{e}");
    }
}
