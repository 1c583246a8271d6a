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
//! bundle's removal from the inbox is what must not outlive the renames of its files: it is
//! queued here ([`Deferred::remove_after`]) and done once every sync started before it
//! succeeded (on any filesystem; none when one failed, so the bundle is placed again), off the
//! way to kubelet's start too (its unlink waits for the journal commit the syncs started, 15 ms
//! of a bundle's pass in a slow boot). The crash campaign kills the process, which leaves the
//! page cache whole: this power-loss reasoning is not tested there.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::at::Located;
use super::batch::sync_held;
use super::{WriteError, Writer};
use crate::util::crash_point;

/// The directory fsyncs a pass left running.
#[derive(Default)]
pub struct Deferred {
    running: Mutex<Vec<JoinHandle<Result<(), WriteError>>>>,
    /// The node paths queued for removal ([`Deferred::remove_after`]) until waited for.
    removing: Mutex<std::collections::HashSet<PathBuf>>,
    /// A sync failure no thread returns (joined in place when a thread could not be made).
    failed: Mutex<Option<WriteError>>,
    /// Removals that failed, with the step that queued each.
    not_removed: Arc<Mutex<Vec<(&'static str, WriteError)>>>,
}

impl Deferred {
    /// Starts syncing `dirs` (each held open; the path for messages) in a thread; at once in
    /// this one when no thread can be made.
    pub(super) fn sync(&self, dirs: Vec<(Arc<OwnedFd>, PathBuf)>) -> Result<(), WriteError> {
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

    /// Removes `at` (`node_path` under the root) once every sync started so far succeeded, in
    /// the background: what must not outlive those renames (a bundle's removal from the inbox)
    /// is then ordered after them on any filesystem. Not removed when a sync failed (the
    /// failure is what [`Deferred::wait`] returns); until waited for, [`Deferred::removing`]
    /// says it is queued. Only while `same` holds for its metadata (see
    /// [`Writer::discard_after_syncs`]); a removal that fails is `owner`'s (the step that
    /// queued it: [`Deferred::take_not_removed`]), never a durability failure. At once in this
    /// thread when no thread can be made.
    pub(super) fn remove_after(
        &self,
        at: Located,
        node_path: &Path,
        owner: &'static str,
        same: Arc<dyn Fn(&std::fs::Metadata) -> bool + Send + Sync>,
    ) {
        let before = std::mem::take(&mut *self.running.lock().expect("deferred syncs"));
        self.removing
            .lock()
            .expect("deferred syncs")
            .insert(node_path.to_path_buf());
        // Handed over once the thread exists: they are joined here when it cannot be made.
        let (tx, rx) = std::sync::mpsc::channel();
        let (theirs, their_same, failures) = (at.clone(), same.clone(), self.not_removed.clone());
        let spawned = std::thread::Builder::new()
            .name("fsync-remove".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                // (a sync failed: not removed, and the failure is the pass's)
                join_all(rx.recv().unwrap_or_default())?;
                remove_or_note(&theirs, &*their_same, owner, &failures);
                Ok(())
            });
        match spawned {
            Ok(h) => {
                // (the thread is alive and waiting for them: the send cannot fail)
                let _ = tx.send(before);
                self.running.lock().expect("deferred syncs").push(h);
            }
            Err(_) => match join_all(before) {
                Err(e) => {
                    let mut failed = self.failed.lock().expect("deferred syncs");
                    failed.get_or_insert(e);
                }
                Ok(()) => remove_or_note(&at, &*same, owner, &self.not_removed),
            },
        }
    }

    /// The removals that failed since the last call, with the step that queued each (the file
    /// stays where it was). Complete once [`Deferred::wait`] returned.
    pub fn take_not_removed(&self) -> Vec<(&'static str, WriteError)> {
        std::mem::take(&mut *self.not_removed.lock().expect("deferred syncs"))
    }

    /// Whether `node_path` is queued for removal in this pass (a step's check after its
    /// apply counts it as removed).
    pub fn removing(&self, node_path: &Path) -> bool {
        self.removing
            .lock()
            .expect("deferred syncs")
            .contains(node_path)
    }

    /// Waits for every sync started; returns the first failure.
    pub fn wait(&self) -> Result<(), WriteError> {
        let running = std::mem::take(&mut *self.running.lock().expect("deferred syncs"));
        let result = join_all(running);
        self.removing.lock().expect("deferred syncs").clear();
        match self.failed.lock().expect("deferred syncs").take() {
            Some(e) => Err(e),
            None => result,
        }
    }

    /// A sync that ends when the returned sender is dropped, with `result` (a test's stand-in
    /// for a slow or failing directory sync).
    #[cfg(test)]
    pub(crate) fn hold(&self, result: Result<(), WriteError>) -> std::sync::mpsc::Sender<()> {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            let _ = rx.recv();
            result
        });
        self.running.lock().expect("deferred syncs").push(h);
        tx
    }
}

