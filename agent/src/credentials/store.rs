//! The store: timestamped chain+key files, the `current` link switched atomically, the pending
//! key kept across restarts; the certificate's validity and rotation deadline.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

use crate::fsio::{DirSpec, FileSpec, Writer};

use super::{CERT_DIR, CURRENT, PENDING_KEY};

/// nodectld's renewal window, as fractions of the certificate's lifetime: from 92%, over 4%
/// (after kubelet's own 70-90%).
pub(crate) const RENEW_FROM: f64 = 0.92;
/// See [`RENEW_FROM`].
pub(crate) const RENEW_SPAN: f64 = 0.04;

/// When a certificate is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// Start of validity (the certificate's notBefore).
    pub not_before: SystemTime,
    /// End of validity (notAfter); from then on the certificate is expired.
    pub not_after: SystemTime,
}

fn to_time(t: x509_parser::time::ASN1Time) -> SystemTime {
    let secs = t.timestamp();
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        UNIX_EPOCH
    }
}

/// The validity of the first certificate in a PEM chain.
pub(crate) fn validity(chain_pem: &[u8]) -> anyhow::Result<Validity> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(chain_pem)
        .map_err(|e| anyhow::anyhow!("not a PEM certificate: {e}"))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| anyhow::anyhow!("not an X.509 certificate: {e}"))?;
    Ok(Validity {
        not_before: to_time(cert.validity().not_before),
        not_after: to_time(cert.validity().not_after),
    })
}

impl Validity {
    /// When nodectld renews: `not_before` plus `fraction` of the lifetime, with `fraction` drawn
    /// by the caller in [0.92, 0.96). kubelet itself rotates at [0.7, 0.9)
    /// (k8s.io/client-go/util/certificate/certificate_manager.go `nextRotationDeadline`:
    /// `wait.Jitter(total*0.7, 0.2/0.7)`-like, 70-90%) in the same store, so nodectld renews only
    /// when kubelet has not (kubelet down, its request not approved), still hours before expiry.
    pub fn rotation_deadline(&self, jitter01: f64) -> SystemTime {
        let total = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or_default();
        let fraction = RENEW_FROM + RENEW_SPAN * jitter01.clamp(0.0, 0.999_999);
        self.not_before + total.mul_f64(fraction)
    }

    /// True once `now` has reached `not_after`.
    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }
}

/// A credential's file spec with the private label (never container-readable; see
/// `Labeler::private_for`).
pub(crate) fn private(w: &Writer, spec: FileSpec) -> FileSpec {
    match w.labeler().private_for(&spec.path, S_IFREG) {
        Some(l) => spec.label(l),
        None => spec,
    }
}

/// The credentials directory (0700, private label).
fn private_dir(w: &Writer) -> DirSpec {
    DirSpec {
        label: w.labeler().private_for(Path::new(CERT_DIR), 0o040000),
        ..DirSpec::new(CERT_DIR, 0o700)
    }
}

const S_IFREG: u32 = 0o100000;

