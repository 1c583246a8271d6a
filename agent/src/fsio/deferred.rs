//! Directory fsyncs after renames, run in the background for the rest of a pass
//! ([`Writer::deferring`]). What a rename made visible is visible at once to every process on
//! the node (kubelet included); the directory's fsync only makes the rename survive a power
//! loss, and the file under the new name was made durable before the rename (a crash never
//! shows it half-written, with or without this fsync). So the fsync need not be on the way to
//! kubelet's start (one journal commit, 5-9 ms of a bundle's pass under QEMU TCG, issue 18): it
//! starts right after the renames, the pass goes on, and the engine waits for it at the pass's
//! end (a failure fails the steps that applied changes; a [`Deferred`] dropped unwaited waits
//! too). A crash before it completes may lose renames of this
//! pass; the next boot's first pass, which runs before kubelet, places those files again. A
//! bundle's removal from the inbox is what must not outlive the renames of its files: on the
//! same filesystem its journal commits the removal after them (ext4, xfs and btrfs commit
//! metadata in order; nodectld does not fsync the inbox), and on another the secrets step waits
//! for these syncs first ([`Deferred::wait_unless_all_on`]). The crash campaign kills the
//! process, which leaves the page cache whole: this power-loss reasoning is not tested there.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::batch::sync_held;
use super::{WriteError, Writer};

/// The directory fsyncs a pass left running.
#[derive(Default)]
pub struct Deferred {
    running: Mutex<Vec<JoinHandle<Result<(), WriteError>>>>,
    /// The filesystems (`st_dev`) of the directories being synced.
    devices: Mutex<std::collections::HashSet<u64>>,
}

impl Deferred {
    /// Starts syncing `dirs` (each held open; the path for messages) in a thread; at once in
    /// this one when no thread can be made.
    pub(super) fn sync(&self, dirs: Vec<(Arc<OwnedFd>, PathBuf)>) -> Result<(), WriteError> {
        {
            let mut devices = self.devices.lock().expect("deferred syncs");
            for (fd, _) in &dirs {
                // (unknown: counted as another filesystem than any asked about)
                devices
                    .insert(nix::sys::stat::fstat(fd.as_raw_fd()).map_or(u64::MAX, |st| st.st_dev));
            }
        }
        let dirs = Arc::new(dirs);
        let theirs = dirs.clone();
        let spawned = std::thread::Builder::new()
            .name("fsync-dirs".into())
            .stack_size(64 * 1024)
            .spawn(move || sync_held(&theirs));
        match spawned {
            Ok(h) => {
                self.running.lock().expect("deferred syncs").push(h);
                Ok(())
            }
            Err(_) => sync_held(&dirs),
        }
    }

    /// Waits for the syncs when one is on another filesystem than `dev`: a later change on
    /// `dev` that must not outlive these renames (a bundle's removal from the inbox) is then
    /// ordered after them only by waiting; on the same filesystem its journal orders them.
    pub fn wait_unless_all_on(&self, dev: u64) -> Result<(), WriteError> {
        let other = self
            .devices
            .lock()
            .expect("deferred syncs")
            .iter()
            .any(|d| *d != dev);
        if other {
            return self.wait();
        }
        Ok(())
    }

    /// Waits for every sync started; returns the first failure.
    pub fn wait(&self) -> Result<(), WriteError> {
        self.devices.lock().expect("deferred syncs").clear();
        let running = std::mem::take(&mut *self.running.lock().expect("deferred syncs"));
        let mut result = Ok(());
        for h in running {
            let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            result = result.and(r);
        }
        result
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        if let Err(e) = self.wait() {
            tracing::error!("{e} (a rename of this pass may not survive a power loss)");
        }
    }
}

impl<'a> Writer<'a> {
    /// This writer's directory fsyncs after renames run in the background until `deferred`
    /// is waited for or dropped (see the module docs); the files themselves are still synced
    /// before their renames.
    pub fn deferring(mut self, deferred: &'a Deferred) -> Self {
        self.deferred = Some(deferred);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FileSpec, Writer};
    use super::*;

    /// Renamed files are in place when the write returns; their directories' syncs are left
    /// running for the pass's end, which waits for every one.
    #[test]
    fn a_deferring_writer_places_at_once_and_the_pass_waits_for_its_directory_syncs() {
        let (_d, root, l) = super::super::tests::setup();
        let deferred = Deferred::default();
        let w = Writer::new(&root, &l).deferring(&deferred);
        let specs = [
            FileSpec::new("/etc/kubernetes/pki/ca.crt", "ca", 0o644),
            FileSpec::new("/etc/ssl/etcd/etcd/peer.key", "peer", 0o600),
        ];
        w.write_all(&specs).unwrap();
        for s in &specs {
            assert_eq!(std::fs::read(root.path(&s.path)).unwrap(), s.content);
        }
        assert_eq!(
            deferred.running.lock().unwrap().len(),
            1,
            "one thread a batch"
        );
        // A change on the same filesystem does not wait (its journal orders it after the
        // renames); one on another does.
        let dev = std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(root.dir()).unwrap());
        deferred.wait_unless_all_on(dev).unwrap();
        assert_eq!(deferred.running.lock().unwrap().len(), 1);
        deferred.wait_unless_all_on(dev.wrapping_add(1)).unwrap();
        assert!(deferred.running.lock().unwrap().is_empty());
        w.write(&FileSpec::new("/etc/y", "y", 0o644)).unwrap();
        deferred.wait().unwrap();
        assert!(deferred.running.lock().unwrap().is_empty());
        // Without a deferring writer, nothing is left running.
        Writer::new(&root, &l)
            .write(&FileSpec::new("/etc/x", "x", 0o644))
            .unwrap();
        assert!(deferred.running.lock().unwrap().is_empty());
    }
}
