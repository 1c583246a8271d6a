//! Many files placed at the cost of their writes: every file is staged first (a temp file in
//! its directory, born with its final label, then owner and mode, then content), then all are
//! made durable, then renamed over their targets in the order given, then each directory is
//! synced once (within a pass, in the background: [`super::Deferred`]). Per file the guarantee
//! is [`Writer::write`]'s (old or new, never half-written or mislabeled; a crash leaves each
//! file one or the other); what changes is the number of waits for the disk. The files are synced from a few threads at once, so that their fsyncs share
//! journal commits ([`sync_together`]); each directory is synced once after the renames. One
//! `syncfs` would flush whatever else the node has dirty (image layers being pulled) and is not
//! used.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodectl_selinux::Context;

use super::at::Located;
use super::temp::Temp;
use super::{attrs, fchown, label_err, werr, FileSpec, Outcome, WriteError, Writer, S_IFREG};
use crate::util::crash_point;

/// At most this many files are staged at once (each holds two descriptors until renamed).
const MAX_STAGED: usize = 128;

/// A file whose new version waits under a temp name in its directory.
struct Staged {
    tmp: Temp,
    at: Located,
    outcome: Outcome,
}

/// What staging one file came to.
enum Staging {
    /// Nothing to write, or the metadata fixed in place.
    Done(Outcome),
    Staged(Staged),
}

/// How long each phase of a batch took (logged at debug level).
#[derive(Default)]
struct Phases {
    stage: Duration,
    sync: Duration,
    rename: Duration,
    dir_sync: Duration,
    written: usize,
    dirs: usize,
}

