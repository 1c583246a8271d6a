//! What makes a kubeconfig one nodectld acts on: who could have written it (owner, mode, label,
//! checked on the descriptor read), what it may ask for (a token or a client certificate; no
//! plugin, token file, proxy or unverified TLS), where the files it names may be, and that its
//! CA is certificates only.

use std::path::{Component, Path, PathBuf};

use super::{err, KubeconfigError};
use crate::root::Root;

/// Whether root alone could have written the file open as `f`: owned by root, writable by
/// nobody else, and not of a type containers write. A container with a hostPath on
/// `/etc/kubernetes` (a tree nodectld labels `container_file_t:s0` for kubelet's static pods)
/// runs as root and creates files there: their label is a container type (the container's own
/// `container_file_t:s0:cX,cY`, or one it relabeled within its types), which no file
/// provisioning or an operator places has (Ignition, `install`, restorecon give the policy's
/// type: `etc_t`, or container-selinux's `kubernetes_file_t`). Checked on the descriptor, so
/// what is checked is what is read.
pub(super) fn trusted_file(f: &std::fs::File) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if m.uid() != 0 {
        return Err(format!(
            "owned by uid {}, not root: not trusted (who may write it could point the node at \
             another server); place it as root, e.g. `install -o root -g root -m 0600 FILE PATH`",
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "writable by group or others (mode {:04o}): not trusted; `chmod go-w` it",
            m.mode() & 0o7777
        ));
    }
    if let Some(label) = label_of(f).map_err(|why| format!("{why}: not trusted"))? {
        if label.is_container_readable() {
            return Err(format!(
                "labeled {label}, a type containers write: not trusted (a container with a \
                 hostPath may have placed it); if you placed it, `restorecon` it"
            ));
        }
    }
    Ok(())
}

/// The file's SELinux label (`security.selinux`), read on the descriptor, whatever its length
/// (a level with many categories makes a label of kilobytes): `Ok(None)` when it has none (no
/// SELinux), an error when one is there but cannot be read or parsed (not trusted then).
fn label_of(f: &std::fs::File) -> Result<Option<nodectl_selinux::Context>, String> {
    use std::os::fd::AsRawFd;
    let get = |buf: &mut [u8]| {
        // SAFETY: a valid descriptor, a NUL-terminated name and a buffer of the given length
        // (a null pointer with length 0 asks for the size).
        let n = unsafe {
            libc::fgetxattr(
                f.as_raw_fd(),
                c"security.selinux".as_ptr(),
                if buf.is_empty() {
                    std::ptr::null_mut()
                } else {
                    buf.as_mut_ptr().cast()
                },
                buf.len(),
            )
        };
        usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
    };
    for _ in 0..3 {
        let size = match get(&mut []) {
            Ok(n) => n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::ENOTSUP)) => {
                return Ok(None)
            }
            Err(e) => return Err(format!("its label cannot be read: {e}")),
        };
        if size > 64 << 10 {
            return Err(format!("its label is {size} bytes long"));
        }
        let mut buf = vec![0u8; size];
        match get(&mut buf) {
            Ok(n) => {
                let text = std::str::from_utf8(&buf[..n]).map_err(|_| "its label is not text")?;
                return text
                    .parse()
                    .map(Some)
                    .map_err(|_| "its label does not parse".to_string());
            }
            // (relabeled between the two calls, to a longer label)
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(format!("its label cannot be read: {e}")),
        }
    }
    Err("its label keeps changing".into())
}

/// Opens a file nodectld trusts (see [`trusted_file`]) and reads it, bounded.
pub(super) fn read_trusted(
    root: &Root,
    node_path: &Path,
    what: &str,
) -> Result<Vec<u8>, KubeconfigError> {
    let f = crate::fsio::open_regular(root, node_path)
        .map_err(|e| err(node_path, format!("{what}: cannot open: {e}")))?
        .ok_or_else(|| err(node_path, format!("{what}: not found")))?;
    trusted_file(&f).map_err(|m| err(node_path, format!("{what}: {m}")))?;
    crate::util::bounded::read_from(&f, crate::util::bounded::MAX_INPUT_BYTES)
        .map_err(|e| err(node_path, format!("{what}: cannot read: {e}")))
}

