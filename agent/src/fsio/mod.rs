//! The one way nodectl writes a file: a temp file in the target directory gets its final label,
//! owner and mode before any content is written, then content, fsync, rename over the target,
//! fsync of the directory (within a pass, finishing in the background while the pass goes on:
//! [`Deferred`]). A reader sees the old file or the new one, never a half-written or
//! mislabeled one. Content that is already right is not rewritten; wrong metadata on right
//! content is fixed in place.

mod at;
mod attrs;
mod batch;
mod deferred;
mod dirs;
mod held;
pub mod lock;
mod read;
mod scope;
mod temp;

pub(crate) use attrs::open_nofollow;
pub use deferred::Deferred;
pub(crate) use held::{hold_with_children, HeldEntry};
pub(crate) use read::{open_regular, open_regular_or_sibling};

use crate::util::crash_point;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nodectl_selinux::{Context, Labeler};

use crate::root::Root;
use at::Located;

/// A file as it should be. `path` is the path on the node (the root is applied by [`Writer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    /// The node path of the file.
    pub path: PathBuf,
    /// The full content.
    pub content: Vec<u8>,
    /// Permission bits, e.g. 0o600.
    pub mode: u32,
    /// Owning user id (set and compared only when nodectl runs as root).
    pub uid: u32,
    /// Owning group id (set and compared only when nodectl runs as root).
    pub gid: u32,
    /// `None`: the policy's default for the path (what restorecon would set).
    pub label: Option<Context>,
    /// Whose temp files a crash may have left that this write removes first: `None`, this
    /// file's; `Some(prefix)`, those of every file in the directory whose name starts with
    /// `prefix` (a family whose names change from write to write, as the credential store's
    /// timestamped files: a crash's temp file has another name than the next write's).
    pub temps_of: Option<String>,
}

impl FileSpec {
    /// A root-owned file.
    pub fn new(path: impl Into<PathBuf>, content: impl Into<Vec<u8>>, mode: u32) -> Self {
        FileSpec {
            path: path.into(),
            content: content.into(),
            mode,
            uid: 0,
            gid: 0,
            label: None,
            temps_of: None,
        }
    }

    /// Uses this SELinux label instead of the policy's default.
    pub fn label(mut self, ctx: Context) -> Self {
        self.label = Some(ctx);
        self
    }

    /// Removes the temp files of every file named `prefix...` first (see [`FileSpec::temps_of`]).
    pub fn sweeping(mut self, prefix: &str) -> Self {
        self.temps_of = Some(prefix.into());
        self
    }
}

/// A directory as it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirSpec {
    /// The node path of the directory.
    pub path: PathBuf,
    /// Permission bits, e.g. 0o755.
    pub mode: u32,
    /// Owning user id (set and compared only when nodectl runs as root).
    pub uid: u32,
    /// Owning group id (set and compared only when nodectl runs as root).
    pub gid: u32,
    /// `None`: the policy's default for the path (what restorecon would set).
    pub label: Option<Context>,
}

impl DirSpec {
    /// A root-owned directory with the policy's default label.
    pub fn new(path: impl Into<PathBuf>, mode: u32) -> Self {
        DirSpec {
            path: path.into(),
            mode,
            uid: 0,
            gid: 0,
            label: None,
        }
    }
}

/// What differs between a path on disk and its spec. Empty: nothing to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// The path does not exist; the other fields are then unset.
    pub missing: bool,
    /// The content differs (always set when something other than a regular file is in the place).
    pub content: bool,
    /// Something other than a regular file, e.g. a directory or symlink, is at the path.
    pub not_a_regular_file: bool,
    /// Mode bits as found and as wanted.
    pub mode: Option<(u32, u32)>,
    /// Owner (uid, gid) as found and as wanted.
    pub owner: Option<((u32, u32), (u32, u32))>,
    /// SELinux label as found (`None`: no label) and as wanted.
    pub label: Option<(Option<Context>, Context)>,
}