impl Writer<'_> {
    /// Makes every file match its spec; renames happen in the order of `specs` (list a file
    /// before the ones that name it). Returns each file's outcome, in order.
    pub fn write_all(&self, specs: &[FileSpec]) -> Result<Vec<Outcome>, WriteError> {
        let mut out = Vec::with_capacity(specs.len());
        let mut phases = Phases::default();
        self.batched(|| {
            for chunk in specs.chunks(MAX_STAGED) {
                out.extend(self.write_chunk(chunk, &mut phases)?);
            }
            Ok(())
        })?;
        if phases.written > 1 {
            tracing::debug!(
                files = phases.written,
                "placed {} files in {} directories: staged (labeled, owned, written) in {:.1} ms, synced in {:.1} ms, renamed in {:.1} ms, directories synced{} in {:.1} ms",
                phases.written,
                phases.dirs,
                phases.stage.as_secs_f64() * 1e3,
                phases.sync.as_secs_f64() * 1e3,
                phases.rename.as_secs_f64() * 1e3,
                if self.deferred.is_some() { " (started: in the background)" } else { "" },
                phases.dir_sync.as_secs_f64() * 1e3,
            );
        }
        Ok(out)
    }

    fn write_chunk(
        &self,
        specs: &[FileSpec],
        phases: &mut Phases,
    ) -> Result<Vec<Outcome>, WriteError> {
        let t = Instant::now();
        let mut out = Vec::with_capacity(specs.len());
        let mut staged = Vec::new();
        for spec in specs {
            match self.stage(spec)? {
                Staging::Done(o) => out.push(o),
                Staging::Staged(s) => {
                    out.push(s.outcome);
                    staged.push(s);
                }
            }
        }
        phases.stage += t.elapsed();
        let t = Instant::now();
        // The directories this batch created (their entries in their parents) with the files:
        // all durable before the first rename.
        let created = self.take_unsynced();
        let mut syncs: Vec<Sync> = staged
            .iter()
            .map(|s| Sync {
                fd: s.tmp.file().as_fd(),
                real: &s.at.real,
                op: FILE_SYNC,
            })
            .collect();
        syncs.extend(distinct(&created).into_iter().map(dir_sync));
        sync_together(&syncs)?;
        phases.sync += t.elapsed();
        let t = Instant::now();
        let mut dirs = Vec::new();
        for Staged { tmp, at, .. } in staged {
            // Both names through the held directory: the rename happens in it, wherever its
            // path now leads.
            if let Err(e) = tmp.persist(&at) {
                // (what was renamed before it is made durable all the same)
                let _ = self.sync_renamed(&dirs);
                return Err(werr(&at.real, "rename")(e));
            }
            crash_point!("fsio::rename");
            dirs.push(at);
        }
        phases.rename += t.elapsed();
        let t = Instant::now();
        phases.written += dirs.len();
        phases.dirs += self.sync_renamed(&dirs)?;
        phases.dir_sync += t.elapsed();
        Ok(out)
    }

    /// Syncs the directories of renamed files, once each (in the background within a pass:
    /// [`super::Deferred`]). Returns how many.
    fn sync_renamed(&self, renamed: &[Located]) -> Result<usize, WriteError> {
        let dirs = distinct(renamed);
        match self.deferred {
            Some(d) => d.sync(
                dirs.iter()
                    .map(|at| (at.dir_arc(), at.real.clone()))
                    .collect(),
            )?,
            None => sync_dirs_of(&dirs)?,
        }
        Ok(dirs.len())
    }

    /// Stages one file: nothing when it matches, its metadata fixed in place when only that is
    /// wrong, else a temp file with label, owner, mode and content, not yet durable.
    fn stage(&self, spec: &FileSpec) -> Result<Staging, WriteError> {
        let diff = self.check(spec)?;
        if diff.is_empty() {
            return Ok(Staging::Done(Outcome::Unchanged));
        }
        let label = self.wanted_label(&spec.path, &spec.label, S_IFREG);
        if !diff.missing && !diff.content {
            // Right content, wrong metadata: fix in place, through one descriptor. Tighten the
            // mode first when the owner changes, so the file is never more open than either.
            let at = self.place(&spec.path)?;
            let f = attrs::open_nofollow(&at.via).map_err(werr(&at.real, "open"))?;
            if diff.owner.is_some() {
                f.set_permissions(fs::Permissions::from_mode(spec.mode & 0o700))
                    .map_err(werr(&at.real, "chmod"))?;
                fchown(&f, &at.real, spec.uid, spec.gid)?;
            }
            if let Some(l) = &label {
                self.labeler
                    .set_on_fd(&f, &at.real, l)
                    .map_err(|e| label_err(&at.real, e))?;
            }
            f.set_permissions(fs::Permissions::from_mode(spec.mode))
                .map_err(werr(&at.real, "chmod"))?;
            crash_point!("fsio::fixed");
            return Ok(Staging::Done(Outcome::MetadataFixed));
        }
        if diff.missing {
            let parent = spec.path.parent().unwrap_or(Path::new("/"));
            self.create_parents(parent)?;
        }
        let at = self.place(&spec.path)?;
        if diff.not_a_regular_file && fs::symlink_metadata(&at.via).is_ok_and(|m| m.is_dir()) {
            // A rename cannot replace it: refused here, before any file of the batch is renamed.
            return Err(werr(&at.real, "write")(std::io::Error::other(
                "a directory is in its place; nodectl will not replace it",
            )));
        }
        self.sweep(&at, spec);
        // Born with its final label (setfscreatecon: the kernel labels the new inode with it, or
        // refuses to create it), then owner and mode, all before the first byte of content.
        let tmp = self
            .labeler
            .create_with(label.as_ref(), &at.real, || Temp::create_for(&at))
            .map_err(|e| label_err(&at.real, e))?;
        crash_point!("fsio::temp");
        let f: &File = tmp.file();
        let dir = spec.path.parent().unwrap_or(Path::new("/"));
        if let Some(l) = label.as_ref() {
            let key = l.to_string();
            if self.born_labeled_in(dir, &key) {
                // (the batch read back a file it created here under this label: see scope)
            } else if self.born_with(f, &at.real, l) {
                self.note_born_labeled(dir, &key);
            } else {
                self.labeler
                    .set_on_fd(f, &at.real, l)
                    .map_err(|e| label_err(&at.real, e))?;
            }
        }
        self.own_and_mode(f, &at.real, spec)?;
        (&*f)
            .write_all(&spec.content)
            .map_err(werr(&at.real, "write"))?;
        crash_point!("fsio::write");
        Ok(Staging::Staged(Staged {
            tmp,
            at,
            outcome: if diff.missing {
                Outcome::Created
            } else {
                Outcome::Replaced
            },
        }))
    }
}

/// At most this many threads sync a batch's files at once.
const SYNC_THREADS: usize = 8;

/// What syncing a staged file is called (in messages).
const FILE_SYNC: &str = "fsync";
/// What syncing a directory is called (in messages).
const DIR_SYNC: &str = "fsync directory";

/// One descriptor to make durable: a staged file, or a directory whose entries changed.
struct Sync<'a> {
    fd: BorrowedFd<'a>,
    real: &'a Path,
    op: &'static str,
}

