//! The checks, pure over a [`Snapshot`]: one function per finding family.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::snapshot::{Snapshot, APISERVER_MANIFEST, BOOTSTRAP_TOKEN_MANIFEST, ETCD_ENV};
use super::{finding, Finding, Remedy};
use crate::config::Role;
use crate::steps::CONTROL_PLANE_UID;

/// Where the control plane's keys and kubeconfigs live.
const CONTROL_PLANE_PKI: &str = "/etc/kubernetes/pki";

/// Every check, in no particular order (the caller sorts).
pub(super) fn all(s: &Snapshot) -> Vec<Finding> {
    let mut out = os(&s.os_release);
    shared_ca(s, &mut out);
    if s.role == Role::Worker {
        etcd_on_worker(s, &mut out);
    }
    if s.role == Role::Controller {
        apiserver(s, &mut out);
        etcd(s, &mut out);
    }
    keys(s, &mut out);
    bootstrap_token(s, &mut out);
    zincati(s, &mut out);
    out
}

/// Zincati rebooting the node without asking nodectld (or unable to read its configuration).
fn zincati(s: &Snapshot, out: &mut Vec<Finding>) {
    let Some(z) = &s.zincati else { return };
    let Some(problem) = &z.problem else { return };
    let (path, field) = if z.strategy.value != "fleet_lock" {
        (z.strategy.from.as_deref(), "updates.strategy")
    } else {
        (z.base_url.from.as_deref(), "updates.fleet_lock.base_url")
    };
    let path = if z.state == "unreadable" { None } else { path };
    out.push(finding(
        "zincati-uncoordinated",
        Path::new(path.unwrap_or("/etc/zincati/config.d")),
        field,
        problem.clone(),
        "remove the fragment named (or point its base_url at nodectld's reboot.listen), then systemctl restart zincati",
        None,
    ));
}