impl Diff {
    fn missing() -> Self {
        Diff {
            missing: true,
            ..Diff::default()
        }
    }

    /// True when the path already matches its spec.
    pub fn is_empty(&self) -> bool {
        *self == Diff::default()
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.missing {
            return f.write_str("missing");
        }
        let mut parts = Vec::new();
        if self.not_a_regular_file {
            parts.push("not a regular file".to_string());
        }
        if self.content {
            parts.push("content differs".to_string());
        }
        if let Some((from, to)) = self.mode {
            parts.push(format!("mode {from:04o} -> {to:04o}"));
        }
        if let Some(((fu, fg), (tu, tg))) = self.owner {
            parts.push(format!("owner {fu}:{fg} -> {tu}:{tg}"));
        }
        if let Some((from, to)) = &self.label {
            let from = from.as_ref().map_or("none".to_string(), Context::to_string);
            parts.push(format!("label {from} -> {to}"));
        }
        f.write_str(&parts.join(", "))
    }
}

/// What a write or ensure_dir did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The path already matched its spec; nothing was touched.
    Unchanged,
    /// The path did not exist and was created.
    Created,
    /// The content differed and the file was replaced with a new one.
    Replaced,
    /// The content was right; only mode, owner or label were fixed in place.
    MetadataFixed,
}

/// A filesystem operation that failed on a path.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {op}: {source}")]
pub struct WriteError {
    /// The path on this machine (under the root) the operation was on.
    pub path: PathBuf,
    /// The operation that failed, e.g. "rename" or "fchown".
    pub op: String,
    /// The underlying I/O error.
    #[source]
    pub source: io::Error,
}

fn werr(path: &Path, op: impl Into<String>) -> impl FnOnce(io::Error) -> WriteError + '_ {
    let op = op.into();
    move |source| WriteError {
        path: path.to_path_buf(),
        op,
        source,
    }
}

fn label_err(path: &Path, e: nodectl_selinux::LabelError) -> WriteError {
    WriteError {
        path: path.to_path_buf(),
        op: "SELinux label".into(),
        source: io::Error::other(e.to_string()),
    }
}

const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;

/// Writes files under a root, with labels when the host has SELinux.
pub struct Writer<'a> {
    root: &'a Root,
    labeler: &'a Labeler,
    /// Ownership is applied only when running as root; otherwise it is neither set nor compared
    /// (tests as an ordinary user on a scratch root).
    chown: bool,
    /// Inside [`Writer::batched`]: what one batch shares (`None` outside).
    batch: std::sync::Mutex<Option<scope::Batch>>,
    /// Where directory fsyncs after renames go when they may finish later in the pass.
    deferred: Option<&'a Deferred>,
}

impl<'a> Writer<'a> {
    /// A writer for `root` that sets owners only when nodectl runs as root.
    pub fn new(root: &'a Root, labeler: &'a Labeler) -> Self {
        Writer {
            root,
            labeler,
            chown: nix::unistd::geteuid().is_root(),
            batch: std::sync::Mutex::new(None),
            deferred: None,
        }
    }

    /// The root the writer writes under.
    pub fn root(&self) -> &Root {
        self.root
    }

    /// The labeler that sets SELinux labels.
    pub fn labeler(&self) -> &Labeler {
        self.labeler
    }

    fn wanted_label(
        &self,
        node_path: &Path,
        explicit: &Option<Context>,
        kind: u32,
    ) -> Option<Context> {
        if self.labeler.skipped().is_some() {
            return None;
        }
        explicit
            .clone()
            .or_else(|| self.labeler.default_for(node_path, kind))
    }

