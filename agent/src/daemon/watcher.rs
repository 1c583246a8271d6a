//! The inotify watches that wake the daemon: config directories (nodectl's, and Zincati's under
//! `reboot.strategy = "fleet-lock"`), the inputs a pass waits for
//! (the nearest existing parent while a path does not exist yet), the secrets inbox, the
//! node's credentials (a label or mode changed by someone else is put back at once) and, on a
//! controller, kubelet's pod log directory (a new API server pod ends a request's backoff).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;

use super::shared::Trigger;
use crate::config::{self, Settings};
use crate::root::Root;

/// What a watch is for, so unrelated events in a watched directory wake nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Interest {
    /// A config.d directory: any `*.toml` entry.
    ConfigDir,
    /// A parent of a path that does not exist yet: only this entry name.
    Entry(OsString, Trigger),
    /// The secrets inbox (this directory): any entry, and a file closed after writing or
    /// renamed in is marked settled (read at once, not after the age rule's second).
    Inbox(PathBuf, Trigger),
    /// Credentials: a label or mode changed (IN_ATTRIB) or an entry removed, on this entry or
    /// (`None`) any non-hidden one. nodectld's own writes (a hidden temp file renamed into
    /// place, its label and mode set before) raise neither on the final name.
    Altered(Option<OsString>, Trigger),
    /// A new entry whose name starts with this (created or renamed in): a controller's API
    /// server pod in kubelet's pod log directory, which ends a certificate request's backoff.
    Prefix(String, Trigger),
}

/// The inotify instance, owning its descriptor for its whole life (what AsyncFd requires).
struct InotifyFd(Inotify);

impl std::os::fd::AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The daemon's inotify instance and what each watch is for.
pub(super) struct Watcher {
    fd: AsyncFd<InotifyFd>,
    watches: HashMap<WatchDescriptor, Vec<Interest>>,
    /// Inbox files the kernel said are complete (shared with the passes).
    settled: std::sync::Arc<crate::util::settled::Settled>,
    /// An inbox file was marked complete (see [`Watcher::take_complete`]).
    complete: std::sync::atomic::AtomicBool,
}

