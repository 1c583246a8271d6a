//! `nodectl audit`: the node-level findings of a security review of a production cluster, each
//! with an id, a severity, the evidence (path, field) and the fix. Reads only; `--fix` applies
//! the fixes that are safe ([`fix`]), each logged.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{Role, Settings};
use crate::root::Root;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Low,
    Medium,
    High,
}

/// What `--fix` may do about a finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Remedy {
    /// Remove the file (etcd client credentials on a worker).
    Remove,
    Chmod {
        mode: u32,
    },
    /// Give the file its policy default label (not readable by containers).
    Relabel,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    pub path: PathBuf,
    /// The field, flag or property that shows it.
    pub field: String,
    pub evidence: String,
    pub fix: String,
    /// Applied by `nodectl audit --fix`.
    pub remedy: Option<Remedy>,
}

/// Every check: (id, severity, what it finds). docs/security.md lists them too.
pub const CHECKS: &[(&str, Severity, &str)] = &[
    ("etcd-credentials-on-worker", Severity::High, "etcd client or server keys/certificates on a worker (known etcd paths, or issued by the etcd CA)"),
    ("shared-etcd-kubernetes-ca", Severity::High, "the etcd CA and the Kubernetes CA are the same certificate or key, or the kubelet's certificate was issued by the etcd CA"),
    ("apiserver-admission", Severity::High, "kube-apiserver without NodeRestriction in --enable-admission-plugins"),
    ("apiserver-authorization", Severity::High, "kube-apiserver --authorization-mode without Node and RBAC"),
    ("bootstrap-token-unbounded", Severity::Medium, "bootstrap token auth on, and the bootstrap token Secret has no expiration"),
    ("etcd-client-cert-auth", Severity::High, "etcd does not require client certificates (ETCD_CLIENT_CERT_AUTH)"),
    ("etcd-listens-everywhere", Severity::Medium, "etcd's client URLs listen on every interface, so every node can reach it"),
    ("key-mode", Severity::High, "a private key (or kubeconfig with credentials) readable by group or others"),
    ("key-dir-mode", Severity::Medium, "a directory holding private keys open to others"),
    ("key-label-container-readable", Severity::High, "a node credential labeled container_file_t: a container with a hostPath mount can read it"),
    ("bootstrap-token-on-disk", Severity::Medium, "the bootstrap token is still on disk although the node holds its own certificate"),
    ("end-of-life-os", Severity::High, "CoreOS Container Linux (end of life: no security updates)"),
];

