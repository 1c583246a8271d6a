//! SELinux for nodectl: contexts and MCS levels (pure), the host's SELinux state (read from
//! selinuxfs through the configured root), and labels on files (libselinux, never following
//! symlinks).

pub mod beneath;
mod context;
pub mod relabel;

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use context::{Context, ContextError, Level, Range, MAX_CATEGORY};

/// What the kernel says about SELinux, read from selinuxfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No selinuxfs: the kernel has no SELinux, or it is disabled.
    Absent,
    Permissive,
    Enforcing,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSelinux {
    pub mode: Mode,
    /// The loaded policy has MLS/MCS (`/sys/fs/selinux/mls` is 1).
    pub mls: bool,
    /// `SELINUXTYPE` from `/etc/selinux/config`, when present (`targeted`, `default`, ...).
    pub policy: Option<String>,
}

impl HostSelinux {
    /// Reads `<root>/sys/fs/selinux/{enforce,mls}` and `<root>/etc/selinux/config`.
    pub fn detect(root: &Path) -> io::Result<Self> {
        let fs_dir = root.join("sys/fs/selinux");
        let read_flag = |name: &str| -> io::Result<Option<bool>> {
            match fs::read_to_string(fs_dir.join(name)) {
                Ok(s) => Ok(Some(s.trim() == "1")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io::Error::new(
                    e.kind(),
                    format!("reading {}: {e}", fs_dir.join(name).display()),
                )),
            }
        };
        let mode = match read_flag("enforce")? {
            None => Mode::Absent,
            Some(true) => Mode::Enforcing,
            Some(false) => Mode::Permissive,
        };
        let mls = mode != Mode::Absent && read_flag("mls")?.unwrap_or(false);
        let policy = fs::read_to_string(root.join("etc/selinux/config"))
            .ok()
            .and_then(|c| {
                c.lines()
                    .filter_map(|l| l.trim().strip_prefix("SELINUXTYPE="))
                    .map(|v| v.trim().to_string())
                    .next_back()
            });
        Ok(HostSelinux { mode, mls, policy })
    }

    pub fn active(&self) -> bool {
        self.mode != Mode::Absent
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("{path}: {op}: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    #[error("{path}: {0}", path = .1.display())]
    Lib(String, PathBuf),
    #[error("{path}: label {label:?} is not a valid context: {source}")]
    Invalid {
        path: PathBuf,
        label: String,
        source: ContextError,
    },
}

/// Why labels are not being written; shown in `nodectl status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum LabelsSkipped {
    /// The host has no SELinux (selinuxfs not mounted).
    NoSelinux,
    /// The agent runs against a scratch root, not `/`: the kernel's policy does not apply there.
    ScratchRoot { root: PathBuf },
}

impl std::fmt::Display for LabelsSkipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabelsSkipped::NoSelinux => {
                f.write_str("no SELinux on this host (selinuxfs not mounted)")
            }
            LabelsSkipped::ScratchRoot { root } => write!(
                f,
                "scratch root {}: the kernel's SELinux policy does not apply there",
                root.display()
            ),
        }
    }
}

/// The prefix a default-label lookup for `path` opens its file_contexts subset for: its first
/// two components (`/etc/ssl`, `/opt/bootstrap`, `/var/lib`), or its parent when shorter. A
/// shorter prefix loads more entries and stays correct; two keep the handles few per pass.
fn subset_prefix(path: &Path) -> PathBuf {
    let mut p = PathBuf::from("/");
    for c in path
        .parent()
        .unwrap_or(Path::new("/"))
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .take(2)
    {
        p.push(c);
    }
    p
}

/// The key of the handle on the whole file_contexts database (no subset).
const WHOLE: &str = "/";

/// From this many subsets to open for one batch of lookups, the whole database is opened
/// instead ([`Labeler::prefetch`]).
const WHOLE_AT: usize = 3;

