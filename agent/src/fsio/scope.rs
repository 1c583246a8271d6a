//! One batch of writes ([`Writer::batched`]): what its writes share.

use std::io;
use std::path::{Path, PathBuf};

use super::at::{self, Located};
use super::{batch, WriteError, Writer};

/// What the writes of one batch share: each directory opened once (a node path's components
/// are opened one by one from the root, four or five opens a file otherwise, each a few dozen
/// microseconds under QEMU TCG), and the syncs of the directories it created, made with the
/// files' syncs (one round of journal commits) instead of one after each directory.
#[derive(Default)]
pub(super) struct Batch {
    /// Directories opened in this batch, by node path (only existing ones: nothing is
    /// remembered about a path that was not there).
    dirs: std::collections::HashMap<PathBuf, std::sync::Arc<std::os::fd::OwnedFd>>,
    /// Parents of the directories this batch created, not synced yet.
    unsynced: Vec<Located>,
    /// Per directory (node path), the temp files an earlier write left there, listed once at
    /// the batch's first write into it (the batch's own temp files are never among them).
    leftovers: std::collections::HashMap<PathBuf, Vec<String>>,
    /// Directories (node paths) and labels: a file this batch created there under that
    /// creation context was read back with it.
    born_labeled: std::collections::HashSet<(PathBuf, String)>,
}

impl Writer<'_> {
    /// Runs `f` as one batch (see [`Batch`]; nested calls join the outer one): each directory
    /// is opened once while it runs, and the directories it creates are made durable with the
    /// files [`Writer::write_all`] writes in it, before any of them is renamed, or at its end.
    /// Only for the span of one step's writes: a directory held open is the one it was when
    /// first opened, whatever happens to its path meanwhile.
    pub fn batched<T>(&self, f: impl FnOnce() -> Result<T, WriteError>) -> Result<T, WriteError> {
        {
            let mut b = self.batch.lock().expect("writer batch");
            if b.is_some() {
                drop(b);
                return f();
            }
            *b = Some(Batch::default());
        }
        let r = self.labeler.holding_creation_context(f);
        let left = self
            .batch
            .lock()
            .expect("writer batch")
            .take()
            .map(|b| b.unsynced)
            .unwrap_or_default();
        let synced = batch::sync_dirs(&left);
        let v = r?;
        synced?;
        Ok(v)
    }

    /// Where a node path is: its directory opened (see [`at`]), once per batch.
    pub(super) fn locate(&self, node_path: &Path) -> io::Result<Located> {
        let parent = node_path.parent().unwrap_or(Path::new("/"));
        let held = self
            .batch
            .lock()
            .expect("writer batch")
            .as_ref()
            .and_then(|b| b.dirs.get(parent).cloned());
        if let Some(dir) = held {
            return at::located_in(dir, self.root, node_path);
        }
        let at = at::locate(self.root, node_path)?;
        if let Some(b) = self.batch.lock().expect("writer batch").as_mut() {
            b.dirs.insert(parent.to_path_buf(), at.dir_arc());
        }
        Ok(at)
    }

    /// Whether this batch holds `node_dir` open (it exists: an entry in it was located).
    pub(super) fn holds(&self, node_dir: &Path) -> bool {
        self.batch
            .lock()
            .expect("writer batch")
            .as_ref()
            .is_some_and(|b| b.dirs.contains_key(node_dir))
    }

    /// Whether a file this batch created in `node_dir` under the creation context `label` was
    /// read back with it. The kernel honours a creation context, or refuses it (the create
    /// fails), unless the filesystem gives every file one label of its own (a `context=` mount,
    /// a filesystem without labels): a file read back with `label` there says the filesystem
    /// gave it `label`, which it then gives the batch's later files in `node_dir` created under
    /// `label` too, so they are not read back each. Keyed by the label: a read back that matched
    /// a mount's fixed label says nothing of another one. Always `false` outside a batch.
    pub(super) fn born_labeled_in(&self, node_dir: &Path, label: &str) -> bool {
        self.batch
            .lock()
            .expect("writer batch")
            .as_ref()
            .is_some_and(|b| {
                b.born_labeled
                    .contains(&(node_dir.to_path_buf(), label.to_string()))
            })
    }

    /// Notes that a file created in `node_dir` under `label` was read back with it.
    pub(super) fn note_born_labeled(&self, node_dir: &Path, label: &str) {
        if let Some(b) = self.batch.lock().expect("writer batch").as_mut() {
            b.born_labeled
                .insert((node_dir.to_path_buf(), label.to_string()));
        }
    }

    /// Makes a new entry of `at`'s directory durable: now, or with the batch's syncs.
    pub(super) fn sync_later(&self, at: Located) -> io::Result<()> {
        match self.batch.lock().expect("writer batch").as_mut() {
            Some(b) => {
                b.unsynced.push(at);
                Ok(())
            }
            None => at.sync_dir(),
        }
    }

    /// Runs `f` on the temp files earlier writes left in `at`'s directory (node path `dir`):
    /// listed once per batch, else now. `f` returns the names it removed.
    pub(super) fn with_leftovers(
        &self,
        at: &Located,
        dir: &Path,
        f: impl FnOnce(&[String]) -> Vec<String>,
    ) {
        let list = || batch::leftover_temps(&at.dir_via());
        let mut guard = self.batch.lock().expect("writer batch");
        match guard.as_mut() {
            Some(b) => {
                let names = b.leftovers.entry(dir.to_path_buf()).or_insert_with(list);
                let gone = f(names);
                names.retain(|n| !gone.contains(n));
            }
            None => {
                drop(guard);
                f(&list());
            }
        }
    }

    /// The directories created in this batch and not synced yet (for the files' sync round).
    pub(super) fn take_unsynced(&self) -> Vec<Located> {
        self.batch
            .lock()
            .expect("writer batch")
            .as_mut()
            .map(|b| std::mem::take(&mut b.unsynced))
            .unwrap_or_default()
    }
}