    /// How `meta` and the label `have` reads differ from the wanted mode, owner and label.
    fn meta_diff(
        &self,
        meta: &fs::Metadata,
        mode: u32,
        owner: (u32, u32),
        label: Option<Context>,
        have: impl FnOnce() -> Result<Option<Context>, nodectl_selinux::LabelError>,
    ) -> Result<Diff, nodectl_selinux::LabelError> {
        let mut d = Diff::default();
        let m = meta.permissions().mode() & 0o7777;
        if m != mode {
            d.mode = Some((m, mode));
        }
        if self.chown && (meta.uid(), meta.gid()) != owner {
            d.owner = Some(((meta.uid(), meta.gid()), owner));
        }
        if let Some(want) = label {
            let have = have()?;
            if have.as_ref() != Some(&want) {
                d.label = Some((have, want));
            }
        }
        Ok(d)
    }

    /// Where a node path is (its directory held open) and its metadata (the entry itself, never
    /// a link's target); no metadata when it does not exist, no place when its directory does not.
    fn stat(
        &self,
        node_path: &Path,
    ) -> Result<Option<(Located, Option<fs::Metadata>)>, WriteError> {
        let at = match self.locate(node_path) {
            Ok(at) => at,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(werr(&self.root.path(node_path), "open its directory")(e)),
        };
        match fs::symlink_metadata(&at.via) {
            Ok(m) => Ok(Some((at, Some(m)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some((at, None))),
            Err(e) => Err(werr(&at.real, "stat")(e)),
        }
    }

    /// What would change to make the file match `spec`. Reads only: the entry by name in its
    /// held directory, then its metadata, label and content through one descriptor.
    pub fn check(&self, spec: &FileSpec) -> Result<Diff, WriteError> {
        let at = match self.locate(&spec.path) {
            Ok(at) => at,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Diff::missing()),
            Err(e) => return Err(werr(&self.root.path(&spec.path), "open its directory")(e)),
        };
        let f = match at.open_file().map_err(werr(&at.real, "open"))? {
            at::Entry::Missing => return Ok(Diff::missing()),
            at::Entry::Other => {
                return Ok(Diff {
                    not_a_regular_file: true,
                    content: true,
                    ..Diff::default()
                })
            }
            at::Entry::File(f) => f,
        };
        let meta = f.metadata().map_err(werr(&at.real, "stat"))?;
        let label = self.wanted_label(&spec.path, &spec.label, S_IFREG);
        let have = || self.labeler.get_fd(&f, &at.real);
        let mut d = self
            .meta_diff(&meta, spec.mode, (spec.uid, spec.gid), label, have)
            .map_err(|e| label_err(&at.real, e))?;
        if meta.len() != spec.content.len() as u64 {
            d.content = true;
        } else {
            let mut have = Vec::with_capacity(spec.content.len());
            io::Read::read_to_end(&mut io::Read::take(&f, meta.len() + 1), &mut have)
                .map_err(werr(&at.real, "read"))?;
            d.content = have != spec.content;
        }
        Ok(d)
    }

    /// Makes the file match `spec` (see the module docs for how).
    pub fn write(&self, spec: &FileSpec) -> Result<Outcome, WriteError> {
        Ok(self.write_all(std::slice::from_ref(spec))?[0])
    }

    /// Where `node_path` is; its directory must exist.
    fn place(&self, node_path: &Path) -> Result<Located, WriteError> {
        self.locate(node_path)
            .map_err(|e| werr(&self.root.path(node_path), "open its directory")(e))
    }

    /// Creates missing parent directories of a node path (0755 root, policy labels).
    fn create_parents(&self, node_dir: &Path) -> Result<(), WriteError> {
        let mut missing = Vec::new();
        let mut p = Some(node_dir);
        while let Some(d) = p {
            if d == Path::new("/") || self.holds(d) || matches!(self.stat(d)?, Some((_, Some(_)))) {
                break;
            }
            missing.push(d.to_path_buf());
            p = d.parent();
        }
        for d in missing.into_iter().rev() {
            self.ensure_dir(&DirSpec::new(d, 0o755))?;
        }
        Ok(())
    }

    /// What would change to make the directory match `spec`. Reads only; fails when something
    /// other than a directory is at the path.
    pub fn check_dir(&self, spec: &DirSpec) -> Result<Diff, WriteError> {
        let Some((at, Some(meta))) = self.stat(&spec.path)? else {
            return Ok(Diff::missing());
        };
        if !meta.is_dir() {
            return Err(werr(&at.real, "check directory")(io::Error::other(
                "exists and is not a directory; nodectl will not replace it",
            )));
        }
        let label = self.wanted_label(&spec.path, &spec.label, S_IFDIR);
        let have = || self.labeler.get(&at.via);
        self.meta_diff(&meta, spec.mode, (spec.uid, spec.gid), label, have)
            .map_err(|e| label_err(&at.real, e))
    }

    /// Creates the directory (with its label, owner and mode set before it is used) or fixes its
    /// metadata, through a descriptor. Parents are created as needed.
    pub fn ensure_dir(&self, spec: &DirSpec) -> Result<Outcome, WriteError> {
        let diff = self.check_dir(spec)?;
        if diff.is_empty() {
            return Ok(Outcome::Unchanged);
        }
        if diff.missing {
            if let Some(parent) = spec.path.parent() {
                self.create_parents(parent)?;
            }
        }
        let at = self.place(&spec.path)?;
        let label = self.wanted_label(&spec.path, &spec.label, S_IFDIR);
        if diff.missing && self.create_dir_renamed(spec, &at, label.as_ref())? {
            return Ok(Outcome::Created);
        }
        let d = attrs::open_nofollow(&at.via).map_err(werr(&at.real, "open directory"))?;
        self.set_dir_meta(&d, spec, &at.real, label.as_ref())?;
        crash_point!("fsio::dirmeta");
        Ok(Outcome::MetadataFixed)
    }

    /// Removes a file (not a directory), durably; `false` when it was not there.
    pub fn remove(&self, node_path: &Path) -> Result<bool, WriteError> {
        self.unlink(node_path, true)
    }

    /// Removes a file whose return after a crash is harmless (the next pass removes it again,
    /// e.g. a bundle whose files are placed), without waiting for the disk.
    pub fn discard(&self, node_path: &Path) -> Result<bool, WriteError> {
        self.unlink(node_path, false)
    }

    /// Like [`Writer::discard`], for a file that must not be gone before the renames made so
    /// far are durable (a bundle whose files were just placed): with a deferring writer, done
    /// in the background once the directory syncs started so far succeeded (the pass's end
    /// waits for it, and reports a failure); otherwise at once, every sync being done already.
    /// Only while `same` holds for the file's metadata (the file that was read, not one renamed
    /// in over it since); that is looked at just before the unlink. A failed removal in the
    /// background is `owner`'s (the step's id: [`Deferred::take_not_removed`]).
    pub fn discard_after_syncs(
        &self,
        node_path: &Path,
        owner: &'static str,
        same: impl Fn(&fs::Metadata) -> bool + Send + Sync + 'static,
    ) -> Result<(), WriteError> {
        let at = match self.locate(node_path) {
            Ok(at) => at,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(werr(&self.root.path(node_path), "open its directory")(e)),
        };
        match self.deferred {
            Some(d) => {
                d.remove_after(at, node_path, owner, std::sync::Arc::new(same));
                Ok(())
            }
            None => deferred::remove(&at, &same),
        }
    }

    fn unlink(&self, node_path: &Path, durably: bool) -> Result<bool, WriteError> {
        let Some((at, _)) = self.stat(node_path)? else {
            return Ok(false);
        };
        match fs::remove_file(&at.via) {
            Ok(()) => {
                crash_point!("fsio::removed");
                if durably {
                    at.sync_dir().map_err(werr(&at.real, "fsync directory"))?;
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(werr(&at.real, "remove")(e)),
        }
    }
}

/// chown through a descriptor (the entry itself, never a symlink's target).
fn fchown(f: &File, real: &Path, uid: u32, gid: u32) -> Result<(), WriteError> {
    nix::unistd::fchown(
        std::os::fd::AsRawFd::as_raw_fd(f),
        Some(uid.into()),
        Some(gid.into()),
    )
    .map_err(|e| werr(real, "chown")(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodectl_selinux::{HostSelinux, Mode};

    pub(super) fn setup() -> (tempfile::TempDir, Root, Labeler) {
        let d = tempfile::tempdir().unwrap();
        let root = Root::new(d.path());
        let host = HostSelinux {
            mode: Mode::Absent,
            mls: false,
            policy: None,
        };
        let l = Labeler::new(root.dir(), &host);
        (d, root, l)
    }

    #[test]
    fn creates_with_mode_and_parents_then_is_idempotent() {
        let (_d, root, l) = setup();
        let w = Writer::new(&root, &l);
        let spec = FileSpec::new("/etc/kubernetes/pki/ca.key", "secret", 0o600);
        assert!(w.check(&spec).unwrap().missing);
        assert_eq!(w.write(&spec).unwrap(), Outcome::Created);
        let real = root.path("/etc/kubernetes/pki/ca.key");
        assert_eq!(fs::read(&real).unwrap(), b"secret");
        assert_eq!(
            fs::metadata(&real).unwrap().permissions().mode() & 0o7777,
            0o600
        );
        assert_eq!(
            fs::metadata(root.path("/etc/kubernetes/pki"))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777,
            0o755
        );
        let ino = fs::metadata(&real).unwrap().ino();
        assert_eq!(w.write(&spec).unwrap(), Outcome::Unchanged);
        assert_eq!(
            fs::metadata(&real).unwrap().ino(),
            ino,
            "unchanged content is not rewritten"
        );
        // no temp files left behind
        let names: Vec<_> = fs::read_dir(real.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("ca.key")]);
    }

    #[test]
    fn content_change_replaces_by_rename_and_mode_change_fixes_in_place() {
        let (_d, root, l) = setup();
        let w = Writer::new(&root, &l);
        let real = root.path("/etc/a.conf");
        w.write(&FileSpec::new("/etc/a.conf", "one", 0o644))
            .unwrap();
        let ino = fs::metadata(&real).unwrap().ino();
        assert_eq!(
            w.write(&FileSpec::new("/etc/a.conf", "two", 0o644))
                .unwrap(),
            Outcome::Replaced
        );
        assert_ne!(
            fs::metadata(&real).unwrap().ino(),
            ino,
            "new content arrives by rename"
        );
        let ino = fs::metadata(&real).unwrap().ino();
        let spec = FileSpec::new("/etc/a.conf", "two", 0o600);
        assert_eq!(w.check(&spec).unwrap().to_string(), "mode 0644 -> 0600");
        assert_eq!(w.write(&spec).unwrap(), Outcome::MetadataFixed);
        assert_eq!(fs::metadata(&real).unwrap().ino(), ino);
        assert_eq!(
            fs::metadata(&real).unwrap().permissions().mode() & 0o7777,
            0o600
        );
    }

    #[test]
    fn replaces_a_symlink_itself_never_its_target() {
        let (_d, root, l) = setup();
        let w = Writer::new(&root, &l);
        fs::create_dir_all(root.path("/etc")).unwrap();
        fs::write(root.path("/victim"), "keep").unwrap();
        std::os::unix::fs::symlink(root.path("/victim"), root.path("/etc/x")).unwrap();
        assert!(
            w.check(&FileSpec::new("/etc/x", "new", 0o644))
                .unwrap()
                .not_a_regular_file
        );
        w.write(&FileSpec::new("/etc/x", "new", 0o644)).unwrap();
        assert_eq!(fs::read(root.path("/victim")).unwrap(), b"keep");
        assert!(fs::symlink_metadata(root.path("/etc/x")).unwrap().is_file());
        // A FIFO in a file's place is never opened (an open for reading would wait for a
        // writer), only replaced.
        nix::unistd::mkfifo(&root.path("/etc/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let spec = FileSpec::new("/etc/fifo", "new", 0o644);
        assert!(w.check(&spec).unwrap().not_a_regular_file);
        w.write(&spec).unwrap();
        assert_eq!(fs::read(root.path("/etc/fifo")).unwrap(), b"new");
        assert_eq!(w.check(&spec).unwrap(), Diff::default());
    }

    #[test]
    fn dirs_are_created_with_mode_and_refuse_to_replace_files() {
        let (_d, root, l) = setup();
        let w = Writer::new(&root, &l);
        let spec = DirSpec::new("/etc/kubernetes/pki", 0o700);
        assert_eq!(w.ensure_dir(&spec).unwrap(), Outcome::Created);
        assert_eq!(w.ensure_dir(&spec).unwrap(), Outcome::Unchanged);
        assert_eq!(
            fs::metadata(root.path("/etc/kubernetes/pki"))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777,
            0o700
        );
        fs::write(root.path("/etc/file"), "").unwrap();
        let e = w
            .ensure_dir(&DirSpec::new("/etc/file", 0o755))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/etc/file") && e.contains("not a directory"),
            "{e}"
        );
    }

    /// Someone who owns a directory on the way (uid etcd owns /etc/ssl/etcd) swaps it for a
    /// symlink to a directory outside, over and over, while nodectld writes, chmods and creates
    /// in it: nothing outside is ever written, chmodded or created (issue 14, item 6).
    #[test]
    fn a_looping_symlink_swap_never_leads_a_write_outside() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (d, root, l) = setup();
        let w = Writer::new(&root, &l);
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("peer.key");
        fs::write(&victim, "host").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        let etcd = d.path().join("etc/ssl/etcd/etcd");
        fs::create_dir_all(&etcd).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (etcd, target, stop) = (etcd.clone(), outside.path().to_path_buf(), stop.clone());
            std::thread::spawn(move || {
                let aside = etcd.with_extension("real");
                while !stop.load(Ordering::Relaxed) {
                    let _ = fs::rename(&etcd, &aside);
                    let _ = std::os::unix::fs::symlink(&target, &etcd);
                    std::thread::yield_now();
                    let _ = fs::remove_file(&etcd);
                    // Put back whatever happens: the writer makes a missing directory again
                    // (with `sub` in it) while the real one is aside, and a rename over a
                    // directory that is not empty fails; left so, both stay non-empty and the
                    // swap stops for good (a clean run's tier 1 once saw no race in 60 000
                    // rounds). The one made meanwhile goes (never a symlink: only this thread
                    // makes one, and removed it above).
                    while aside.exists() && fs::rename(&aside, &etcd).is_err() {
                        let _ = fs::remove_dir_all(&etcd);
                    }
                }
            })
        };
        let mut errors = 0;
        // At least 3000 rounds, and on until the swap has raced a write (a directory opened in
        // one openat2 call leaves it a narrower window: under a loaded test run, 3000 rounds
        // sometimes saw none), within 60 000.
        let mut i = 0;
        while i < 3000 || (errors == 0 && i < 60_000) {
            i += 1;
            let spec = FileSpec::new("/etc/ssl/etcd/etcd/peer.key", format!("new {i}"), 0o600);
            errors += usize::from(w.write(&spec).is_err());
            let _ = w.set_mode(Path::new("/etc/ssl/etcd/etcd/peer.key"), 0o600);
            let _ = w.ensure_dir(&DirSpec::new("/etc/ssl/etcd/etcd/sub", 0o700));
            let _ = w.remove(Path::new("/etc/ssl/etcd/etcd/peer.key"));
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "host");
        assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o777, 0o644);
        let names: Vec<_> = fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["peer.key"], "nothing created outside");
        // (the swap did race the writes: some found a symlink where the directory was)
        assert!(errors > 0, "the swap never raced a write");
    }

    #[test]
    fn remove_is_idempotent() {
        let (_d, root, l) = setup();
        let w = Writer::new(&root, &l);
        w.write(&FileSpec::new("/etc/x", "a", 0o644)).unwrap();
        assert!(w.remove(Path::new("/etc/x")).unwrap());
        assert!(!w.remove(Path::new("/etc/x")).unwrap());
    }
}