/// The checks that need no settings (the OS).
pub(super) fn os(os_release: &str) -> Vec<Finding> {
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

/// The etcd CA and the Kubernetes CA the same, or kubelet's certificate issued by etcd's CA.
fn shared_ca(s: &Snapshot, out: &mut Vec<Finding>) {
    for (kp, k) in &s.k8s_cas {
        if let Some((ep, _)) = s.etcd_cas.iter().find(|(_, e)| e.spki == k.spki) {
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
    if let Some((path, c)) = &s.kubelet_cert {
        if let Some((ep, e)) = s.etcd_cas.iter().find(|(_, e)| c.signed_by(e)) {
            out.push(finding(
                "shared-etcd-kubernetes-ca",
                path,
                "issuer",
                format!("the kubelet's certificate ({}) was issued by {} ({}): it works as an etcd client certificate", c.subject, e.subject, ep.display()),
                "sign kubelet certificates with the Kubernetes CA only; give etcd its own CA",
                None,
            ));
        }
    }
}

/// etcd credentials on a worker: in etcd's directories, named for etcd, or issued by an etcd CA.
fn etcd_on_worker(s: &Snapshot, out: &mut Vec<Finding>) {
    let mut seen: BTreeSet<&Path> = s.etcd_files.iter().map(|p| p.as_path()).collect();
    for f in &s.kube_files {
        let name = f.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Signed by an etcd CA found on the node, or (none found) named for etcd.
        let issued_by_etcd = f.certs.iter().any(|c| {
            c.subject != c.issuer
                && (s.etcd_cas.iter().any(|(_, e)| c.signed_by(e))
                    || c.issuer.to_lowercase().contains("etcd"))
        });
        if name.starts_with("etcd-client") || name.starts_with("etcd-") || issued_by_etcd {
            seen.insert(&f.path);
        }
    }
    for f in seen {
        out.push(finding(
            "etcd-credentials-on-worker",
            f,
            "file",
            format!(
                "{} is an etcd credential on worker {}",
                f.display(),
                s.node_name
            ),
            "remove it (nodectl audit --fix does): workers never talk to etcd",
            Some(Remedy::Remove),
        ));
    }
}

/// kube-apiserver's admission plugins, authorization modes and bootstrap token lifetime.
fn apiserver(s: &Snapshot, out: &mut Vec<Finding>) {
    let Some(text) = &s.apiserver_manifest else {
        return;
    };
    let manifest = Path::new(APISERVER_MANIFEST);
    let flags = apiserver_flags(text);
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
    let unbounded = s
        .bootstrap_token_manifest
        .as_ref()
        .is_some_and(|t| !t.contains("expiration"));
    if flag("--enable-bootstrap-token-auth").as_deref() == Some("true") && unbounded {
        out.push(finding(
            "bootstrap-token-unbounded",
            Path::new(BOOTSTRAP_TOKEN_MANIFEST),
            "stringData.expiration",
            "bootstrap token auth is on and the token Secret has no expiration".into(),
            "bound what the token can do rather than its life alone: workers that join later (an autoscaling group started from the same config) carry this token, so an expiration stops them joining unless the token is rotated with their configs (a new token Secret and `terraform apply` of the workers' Ignition) before it expires; with no autoscaling, give the Secret an expiration (the tokencleaner removes it)",
            None,
        ));
    }
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

/// etcd's client certificate requirement and where it listens.
fn etcd(s: &Snapshot, out: &mut Vec<Finding>) {
    let Some(text) = &s.etcd_env else {
        return;
    };
    let env = Path::new(ETCD_ENV);
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
    // Every interface is Typhoon's choice (its firewall lets only controllers reach 2379) and
    // harmless while etcd asks every client for a certificate its CA signed: flagged only
    // without that (nodectl's own shipped etcd.env listens so, with client certificates).
    let cert_auth = var("ETCD_CLIENT_CERT_AUTH").as_deref() == Some("true")
        && var("ETCD_TRUSTED_CA_FILE").is_some_and(|f| !f.is_empty());
    if let Some(urls) = var("ETCD_LISTEN_CLIENT_URLS").filter(|_| !cert_auth) {
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

/// The remedy for a key or key directory opened too wide: 0600/0700; under
/// `/etc/kubernetes/pki` on a controller, also given to the control plane's uid, whose static
/// pods read it (a chmod alone would lock them out of a Typhoon-laid-out controller).
fn tighten(s: &Snapshot, path: &Path, mode: u32) -> Remedy {
    let uid = control_plane_uid(s);
    if s.role == Role::Controller && path.starts_with(CONTROL_PLANE_PKI) {
        Remedy::Own {
            uid,
            gid: uid,
            mode,
        }
    } else {
        Remedy::Chmod { mode }
    }
}

/// Keys and credentials: their modes, their directories' modes, their labels.
fn keys(s: &Snapshot, out: &mut Vec<Finding>) {
    let mut dirs_flagged = BTreeSet::new();
    for f in &s.key_files {
        if f.mode & 0o077 != 0 {
            out.push(finding(
                "key-mode",
                &f.path,
                "mode",
                format!(
                    "{} is {:04o} and holds a private key or credentials",
                    f.path.display(),
                    f.mode
                ),
                "chmod 0600 (nodectl audit --fix does; on a controller's pki also chown 65534, the control plane's uid)",
                Some(tighten(s, &f.path, 0o600)),
            ));
        }
        if let Some((parent, m, _)) = &f.dir {
            if m & 0o007 != 0
                && parent != Path::new("/etc/kubernetes")
                && dirs_flagged.insert(parent.clone())
            {
                out.push(finding(
                    "key-dir-mode",
                    parent,
                    "mode",
                    format!("{} is {m:04o} and holds private keys", parent.display()),
                    "chmod 0700 (nodectl audit --fix does; on a controller's pki also chown 65534)",
                    Some(tighten(s, parent, 0o700)),
                ));
            }
        }
        control_plane_owner(s, f, &mut dirs_flagged, out);
        if let Some(l) = f.label.as_ref().filter(|l| container_readable(l)) {
            out.push(finding(
                "key-label-container-readable",
                &f.path,
                "SELinux label",
                format!("{} is labeled {l}", f.path.display()),
                "give it the policy default label (nodectl audit --fix does; nodectld keeps it so)",
                Some(Remedy::Relabel),
            ));
        }
    }
}

/// On a controller, a key or kubeconfig in `/etc/kubernetes/pki` (or that directory) owned by
/// another uid than the control plane's static pods (65534) with no group or other access: the
/// control plane cannot read it (nodectl's layout before, or a hand-made `chown root`).
fn control_plane_owner(
    s: &Snapshot,
    f: &super::snapshot::KeyFile,
    dirs_flagged: &mut BTreeSet<PathBuf>,
    out: &mut Vec<Finding>,
) {
    let uid = control_plane_uid(s);
    // (root reads whatever it owns or not)
    if s.role != Role::Controller || !f.path.starts_with(CONTROL_PLANE_PKI) || uid == 0 {
        return;
    }
    if f.uid != uid && f.mode & 0o077 == 0 {
        out.push(finding(
            "control-plane-key-owner",
            &f.path,
            "owner",
            format!(
                "{} is owned by uid {} ({:04o}): the control plane's static pods (uid {uid}) cannot read it",
                f.path.display(),
                f.uid,
                f.mode
            ),
            "chown 65534:65534, mode 0600 (nodectl audit --fix does)",
            Some(tighten(s, &f.path, 0o600)),
        ));
    }
    if let Some((parent, m, owner)) = &f.dir {
        if *owner != uid
            && m & 0o005 != 0o005
            && parent.starts_with(CONTROL_PLANE_PKI)
            && dirs_flagged.insert(parent.clone())
        {
            out.push(finding(
                "control-plane-key-owner",
                parent,
                "owner",
                format!(
                    "{} is owned by uid {owner} ({m:04o}): the control plane's static pods (uid {uid}) cannot enter it",
                    parent.display()
                ),
                "chown 65534:65534, mode 0700 (nodectl audit --fix does)",
                Some(tighten(s, parent, 0o700)),
            ));
        }
    }
}

/// The uid the control plane's static pods run as, from kube-apiserver's manifest as kubelet
/// reads it: the container's `securityContext.runAsUser`, else the pod's, else the image's user
/// (root for the upstream images; a kubeadm-style manifest sets none); without a manifest, the
/// uid nodectl's layout gives the control plane's keys (terraform-render-bootstrap's manifests
/// run as 65534).
pub(super) fn control_plane_uid(s: &Snapshot) -> u32 {
    let Some(text) = &s.apiserver_manifest else {
        return CONTROL_PLANE_UID;
    };
    let v: serde_json::Value = serde_saphyr::from_str(text).unwrap_or_default();
    let spec = &v["spec"];
    let uid = spec["containers"][0]["securityContext"]["runAsUser"]
        .as_u64()
        .or_else(|| spec["securityContext"]["runAsUser"].as_u64());
    uid.and_then(|u| u32::try_from(u).ok()).unwrap_or(0)
}

/// A label of a type containers read (the container policy's content types, not only
/// `container_file_t`).
fn container_readable(label: &str) -> bool {
    label
        .parse::<nodectl_selinux::Context>()
        .is_ok_and(|c| c.is_container_readable())
}

/// The bootstrap token still on disk after the node got its own certificate.
fn bootstrap_token(s: &Snapshot, out: &mut Vec<Finding>) {
    if let (true, Some(p)) = (s.holds_valid_certificate, &s.bootstrap_token_file) {
        out.push(finding(
            "bootstrap-token-on-disk",
            p,
            "users[].user.token",
            "the node holds its own certificate; the bootstrap token is still readable on disk".into(),
            "remove the bootstrap kubeconfig (nodectld no longer needs it; see docs/security.md) and bound the token's lifetime",
            None,
        ));
    }
}
