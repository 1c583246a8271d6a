//! `/run/reboot-required` (the convention Debian's packages, kured and Flatcar's sysext updates
//! use): when it appears, take a slot of the group, drain, reboot through logind, and after the
//! boot give the slot back once kubelet is active and the Node Ready, exactly as for
//! update_engine ([`super::update_engine::Follower`]). Woken by inotify on its directory (created
//! or renamed in), never by polling. `/run` is a tmpfs: the file is gone after the reboot.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

use super::update_engine::Follower;
use crate::root::Root;

/// The file's node path.
pub const REBOOT_REQUIRED: &str = "/run/reboot-required";

struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Returns once `file` exists (at once if it does already).
pub async fn appears(file: &Path) -> anyhow::Result<()> {
    let dir: PathBuf = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| "/".into());
    let name = file
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    ino.add_watch(
        &dir,
        AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE,
    )?;
    // after the watch: a file created in between is seen either way
    if std::fs::symlink_metadata(file).is_ok() {
        return Ok(());
    }
    // SAFETY: Fd owns the descriptor and returns the same one until dropped with the AsyncFd.
    let fd = unsafe { AsyncFd::register(Fd(ino)) }.map_err(|e| e.into_parts().1)?;
    loop {
        let mut guard = fd.readable().await?;
        match guard.try_io(|f| {
            f.get_ref()
                .0
                .read_events()
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))
        }) {
            Ok(Ok(events)) => {
                if events
                    .iter()
                    .any(|e| e.name.as_deref() == Some(name.as_os_str()))
                {
                    return Ok(());
                }
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_would_block) => continue,
        }
    }
}

/// Runs until the reboot: steady-state first (a reboot this node asked for is over: the slot
/// goes back once kubelet is active and the Node Ready), then waits for the file and reboots
/// through the follower's slot, drain and logind.
pub async fn run(follower: &Follower, root: &Root) -> anyhow::Result<()> {
    follower.steady_state().await;
    let file = root.path(REBOOT_REQUIRED);
    appears(&file).await?;
    tracing::info!("{REBOOT_REQUIRED} appeared: a reboot is required");
    follower.reboot_for_update().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_file_is_seen_when_created_or_renamed_in_and_at_once_when_there() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("reboot-required");
        let waiting = tokio::spawn({
            let f = f.clone();
            async move { appears(&f).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::write(d.path().join("other"), "").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "another file woke it");
        std::fs::write(d.path().join(".tmp"), "").unwrap();
        std::fs::rename(d.path().join(".tmp"), &f).unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_millis(100), appears(&f))
            .await
            .unwrap()
            .unwrap();
    }
}
