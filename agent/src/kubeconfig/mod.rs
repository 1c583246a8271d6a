//! Reading kubeconfigs: Typhoon's bootstrap kubeconfig (one cluster with
//! `certificate-authority-data`, one user with a token, one context *without a name*, no
//! `current-context`) and ordinary ones.
//!
//! kube's typed `Kubeconfig` requires every context to be named, which kubelet's loader does not,
//! so the YAML is read with the parser kube uses into a value, nameless contexts get the empty
//! name kubelet assumes, and the value is then deserialized into kube's types.

use std::path::Path;

use base64::Engine as _;
use kube::config::Kubeconfig;

use crate::root::Root;

/// A kubeconfig that cannot be read, parsed or used.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct KubeconfigError {
    /// The kubeconfig's path.
    pub file: String,
    /// What is wrong with it.
    pub message: String,
}

fn err(file: &Path, message: impl Into<String>) -> KubeconfigError {
    KubeconfigError {
        file: file.display().to_string(),
        message: message.into(),
    }
}

/// Parses a kubeconfig's text. `file` is for errors.
pub fn parse(text: &str, file: &Path) -> Result<Kubeconfig, KubeconfigError> {
    // A kubeconfig carries credentials: no error quotes it (the parser's messages carry a snippet
    // of the source by default); line and column only.
    let mut v: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| {
        err(
            file,
            match e.location() {
                Some(l) => format!("not valid YAML (line {}, column {})", l.line(), l.column()),
                None => "not valid YAML".to_string(),
            },
        )
    })?;
    if !v.is_object() {
        return Err(err(
            file,
            "not a kubeconfig (expected a mapping with clusters, users, contexts)",
        ));
    }
    for section in ["contexts", "clusters", "users"] {
        if let Some(items) = v.get_mut(section).and_then(|s| s.as_array_mut()) {
            for item in items {
                if let Some(o) = item.as_object_mut() {
                    o.entry("name")
                        .or_insert_with(|| serde_json::Value::String(String::new()));
                }
            }
        }
    }
    serde_json::from_value(v).map_err(|e| {
        err(
            file,
            format!("not a kubeconfig: {}", redact(&e.to_string())),
        )
    })
}

/// A message with every value serde quotes left out: double-quoted strings (a refused value,
/// which in a kubeconfig may be a token or a key; quoted as Rust's `Debug` does, so a `\"` inside
/// does not end it) and an unknown variant's name in backticks. Field names stay, in backticks.
fn redact(message: &str) -> String {
    let mut out = String::new();
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        let value = c == '"' || (c == '`' && out.ends_with("variant "));
        out.push(c);
        if !value {
            continue;
        }
        out.push('…');
        out.push(c);
        // to the closing quote (an unclosed one leaves out the rest)
        while let Some(d) = chars.next() {
            if d == '\\' {
                chars.next();
            } else if d == c {
                break;
            }
        }
    }
    out
}

/// The cluster kubelet would use: the current context's, else the only context's, else the only
/// cluster.
pub(crate) fn cluster<'k>(
    kc: &'k Kubeconfig,
    file: &Path,
) -> Result<&'k kube::config::NamedCluster, KubeconfigError> {
    let context = match &kc.current_context {
        Some(name) => Some(
            kc.contexts
                .iter()
                .find(|c| &c.name == name)
                .ok_or_else(|| {
                    err(
                        file,
                        format!("current-context {name:?} is not among the contexts"),
                    )
                })?,
        ),
        None if kc.contexts.len() == 1 => kc.contexts.first(),
        None => None,
    };
    let name = match context.and_then(|c| c.context.as_ref()) {
        Some(c) => c.cluster.clone(),
        None if kc.clusters.len() == 1 => kc.clusters[0].name.clone(),
        None => {
            return Err(err(
                file,
                format!(
                    "{} clusters and no current-context: cannot tell which one kubelet uses",
                    kc.clusters.len()
                ),
            ))
        }
    };
    kc.clusters.iter().find(|c| c.name == name).ok_or_else(|| {
        err(
            file,
            format!("context names cluster {name:?}, which is not defined"),
        )
    })
}

/// A client for a kubeconfig on the node, with what it talks to.
pub(crate) struct Connection {
    pub client: kube::Client,
    pub server: String,
    /// The cluster CA (PEM): the only trust root.
    pub ca: Vec<u8>,
}

