//! Everything the audit reads, read once (no check touches the disk): the CAs, the kubelet's
//! certificate, the worker's etcd candidates, the control plane's manifest and etcd's
//! environment, every file holding credentials with its mode, directory mode and label.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::certs::{certs, Cert};
use crate::config::{Role, Settings};
use crate::root::Root;

const ETCD_CA_PATHS: &[&str] = &[
    "/etc/ssl/etcd/etcd/server-ca.crt",
    "/etc/ssl/etcd/etcd/peer-ca.crt",
    "/etc/ssl/etcd/etcd-client-ca.crt",
    "/etc/kubernetes/pki/etcd-client-ca.crt",
    "/etc/kubernetes/pki/etcd/ca.crt",
];
const K8S_CA_PATHS: &[&str] = &["/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/ca.crt"];
const ETCD_DIRS: &[&str] = &["/etc/ssl/etcd", "/etc/etcd", "/etc/kubernetes/pki/etcd"];
/// Where node credentials live (keys, kubeconfigs).
const KEY_DIRS: &[&str] = &[
    "/etc/kubernetes",
    "/etc/ssl/etcd",
    "/var/lib/kubelet/pki",
    "/var/lib/nodectl",
];
pub(super) const APISERVER_MANIFEST: &str = "/etc/kubernetes/manifests/kube-apiserver.yaml";
pub(super) const BOOTSTRAP_TOKEN_MANIFEST: &str =
    "/opt/bootstrap/assets/manifests/bootstrap-token.yaml";
pub(super) const ETCD_ENV: &str = "/etc/etcd/etcd.env";

/// A file holding a private key or credentials.
pub(super) struct KeyFile {
    pub(super) path: PathBuf,
    pub(super) mode: u32,
    /// Its owner.
    pub(super) uid: u32,
    /// Its directory, that directory's mode and owner.
    pub(super) dir: Option<(PathBuf, u32, u32)>,
    /// Its SELinux label, for node credentials only.
    pub(super) label: Option<String>,
}

/// A file under `/etc/kubernetes` on a worker, with what makes it an etcd credential.
pub(super) struct KubeFile {
    pub(super) path: PathBuf,
    pub(super) certs: Vec<Cert>,
}

/// What the checks look at.
pub(super) struct Snapshot {
    pub(super) os_release: String,
    pub(super) role: Role,
    pub(super) node_name: String,
    pub(super) etcd_cas: Vec<(PathBuf, Cert)>,
    pub(super) k8s_cas: Vec<(PathBuf, Cert)>,
    /// kubelet's client certificate (the first of its chain).
    pub(super) kubelet_cert: Option<(PathBuf, Cert)>,
    /// Workers: every file in etcd's directories.
    pub(super) etcd_files: Vec<PathBuf>,
    /// Workers: every file under `/etc/kubernetes`.
    pub(super) kube_files: Vec<KubeFile>,
    pub(super) apiserver_manifest: Option<String>,
    pub(super) bootstrap_token_manifest: Option<String>,
    pub(super) etcd_env: Option<String>,
    pub(super) key_files: Vec<KeyFile>,
    /// The node holds a certificate of its own that has not expired.
    pub(super) holds_valid_certificate: bool,
    /// The bootstrap kubeconfig, when it still carries a token.
    pub(super) bootstrap_token_file: Option<PathBuf>,
    /// With `reboot.strategy = "fleet-lock"`: what Zincati's configuration asks.
    pub(super) zincati: Option<crate::reboot::zincati::ZincatiCheck>,
}