/// The file_contexts handle. libselinux does not promise concurrent lookups on one handle, so
/// every use goes through the mutex; with that, moving the handle between threads is sound (it
/// is a heap object owned by this value alone).
struct Lookup(std::sync::Mutex<selinux::label::Labeler<selinux::label::back_end::File>>);
// SAFETY: see the type's comment: the handle is only touched under the mutex.
unsafe impl Send for Lookup {}
// SAFETY: as above.
unsafe impl Sync for Lookup {}

/// Reads and writes labels. Created once per pass; when labels do not apply it only says why.
/// The file_contexts handle (tens of MiB of compiled expressions with a full policy) is opened
/// at the first lookup, not before, and closed with the labeler.
pub struct Labeler {
    skipped: Option<LabelsSkipped>,
    /// file_contexts handles opened by this labeler, each loading only the entries that may
    /// match paths under its prefix (see [`subset_prefix`]).
    lookups: std::sync::Mutex<std::collections::HashMap<PathBuf, Option<std::sync::Arc<Lookup>>>>,
    /// Time spent opening them, and the prefixes they were opened for (`/` the whole database).
    opened_in: std::sync::Mutex<Option<std::time::Duration>>,
    opened: std::sync::Mutex<Vec<PathBuf>>,
    /// The file_contexts files' identity when this labeler was made (None: not cacheable).
    stamp: Option<Stamp>,
}