/// A kube client from the kubeconfig at `node_path`: Typhoon's nameless context accepted,
/// certificate and key files (node paths, links followed) read through the root and handed to
/// the client as data. `retry`: kube's retries of 429/503/504 (off for the Eviction API, whose
/// 429 is an answer).
pub(crate) async fn connect(
    root: &Root,
    node_path: &Path,
    retry: bool,
) -> Result<Connection, KubeconfigError> {
    let text = crate::util::bounded::read_to_string(
        &root.path(node_path),
        crate::util::bounded::MAX_INPUT_BYTES,
    )
    .map_err(|e| err(node_path, format!("cannot read: {e}")))?;
    let mut kc = parse(&text, node_path)?;
    let ca = cluster_ca(root, node_path)?;
    let server = cluster(&kc, node_path)?
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .ok_or_else(|| err(node_path, "the cluster has no server"))?;
    for user in kc
        .auth_infos
        .iter_mut()
        .filter_map(|a| a.auth_info.as_mut())
    {
        let b64 = |p: &str| -> Result<String, KubeconfigError> {
            let bytes = root
                .read(p)
                .map_err(|e| err(node_path, format!("{p}: {e}")))?;
            Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
        };
        if let Some(p) = user.client_certificate.take() {
            user.client_certificate_data = Some(b64(&p)?);
        }
        if let Some(p) = user.client_key.take() {
            user.client_key_data = Some(b64(&p)?.into());
        }
    }
    let client = client(kc, retry)
        .await
        .map_err(|e| err(node_path, e.to_string()))?;
    Ok(Connection { client, server, ca })
}

/// A kube client for a parsed kubeconfig: its current context, else its only (or first) one,
/// as kubelet's loader picks it. `retry`: kube's retries of 429/503/504.
pub async fn client(kc: Kubeconfig, retry: bool) -> Result<kube::Client, ClientError> {
    let context = kc
        .current_context
        .clone()
        .or_else(|| kc.contexts.first().map(|c| c.name.clone()));
    let opts = kube::config::KubeConfigOptions {
        context,
        ..Default::default()
    };
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &opts).await?;
    cfg.default_retry = retry;
    Ok(kube::Client::try_from(cfg)?)
}

