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

mod trust;

use trust::{ca_certificates, named_file, read_trusted, refuse_unsafe};

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
    parse_with(text, file, |_| Ok(()))
}

/// [`parse`], with `check` looking at the parsed YAML before it becomes kube's types (which
/// would drop what they do not know).
fn parse_with(
    text: &str,
    file: &Path,
    check: impl FnOnce(&serde_json::Value) -> Result<(), KubeconfigError>,
) -> Result<Kubeconfig, KubeconfigError> {
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
    check(&v)?;
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
/// does not end it), and in backticks an unknown variant's name and a refused number, boolean or
/// character (a numeric token is a scalar serde quotes so). Field names stay, in backticks.
fn redact(message: &str) -> String {
    let mut out = String::new();
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        let value = c == '"'
            || (c == '`'
                && [
                    "variant ",
                    "integer ",
                    "floating point ",
                    "boolean ",
                    "character ",
                ]
                .iter()
                .any(|w| out.ends_with(w)));
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

/// Where the node's client certificate and key live (kubelet's `--cert-dir`): the only place a
/// kubeconfig nodectld reads may name for them.
pub const NODE_PKI: &str = "/var/lib/kubelet/pki";

/// A kubeconfig nodectld may act on, with the cluster it names.
pub(crate) struct Loaded {
    pub kc: Kubeconfig,
    /// The cluster's server URL.
    pub server: String,
    /// The cluster CA (PEM, certificates only): the only trust root.
    pub ca: Vec<u8>,
}

/// Reads the kubeconfig at `node_path` as nodectld acts on it: trusted (see [`trusted_file`]),
/// nothing unsafe in it ([`refuse_unsafe`]), its cluster's server and CA (inline, or a trusted
/// file beside the kubeconfig), and client certificate files only from [`NODE_PKI`].
pub(crate) fn load(root: &Root, node_path: &Path) -> Result<Loaded, KubeconfigError> {
    let bytes = read_trusted(root, node_path, "kubeconfig")?;
    let text = String::from_utf8(bytes).map_err(|_| err(node_path, "not UTF-8 text"))?;
    let kc = parse_with(&text, node_path, |v| refuse_unsafe(v, node_path))?;
    let named = cluster(&kc, node_path)?;
    let c = named.cluster.as_ref().ok_or_else(|| {
        err(
            node_path,
            format!("cluster {:?} has no `cluster` section", named.name),
        )
    })?;
    let server = c
        .server
        .clone()
        .ok_or_else(|| err(node_path, "the cluster has no server"))?;
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
        let dir = node_path.parent().unwrap_or(Path::new("/"));
        let p = named_file(node_path, "certificate-authority", file, dir)?;
        read_trusted(root, &p, &format!("certificate-authority {}", p.display()))
            .map_err(|e| err(node_path, e.message))?
    } else {
        return Err(err(
            node_path,
            format!(
                "cluster {:?} has neither certificate-authority-data nor certificate-authority",
                named.name
            ),
        ));
    };
    let ca = ca_certificates(&pem, node_path, &named.name)?;
    for (field, p) in kc
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
        .flat_map(|u| {
            [
                ("client-certificate", u.client_certificate.as_deref()),
                ("client-key", u.client_key.as_deref()),
            ]
        })
    {
        if let Some(p) = p {
            named_file(node_path, field, p, Path::new(NODE_PKI))?;
        }
    }
    Ok(Loaded { kc, server, ca })
}

/// The bootstrap kubeconfig, held to the node kubeconfig once there is one: the node holds
/// credentials for that server and CA, and a later bootstrap file (which a container with a
/// hostPath on its directory could create once the operator removed it) may name neither
/// another server nor another CA. An operator moves the node (a new cluster, a rotated CA) by
/// removing the node kubeconfig, which only root can.
pub(crate) fn load_bootstrap(
    root: &Root,
    bootstrap: &Path,
    node: &Path,
) -> Result<Loaded, KubeconfigError> {
    let b = load(root, bootstrap)?;
    if std::fs::symlink_metadata(root.path(node)).is_err() {
        return Ok(b);
    }
    let n = load(root, node)?;
    if n.server != b.server || n.ca != b.ca {
        return Err(err(
            bootstrap,
            format!(
                "its {} differs from the one the node holds credentials for ({}): not used; \
                 to move the node to it, remove {} as root",
                if n.server != b.server {
                    "server"
                } else {
                    "cluster CA"
                },
                node.display(),
                node.display()
            ),
        ));
    }
    Ok(b)
}

/// A client for a kubeconfig on the node, with what it talks to.
pub(crate) struct Connection {
    pub client: kube::Client,
    pub server: String,
    /// The cluster CA (PEM): the only trust root.
    pub ca: Vec<u8>,
}

/// A kube client from the kubeconfig at `node_path`, read as [`load`] reads it: Typhoon's
/// nameless context accepted, certificate and key files read through the root and handed to
/// the client as data. `retry`: kube's retries of 429/503/504 (off for the Eviction API, whose
/// 429 is an answer).
pub(crate) async fn connect(
    root: &Root,
    node_path: &Path,
    retry: bool,
) -> Result<Connection, KubeconfigError> {
    let loaded = load(root, node_path)?;
    connect_loaded(root, node_path, loaded, retry).await
}

/// [`connect`] with a kubeconfig already loaded (the bootstrap kubeconfig, held to the node's).
pub(crate) async fn connect_loaded(
    root: &Root,
    node_path: &Path,
    loaded: Loaded,
    retry: bool,
) -> Result<Connection, KubeconfigError> {
    let Loaded { mut kc, server, ca } = loaded;
    for user in kc
        .auth_infos
        .iter_mut()
        .filter_map(|a| a.auth_info.as_mut())
    {
        // Each file as `load` checked it (the same resolution: against the kubeconfig's
        // directory, kept to the node's pki directory), read through one descriptor: no
        // symlink on the way, at the entry only one naming a file beside it (the current
        // certificate's link), a regular file, bounded.
        let b64 = |field: &str, p: &str| -> Result<String, KubeconfigError> {
            let path = named_file(node_path, field, p, Path::new(NODE_PKI))?;
            let cannot =
                |why: String| err(node_path, format!("{field}: {}: {why}", path.display()));
            let f = crate::fsio::open_regular_or_sibling(root, &path)
                .map_err(|e| cannot(e.to_string()))?
                .ok_or_else(|| cannot("not found".into()))?;
            let bytes = crate::util::bounded::read_from(&f, crate::util::bounded::MAX_INPUT_BYTES)
                .map_err(|e| cannot(e.to_string()))?;
            Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
        };
        if let Some(p) = user.client_certificate.take() {
            user.client_certificate_data = Some(b64("client-certificate", &p)?);
        }
        if let Some(p) = user.client_key.take() {
            user.client_key_data = Some(b64("client-key", &p)?.into());
        }
    }
    // Only the checked CA is trusted (a file named in the kubeconfig is not read again).
    for c in kc.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        c.certificate_authority = None;
        c.certificate_authority_data = Some(base64::engine::general_purpose::STANDARD.encode(&ca));
    }
    let client = client(kc, retry)
        .await
        .map_err(|e| err(node_path, e.to_string()))?;
    Ok(Connection { client, server, ca })
}