fn finding(
    id: &str,
    path: &Path,
    field: &str,
    evidence: String,
    fix: &str,
    remedy: Option<Remedy>,
) -> Finding {
    let severity = CHECKS
        .iter()
        .find(|(c, _, _)| *c == id)
        .map(|(_, s, _)| *s)
        .expect("a known check");
    Finding {
        id: id.into(),
        severity,
        path: path.to_path_buf(),
        field: field.into(),
        evidence,
        fix: fix.into(),
        remedy,
    }
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

struct Cert {
    subject: String,
    issuer: String,
    spki: Vec<u8>,
    der: Vec<u8>,
}

impl Cert {
    /// This certificate's signature verifies with `ca`'s key (it validates against that CA).
    fn signed_by(&self, ca: &Cert) -> bool {
        let (Ok((_, c)), Ok((_, k))) = (
            x509_parser::parse_x509_certificate(&self.der),
            x509_parser::parse_x509_certificate(&ca.der),
        ) else {
            return false;
        };
        c.verify_signature(Some(k.public_key())).is_ok()
    }
}

fn certs(pem: &[u8]) -> Vec<Cert> {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .flatten()
        .filter(|p| p.label == "CERTIFICATE")
        .filter_map(|p| {
            let c = p.parse_x509().ok()?;
            Some(Cert {
                subject: c.subject().to_string(),
                issuer: c.issuer().to_string(),
                spki: c.public_key().raw.to_vec(),
                der: p.contents.clone(),
            })
        })
        .collect()
}

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

/// The checks that need no settings (the OS).
pub fn audit_os(os_release: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    if os_release
        .lines()
        .any(|l| l.trim() == "ID=coreos" || l.trim() == "ID=\"coreos\"")
    {
        out.push(finding(
            "end-of-life-os",
            Path::new("/etc/os-release"),
            "ID",
            "ID=coreos (CoreOS Container Linux, end of life since May 2020)".into(),
            "migrate to Flatcar Container Linux (in-place update) or Fedora CoreOS",
            None,
        ));
    }
    out
}

/// Runs every check against the node at `root` (read only). `labels` reads a file's SELinux
/// context (None where SELinux is absent).
pub fn audit(
    root: &Root,
    settings: &Settings,
    os_release: &str,
    label_of: &dyn Fn(&Path) -> Option<String>,
) -> Vec<Finding> {
    let mut out = audit_os(os_release);
    let read = |p: &Path| std::fs::read(root.path(p)).ok();

    // The CAs.
    let etcd_cas: Vec<(PathBuf, Cert)> = ETCD_CA_PATHS
        .iter()
        .filter_map(|p| read(Path::new(p)).map(|b| (PathBuf::from(p), b)))
        .flat_map(|(p, b)| certs(&b).into_iter().map(move |c| (p.clone(), c)))
        .collect();
    let k8s_cas: Vec<(PathBuf, Cert)> = K8S_CA_PATHS
        .iter()
        .filter_map(|p| read(Path::new(p)).map(|b| (PathBuf::from(p), b)))
        .flat_map(|(p, b)| certs(&b).into_iter().map(move |c| (p.clone(), c)))
        .collect();
    for (kp, k) in &k8s_cas {
        if let Some((ep, _)) = etcd_cas.iter().find(|(_, e)| e.spki == k.spki) {
            out.push(finding(
                "shared-etcd-kubernetes-ca",
                kp,
                "public key",
                format!("{} and {} have the same key ({})", kp.display(), ep.display(), k.subject),
                "give etcd its own CA (Typhoon: separate etcd-ca and kubernetes-ca), then re-issue etcd's and Kubernetes' certificates",
                None,
            ));
        }
    }
    let kubelet_cert = Path::new(crate::credentials::CERT_DIR).join(crate::credentials::CURRENT);
    if let Ok(b) = root.read(&kubelet_cert) {
        for c in certs(&b).iter().take(1) {
            if let Some((ep, e)) = etcd_cas.iter().find(|(_, e)| c.signed_by(e)) {
                out.push(finding(
                    "shared-etcd-kubernetes-ca",
                    &kubelet_cert,
                    "issuer",
                    format!("the kubelet's certificate ({}) was issued by {} ({}): it works as an etcd client certificate", c.subject, e.subject, ep.display()),
                    "sign kubelet certificates with the Kubernetes CA only; give etcd its own CA",
                    None,
                ));
            }
        }
    }

    // etcd credentials on a worker.
    if settings.role == Role::Worker {
        let mut seen = std::collections::BTreeSet::new();
        for dir in ETCD_DIRS {
            for f in files_under(root, Path::new(dir)) {
                seen.insert(f);
            }
        }
        for f in files_under(root, Path::new("/etc/kubernetes")) {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with("etcd-client") || name.starts_with("etcd-") {
                seen.insert(f.clone());
            }
            if let Some(b) = read(&f) {
                // Signed by an etcd CA found on the node, or (none found) named for etcd.
                let issued_by_etcd = certs(&b).iter().any(|c| {
                    c.subject != c.issuer
                        && (etcd_cas.iter().any(|(_, e)| c.signed_by(e))
                            || c.issuer.to_lowercase().contains("etcd"))
                });
                if issued_by_etcd {
                    seen.insert(f);
                }
            }
        }
        for f in seen {
            out.push(finding(
                "etcd-credentials-on-worker",
                &f,
                "file",
                format!(
                    "{} is an etcd credential on worker {}",
                    f.display(),
                    settings.node_name
                ),
                "remove it (nodectl audit --fix does): workers never talk to etcd",
                Some(Remedy::Remove),
            ));
        }
    }

    // Controller: kube-apiserver and etcd settings.
    if settings.role == Role::Controller {
        let manifest = Path::new("/etc/kubernetes/manifests/kube-apiserver.yaml");
        if let Some(text) = read(manifest).and_then(|b| String::from_utf8(b).ok()) {
            let flags = apiserver_flags(&text);
            let flag = |name: &str| {
                flags
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            };
            let admission = flag("--enable-admission-plugins").unwrap_or_default();
            if !admission.split(',').any(|p| p == "NodeRestriction") {
                out.push(finding(
                    "apiserver-admission",
                    manifest,
                    "--enable-admission-plugins",
                    format!("--enable-admission-plugins={admission}"),
                    "add NodeRestriction: without it a node's credentials can modify other Nodes and their pods",
                    None,
                ));
            }
            let authz = flag("--authorization-mode").unwrap_or_default();
            let modes: Vec<&str> = authz.split(',').collect();
            if !(modes.contains(&"Node") && modes.contains(&"RBAC")) {
                out.push(finding(
                    "apiserver-authorization",
                    manifest,
                    "--authorization-mode",
                    format!("--authorization-mode={authz}"),
                    "use --authorization-mode=Node,RBAC",
                    None,
                ));
            }
            if flag("--enable-bootstrap-token-auth").as_deref() == Some("true") {
                let token = Path::new("/opt/bootstrap/assets/manifests/bootstrap-token.yaml");
                if let Some(t) = read(token).and_then(|b| String::from_utf8(b).ok()) {
                    if !t.contains("expiration") {
                        out.push(finding(
                            "bootstrap-token-unbounded",
                            token,
                            "stringData.expiration",
                            "bootstrap token auth is on and the token Secret has no expiration".into(),
                            "give the bootstrap token Secret an expiration (the tokencleaner removes it) and hand new nodes fresh tokens",
                            None,
                        ));
                    }
                }
            }
        }
        let env = Path::new("/etc/etcd/etcd.env");
        if let Some(text) = read(env).and_then(|b| String::from_utf8(b).ok()) {
            let var = |k: &str| {
                text.lines()
                    .filter_map(|l| l.split_once('='))
                    .find(|(n, _)| n.trim() == k)
                    .map(|(_, v)| v.trim().trim_matches('"').to_string())
            };
            if var("ETCD_CLIENT_CERT_AUTH").as_deref() != Some("true") {
                out.push(finding(
                    "etcd-client-cert-auth",
                    env,
                    "ETCD_CLIENT_CERT_AUTH",
                    format!(
                        "ETCD_CLIENT_CERT_AUTH={}",
                        var("ETCD_CLIENT_CERT_AUTH").unwrap_or_else(|| "(unset)".into())
                    ),
                    "set ETCD_CLIENT_CERT_AUTH=true (and ETCD_TRUSTED_CA_FILE to the etcd CA)",
                    None,
                ));
            }
            if let Some(urls) = var("ETCD_LISTEN_CLIENT_URLS") {
                if urls.contains("0.0.0.0") || urls.contains("[::]") {
                    out.push(finding(
                        "etcd-listens-everywhere",
                        env,
                        "ETCD_LISTEN_CLIENT_URLS",
                        format!("ETCD_LISTEN_CLIENT_URLS={urls}"),
                        "listen on the controller's private address (and 127.0.0.1) and allow 2379 only from controllers in the firewall",
                        None,
                    ));
                }
            }
        }
    }

    // Keys: modes, directories, labels.
    let credential_paths = crate::credentials::paths(settings);
    let mut dirs_flagged = std::collections::BTreeSet::new();
    for dir in KEY_DIRS {
        for f in files_under(root, Path::new(dir)) {
            let Some(bytes) = read(&f) else { continue };
            let text = String::from_utf8_lossy(&bytes);
            if !has_credentials(&text) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(root.path(&f)) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                out.push(finding(
                    "key-mode",
                    &f,
                    "mode",
                    format!(
                        "{} is {mode:04o} and holds a private key or credentials",
                        f.display()
                    ),
                    "chmod 0600 (nodectl audit --fix does)",
                    Some(Remedy::Chmod { mode: 0o600 }),
                ));
            }
            if let Some(parent) = f.parent() {
                if let Ok(pm) = std::fs::metadata(root.path(parent)) {
                    let m = pm.permissions().mode() & 0o777;
                    if m & 0o007 != 0
                        && parent != Path::new("/etc/kubernetes")
                        && dirs_flagged.insert(parent.to_path_buf())
                    {
                        out.push(finding(
                            "key-dir-mode",
                            parent,
                            "mode",
                            format!("{} is {m:04o} and holds private keys", parent.display()),
                            "chmod 0700 (nodectl audit --fix does)",
                            Some(Remedy::Chmod { mode: 0o700 }),
                        ));
                    }
                }
            }
            let node_credential = credential_paths.iter().any(|c| f.starts_with(c));
            if node_credential {
                if let Some(l) = label_of(&f) {
                    if l.contains(":container_file_t:") {
                        out.push(finding(
                            "key-label-container-readable",
                            &f,
                            "SELinux label",
                            format!("{} is labeled {l}", f.display()),
                            "give it the policy default label (nodectl audit --fix does; nodectld keeps it so)",
                            Some(Remedy::Relabel),
                        ));
                    }
                }
            }
        }
    }

    // The bootstrap token after the node got its own certificate.
    let held = crate::credentials::read(root);
    let valid = held
        .as_ref()
        .is_some_and(|h| !h.validity.expired(std::time::SystemTime::now()));
    if valid {
        if let Some(t) = read(&settings.bootstrap_kubeconfig) {
            if String::from_utf8_lossy(&t)
                .lines()
                .any(|l| l.trim_start().starts_with("token:"))
            {
                out.push(finding(
                    "bootstrap-token-on-disk",
                    &settings.bootstrap_kubeconfig,
                    "users[].user.token",
                    "the node holds its own certificate; the bootstrap token is still readable on disk".into(),
                    "remove the bootstrap kubeconfig (nodectld no longer needs it; see docs/security.md) and bound the token's lifetime",
                    None,
                ));
            }
        }
    }
    out.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.id.cmp(&b.id))
            .then(a.path.cmp(&b.path))
    });
    out
}

