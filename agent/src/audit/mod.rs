//! `nodectl audit`: the node-level findings of a security review of a production cluster, each
//! with an id, a severity, the evidence (path, field) and the fix. Reads only; `--fix` applies
//! the fixes that are safe ([`fix`]), each logged.
//!
//! `snapshot`: every read, done once; `checks`: the checks, pure over the snapshot; `fix`: the
//! remedies, through the one write path; `certs`: certificate comparisons.

mod certs;
mod checks;
mod fix;
mod snapshot;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(crate) use fix::fix;

use crate::config::Settings;
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
    /// Give the file (or directory) to this uid and gid with this mode: the control plane's
    /// keys, which its static pods (uid 65534) must still read after the fix.
    Own {
        /// The owner.
        uid: u32,
        /// The group.
        gid: u32,
        /// The mode.
        mode: u32,
    },
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
pub(crate) const CHECKS: &[(&str, Severity, &str)] = &[
    ("etcd-credentials-on-worker", Severity::High, "etcd client or server keys/certificates on a worker (known etcd paths, or issued by the etcd CA)"),
    ("shared-etcd-kubernetes-ca", Severity::High, "the etcd CA and the Kubernetes CA are the same certificate or key, or the kubelet's certificate was issued by the etcd CA"),
    ("apiserver-admission", Severity::High, "kube-apiserver without NodeRestriction in --enable-admission-plugins"),
    ("apiserver-authorization", Severity::High, "kube-apiserver --authorization-mode without Node and RBAC"),
    ("bootstrap-token-unbounded", Severity::Medium, "bootstrap token auth on, and the bootstrap token Secret has no expiration"),
    ("etcd-client-cert-auth", Severity::High, "etcd does not require client certificates (ETCD_CLIENT_CERT_AUTH)"),
    ("etcd-listens-everywhere", Severity::Medium, "etcd's client URLs listen on every interface without client certificate authentication, so every node can reach it"),
    ("key-mode", Severity::High, "a private key (or kubeconfig with credentials) readable by group or others"),
    ("key-dir-mode", Severity::Medium, "a directory holding private keys open to others"),
    ("control-plane-key-owner", Severity::High, "on a controller, a key, kubeconfig or directory in /etc/kubernetes/pki the control plane's static pods (the uid kube-apiserver's manifest runs as; 65534 in Typhoon's) cannot read"),
    ("key-label-container-readable", Severity::High, "a node credential labeled container_file_t: a container with a hostPath mount can read it"),
    ("bootstrap-token-on-disk", Severity::Medium, "the bootstrap token is still on disk although the node holds its own certificate"),
    ("end-of-life-os", Severity::High, "CoreOS Container Linux (end of life: no security updates)"),
    ("zincati-uncoordinated", Severity::Medium, "with reboot.strategy fleet-lock, Zincati's configuration has it reboot without asking nodectld (or Zincati cannot read it): nodes may reboot together, undrained"),
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

/// Runs every check against the node at `root` (read only). `label_of` reads a file's SELinux
/// context (None where SELinux is absent).
pub(crate) fn audit(
    root: &Root,
    settings: &Settings,
    os_release: &str,
    label_of: &dyn Fn(&Path) -> Option<String>,
) -> Vec<Finding> {
    let snapshot = snapshot::Snapshot::read(root, settings, os_release, label_of);
    let mut out = checks::all(&snapshot);
    out.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.id.cmp(&b.id))
            .then(a.path.cmp(&b.path))
    });
    out
}

/// The checks that need no settings (the OS).
pub(crate) fn audit_os(os_release: &str) -> Vec<Finding> {
    checks::os(os_release)
}

/// The node's os-release (`/etc`, then `/usr/lib`), empty when neither is readable.
pub(crate) fn os_release(root: &Root) -> String {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| {
            crate::util::bounded::read_to_string(
                &root.path(p),
                crate::util::bounded::MAX_SMALL_BYTES,
            )
            .ok()
        })
        .unwrap_or_default()
}

/// The audit of the node at `root`, with its own os-release and the labels on disk.
pub(crate) fn run_on(root: &Root, settings: &Settings) -> Vec<Finding> {
    let label_of = |p: &Path| {
        nodectl_selinux::relabel::stored_label(&root.path(p))
            .ok()
            .flatten()
    };
    audit(root, settings, &os_release(root), &label_of)
}

/// The exit code scripts gate on: 0 clean, 2 medium/low findings only, 3 a high finding.
pub(crate) fn exit_code(findings: &[Finding]) -> i32 {
    match findings.iter().map(|f| f.severity).max() {
        None => 0,
        Some(Severity::High) => 3,
        Some(_) => 2,
    }
}

/// For people: one block per finding.
pub(crate) fn render(findings: &[Finding]) -> String {
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