thread_local! {
    /// How deep this thread is in [`Labeler::holding_creation_context`] spans.
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// No file_contexts handle answered a lookup (labels skipped, or opening it failed).
#[derive(Debug)]
struct NoHandle;

/// Which file_contexts answered: the (path, size, mtime) of each of the policy's files.
type Stamp = Vec<(PathBuf, u64, std::time::SystemTime)>;

/// Default labels already looked up, process-wide, for the file_contexts files they came from.
/// A daemon asks for the same few dozen paths every pass; the handle that answers them holds
/// tens of MiB (every compiled expression of the policy), so it is opened only on a miss.
#[allow(clippy::type_complexity)]
static DEFAULTS: std::sync::Mutex<
    Option<(
        Stamp,
        std::collections::HashMap<(PathBuf, u32), Option<Context>>,
    )>,
> = std::sync::Mutex::new(None);

/// The policy's file_contexts files as they are now; `None` when the policy type is unknown.
fn stamp(policy: Option<&str>) -> Option<Stamp> {
    let dir = Path::new("/etc/selinux")
        .join(policy?)
        .join("contexts/files");
    let mut out = Vec::new();
    for suffix in [
        "",
        ".bin",
        ".local",
        ".local.bin",
        ".homedirs",
        ".homedirs.bin",
        ".subs",
        ".subs_dist",
    ] {
        let p = dir.join(format!("file_contexts{suffix}"));
        if let Ok(m) = fs::metadata(&p) {
            out.push((p, m.len(), m.modified().ok()?));
        }
    }
    (!out.is_empty()).then_some(out)
}

impl Labeler {
    pub fn new(root: &Path, host: &HostSelinux) -> Self {
        let skipped = if !host.active() {
            Some(LabelsSkipped::NoSelinux)
        } else if root != Path::new("/") {
            Some(LabelsSkipped::ScratchRoot {
                root: root.to_path_buf(),
            })
        } else {
            None
        };
        let stamp = if skipped.is_none() {
            stamp(host.policy.as_deref())
        } else {
            None
        };
        Labeler {
            skipped,
            lookups: Default::default(),
            opened_in: Default::default(),
            opened: Default::default(),
            stamp,
        }
    }

    /// The file_contexts database for paths under `prefix`, which answers "what would
    /// restorecon set here". Opened with `SELABEL_OPT_SUBSET`: libselinux keeps only the
    /// entries whose fixed stem could match a path under the prefix (label_file.c,
    /// `process_line`; what `matchpathcon_init_prefix` and restorecon of one tree use), so it
    /// compiles a few dozen expressions instead of the whole policy's (~300 ms and ~10 MiB for
    /// Debian's under QEMU TCG, on the arrival of a bundle).
    fn lookup(&self, prefix: &Path) -> Option<std::sync::Arc<Lookup>> {
        if self.skipped.is_some() {
            return None;
        }
        let mut map = self.lookups.lock().ok()?;
        if let Some(l) = map.get(prefix) {
            return l.clone();
        }
        // (the whole database, when this labeler opened it, answers every prefix)
        if let Some(Some(whole)) = map.get(Path::new(WHOLE)) {
            return Some(whole.clone());
        }
        let t = std::time::Instant::now();
        let c = std::ffi::CString::new(prefix.as_os_str().as_encoded_bytes()).ok()?;
        // SELABEL_OPT_SUBSET (selinux/label.h); libselinux reads the string during the open.
        const SELABEL_OPT_SUBSET: std::ffi::c_int = 4;
        let opened = if prefix == Path::new(WHOLE) {
            selinux::label::Labeler::new(&[], true)
        } else {
            selinux::label::Labeler::new(&[(SELABEL_OPT_SUBSET, c.as_ptr().cast())], true)
        }
        .ok()
        .map(|l| std::sync::Arc::new(Lookup(std::sync::Mutex::new(l))));
        if let Ok(mut d) = self.opened_in.lock() {
            *d = Some(d.unwrap_or_default() + t.elapsed());
        }
        if let (Some(_), Ok(mut o)) = (&opened, self.opened.lock()) {
            o.push(prefix.to_path_buf());
        }
        map.insert(prefix.to_path_buf(), opened.clone());
        opened
    }

    /// How long opening file_contexts handles took in this labeler (default labels not in the
    /// process-wide cache); `None` when it opened none.
    pub fn opened_in(&self) -> Option<std::time::Duration> {
        *self.opened_in.lock().ok()?
    }

    /// The file_contexts subsets this labeler opened, by prefix (`/`: the whole database).
    pub fn opened(&self) -> Vec<PathBuf> {
        self.opened.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Whether default labels this labeler looks up stay in the process-wide cache: the
    /// policy's file_contexts files could be identified (type and files readable).
    pub fn caches(&self) -> bool {
        self.stamp.is_some()
    }

    /// `Some(reason)` when this labeler writes nothing.
    pub fn skipped(&self) -> Option<&LabelsSkipped> {
        self.skipped.as_ref()
    }

    /// The policy's default label for `path` (as `restorecon` would set it), for a file of the
    /// given `st_mode` file type bits.
    pub fn default_for(&self, path: &Path, file_mode: u32) -> Option<Context> {
        let key = default_key(path, file_mode);
        let Some(stamp) = &self.stamp else {
            return self.look_up(path, file_mode).ok().flatten();
        };
        if let Some(hit) = self.cached_default(&key) {
            return hit;
        }
        // A handle that could not be opened is no answer: looked up again next time.
        let found = self.look_up(path, file_mode).ok()?;
        let mut cache = DEFAULTS.lock().ok()?;
        match cache.as_mut() {
            Some((s, map)) if s == stamp => {
                map.insert(key, found.clone());
            }
            _ => *cache = Some((stamp.clone(), [(key, found.clone())].into())),
        }
        found
    }

    /// Whether [`Labeler::default_for`] answers `path` without opening a file_contexts handle:
    /// labels are skipped here, or the answer is in the process-wide cache.
    pub fn knows_default(&self, path: &Path, file_mode: u32) -> bool {
        self.skipped.is_some() || self.cached_default(&default_key(path, file_mode)).is_some()
    }

    /// The cached default label for `key` under this labeler's policy (`Some(None)`: the policy
    /// gives none); `None` when no answer is cached.
    fn cached_default(&self, key: &(PathBuf, u32)) -> Option<Option<Context>> {
        let stamp = self.stamp.as_ref()?;
        let cache = DEFAULTS.lock().ok()?;
        let (s, map) = cache.as_ref()?;
        if s != stamp {
            return None;
        }
        map.get(key).cloned()
    }

    /// Looks up now the default labels of `paths` (node path, `st_mode` file type bits) that
    /// are not cached yet: when they span `WHOLE_AT` file_contexts subsets or more, one
    /// handle on the whole database answers them all and the later lookups of this labeler
    /// (each subset open reads the whole policy file again: a node's first pass needs about
    /// seven, 550 ms under QEMU TCG, the whole database 100-320 ms; issue 18). Fewer are left to
    /// the subsets, opened at their first lookup. Returns the subsets this spared.
    pub fn prefetch(&self, paths: &[(&Path, u32)]) -> usize {
        const S_IFMT: u32 = 0o170000;
        let Some(stamp) = &self.stamp else {
            return 0;
        };
        let missing: Vec<(&Path, u32)> = {
            let Ok(cache) = DEFAULTS.lock() else {
                return 0;
            };
            let cached = |p: &Path, m: u32| {
                cache.as_ref().is_some_and(|(s, map)| {
                    s == stamp && map.contains_key(&(p.to_path_buf(), m & S_IFMT))
                })
            };
            paths
                .iter()
                .copied()
                .filter(|(p, m)| !cached(p, *m))
                .collect()
        };
        let prefixes: std::collections::BTreeSet<PathBuf> = {
            let Ok(open) = self.lookups.lock() else {
                return 0;
            };
            if open.contains_key(Path::new(WHOLE)) {
                return 0;
            }
            missing
                .iter()
                .map(|(p, _)| subset_prefix(p))
                .filter(|p| !open.contains_key(p))
                .collect()
        };
        if prefixes.len() < WHOLE_AT {
            return 0;
        }
        if self.lookup(Path::new(WHOLE)).is_none() {
            return 0;
        }
        for (p, m) in missing {
            self.default_for(p, m);
        }
        prefixes.len()
    }

    /// Asks the file_contexts handle (opened now if this labeler has not yet).
    /// `Err` when no handle answers (not opened: skipped labels, or the open failed), `Ok(None)`
    /// when the policy has no label for the path.
    fn look_up(&self, path: &Path, file_mode: u32) -> Result<Option<Context>, NoHandle> {
        let handle = self.lookup(&subset_prefix(path)).ok_or(NoHandle)?;
        let lookup = handle.0.lock().map_err(|_| NoHandle)?;
        let Ok(ctx) = lookup.look_up_by_path(path, selinux::FileAccessMode::new(file_mode)) else {
            return Ok(None);
        };
        let s = String::from_utf8_lossy(ctx.as_bytes()).into_owned();
        Ok(s.parse().ok())
    }

    /// The label for a node credential at `path` (node path): the policy's default, unless that
    /// is a type containers may read (Fedora's container-selinux labels `/var/lib/kubelet`
    /// `container_file_t`), then the generic type of its location (`var_lib_t` under `/var`,
    /// `etc_t` elsewhere). `None` when labels are skipped.
    pub fn private_for(&self, path: &Path, file_mode: u32) -> Option<Context> {
        let d = self.default_for(path, file_mode)?;
        if !d.is_container_readable() {
            return Some(d);
        }
        let t = if path.starts_with("/var") {
            "var_lib_t"
        } else {
            "etc_t"
        };
        let mls = d.range.is_some();
        let c = d.with_type(t).with_user("system_u");
        Some(if mls {
            c.with_level(context::Level::s0())
        } else {
            c
        })
    }

    /// The label of `path` itself (a symlink is not followed). `None` when labels are skipped or
    /// the file has none.
    pub fn get(&self, path: &Path) -> Result<Option<Context>, LabelError> {
        if self.skipped.is_some() {
            return Ok(None);
        }
        parsed(selinux::SecurityContext::of_path(path, false, true), path)
    }

    /// The label of an open file (`fgetfilecon`: no path resolved). `path` is for error
    /// messages only.
    pub fn get_fd(&self, fd: &impl AsRawFd, path: &Path) -> Result<Option<Context>, LabelError> {
        if self.skipped.is_some() {
            return Ok(None);
        }
        parsed(selinux::SecurityContext::of_file(fd, true), path)
    }

    /// Sets `ctx` on an open file (the temp file of an atomic write, before its rename).
    /// `path` is for error messages only.
    pub fn set_on_fd(
        &self,
        fd: &impl AsRawFd,
        path: &Path,
        ctx: &Context,
    ) -> Result<(), LabelError> {
        if self.skipped.is_some() {
            return Ok(());
        }
        let c = std::ffi::CString::new(ctx.to_string()).expect("contexts have no NUL");
        let sc = selinux::SecurityContext::from_c_str(&c, true);
        sc.set_for_file(fd)
            .map_err(|e| LabelError::Lib(format!("setting label {ctx}: {e}"), path.to_path_buf()))
    }

    /// Runs `create` with the thread's file-creation context set to `ctx` (setfscreatecon), so
    /// whatever it creates is born with that label: no moment exists in which another process
    /// could see it with its directory's default label. The context is reset afterwards.
    pub fn create_with<T>(
        &self,
        ctx: Option<&Context>,
        path: &Path,
        create: impl FnOnce() -> io::Result<T>,
    ) -> Result<T, LabelError> {
        let io_err = |op, source| LabelError::Io {
            path: path.to_path_buf(),
            op,
            source,
        };
        let held = HELD.with(|h| h.get() > 0);
        let reset = || {
            selinux::SecurityContext::set_default_context_for_new_file_system_objects().map_err(
                |e| LabelError::Lib(format!("resetting setfscreatecon: {e}"), path.to_path_buf()),
            )
        };
        let Some(ctx) = ctx.filter(|_| self.skipped.is_none()) else {
            if self.skipped.is_none() {
                // What a held span set must not label this one (libselinux makes this free when
                // nothing is set: it skips writing the value the thread already has).
                reset()?;
            }
            return create().map_err(|e| io_err("create", e));
        };
        let c = std::ffi::CString::new(ctx.to_string()).expect("contexts have no NUL");
        selinux::SecurityContext::from_c_str(&c, true)
            .set_for_new_file_system_objects(true)
            .map_err(|e| {
                LabelError::Lib(format!("setfscreatecon {ctx}: {e}"), path.to_path_buf())
            })?;
        let r = create();
        // Within a held span the context stays for the next creation (libselinux skips setting
        // it again when it is the same) and is reset when the span ends.
        let reset = if held { Ok(()) } else { reset() };
        let v = r.map_err(|e| io_err("create", e))?;
        reset?;
        Ok(v)
    }

    /// Runs `f` with the file-creation contexts [`Labeler::create_with`] sets left in place
    /// between creations on this thread, and reset when `f` ends (returns or unwinds): a batch
    /// of files mostly in a few labels sets each once, not set and reset around every file
    /// (each an open, write and close of `/proc/thread-self/attr/fscreate`).
    pub fn holding_creation_context<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Span;
        impl Drop for Span {
            fn drop(&mut self) {
                let last = HELD.with(|h| {
                    h.set(h.get() - 1);
                    h.get() == 0
                });
                if last {
                    // (nothing to report to: a failed reset leaves the thread's context set,
                    // which every later creation sets or resets first)
                    let _ =
                        selinux::SecurityContext::set_default_context_for_new_file_system_objects();
                }
            }
        }
        HELD.with(|h| h.set(h.get() + 1));
        let _span = Span;
        f()
    }

    /// Sets `ctx` on `path` itself, never following a symlink.
    pub fn set_on_path(&self, path: &Path, ctx: &Context) -> Result<(), LabelError> {
        if self.skipped.is_some() {
            return Ok(());
        }
        let c = std::ffi::CString::new(ctx.to_string()).expect("contexts have no NUL");
        let sc = selinux::SecurityContext::from_c_str(&c, true);
        sc.set_for_path(path, false, true)
            .map_err(|e| LabelError::Lib(format!("setting label {ctx}: {e}"), path.to_path_buf()))
    }
}

/// The default-label cache's key: the path and its file type bits.
fn default_key(path: &Path, file_mode: u32) -> (PathBuf, u32) {
    const S_IFMT: u32 = 0o170000;
    (path.to_path_buf(), file_mode & S_IFMT)
}

/// A label as libselinux read it, parsed (`path` for messages).
fn parsed(
    read: selinux::errors::Result<Option<selinux::SecurityContext<'_>>>,
    path: &Path,
) -> Result<Option<Context>, LabelError> {
    let ctx = read.map_err(|e| LabelError::Lib(e.to_string(), path.to_path_buf()))?;
    ctx.map(|c| {
        let s = String::from_utf8_lossy(c.as_bytes()).into_owned();
        s.parse().map_err(|source| LabelError::Invalid {
            path: path.to_path_buf(),
            label: s,
            source,
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_lookup_opens_the_subset_of_its_first_two_directories() {
        use std::path::{Path, PathBuf};
        for (path, prefix) in [
            ("/etc/ssl/etcd/etcd/peer.key", "/etc/ssl"),
            ("/opt/bootstrap/assets/manifests/a.yaml", "/opt/bootstrap"),
            ("/etc/hostname", "/etc"),
            ("/etc/kubernetes", "/etc"),
            ("/var/lib/kubelet/pki/x.pem", "/var/lib"),
            ("/x", "/"),
        ] {
            assert_eq!(
                super::subset_prefix(Path::new(path)),
                PathBuf::from(prefix),
                "{path}"
            );
        }
    }

    use super::*;

    fn fake_root(enforce: Option<&str>, mls: &str) -> tempfile_dir::Dir {
        let d = tempfile_dir::Dir::new();
        if let Some(e) = enforce {
            fs::create_dir_all(d.0.join("sys/fs/selinux")).unwrap();
            fs::write(d.0.join("sys/fs/selinux/enforce"), e).unwrap();
            fs::write(d.0.join("sys/fs/selinux/mls"), mls).unwrap();
        }
        fs::create_dir_all(d.0.join("etc/selinux")).unwrap();
        fs::write(
            d.0.join("etc/selinux/config"),
            "SELINUX=enforcing\nSELINUXTYPE=targeted\n",
        )
        .unwrap();
        d
    }

    /// A tiny scratch dir so this crate needs no dev-dependency.
    mod tempfile_dir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "nodectl-selinux-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::SeqCst)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn detects_modes_from_selinuxfs() {
        let d = fake_root(Some("1\n"), "1\n");
        let h = HostSelinux::detect(&d.0).unwrap();
        assert_eq!(h.mode, Mode::Enforcing);
        assert!(h.mls);
        assert_eq!(h.policy.as_deref(), Some("targeted"));

        let d = fake_root(Some("0"), "0");
        let h = HostSelinux::detect(&d.0).unwrap();
        assert_eq!(h.mode, Mode::Permissive);
        assert!(!h.mls);

        let d = fake_root(None, "");
        let h = HostSelinux::detect(&d.0).unwrap();
        assert_eq!(h.mode, Mode::Absent);
        assert!(!h.active());
    }

    #[test]
    fn labeler_says_why_it_skips() {
        let d = fake_root(None, "");
        let h = HostSelinux::detect(&d.0).unwrap();
        let l = Labeler::new(Path::new("/"), &h);
        assert_eq!(l.skipped(), Some(&LabelsSkipped::NoSelinux));

        let d = fake_root(Some("1"), "1");
        let h = HostSelinux::detect(&d.0).unwrap();
        let l = Labeler::new(&d.0, &h);
        assert!(matches!(
            l.skipped(),
            Some(LabelsSkipped::ScratchRoot { .. })
        ));
        // Skipped labelers never touch the file.
        assert_eq!(l.get(&d.0.join("etc/selinux/config")).unwrap(), None);
    }
}