impl Watcher {
    pub(super) fn new(settled: std::sync::Arc<crate::util::settled::Settled>) -> nix::Result<Self> {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        // SAFETY: InotifyFd owns the descriptor and always returns the same one until dropped
        // together with the AsyncFd.
        let fd = unsafe { AsyncFd::register(InotifyFd(ino)) }
            .map_err(|e| nix::Error::from_raw(e.into_parts().1.raw_os_error().unwrap_or(0)))?;
        Ok(Watcher {
            fd,
            watches: HashMap::new(),
            settled,
            complete: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether an inbox file was marked complete since the last call: the pass for it need not
    /// wait for the debounce window (nothing more is coming for that file).
    pub(super) fn take_complete(&self) -> bool {
        self.complete
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Re-derives the watch list from the settings (new directories may exist now).
    pub(super) fn update(&mut self, root: &Root, settings: Option<&Settings>) {
        let mut want: Vec<(PathBuf, Interest)> = Vec::new();
        for d in config::CONFIG_DIRS {
            want.push(nearest(
                root,
                Path::new(d),
                Interest::ConfigDir,
                Trigger::ConfigChange,
            ));
        }
        zincati_dirs(root, settings, &mut want);
        if let Some(s) = settings {
            want.push(nearest_file(
                root,
                &s.bootstrap_kubeconfig,
                Trigger::InputChange,
            ));
            // The node's name and DNS (the node-identity step waits for them).
            for f in ["/etc/hostname", crate::steps::RESOLV_CONF] {
                want.push(nearest_file(root, Path::new(f), Trigger::InputChange));
            }
            let inbox = Interest::Inbox(root.path(&s.secrets_inbox), Trigger::InputChange);
            want.push(nearest(root, &s.secrets_inbox, inbox, Trigger::InputChange));
            // The node kubeconfig and the key directory (the bootstrap kubeconfig is watched
            // above): a label made container-readable is put back by the next pass, now.
            let cred = Trigger::CredentialChange;
            let kc = &s.kubeconfig;
            if let (Some(dir), Some(name)) = (kc.parent(), kc.file_name()) {
                if root.path(dir).is_dir() {
                    let i = Interest::Altered(Some(name.to_os_string()), cred);
                    want.push((root.path(dir), i));
                }
            }
            if s.role == config::Role::Controller {
                let pods = Interest::Prefix(
                    crate::steps::api_server_pod_prefix(&s.node_name),
                    Trigger::InputChange,
                );
                let logs = Path::new(crate::steps::POD_LOGS);
                want.push(nearest(root, logs, pods, Trigger::InputChange));
            }
            let pki = Path::new(crate::credentials::CERT_DIR);
            if root.path(pki).is_dir() {
                want.push((root.path(pki), Interest::Altered(None, cred)));
                // kubelet's own rotation renames a new `current` link in (client-go
                // certificate_store.go updateSymlink): status and the renewal time follow it.
                let current = crate::credentials::CURRENT.into();
                want.push((root.path(pki), Interest::Entry(current, cred)));
            }
        }
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_ONLYDIR;
        // Re-adding a watched directory returns its existing descriptor: no gap in which an
        // event could be lost. Descriptors no longer wanted are removed afterwards.
        let mut next: HashMap<WatchDescriptor, Vec<Interest>> = HashMap::new();
        for (dir, interest) in want {
            match self.fd.get_ref().0.add_watch(&dir, flags) {
                Ok(wd) => next.entry(wd).or_default().push(interest),
                Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot watch"),
            }
        }
        for wd in self.watches.keys() {
            if !next.contains_key(wd) {
                let _ = self.fd.get_ref().0.rm_watch(*wd);
            }
        }
        self.watches = next;
    }

    /// The next event someone cares about.
    pub(super) async fn next(&mut self) -> Trigger {
        loop {
            let mut guard = match self.fd.readable().await {
                Ok(g) => g,
                Err(e) => {
                    tracing::error!(error = %e, "inotify");
                    std::future::pending::<()>().await;
                    unreachable!()
                }
            };
            let events = match guard.try_io(|fd| {
                fd.get_ref()
                    .0
                    .read_events()
                    .map_err(|e| std::io::Error::from_raw_os_error(e as i32))
            }) {
                Ok(Ok(ev)) => ev,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "reading inotify events");
                    continue;
                }
                Err(_would_block) => continue,
            };
            // Every event of the batch is looked at (an inbox file renamed in after another
            // event in the same read must still be marked settled); the first trigger wins.
            let mut first = None;
            for ev in events {
                if let Some(t) = self.interesting(ev) {
                    first.get_or_insert(t);
                }
            }
            if let Some(t) = first {
                return t;
            }
        }
    }

    /// The trigger an event is for, if any; marks inbox files the kernel says are complete.
    fn interesting(&self, ev: nix::sys::inotify::InotifyEvent) -> Option<Trigger> {
        let interests = self.watches.get(&ev.wd)?;
        let name = ev.name.unwrap_or_default();
        let hidden = name.to_string_lossy().starts_with('.');
        let altered = ev
            .mask
            .intersects(AddWatchFlags::IN_ATTRIB | AddWatchFlags::IN_DELETE);
        for i in interests {
            match i {
                Interest::ConfigDir if !hidden && name.to_string_lossy().ends_with(".toml") => {
                    return Some(Trigger::ConfigChange)
                }
                Interest::Entry(n, t) if *n == name => return Some(*t),
                Interest::Inbox(dir, t) if !hidden && !name.is_empty() => {
                    let complete = ev
                        .mask
                        .intersects(AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO);
                    if complete {
                        self.settled.mark(&dir.join(&name));
                        self.complete
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    return Some(*t);
                }
                Interest::Prefix(p, t)
                    if ev
                        .mask
                        .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
                        && name.to_string_lossy().starts_with(p.as_str()) =>
                {
                    return Some(*t)
                }
                Interest::Altered(n, t)
                    if altered
                        && !hidden
                        && !name.is_empty()
                        && n.as_ref().is_none_or(|n| *n == name) =>
                {
                    return Some(*t)
                }
                _ => {}
            }
        }
        None
    }
}

/// Zincati's config directories under `reboot.strategy = "fleet-lock"`: whether Zincati asks
/// nodectld is read again after each pass.
fn zincati_dirs(root: &Root, settings: Option<&Settings>, want: &mut Vec<(PathBuf, Interest)>) {
    if settings.is_some_and(|s| s.reboot == config::RebootStrategy::FleetLock) {
        for d in crate::reboot::zincati::CONFIG_DIRS {
            let dir = Path::new(d);
            want.push(nearest(
                root,
                dir,
                Interest::ConfigDir,
                Trigger::ConfigChange,
            ));
        }
    }
}

/// The directory to watch for `dir`: itself when it exists, else its nearest existing ancestor,
/// watching for the next path component to appear.
fn nearest(root: &Root, dir: &Path, interest: Interest, trigger: Trigger) -> (PathBuf, Interest) {
    if root.path(dir).is_dir() {
        return (root.path(dir), interest);
    }
    let mut child = dir;
    let mut p = dir.parent();
    while let Some(d) = p {
        if root.path(d).is_dir() {
            let name = child
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default();
            return (root.path(d), Interest::Entry(name, trigger));
        }
        child = d;
        p = d.parent();
    }
    (root.path("/"), Interest::Entry(OsString::new(), trigger))
}

/// Watch for a file: its directory (for its name) when that exists.
fn nearest_file(root: &Root, file: &Path, trigger: Trigger) -> (PathBuf, Interest) {
    let dir = file.parent().unwrap_or(Path::new("/"));
    if root.path(dir).is_dir() {
        let name = file
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        return (root.path(dir), Interest::Entry(name, trigger));
    }
    nearest(
        root,
        dir,
        Interest::Entry(OsString::new(), trigger),
        trigger,
    )
}