/// Joins every thread; the first failure.
fn join_all(running: Vec<JoinHandle<Result<(), WriteError>>>) -> Result<(), WriteError> {
    let mut result = Ok(());
    for h in running {
        let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        result = result.and(r);
    }
    result
}

/// [`remove`], a failure noted as `owner`'s.
fn remove_or_note(
    at: &Located,
    same: &(dyn Fn(&std::fs::Metadata) -> bool + Send + Sync),
    owner: &'static str,
    failures: &Mutex<Vec<(&'static str, WriteError)>>,
) {
    if let Err(e) = remove(at, same) {
        failures.lock().expect("deferred syncs").push((owner, e));
    }
}

/// Unlinks the entry by name in its held directory while `same` holds for its metadata (gone
/// already, or another file now: nothing to do).
pub(super) fn remove(
    at: &Located,
    same: &(dyn Fn(&std::fs::Metadata) -> bool + Send + Sync),
) -> Result<(), WriteError> {
    use nix::errno::Errno;
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let err = |op: &str, source: std::io::Error| WriteError {
        path: at.real.clone(),
        op: op.into(),
        source,
    };
    match std::fs::symlink_metadata(&at.via) {
        Ok(m) if same(&m) => {}
        Ok(_) => {
            tracing::info!(
                "{} was replaced or changed since it was read: left for the next pass",
                at.real.display()
            );
            return Ok(());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err("stat", e)),
    }
    match unlinkat(
        Some(at.dir_fd().as_raw_fd()),
        at.name.as_c_str(),
        UnlinkatFlags::NoRemoveDir,
    ) {
        Ok(()) => {
            crash_point!("fsio::removed");
            Ok(())
        }
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(err("remove", e.into())),
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
        // A removal queued after them waits for them, in the background; until the pass's
        // end it counts as queued.
        let bundle = Path::new("/var/lib/nodectl/inbox/assets");
        w.write(&FileSpec::new(bundle, "bundle", 0o600)).unwrap();
        w.discard_after_syncs(bundle, "t", |_| true).unwrap();
        assert!(deferred.removing(bundle));
        assert!(!deferred.removing(Path::new("/etc/y")));
        assert_eq!(
            deferred.running.lock().unwrap().len(),
            1,
            "the removal's thread joins the syncs before it"
        );
        deferred.wait().unwrap();
        assert!(!root.path(bundle).exists());
        assert!(!deferred.removing(bundle));
        // Gone already: nothing to do.
        w.discard_after_syncs(bundle, "t", |_| true).unwrap();
        deferred.wait().unwrap();
        // Another file than the one read (renamed in over it since): left in place.
        w.write(&FileSpec::new(bundle, "another", 0o600)).unwrap();
        w.discard_after_syncs(bundle, "t", |m| m.len() == 6)
            .unwrap();
        deferred.wait().unwrap();
        assert!(root.path(bundle).exists(), "another file is left");
        w.discard_after_syncs(bundle, "t", |m| m.len() == 7)
            .unwrap();
        deferred.wait().unwrap();
        assert!(!root.path(bundle).exists());
        assert!(deferred.take_not_removed().is_empty());
    }

    /// A removal queued behind a sync that fails is not done, and the failure is the pass's;
    /// one that fails itself is the queuing step's, not a durability failure.
    #[test]
    fn a_removal_waits_for_the_syncs_before_it_and_its_own_failure_is_its_steps() {
        let (_d, root, l) = super::super::tests::setup();
        let deferred = Deferred::default();
        let w = Writer::new(&root, &l).deferring(&deferred);
        let bundle = Path::new("/var/lib/nodectl/inbox/assets");
        w.write(&FileSpec::new(bundle, "bundle", 0o600)).unwrap();
        deferred.wait().unwrap();
        let failing = WriteError {
            path: "/etc/kubernetes/pki".into(),
            op: "fsync directory".into(),
            source: std::io::Error::from_raw_os_error(libc::EIO),
        };
        let release = deferred.hold(Err(failing));
        w.discard_after_syncs(bundle, "secrets", |_| true).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(root.path(bundle).exists(), "not before the sync ends");
        drop(release);
        let e = deferred.wait().unwrap_err();
        assert_eq!(e.op, "fsync directory");
        assert!(root.path(bundle).exists(), "kept: a sync before it failed");
        assert!(deferred.take_not_removed().is_empty());
        // A directory in its place by the time it is removed: the unlink fails, the file's
        // step is told, the pass's syncs are not.
        let release = deferred.hold(Ok(()));
        w.discard_after_syncs(bundle, "secrets", |_| true).unwrap();
        std::fs::remove_file(root.path(bundle)).unwrap();
        std::fs::create_dir(root.path(bundle)).unwrap();
        drop(release);
        deferred.wait().unwrap();
        let failed = deferred.take_not_removed();
        assert_eq!(failed.len(), 1);
        assert_eq!(
            (failed[0].0, failed[0].1.op.as_str()),
            ("secrets", "remove")
        );
        assert!(root.path(bundle).is_dir());
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