/// `--flag=value` pairs of the first container's command and args in a static pod manifest.
fn apiserver_flags(manifest: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_saphyr::from_str(manifest).unwrap_or_default();
    let c = &v["spec"]["containers"][0];
    let words = c["command"]
        .as_array()
        .into_iter()
        .chain(c["args"].as_array())
        .flatten()
        .filter_map(|w| w.as_str());
    words
        .filter_map(|w| {
            w.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Applies the safe remedies, logging each; returns what was done.
pub fn fix(
    root: &Root,
    findings: &[Finding],
    relabel: &dyn Fn(&Path) -> anyhow::Result<()>,
) -> Vec<String> {
    let mut done = Vec::new();
    for f in findings {
        let real = root.path(&f.path);
        let r = match &f.remedy {
            None => continue,
            Some(Remedy::Remove) => std::fs::remove_file(&real).map_err(anyhow::Error::from),
            Some(Remedy::Chmod { mode }) => {
                std::fs::set_permissions(&real, std::fs::Permissions::from_mode(*mode))
                    .map_err(anyhow::Error::from)
            }
            Some(Remedy::Relabel) => relabel(&f.path),
        };
        let line = match r {
            Ok(()) => format!(
                "fixed {} {}: {:?}",
                f.id,
                f.path.display(),
                f.remedy.as_ref().expect("a remedy")
            ),
            Err(e) => format!("could not fix {} {}: {e:#}", f.id, f.path.display()),
        };
        tracing::warn!(check = %f.id, path = %f.path.display(), "audit --fix: {line}");
        done.push(line);
    }
    done
}

/// The exit code scripts gate on: 0 clean, 2 medium/low findings only, 3 a high finding.
pub fn exit_code(findings: &[Finding]) -> i32 {
    match findings.iter().map(|f| f.severity).max() {
        None => 0,
        Some(Severity::High) => 3,
        Some(_) => 2,
    }
}

/// For people: one block per finding.
pub fn render(findings: &[Finding]) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    if findings.is_empty() {
        let _ = writeln!(o, "No findings ({} checks).", CHECKS.len());
        return o;
    }
    for f in findings {
        let sev = format!("{:?}", f.severity).to_uppercase();
        let _ = writeln!(o, "{sev:6} {}  {} ({})", f.id, f.path.display(), f.field);
        let _ = writeln!(o, "       {}", f.evidence);
        let _ = writeln!(o, "       fix: {}", f.fix);
    }
    let high = findings
        .iter()
        .filter(|f| f.severity == Severity::High)
        .count();
    let _ = writeln!(o, "{} finding(s), {high} high.", findings.len());
    o
}