/// A user may authenticate with these only; anything else (an `exec` plugin or `auth-provider`
/// nodectld would run as root, a `tokenFile` anywhere on the node, impersonation, basic auth)
/// is refused.
const USER_KEYS: &[&str] = &[
    "token",
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
];

/// Refuses what a kubeconfig nodectld reads may not ask for: credential plugins and token
/// files, TLS without verification, a proxy. kube's client honours each of them (an `exec`
/// plugin runs as root); the field is named, never its value.
pub(super) fn refuse_unsafe(v: &serde_json::Value, file: &Path) -> Result<(), KubeconfigError> {
    for (i, u) in items(v, "users") {
        if let Some(user) = u.get("user").and_then(|x| x.as_object()) {
            if let Some(k) = user.keys().find(|k| !USER_KEYS.contains(&k.as_str())) {
                return Err(err(
                    file,
                    format!(
                        "users[{i}].user.{k}: not accepted (nodectld authenticates with a token \
                         or a client certificate only, and never runs a credential plugin)"
                    ),
                ));
            }
        }
    }
    for (i, c) in items(v, "clusters") {
        let Some(cluster) = c.get("cluster").and_then(|x| x.as_object()) else {
            continue;
        };
        if cluster
            .get("server")
            .and_then(|x| x.as_str())
            .is_some_and(|s| !s.starts_with("https://"))
        {
            return Err(err(
                file,
                format!("clusters[{i}].cluster.server: not https:// (a token or a certificate request would travel unprotected)"),
            ));
        }
        if cluster
            .get("insecure-skip-tls-verify")
            .is_some_and(|x| x != &serde_json::Value::Bool(false))
        {
            return Err(err(
                file,
                format!(
                    "clusters[{i}].cluster.insecure-skip-tls-verify: not accepted (the API \
                     server is always verified against the cluster CA)"
                ),
            ));
        }
        if cluster.contains_key("proxy-url") {
            return Err(err(
                file,
                format!("clusters[{i}].cluster.proxy-url: not accepted (nodectld talks to the API server directly)"),
            ));
        }
    }
    Ok(())
}

fn items<'v>(
    v: &'v serde_json::Value,
    section: &str,
) -> impl Iterator<Item = (usize, &'v serde_json::Value)> {
    v.get(section)
        .and_then(|s| s.as_array())
        .into_iter()
        .flatten()
        .enumerate()
}

/// A file a kubeconfig names, as a node path: relative to the kubeconfig's directory, with no
/// `..`, and inside `allowed`.
pub(super) fn named_file(
    file: &Path,
    field: &str,
    value: &str,
    allowed: &Path,
) -> Result<PathBuf, KubeconfigError> {
    let dir = file.parent().unwrap_or(Path::new("/"));
    let p = dir.join(value);
    let normal = p
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !normal || !p.starts_with(allowed) || p == allowed {
        return Err(err(
            file,
            format!(
                "{field}: {} is not a file in {} (the only place nodectld reads it from)",
                p.display(),
                allowed.display()
            ),
        ));
    }
    Ok(p)
}

/// The cluster CA as PEM certificates only: every block a `CERTIFICATE` that parses as X.509 (a
/// file holding a key is refused, never copied on as a CA).
pub(super) fn ca_certificates(
    pem: &[u8],
    file: &Path,
    cluster: &str,
) -> Result<Vec<u8>, KubeconfigError> {
    let bad = |why: &str| {
        err(
            file,
            format!("cluster {cluster:?}: the certificate authority is not PEM certificates only ({why})"),
        )
    };
    let mut out = String::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let block = block.map_err(|_| bad("a block is not PEM"))?;
        if block.label != "CERTIFICATE" {
            return Err(bad(&format!("it holds a {} block", block.label)));
        }
        block
            .parse_x509()
            .map_err(|_| bad("a certificate does not parse"))?;
        // Written anew from the parsed bytes: text around the blocks is not carried on to the
        // world-readable ca.crt.
        out.push_str(&pem_block(&block.contents));
    }
    if out.is_empty() {
        return Err(bad("no certificate"));
    }
    Ok(out.into_bytes())
}

/// A DER certificate as a PEM block (64-column base64).
fn pem_block(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}