/// A directory whose entries changed, to make durable.
fn dir_sync<'a>(at: &'a Located) -> Sync<'a> {
    Sync {
        fd: at.dir_fd().as_fd(),
        real: &at.real,
        op: DIR_SYNC,
    }
}

/// The distinct directories (device and inode) among `at`, first seen first.
fn distinct(at: &[Located]) -> Vec<&Located> {
    let mut seen = HashSet::new();
    at.iter()
        .filter(|at| {
            nix::sys::stat::fstat(at.dir_fd().as_raw_fd())
                .map_or(true, |st| seen.insert((st.st_dev, st.st_ino)))
        })
        .collect()
}

/// Syncs directories held open (the path for messages), together: [`super::Deferred`]'s, in its
/// thread.
pub(super) fn sync_held(dirs: &[(Arc<OwnedFd>, PathBuf)]) -> Result<(), WriteError> {
    let syncs: Vec<Sync> = dirs
        .iter()
        .map(|(fd, real)| Sync {
            fd: fd.as_fd(),
            real,
            op: DIR_SYNC,
        })
        .collect();
    sync_together(&syncs)
}

/// Syncs directories (renames or new entries in them made durable), together.
fn sync_dirs_of(dirs: &[&Located]) -> Result<(), WriteError> {
    let syncs: Vec<Sync> = dirs.iter().map(|at| dir_sync(at)).collect();
    sync_together(&syncs)
}

/// Syncs the directories of `at` that created entries not yet durable (a batch's end).
pub(super) fn sync_dirs(at: &[Located]) -> Result<(), WriteError> {
    sync_dirs_of(&distinct(at))
}

/// Makes every descriptor durable; returns when all are, or with the first failure. The
/// fsyncs run from up to [`SYNC_THREADS`] threads at once: concurrent fsyncs on one filesystem
/// share journal commits (ext4's jbd2 and xfs's log join a commit in progress, "group commit"),
/// where one after the other each waits for a commit of its own (22 files: ~68 ms one by one
/// under QEMU TCG). Each is still synced by its own descriptor, and a batch syncs its files
/// (and the directories it created) before the first rename; a failure fails the batch before
/// anything is renamed. One by one when threads cannot be made.
fn sync_together(items: &[Sync]) -> Result<(), WriteError> {
    // Every file's writeback started first, all at once (SYNC_FILE_RANGE_WRITE: no wait, no
    // metadata written): the fsyncs then wait for I/O already under way, and the files' block
    // allocations join the journal transaction the first fsync commits (those after it find
    // theirs committed). Only a head start: each file is still fsynced, and a failure to start
    // is the fsync's to report.
    for s in items.iter().filter(|s| s.op == FILE_SYNC) {
        // SAFETY: a plain syscall on a descriptor the caller holds open.
        unsafe { libc::sync_file_range(s.fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    }
    let sync = |items: &[Sync]| -> Result<(), WriteError> {
        for s in items {
            nix::unistd::fsync(s.fd.as_raw_fd()).map_err(|e| werr(s.real, s.op)(e.into()))?;
            crash_point!("fsio::fsync");
        }
        Ok(())
    };
    if items.len() < 2 {
        return sync(items);
    }
    let per = items.len().div_ceil(SYNC_THREADS.min(items.len()));
    std::thread::scope(|scope| {
        let mut threads = Vec::new();
        let mut result = Ok(());
        for part in items.chunks(per) {
            let spawned = std::thread::Builder::new()
                .name("fsync".into())
                .stack_size(64 * 1024)
                .spawn_scoped(scope, move || sync(part));
            match spawned {
                Ok(t) => threads.push(t),
                Err(_) => result = result.and_then(|()| sync(part)),
            }
        }
        for t in threads {
            let r = t.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            result = result.and(r);
        }
        result
    })
}

impl Writer<'_> {
    /// A staged temp file's owner and mode, as `spec` wants them.
    fn own_and_mode(&self, f: &File, real: &Path, spec: &FileSpec) -> Result<(), WriteError> {
        // New (O_EXCL, mode 0600 less the umask or cut down by the parent's default ACL, ours):
        // what it already has is not set again. Each fchown or fchmod writes the inode to the
        // journal where one fstat reads both: a bundle's root-owned 0600 files need neither
        // (one VM boot, four rounds each: a bundle's 22 files staged in 15-62 ms, median 24,
        // against 17-62, median 44).
        let st = nix::sys::stat::fstat(f.as_raw_fd()).map_err(|e| werr(real, "fstat")(e.into()))?;
        if self.chown && (st.st_uid != spec.uid || st.st_gid != spec.gid) {
            fchown(f, real, spec.uid, spec.gid)?;
            crash_point!("fsio::chown");
        }
        if st.st_mode & 0o7777 != spec.mode & 0o7777 {
            f.set_permissions(fs::Permissions::from_mode(spec.mode))
                .map_err(werr(real, "fchmod"))?;
            crash_point!("fsio::chmod");
        }
        Ok(())
    }

    /// Whether a file created under the creation context `label` carries it (read back, one
    /// `fgetxattr`): not where the filesystem's labels come from the mount (`context=`) or it
    /// has none, where the kernel ignores the creation context; the label is then set, which
    /// fails there as it always did, instead of a file placed with another label.
    pub(super) fn born_with(&self, f: &impl AsRawFd, real: &Path, label: &Context) -> bool {
        matches!(self.labeler.get_fd(f, real), Ok(Some(l)) if &l == label)
    }

    /// Removes what a crash left of an earlier write of `spec`'s file in its directory (`at`).
    fn sweep(&self, at: &Located, spec: &FileSpec) {
        let name = spec.path.file_name().unwrap_or_default().to_string_lossy();
        let parent = spec.path.parent().unwrap_or(Path::new("/"));
        self.with_leftovers(at, parent, |temps| {
            sweep_temps(&at.dir_via(), temps, &name, spec.temps_of.as_deref())
        });
    }
}

/// The temp files of earlier writes in `dir` (the held directory): regular files named
/// `.<name>.nodectl-XXXXXX`, never a temp directory's `.nodectl-dir-`.
pub(super) fn leftover_temps(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        let is_file = e.file_type().is_ok_and(|t| t.is_file());
        if is_file && n.starts_with('.') && n.contains(".nodectl-") && !n.contains(".nodectl-dir-")
        {
            out.push(n.into_owned());
        }
    }
    out
}