/// The User-Agent of every request nodectl makes to the API server.
pub const USER_AGENT: &str = concat!("nodectld/", env!("CARGO_PKG_VERSION"));

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
    // Its own User-Agent: a `system:node:<name>` request is told from kubelet's in the audit
    // log and by API Priority and Fairness (kube sets none of its own).
    cfg.headers.push((
        hyper::header::USER_AGENT,
        hyper::header::HeaderValue::from_static(USER_AGENT),
    ));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A real self-signed certificate (a CA must parse as X.509), and its key's PEM.
    fn ca() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    const BOOT: &str = "/etc/kubernetes/kubeconfig";

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
        let (ca, _) = ca();
        let b64 = b64(&ca);
        let kc = parse(
            &typhoon_bootstrap(&b64),
            Path::new("/etc/kubernetes/kubeconfig"),
        )
        .unwrap();
        assert_eq!(kc.contexts.len(), 1);
        assert_eq!(kc.contexts[0].name, "");
        let (_d, r) = root_with("/etc/kubernetes/kubeconfig", &typhoon_bootstrap(&b64));
        let loaded = load(&r, Path::new(BOOT)).unwrap();
        assert_eq!(loaded.ca, ca.as_bytes());
        assert_eq!(loaded.server, "https://10.0.0.1:6443");
    }

    #[test]
    fn reads_a_ca_file_relative_to_the_kubeconfig_and_honours_current_context() {
        let text = "apiVersion: v1\nclusters:\n- name: a\n  cluster:\n    server: https://a\n    certificate-authority: ca-a.crt\n- name: b\n  cluster:\n    server: https://b\n    certificate-authority: ca-b.crt\ncontexts:\n- name: ctx-a\n  context:\n    cluster: a\n- name: ctx-b\n  context:\n    cluster: b\ncurrent-context: ctx-b\n";
        let (_d, r) = root_with("/etc/kubernetes/kubeconfig", text);
        let (ca, _) = ca();
        std::fs::write(r.path("/etc/kubernetes/ca-b.crt"), &ca).unwrap();
        let loaded = load(&r, Path::new(BOOT)).unwrap();
        assert_eq!(loaded.ca, ca.as_bytes());
        assert_eq!(loaded.server, "https://b");
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let p = Path::new("/etc/kubernetes/kubeconfig");
        let (_d, r) = root_with(
            "/etc/kubernetes/kubeconfig",
            &typhoon_bootstrap("not*base64"),
        );
        let e = load(&r, p).err().unwrap().to_string();
        assert!(
            e.starts_with("/etc/kubernetes/kubeconfig: ")
                && e.contains("certificate-authority-data is not base64"),
            "{e}"
        );
        let (_d, r) = root_with("/etc/kubernetes/kubeconfig", "clusters: [");
        assert!(load(&r, p)
            .err()
            .unwrap()
            .to_string()
            .contains("not valid YAML"));
        let two = "clusters:\n- name: a\n  cluster: {server: \"https://x\"}\n- name: b\n  cluster: {server: \"https://y\"}\n";
        let (_d, r) = root_with("/etc/kubernetes/kubeconfig", two);
        let e = load(&r, p).err().unwrap().to_string();
        assert!(e.contains("2 clusters and no current-context"), "{e}");
        let (_d, r) = root_with(
            "/etc/kubernetes/kubeconfig",
            &typhoon_bootstrap(&base64::engine::general_purpose::STANDARD.encode("hello")),
        );
        let e = load(&r, p).err().unwrap().to_string();
        assert!(
            e.contains("not PEM certificates only (no certificate)"),
            "{e}"
        );
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

    fn set_label(r: &Root, node: &str, label: &str) {
        let real =
            std::ffi::CString::new(r.path(node).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: NUL-terminated path and name, a buffer of the given length.
        let rc = unsafe {
            libc::lsetxattr(
                real.as_ptr(),
                c"security.selinux".as_ptr(),
                label.as_ptr().cast(),
                label.len(),
                0,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }

    /// Issue 37, 1: a bootstrap kubeconfig is used only when root alone could have placed it:
    /// owned by root, nobody else may write it, not of a type containers write (a container
    /// with a hostPath on /etc/kubernetes creates `container_file_t:s0:cX,cY` files), and not
    /// a symlink. Each is refused naming the file and why; the policy's own types are fine.
    #[test]
    fn a_kubeconfig_root_alone_could_not_have_placed_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let (ca, _) = ca();
        let text = typhoon_bootstrap(&b64(&ca));
        let p = Path::new(BOOT);
        let (_d, r) = root_with(BOOT, &text);
        for ok in [
            "system_u:object_r:etc_t:s0",
            "system_u:object_r:kubernetes_file_t:s0",
        ] {
            set_label(&r, BOOT, ok);
            load(&r, p).unwrap();
        }
        for planted in [
            "system_u:object_r:container_file_t:s0:c12,c34",
            "system_u:object_r:container_file_t:s0",
            "system_u:object_r:container_ro_file_t:s0",
        ] {
            set_label(&r, BOOT, planted);
            let e = load(&r, p).err().unwrap().to_string();
            assert!(
                e.starts_with("/etc/kubernetes/kubeconfig: kubeconfig: labeled ")
                    && e.contains("a type containers write: not trusted"),
                "{e}"
            );
        }
        // A level with many categories makes a label of kilobytes: read whole, still refused;
        // a label that does not parse is not trusted either.
        let cats: Vec<String> = (0..1024).step_by(2).map(|c| format!("c{c}")).collect();
        let long = format!("system_u:object_r:container_file_t:s0:{}", cats.join(","));
        assert!(long.len() > 2000);
        set_label(&r, BOOT, &long);
        let e = load(&r, p).err().unwrap().to_string();
        assert!(e.contains("a type containers write: not trusted"), "{e}");
        set_label(&r, BOOT, "not a label");
        let e = load(&r, p).err().unwrap().to_string();
        assert!(e.contains("its label does not parse: not trusted"), "{e}");
        set_label(&r, BOOT, "system_u:object_r:etc_t:s0");
        std::os::unix::fs::chown(r.path(BOOT), Some(1000), Some(1000)).unwrap();
        let e = load(&r, p).err().unwrap().to_string();
        assert!(
            e.contains("owned by uid 1000, not root: not trusted"),
            "{e}"
        );
        std::os::unix::fs::chown(r.path(BOOT), Some(0), Some(0)).unwrap();
        for mode in [0o664, 0o646] {
            std::fs::set_permissions(r.path(BOOT), std::fs::Permissions::from_mode(mode)).unwrap();
            let e = load(&r, p).err().unwrap().to_string();
            assert!(e.contains("writable by group or others"), "{e}");
        }
        std::fs::set_permissions(r.path(BOOT), std::fs::Permissions::from_mode(0o644)).unwrap();
        load(&r, p).unwrap();
        std::fs::rename(r.path(BOOT), r.path("/etc/kubernetes/real")).unwrap();
        std::os::unix::fs::symlink("real", r.path(BOOT)).unwrap();
        let e = load(&r, p).err().unwrap().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    /// Issue 37, 1: kube's client would run an `exec` plugin or `auth-provider` command as root,
    /// read a `tokenFile` anywhere, skip TLS verification or use a proxy: each is refused by
    /// field, its value never quoted.
    #[test]
    fn plugins_token_files_proxies_and_unverified_tls_are_refused() {
        let (ca, _) = ca();
        let base = typhoon_bootstrap(&b64(&ca));
        let user = "    token: abcdef.0123456789abcdef\n";
        let server = "    server: https://10.0.0.1:6443\n";
        for (from, to, field) in [
            (user, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /tmp/SECRET-x\n", "users[0].user.exec"),
            (user, "    auth-provider:\n      name: gcp\n      config: {cmd-path: /tmp/SECRET-x}\n", "users[0].user.auth-provider"),
            (user, "    tokenFile: /var/lib/kubelet/SECRET-x\n", "users[0].user.tokenFile"),
            (user, "    token: x\n    as: system:SECRET-x\n", "users[0].user.as"),
            (server, "    server: https://10.0.0.1:6443\n    insecure-skip-tls-verify: true\n", "clusters[0].cluster.insecure-skip-tls-verify"),
            (server, "    server: https://10.0.0.1:6443\n    proxy-url: http://SECRET-x:3128\n", "clusters[0].cluster.proxy-url"),
        ] {
            let text = base.replace(from, to);
            assert_ne!(text, base);
            let (_d, r) = root_with(BOOT, &text);
            let e = load(&r, Path::new(BOOT)).err().unwrap().to_string();
            assert!(e.contains(&format!("{field}: not accepted")), "{e}");
            assert!(!e.contains("SECRET"), "{e}");
        }
        // A server not on https:// would carry the token in the clear.
        let (_d, r) = root_with(BOOT, &base.replace("https://10.0.0.1", "http://10.0.0.1"));
        let e = load(&r, Path::new(BOOT)).err().unwrap().to_string();
        assert!(
            e.contains("clusters[0].cluster.server: not https://"),
            "{e}"
        );
        // `insecure-skip-tls-verify: false` asks for nothing.
        let (_d, r) = root_with(
            BOOT,
            &base.replace(
                server,
                "    server: https://10.0.0.1:6443\n    insecure-skip-tls-verify: false\n",
            ),
        );
        load(&r, Path::new(BOOT)).unwrap();
    }

    /// Issue 37, 1: `certificate-authority` pointing at the node's key (cert and key in one PEM)
    /// would have been copied to /etc/kubernetes/ca.crt (0644). A CA file is read only from the
    /// kubeconfig's own directory, without `..` or a symlink, trusted as the kubeconfig is, and
    /// only when it holds certificates and nothing else; client certificates only from the
    /// node's certificate directory.
    #[test]
    fn files_a_kubeconfig_names_are_kept_to_their_places_and_kinds() {
        let (ca, key) = ca();
        let with_ca_file = |f: &str| {
            typhoon_bootstrap("X").replace(
                "    certificate-authority-data: X\n",
                &format!("    certificate-authority: {f}\n"),
            )
        };
        for (f, why) in [
            (
                "/var/lib/kubelet/pki/kubelet-client-current.pem",
                "is not a file in /etc/kubernetes",
            ),
            (
                "../../var/lib/kubelet/pki/kubelet-client-current.pem",
                "is not a file in /etc/kubernetes",
            ),
            ("pki/../../shadow", "is not a file in /etc/kubernetes"),
        ] {
            let (_d, r) = root_with(BOOT, &with_ca_file(f));
            let e = load(&r, Path::new(BOOT)).err().unwrap().to_string();
            assert!(e.contains(why), "{f}: {e}");
        }
        let (_d, r) = root_with(BOOT, &with_ca_file("both.pem"));
        std::fs::write(r.path("/etc/kubernetes/both.pem"), format!("{ca}{key}")).unwrap();
        let e = load(&r, Path::new(BOOT)).err().unwrap().to_string();
        assert!(e.contains("it holds a PRIVATE KEY block"), "{e}");
        assert!(!e.contains("BEGIN"), "{e}");
        // Text around the certificates is not carried on to ca.crt.
        std::fs::write(
            r.path("/etc/kubernetes/both.pem"),
            format!("SECRET-x\n{ca}trailing"),
        )
        .unwrap();
        let got = load(&r, Path::new(BOOT)).unwrap().ca;
        assert_eq!(String::from_utf8(got).unwrap().trim(), ca.trim());
        set_label(
            &r,
            "/etc/kubernetes/both.pem",
            "system_u:object_r:container_file_t:s0:c1,c2",
        );
        let e = load(&r, Path::new(BOOT)).err().unwrap().to_string();
        assert!(
            e.contains("certificate-authority /etc/kubernetes/both.pem: labeled"),
            "{e}"
        );
        // inline data holding a key is refused the same way
        let (_d, r) = root_with(BOOT, &typhoon_bootstrap(&b64(&format!("{ca}{key}"))));
        let e = load(&r, Path::new(BOOT)).err().unwrap().to_string();
        assert!(e.contains("PRIVATE KEY block"), "{e}");
        let user = "    token: abcdef.0123456789abcdef\n";
        for (cert, ok) in [
            ("/var/lib/kubelet/pki/kubelet-client-current.pem", true),
            ("/etc/kubernetes/pki/apiserver.key", false),
            ("/var/lib/kubelet/pki/../../../etc/shadow", false),
        ] {
            let text = typhoon_bootstrap(&b64(&ca)).replace(
                user,
                &format!("    client-certificate: {cert}\n    client-key: {cert}\n"),
            );
            let (_d, r) = root_with(BOOT, &text);
            let got = load(&r, Path::new(BOOT));
            assert_eq!(got.is_ok(), ok, "{cert}");
            if let Err(e) = got {
                assert!(e.to_string().contains("client-certificate: "), "{e}");
            }
        }
    }

    /// Issue 51, 5: the client certificate and key are read where `load` checked them: a
    /// relative path against the kubeconfig's directory (it was read against `/`), through
    /// the pki directory held, following at the entry only a link to a file beside it (the
    /// current certificate's, absolute as kubelet makes it, or a bare name); a link out of the
    /// directory is refused (it was followed anywhere).
    #[tokio::test]
    async fn client_files_are_read_where_load_checked_them_never_through_a_link_out() {
        let (cert, key) = ca();
        let (ca, _) = ca();
        let node = "/var/lib/kubelet/kubeconfig";
        let connect_with = |link_to: &str, named: &str| {
            let text = crate::csr::node_kubeconfig("https://10.0.0.1:6443", ca.as_bytes(), named);
            let (d, r) = root_with(node, &text);
            for dir in ["/var/lib/kubelet/pki", "/etc/kubernetes/pki"] {
                std::fs::create_dir_all(r.path(dir)).unwrap();
            }
            for f in [
                "/var/lib/kubelet/pki/kubelet-client-2026.pem",
                "/etc/kubernetes/pki/apiserver.pem",
            ] {
                std::fs::write(r.path(f), format!("{cert}{key}")).unwrap();
            }
            std::os::unix::fs::symlink(
                link_to,
                r.path("/var/lib/kubelet/pki/kubelet-client-current.pem"),
            )
            .unwrap();
            (d, r)
        };
        for (link_to, named, ok) in [
            (
                "/var/lib/kubelet/pki/kubelet-client-2026.pem",
                "/var/lib/kubelet/pki/kubelet-client-current.pem",
                true,
            ),
            (
                "kubelet-client-2026.pem",
                "pki/kubelet-client-current.pem",
                true,
            ),
            (
                "/etc/kubernetes/pki/apiserver.pem",
                "/var/lib/kubelet/pki/kubelet-client-current.pem",
                false,
            ),
            (
                "../../../../etc/kubernetes/pki/apiserver.pem",
                "pki/kubelet-client-current.pem",
                false,
            ),
        ] {
            let (_d, r) = connect_with(link_to, named);
            let got = connect(&r, Path::new(node), false).await;
            assert_eq!(
                got.is_ok(),
                ok,
                "{named} -> {link_to}: {:?}",
                got.err().map(|e| e.to_string())
            );
            if let Err(e) = got {
                let e = e.to_string();
                assert!(
                    e.contains("only one naming a file in its own directory is followed"),
                    "{e}"
                );
                assert!(!e.contains("BEGIN"), "{e}");
            }
        }
    }

    /// Issue 37, 1: once the node has its own kubeconfig, a bootstrap kubeconfig naming another
    /// server or CA is not used (a planted one would point the re-bootstrap at a server that
    /// answers 401 and hand out its own CA); the same server and CA with another token is.
    #[test]
    fn a_bootstrap_kubeconfig_is_held_to_the_server_and_ca_the_node_holds() {
        let (other, _) = ca();
        let (ca, _) = ca();
        let node = "/var/lib/kubelet/kubeconfig";
        let node_text = crate::csr::node_kubeconfig(
            "https://10.0.0.1:6443",
            ca.as_bytes(),
            "/var/lib/kubelet/pki/kubelet-client-current.pem",
        );
        let (_d, r) = root_with(node, &node_text);
        let write_boot = |t: &str| {
            std::fs::create_dir_all(r.path("/etc/kubernetes")).unwrap();
            std::fs::write(r.path(BOOT), t).unwrap();
        };
        write_boot(
            &typhoon_bootstrap(&b64(&ca))
                .replace("abcdef.0123456789abcdef", "zzzzzz.0123456789abcdef"),
        );
        load_bootstrap(&r, Path::new(BOOT), Path::new(node)).unwrap();
        write_boot(&typhoon_bootstrap(&b64(&other)));
        let e = load_bootstrap(&r, Path::new(BOOT), Path::new(node))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("its cluster CA differs from the one the node holds credentials for"),
            "{e}"
        );
        assert!(
            e.contains("remove /var/lib/kubelet/kubeconfig as root"),
            "{e}"
        );
        write_boot(&typhoon_bootstrap(&b64(&ca)).replace("10.0.0.1", "203.0.113.9"));
        let e = load_bootstrap(&r, Path::new(BOOT), Path::new(node))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("its server differs"), "{e}");
        std::fs::remove_file(r.path(node)).unwrap();
        load_bootstrap(&r, Path::new(BOOT), Path::new(node)).unwrap();
    }

    /// Issue 37, 12: serde quotes a refused number, boolean or character in backticks: a numeric
    /// token is left out as a string is.
    #[test]
    fn refused_numbers_and_booleans_are_left_out_too() {
        for text in [
            "users: 98765432109876\n",
            "users:\n- user: 98765432109876\n",
            "users:\n- user: {token: [98765432109876]}\n",
        ] {
            let e = parse(text, Path::new(BOOT)).err().unwrap().to_string();
            assert!(!e.contains("98765432109876"), "{e}");
        }
        assert_eq!(
            redact("invalid type: integer `123`, expected a string; floating point `1.5`; boolean `true`; character `x`; missing field `name`"),
            "invalid type: integer `…`, expected a string; floating point `…`; boolean `…`; character `…`; missing field `name`"
        );
    }
}