/// Files under a node directory (recursively, not following links), as node paths.
fn files_under(root: &Root, dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(root.path(&d)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = d.join(e.file_name());
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

fn is_private_key(text: &str) -> bool {
    text.contains("PRIVATE KEY-----")
}

/// A kubeconfig or other file carrying credentials inline.
fn has_credentials(text: &str) -> bool {
    is_private_key(text)
        || text.contains("client-key-data:")
        || text.lines().any(|l| l.trim_start().starts_with("token:"))
}

fn has_token(text: &str) -> bool {
    text.lines().any(|l| l.trim_start().starts_with("token:"))
}

fn mode_and_owner(m: &std::fs::Metadata) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt as _;
    (m.permissions().mode() & 0o777, m.uid())
}

/// A regular file's bytes and metadata, read through one descriptor: no symlink followed (on
/// the way or at the entry), a FIFO or device refused, at most `MAX_INPUT_BYTES` (certificates,
/// keys, kubeconfigs and manifests are a few KiB). The audit runs inside nodectld's pass, in
/// trees other users can write (the controller's `pki` belongs to uid 65534): a FIFO left at
/// `ca.crt` would otherwise block every later pass, a link to `/dev/zero` fill the memory.
/// `None` when missing or refused (the checks see no file there).
fn read_regular(root: &Root, p: &Path) -> Option<(Vec<u8>, std::fs::Metadata)> {
    let f = crate::fsio::open_regular(root, p).ok()??;
    let meta = f.metadata().ok()?;
    let bytes = crate::util::bounded::read_from(&f, crate::util::bounded::MAX_INPUT_BYTES).ok()?;
    Some((bytes, meta))
}

impl Snapshot {
    /// Reads what the checks need. `label_of` reads a file's SELinux context (None where
    /// SELinux is absent).
    pub(super) fn read(
        root: &Root,
        settings: &Settings,
        os_release: &str,
        label_of: &dyn Fn(&Path) -> Option<String>,
    ) -> Snapshot {
        let read = |p: &Path| read_regular(root, p).map(|(b, _)| b);
        let text = |p: &str| read(Path::new(p)).and_then(|b| String::from_utf8(b).ok());
        let cas = |paths: &[&str]| -> Vec<(PathBuf, Cert)> {
            paths
                .iter()
                .filter_map(|p| read(Path::new(p)).map(|b| (PathBuf::from(p), b)))
                .flat_map(|(p, b)| certs(&b).into_iter().map(move |c| (p.clone(), c)))
                .collect()
        };
        let kubelet = Path::new(crate::credentials::CERT_DIR).join(crate::credentials::CURRENT);
        let kubelet_cert = root
            .read(&kubelet)
            .ok()
            .and_then(|b| certs(&b).into_iter().next())
            .map(|c| (kubelet.clone(), c));
        let worker = settings.role == Role::Worker;
        let holds_valid_certificate = crate::credentials::read(root)
            .is_some_and(|h| !h.validity.expired(std::time::SystemTime::now()));
        let bootstrap_token_file = read(&settings.bootstrap_kubeconfig)
            .filter(|t| has_token(&String::from_utf8_lossy(t)))
            .map(|_| settings.bootstrap_kubeconfig.clone());
        Snapshot {
            os_release: os_release.to_string(),
            role: settings.role,
            node_name: settings.node_name.clone(),
            etcd_cas: cas(ETCD_CA_PATHS),
            k8s_cas: cas(K8S_CA_PATHS),
            kubelet_cert,
            etcd_files: if worker { etcd_files(root) } else { Vec::new() },
            kube_files: if worker { kube_files(root) } else { Vec::new() },
            apiserver_manifest: text(APISERVER_MANIFEST),
            bootstrap_token_manifest: text(BOOTSTRAP_TOKEN_MANIFEST),
            etcd_env: text(ETCD_ENV),
            key_files: key_files(root, settings, label_of),
            holds_valid_certificate,
            bootstrap_token_file,
            zincati: (settings.reboot == crate::config::RebootStrategy::FleetLock)
                .then(|| crate::reboot::zincati::check(root, settings.reboot_policy.listen)),
        }
    }
}

fn etcd_files(root: &Root) -> Vec<PathBuf> {
    ETCD_DIRS
        .iter()
        .flat_map(|d| files_under(root, Path::new(d)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn kube_files(root: &Root) -> Vec<KubeFile> {
    files_under(root, Path::new("/etc/kubernetes"))
        .into_iter()
        .map(|path| {
            let certs = read_regular(root, &path)
                .map(|(b, _)| certs(&b))
                .unwrap_or_default();
            KubeFile { path, certs }
        })
        .collect()
}

fn key_files(
    root: &Root,
    settings: &Settings,
    label_of: &dyn Fn(&Path) -> Option<String>,
) -> Vec<KeyFile> {
    let credential_paths = crate::credentials::paths(settings);
    let mut out = Vec::new();
    // The key directories, and the node's credential files wherever settings put them (the
    // node kubeconfig is in /var/lib/kubelet, outside them).
    let mut files: BTreeSet<PathBuf> = KEY_DIRS
        .iter()
        .flat_map(|d| files_under(root, Path::new(d)))
        .collect();
    files.extend(
        credential_paths
            .iter()
            .filter(|p| root.path(p).is_file())
            .cloned(),
    );
    {
        for f in files {
            let Some((bytes, meta)) = read_regular(root, &f) else {
                continue;
            };
            if !has_credentials(&String::from_utf8_lossy(&bytes)) {
                continue;
            }
            let (mode, uid) = mode_and_owner(&meta);
            let dir = f.parent().and_then(|p| {
                let m = std::fs::symlink_metadata(root.path(p)).ok()?;
                let (mode, uid) = mode_and_owner(&m);
                Some((p.to_path_buf(), mode, uid))
            });
            let node_credential = credential_paths.iter().any(|c| f.starts_with(c));
            let label = if node_credential { label_of(&f) } else { None };
            out.push(KeyFile {
                path: f,
                mode,
                uid,
                dir,
                label,
            });
        }
    }
    out
}