/// The pending request's key: the one kept on disk, or a new one written first (0600, through
/// the one atomic write). `true` when it was created now.
pub(crate) fn pending_key(w: &Writer) -> anyhow::Result<(rcgen::KeyPair, bool)> {
    let node_path = Path::new(CERT_DIR).join(PENDING_KEY);
    let real = w.root().path(&node_path);
    match std::fs::read_to_string(&real) {
        Ok(pem) => {
            let key = crate::csr::load_key(&pem).with_context(|| real.display().to_string())?;
            Ok((key, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            w.ensure_dir(&private_dir(w))?;
            let key = crate::csr::generate_key()?;
            w.write(&private(
                w,
                FileSpec::new(&node_path, key.serialize_pem(), 0o600),
            ))?;
            Ok((key, true))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", real.display())),
    }
}

/// Stores a new certificate chain with its key: a timestamped file (0600), then the `current`
/// symlink switched to it atomically, then the pending key removed. Returns the node path of
/// `kubelet-client-current.pem` (what the node kubeconfig names).
pub fn store(
    w: &Writer,
    chain_pem: &[u8],
    key_pem: &str,
    now: SystemTime,
) -> anyhow::Result<PathBuf> {
    let dir = Path::new(CERT_DIR);
    w.ensure_dir(&private_dir(w))?;
    let name = format!("kubelet-client-{}.pem", crate::util::time::stamp(now));
    let mut content = chain_pem.to_vec();
    if !content.ends_with(b"\n") {
        content.push(b'\n');
    }
    content.extend_from_slice(key_pem.as_bytes());
    // A crash while writing an earlier one left its temp file under another timestamp.
    let spec = FileSpec::new(dir.join(&name), content, 0o600).sweeping("kubelet-client-");
    w.write(&private(w, spec))?;
    crate::util::crash_point!("store::stored");
    let real_dir = w.root().path(dir);
    let tmp = real_dir.join(format!(".{CURRENT}.nodectl-new"));
    let _ = std::fs::remove_file(&tmp);
    // Absolute target as on the node (kubelet does the same), so the link works under a root.
    symlink(dir.join(&name), &tmp).with_context(|| format!("creating {}", tmp.display()))?;
    crate::util::crash_point!("store::link");
    std::fs::rename(&tmp, real_dir.join(CURRENT))
        .with_context(|| format!("switching {}", real_dir.join(CURRENT).display()))?;
    crate::util::crash_point!("store::switched");
    std::fs::File::open(&real_dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync {}", real_dir.display()))?;
    w.remove(&dir.join(PENDING_KEY))?;
    Ok(dir.join(CURRENT))
}

/// Where `kubelet-client-current.pem` points (the link itself, read without following it), if
/// it exists: what a request about to store a new certificate records, so that after a crash it
/// is known whether the switch came (see `steps::kubelet::issued`).
pub(crate) fn current_target(root: &crate::root::Root) -> Option<PathBuf> {
    std::fs::read_link(root.path(Path::new(CERT_DIR).join(CURRENT))).ok()
}

/// The current chain and key (what `kubelet-client-current.pem` points at), if any.
pub(crate) fn current(root: &crate::root::Root) -> anyhow::Result<Option<Vec<u8>>> {
    let link = Path::new(CERT_DIR).join(CURRENT);
    if std::fs::symlink_metadata(root.path(&link))
        .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        return Ok(None);
    }
    // Through one descriptor: the link followed only to a file beside it (as this store and
    // kubelet make it), a regular file, bounded. A dangling link is an error, not "no
    // certificate".
    let name = || root.path(&link).display().to_string();
    let f = crate::fsio::open_regular_or_sibling(root, &link)
        .with_context(name)?
        .ok_or_else(|| anyhow::anyhow!("{}: points at a file that is not there", name()))?;
    Ok(Some(
        crate::util::bounded::read_from(&f, crate::util::bounded::MAX_INPUT_BYTES)
            .with_context(name)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodectl_selinux::{HostSelinux, Labeler, Mode};

    fn cert_pem(days: i64) -> (String, rcgen::KeyPair) {
        let key = crate::csr::generate_key().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.not_before = rcgen::date_time_ymd(2026, 11, 30);
        p.not_after = p.not_before + Duration::from_secs(days as u64 * 86_400);
        (p.self_signed(&key).unwrap().pem(), key)
    }

    fn setup() -> (tempfile::TempDir, crate::root::Root, Labeler) {
        let d = tempfile::tempdir().unwrap();
        let root = crate::root::Root::new(d.path());
        let l = Labeler::new(
            root.dir(),
            &HostSelinux {
                mode: Mode::Absent,
                mls: false,
                policy: None,
            },
        );
        (d, root, l)
    }

    #[test]
    fn validity_and_renewal_between_92_and_96_percent_after_kubelets_window() {
        let (pem, _) = cert_pem(3); // Typhoon signs for 72h
        let v = validity(pem.as_bytes()).unwrap();
        let total = v.not_after.duration_since(v.not_before).unwrap();
        assert_eq!(total, Duration::from_secs(72 * 3600));
        for j in [0.0, 0.5, 0.999] {
            let at = v.rotation_deadline(j).duration_since(v.not_before).unwrap();
            assert!(
                // kubelet's own rotation window ends at 90%.
                at >= total.mul_f64(0.92) && at < total.mul_f64(0.96),
                "{j}: {at:?}"
            );
        }
        assert!(!v.expired(v.not_before) && v.expired(v.not_after));
        let j = crate::util::jitter();
        assert!((0.0..1.0).contains(&j));
        assert!(validity(b"garbage").is_err());
    }

    #[test]
    fn the_pending_key_survives_a_restart() {
        let (_d, root, l) = setup();
        let w = Writer::new(&root, &l);
        let (k1, created) = pending_key(&w).unwrap();
        assert!(created);
        let (k2, created) = pending_key(&w).unwrap();
        assert!(!created, "a restart reuses the key");
        assert_eq!(k1.public_key_raw(), k2.public_key_raw());
        assert_eq!(
            crate::csr::request_name(&k1, "n"),
            crate::csr::request_name(&k2, "n")
        );
        use std::os::unix::fs::PermissionsExt;
        let p = root.path(Path::new(CERT_DIR).join(PENDING_KEY));
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(root.path(CERT_DIR))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
    }

    #[test]
    fn store_switches_current_atomically_and_drops_the_pending_key() {
        let (_d, root, l) = setup();
        let w = Writer::new(&root, &l);
        let (key, _) = pending_key(&w).unwrap();
        let (chain, _) = cert_pem(3);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        let cur = store(&w, chain.as_bytes(), &key.serialize_pem(), t0).unwrap();
        assert_eq!(
            cur,
            Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem")
        );
        let got = current(&root).unwrap().unwrap();
        assert!(got.starts_with(chain.as_bytes()));
        assert!(String::from_utf8_lossy(&got).contains("PRIVATE KEY"));
        assert!(!root.path(Path::new(CERT_DIR).join(PENDING_KEY)).exists());
        let target = std::fs::read_link(root.path(cur.clone())).unwrap();
        assert_eq!(
            target,
            Path::new("/var/lib/kubelet/pki/kubelet-client-2026-11-30-00-53-20.pem")
        );
        // A rotation: a new file, the link moves, the old file stays (kubelet keeps them too).
        let (chain2, key2) = cert_pem(3);
        store(
            &w,
            chain2.as_bytes(),
            &key2.serialize_pem(),
            t0 + Duration::from_secs(3600),
        )
        .unwrap();
        assert!(current(&root)
            .unwrap()
            .unwrap()
            .starts_with(chain2.as_bytes()));
        assert!(root.path(target).exists());
        use std::os::unix::fs::PermissionsExt;
        let f = root.path("/var/lib/kubelet/pki/kubelet-client-2026-11-30-01-53-20.pem");
        assert_eq!(
            std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    /// A crash while a certificate was being stored left a temp copy of the chain and key under
    /// that pass's timestamp; the next store (another timestamp) removes it, and only temp
    /// files of the store's own (not kubelet's files, not other temp files).
    /// (Found by the crash campaign on real systemd, where the retry lands a second later.)
    #[test]
    fn a_store_removes_what_a_crash_left_of_an_earlier_store() {
        let (_d, root, l) = setup();
        let w = Writer::new(&root, &l);
        let (key, _) = pending_key(&w).unwrap();
        let dir = root.path(CERT_DIR);
        let stale = dir.join(".kubelet-client-2026-11-30-00-53-19.pem.nodectl-Ab12Cd");
        let kubelets = dir.join("kubelet-client-2026-11-29-00-00-00.pem");
        let other = dir.join(".kubelet.crt.nodectl-Zz99Yy");
        for f in [&stale, &kubelets, &other] {
            std::fs::write(f, "half a key").unwrap();
        }
        let (chain, _) = cert_pem(3);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        store(&w, chain.as_bytes(), &key.serialize_pem(), t0).unwrap();
        assert!(!stale.exists());
        assert!(kubelets.exists() && other.exists());
    }
}
