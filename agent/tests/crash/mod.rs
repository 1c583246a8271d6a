//! The crash campaign's checks (crash_campaign.rs): snapshots of a node's files and what a
//! kill may and may not leave of them.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const PKI: &str = "var/lib/kubelet/pki";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub dir: bool,
    pub symlink: bool,
    pub mode: u32,
    /// Owner and group (a key of the control plane's is 65534's, the rest root's).
    pub owner: (u32, u32),
    pub content: Vec<u8>,
    pub label: Option<Vec<u8>>,
}

pub type Tree = BTreeMap<PathBuf, Entry>;

/// Every entry under `tops` (relative to `root`; "" is the root itself) that `keep` keeps
/// (given the relative path and the file name; a directory not kept is not entered).
pub fn walk(root: &Path, tops: &[&str], keep: &dyn Fn(&Path, &str) -> bool) -> Tree {
    fn go(root: &Path, dir: &Path, keep: &dyn Fn(&Path, &str) -> bool, out: &mut Tree) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if !keep(&rel, &name) {
                continue;
            }
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue; // gone meanwhile (a unit's runtime file)
            };
            let symlink = m.file_type().is_symlink();
            let content = if symlink {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_dir() {
                vec![]
            } else {
                std::fs::read(&p).unwrap()
            };
            let entry = Entry {
                dir: m.is_dir(),
                symlink,
                mode: m.permissions().mode() & 0o7777,
                owner: (
                    std::os::unix::fs::MetadataExt::uid(&m),
                    std::os::unix::fs::MetadataExt::gid(&m),
                ),
                content,
                label: xattr(&p),
            };
            out.insert(rel, entry);
            if m.is_dir() {
                go(root, &p, keep, out);
            }
        }
    }
    let mut out = Tree::new();
    for top in tops {
        go(root, &root.join(top), keep, &mut out);
    }
    out
}

/// What the campaign compares: all but the inbox, nodectld's hidden temp files and the
/// credential store (checked apart: its names and keys are new in every run).
pub fn compared(rel: &Path, name: &str) -> bool {
    !(rel.starts_with("var/lib/nodectl/inbox") || rel.starts_with(PKI) || is_temp(name))
}

/// A temp file or directory of nodectld's, not yet renamed into place.
pub fn is_temp(name: &str) -> bool {
    name.contains(".nodectl-")
}

fn xattr(p: &Path) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let n = unsafe {
        nix::libc::lgetxattr(
            c.as_ptr(),
            c"security.selinux".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

#[derive(Default)]
pub struct Tally {
    pub trials: usize,
    pub converged: usize,
    pub partial: Vec<String>,
    pub mislabeled: Vec<String>,
    pub wrong_mode: Vec<String>,
    pub wrong_owner: Vec<String>,
}

/// After a kill: what is there is the old version (`old`: the node before the pass) or the new
/// one whole, with that version's mode, owner and group (and label).
pub fn check_killed(
    root: &Path,
    (have, old, want): (&Tree, &Tree, &Tree),
    between: Option<&Tree>,
    t: &mut Tally,
    trial: &str,
) {
    for (rel, h) in have {
        let Some(w) = want.get(rel) else { continue };
        if old.get(rel) == Some(h) {
            continue; // not yet replaced
        }
        if between.is_some_and(|b| b.get(rel) == Some(h)) {
            continue; // a whole version a pass that is not killed goes through too
        }
        if h.dir != w.dir || h.symlink != w.symlink || (!h.dir && h.content != w.content) {
            t.partial.push(format!("{trial}: {}", rel.display()));
        }
        let closed_dir = h.dir && h.mode == 0o700;
        if h.mode != w.mode && !closed_dir && !h.symlink {
            t.wrong_mode.push(format!(
                "{trial}: {} {:o} (want {:o})",
                rel.display(),
                h.mode,
                w.mode
            ));
        }
        // (a directory still 0700 as born may still be root's: its owner is set with its mode)
        if h.owner != w.owner && !closed_dir && !h.symlink {
            t.wrong_owner.push(format!(
                "{trial}: {} {}:{} (want {}:{})",
                rel.display(),
                h.owner.0,
                h.owner.1,
                w.owner.0,
                w.owner.1
            ));
        }
        if h.label.is_some() && h.label != w.label {
            t.mislabeled.push(format!("{trial}: {}", rel.display()));
        }
    }
    if let Err(e) = store_consistent(root) {
        t.partial.push(format!("{trial}: credential store: {e}"));
    }
}

/// The current link (if any) names a complete chain and key that match; every stored file is
/// complete.
pub fn store_consistent(root: &Path) -> Result<(), String> {
    let dir = root.join(PKI);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for e in entries {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with('.')
            || std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink()
        {
            continue;
        }
        if name.starts_with("kubelet-client-")
            && name.ends_with(".pem")
            && !name.ends_with("current.pem")
        {
            pair(&std::fs::read(&p).unwrap()).map_err(|e| format!("{name}: {e}"))?;
        }
    }
    let current = dir.join("kubelet-client-current.pem");
    if std::fs::symlink_metadata(&current).is_ok() {
        let target = std::fs::read_link(&current).map_err(|e| e.to_string())?;
        let real = root.join(target.strip_prefix("/").unwrap_or(&target));
        let bytes =
            std::fs::read(&real).map_err(|e| format!("current -> {}: {e}", target.display()))?;
        pair(&bytes).map_err(|e| format!("current: {e}"))?;
    }
    Ok(())
}

/// A certificate and the private key of its public key.
fn pair(pem: &[u8]) -> Result<(), String> {
    const END: &str = "-----END CERTIFICATE-----";
    let text = std::str::from_utf8(pem).map_err(|_| "not text")?;
    let ce = text.find(END).ok_or("no complete certificate")? + END.len();
    let (_, c) =
        x509_parser::pem::parse_x509_pem(&text.as_bytes()[..ce]).map_err(|e| e.to_string())?;
    let cert = c.parse_x509().map_err(|e| e.to_string())?;
    let key = text[ce..].trim();
    if !key.starts_with("-----BEGIN") || !key.contains("-----END") {
        return Err("no complete key".into());
    }
    let key = rcgen::KeyPair::from_pem(key).map_err(|e| format!("key: {e}"))?;
    if key.public_key_raw() != &cert.public_key().subject_public_key.data[..] {
        return Err("the key is not the certificate's".into());
    }
    Ok(())
}

/// The campaign's random draws, reproducible: SplitMix64 from `NODECTL_TEST_SEED` (the test
/// command prints the seed it chose; `SEED=N tests/run-tests.sh` runs the same draws again), or
/// a seed drawn here and printed. The draws are the kill instants; where a kill lands also
/// depends on how fast the pass ran, so a rerun repeats the instants, not every outcome.
pub struct Draws(u64);

impl Draws {
    /// `stream`: one sequence per use of the one seed (a scenario's number).
    pub fn from_env(stream: u64) -> Draws {
        let seed = match std::env::var("NODECTL_TEST_SEED") {
            Ok(s) if !s.trim().is_empty() => s
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("NODECTL_TEST_SEED={s:?} is not a number")),
            _ => (nodectl::util::jitter() * 4_294_967_296.0) as u64,
        };
        eprintln!("crash campaign: seed {seed}, stream {stream} (NODECTL_TEST_SEED={seed} draws the same kill instants)");
        Draws(seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93))
    }

    /// A fraction in [0, 1).
    pub fn fraction(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}