/// Removes what a crash left of an earlier write of `name` in `dir` (the held directory),
/// among `temps` ([`leftover_temps`]): temp files `.<name>.nodectl-XXXXXX` that were never
/// renamed (complete or not, with the final mode, owner and label, but a stale copy of a key is
/// still a copy); with `family`, those of every `<family>...` file (FileSpec::temps_of).
/// Regular files only, never followed. A second writer of the same file at the same instant
/// (nodectl apply next to nodectld) loses its temp file and fails its rename; its next pass
/// writes again. Returns the names removed.
fn sweep_temps(dir: &Path, temps: &[String], name: &str, family: Option<&str>) -> Vec<String> {
    let stale = match family {
        Some(prefix) => format!(".{prefix}"),
        None => format!(".{name}.nodectl-"),
    };
    temps
        .iter()
        .filter(|n| n.starts_with(&stale))
        .filter(|n| fs::remove_file(dir.join(n)).is_ok())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{FileSpec, Outcome, Writer};
    use std::os::unix::fs::PermissionsExt;

    fn temps(dir: &std::path::Path) -> Vec<String> {
        walk(dir)
            .into_iter()
            .filter(|n| n.contains(".nodectl-"))
            .collect()
    }

    fn walk(dir: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path().display().to_string());
            }
        }
        out
    }

    #[test]
    fn a_label_read_back_in_a_directory_is_remembered_for_one_batch_only() {
        let (_d, root, l) = super::super::tests::setup();
        let w = Writer::new(&root, &l);
        let (pki, etcd) = (
            std::path::Path::new("/etc/kubernetes/pki"),
            std::path::Path::new("/etc/ssl/etcd"),
        );
        // (outside a batch nothing is remembered: every file is read back)
        let (shared, etcd_t) = (
            "system_u:object_r:container_file_t:s0",
            "system_u:object_r:etc_t:s0",
        );
        w.note_born_labeled(pki, shared);
        assert!(!w.born_labeled_in(pki, shared));
        w.batched(|| {
            assert!(!w.born_labeled_in(pki, shared));
            w.note_born_labeled(pki, shared);
            assert!(w.born_labeled_in(pki, shared));
            assert!(
                !w.born_labeled_in(etcd, shared),
                "another directory is read back"
            );
            assert!(
                !w.born_labeled_in(pki, etcd_t),
                "another label is read back (a mount's fixed label matched the first)"
            );
            Ok(())
        })
        .unwrap();
        w.batched(|| {
            assert!(
                !w.born_labeled_in(pki, shared),
                "the next batch reads back again"
            );
            Ok(())
        })
        .unwrap();
    }

    /// In a batch each directory is opened once (from the root, component by component), not
    /// once per look at each file; what did not exist is not remembered: a directory created in
    /// the batch is opened when first used.
    #[test]
    fn a_batch_opens_each_directory_once() {
        use super::super::{at::OPENED, DirSpec};
        let (_d, root, l) = super::super::tests::setup();
        let w = Writer::new(&root, &l);
        let specs: Vec<FileSpec> = ["a", "b", "c", "d"]
            .iter()
            .flat_map(|n| {
                [
                    FileSpec::new(format!("/etc/kubernetes/pki/{n}.crt"), *n, 0o644),
                    FileSpec::new(format!("/etc/ssl/etcd/etcd/{n}.key"), *n, 0o600),
                ]
            })
            .collect();
        let opened = || OPENED.with(|n| n.get());
        let before = opened();
        w.batched(|| {
            w.ensure_dir(&DirSpec::new("/etc/kubernetes/pki", 0o700))?;
            w.ensure_dir(&DirSpec::new("/etc/ssl/etcd/etcd", 0o700))?;
            w.write_all(&specs)
        })
        .unwrap();
        for s in &specs {
            assert_eq!(std::fs::read(root.path(&s.path)).unwrap(), s.content);
        }
        let first = opened() - before;
        // (the missing parents looked for, then created: a handful of opens, not 8 files x 3)
        assert!(
            first <= 12,
            "{first} directory opens for 8 files in 2 directories"
        );
        let before = opened();
        assert_eq!(w.write_all(&specs).unwrap(), vec![Outcome::Unchanged; 8]);
        assert_eq!(opened() - before, 2, "checking 8 files in 2 directories");
    }

    #[test]
    fn a_batch_places_every_file_once_and_a_failure_leaves_no_temp_file() {
        let (d, root, l) = super::super::tests::setup();
        let w = Writer::new(&root, &l);
        let specs = vec![
            FileSpec::new("/etc/kubernetes/pki/ca.crt", "ca", 0o644),
            FileSpec::new("/etc/kubernetes/pki/ca.key", "key", 0o600),
            FileSpec::new("/etc/ssl/etcd/etcd/peer.key", "peer", 0o600),
            FileSpec::new("/etc/kubernetes/manifests/a.yaml", "kind: Pod", 0o644),
        ];
        let out = w.write_all(&specs).unwrap();
        assert_eq!(out, vec![Outcome::Created; 4]);
        for s in &specs {
            let real = root.path(&s.path);
            assert_eq!(std::fs::read(&real).unwrap(), s.content);
            let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, s.mode, "{}", s.path.display());
        }
        // Again: nothing to do; one changed content, one changed mode.
        assert_eq!(w.write_all(&specs).unwrap(), vec![Outcome::Unchanged; 4]);
        let mut next = specs.clone();
        next[1].content = b"key2".to_vec();
        next[2].mode = 0o400;
        assert_eq!(
            w.write_all(&next).unwrap(),
            vec![
                Outcome::Unchanged,
                Outcome::Replaced,
                Outcome::MetadataFixed,
                Outcome::Unchanged
            ]
        );
        assert_eq!(
            std::fs::read(root.path("/etc/kubernetes/pki/ca.key")).unwrap(),
            b"key2"
        );
        // What a crash left of an earlier write (a temp file never renamed) goes with the next
        // write of that file.
        let stale = root.path("/etc/kubernetes/pki/.ca.key.nodectl-Ab12Cd");
        std::fs::write(&stale, "half a k").unwrap();
        next[1].content = b"key3".to_vec();
        w.write_all(&next).unwrap();
        assert!(!stale.exists());
        // A file whose place is a directory fails the batch before any rename: the files staged
        // before it are not placed and no temp file stays behind.
        std::fs::create_dir_all(root.path("/etc/kubernetes/pki/blocked")).unwrap();
        std::fs::write(root.path("/etc/kubernetes/pki/blocked/x"), "x").unwrap();
        let bad = vec![
            FileSpec::new("/etc/kubernetes/pki/ca.crt", "ca2", 0o644),
            FileSpec::new("/etc/kubernetes/pki/blocked", "not a dir", 0o644),
        ];
        assert!(w.write_all(&bad).is_err());
        assert_eq!(
            std::fs::read(root.path("/etc/kubernetes/pki/ca.crt")).unwrap(),
            b"ca"
        );
        assert_eq!(temps(d.path()), Vec::<String>::new());
    }
}