/// Why no client could be made of a parsed kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig does not describe a usable client (context, credentials).
    #[error("{0}")]
    Config(#[from] kube::config::KubeconfigError),
    /// The client could not be built (TLS set-up).
    #[error("{0}")]
    Client(#[from] kube::Error),
}

/// The cluster CA certificates (PEM) of the kubeconfig at `node_path`: from
/// `certificate-authority-data`, or the `certificate-authority` file (relative to the kubeconfig).
pub(crate) fn cluster_ca(root: &Root, node_path: &Path) -> Result<Vec<u8>, KubeconfigError> {
    let real = root.path(node_path);
    let text = crate::util::bounded::read_to_string(&real, crate::util::bounded::MAX_INPUT_BYTES)
        .map_err(|e| err(node_path, format!("cannot read: {e}")))?;
    let kc = parse(&text, node_path)?;
    let named = cluster(&kc, node_path)?;
    let c = named.cluster.as_ref().ok_or_else(|| {
        err(
            node_path,
            format!("cluster {:?} has no `cluster` section", named.name),
        )
    })?;
    let pem = if let Some(data) = &c.certificate_authority_data {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| {
                err(
                    node_path,
                    format!(
                        "clusters[{:?}].certificate-authority-data is not base64: {e}",
                        named.name
                    ),
                )
            })?
    } else if let Some(file) = &c.certificate_authority {
        let p = node_path.parent().unwrap_or(Path::new("/")).join(file);
        crate::util::bounded::read(&root.path(&p), crate::util::bounded::MAX_INPUT_BYTES).map_err(
            |e| {
                err(
                    node_path,
                    format!("certificate-authority {}: {e}", p.display()),
                )
            },
        )?
    } else {
        return Err(err(
            node_path,
            format!(
                "cluster {:?} has neither certificate-authority-data nor certificate-authority",
                named.name
            ),
        ));
    };
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(err(
            node_path,
            format!(
                "cluster {:?}: the certificate authority is not a PEM certificate",
                named.name
            ),
        ));
    }
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

    /// serde quotes a refused value as `Debug` does: an escaped quote inside does not end it
    /// (the malformed corpus found `users: ..\"SECRET...` quoted back); an unknown variant's
    /// name is a value too; field names stay.
    #[test]
    fn redaction_leaves_out_every_quoted_value_whole() {
        let m = r#"invalid type: string "..\\\"SECRET-1", expected a sequence"#;
        assert_eq!(
            redact(m),
            r#"invalid type: string "…", expected a sequence"#
        );
        let m = "unknown variant `SECRET-2`, expected one of `Never`, missing field `name`";
        assert_eq!(
            redact(m),
            "unknown variant `…`, expected one of `Never`, missing field `name`"
        );
        assert_eq!(redact(r#"bad "SECRET-3"#), r#"bad "…""#, "unclosed");
        let e = parse("users: ..\\\"SECRET-4", Path::new("/k")).unwrap_err();
        assert!(!e.to_string().contains("SECRET"), "{e}");
    }

    fn typhoon_bootstrap(ca_b64: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: {ca_b64}\nusers:\n- name: kubelet\n  user:\n    token: abcdef.0123456789abcdef\ncontexts:\n- context:\n    cluster: local\n    user: kubelet\n"
        )
    }

    use crate::root::scratch_with as root_with;

    #[test]
    fn reads_typhoons_nameless_context() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(CA);
        let kc = parse(
            &typhoon_bootstrap(&b64),
            Path::new("/etc/kubernetes/kubeconfig"),
        )
        .unwrap();
        assert_eq!(kc.contexts.len(), 1);
        assert_eq!(kc.contexts[0].name, "");
        let (_d, r) = root_with("/etc/kubernetes/kubeconfig", &typhoon_bootstrap(&b64));
        assert_eq!(
            cluster_ca(&r, Path::new("/etc/kubernetes/kubeconfig")).unwrap(),
            CA.as_bytes()
        );
    }

    #[test]
    fn reads_a_ca_file_relative_to_the_kubeconfig_and_honours_current_context() {
        let text = "apiVersion: v1\nclusters:\n- name: a\n  cluster:\n    server: https://a\n    certificate-authority: ca-a.crt\n- name: b\n  cluster:\n    server: https://b\n    certificate-authority: ca-b.crt\ncontexts:\n- name: ctx-a\n  context:\n    cluster: a\n- name: ctx-b\n  context:\n    cluster: b\ncurrent-context: ctx-b\n";
        let (_d, r) = root_with("/etc/kubernetes/kubeconfig", text);
        std::fs::write(r.path("/etc/kubernetes/ca-b.crt"), CA).unwrap();
        assert_eq!(
            cluster_ca(&r, Path::new("/etc/kubernetes/kubeconfig")).unwrap(),
            CA.as_bytes()
        );
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let p = Path::new("/etc/kubernetes/kubeconfig");
        let (_d, r) = root_with(
            "/etc/kubernetes/kubeconfig",
            &typhoon_bootstrap("not*base64"),
        );
        let e = cluster_ca(&r, p).unwrap_err().to_string();
        assert!(
            e.starts_with("/etc/kubernetes/kubeconfig: ")
                && e.contains("certificate-authority-data is not base64"),
            "{e}"
        );
        let (_d, r) = root_with("/etc/kubernetes/kubeconfig", "clusters: [");
        assert!(cluster_ca(&r, p)
            .unwrap_err()
            .to_string()
            .contains("not valid YAML"));
        let two = "clusters:\n- name: a\n  cluster: {server: \"https://x\"}\n- name: b\n  cluster: {server: \"https://y\"}\n";
        let (_d, r) = root_with("/etc/kubernetes/kubeconfig", two);
        let e = cluster_ca(&r, p).unwrap_err().to_string();
        assert!(e.contains("2 clusters and no current-context"), "{e}");
        let (_d, r) = root_with(
            "/etc/kubernetes/kubeconfig",
            &typhoon_bootstrap(&base64::engine::general_purpose::STANDARD.encode("hello")),
        );
        assert!(cluster_ca(&r, p)
            .unwrap_err()
            .to_string()
            .contains("not a PEM certificate"));
    }

    /// A malformed kubeconfig's error names the file and where, never its content: the token
    /// would reach the journal and `GetStatus` (every local user may call it).
    #[test]
    fn errors_never_quote_the_credentials() {
        let token = "abcdef.0123456789abcdef";
        for text in [
            format!("users:\n- name: kubelet\n  user:\n    token: \"{token}\n"),
            format!("users:\n- name: kubelet\n  user:\n    token: {token}\n    : [\n"),
            format!("users: \"{token}\"\n"),
            format!("users:\n- user:\n    token: [\"{token}\"]\n"),
        ] {
            let e = parse(&text, Path::new("/etc/kubernetes/kubeconfig"))
                .unwrap_err()
                .to_string();
            assert!(!e.contains("0123456789abcdef"), "{e}");
            assert!(e.starts_with("/etc/kubernetes/kubeconfig: not"), "{e}");
        }
        assert_eq!(
            redact("invalid type: string \"secret\", expected `x`"),
            "invalid type: string \"…\", expected `x`"
        );
    }
}
