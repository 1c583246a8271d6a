//! Typhoon's bootstrap assets bundle: one file of `##### <relative path>` records, each followed
//! by its content. Parsed and checked here without I/O; nothing is placed unless the whole bundle
//! is valid.
//!
//! Content is what Typhoon's layout script (`awk '/#####/ {filename=$2; next} {print > filename}'`)
//! would write: every line of the record, each ending in a newline.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use nodectl_selinux::Context;

use crate::config::Role;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub path: String,
    pub content: Vec<u8>,
    /// Line of the `#####` marker, 1-based.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) struct BundleError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub record: Option<String>,
    pub message: String,
}

impl fmt::Display for BundleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if let Some(r) = &self.record {
            write!(f, ": record {r:?}")?;
        }
        write!(f, ": {}; nothing was placed", self.message)
    }
}

#[cfg(test)]
use super::layout::CONTROL_PLANE;
pub(crate) use super::layout::{Rule, CONTROL_PLANE_CA, CONTROL_PLANE_UID, TYPHOON_LAYOUT};

const MARKER: &str = "#####";

/// The largest bundle read (Typhoon's controller assets are about 100 KiB).
pub(crate) const MAX_BUNDLE_BYTES: usize = 16 << 20;

/// Why a record's path (or the bundle's text) is refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct PathError(String);

impl From<&str> for PathError {
    fn from(s: &str) -> Self {
        PathError(s.into())
    }
}

impl From<String> for PathError {
    fn from(s: String) -> Self {
        PathError(s)
    }
}

fn check_path(p: &str) -> Result<(), PathError> {
    if p.is_empty() {
        return Err("empty path".into());
    }
    if p.starts_with('/') {
        return Err("absolute path; records must be relative".into());
    }
    if p.contains('\\') || p.contains('\0') {
        return Err("path contains a backslash or NUL".into());
    }
    for c in p.split('/') {
        match c {
            "" => return Err("empty path component".into()),
            "." | ".." => return Err(format!("path component {c:?} escapes the bundle").into()),
            _ if c.starts_with('-') => return Err("a component starts with '-'".into()),
            _ => {}
        }
    }
    Ok(())
}

/// The bundle's text: not empty, not over the cap, UTF-8.
fn text_of(bytes: &[u8]) -> Result<&str, PathError> {
    if bytes.is_empty() {
        return Err("the bundle is empty".into());
    }
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(format!(
            "{} bytes, more than a bundle may hold ({MAX_BUNDLE_BYTES})",
            bytes.len()
        )
        .into());
    }
    std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}").into())
}

/// Parses and checks the records' shape (not yet their destinations).
pub fn parse(bytes: &[u8], file: &Path) -> Result<Vec<Record>, BundleError> {
    let err = |line: Option<usize>, record: Option<&str>, msg: String| BundleError {
        file: file.to_path_buf(),
        line,
        record: record.map(String::from),
        message: msg,
    };
    let text = text_of(bytes).map_err(|m| err(None, None, m.0))?;
    let mut records: Vec<Record> = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if let Some(after) = line.strip_prefix(MARKER) {
            let mut words = after.split_whitespace();
            let path = words.next().ok_or_else(|| {
                err(
                    Some(n),
                    None,
                    "marker without a path (truncated record?)".into(),
                )
            })?;
            if words.next().is_some() {
                return Err(err(
                    Some(n),
                    Some(path),
                    "marker line has more than one path".into(),
                ));
            }
            check_path(path).map_err(|m| err(Some(n), Some(path), m.0))?;
            if !seen.insert(path.to_string()) {
                return Err(err(Some(n), Some(path), "appears twice".into()));
            }
            records.push(Record {
                path: path.to_string(),
                content: Vec::new(),
                line: n,
            });
        } else {
            let Some(r) = records.last_mut() else {
                return Err(err(
                    Some(n),
                    None,
                    "content before the first `##### <path>` record".into(),
                ));
            };
            r.content.extend_from_slice(line.as_bytes());
            r.content.push(b'\n');
        }
    }
    for r in &records {
        if r.content.is_empty() {
            return Err(err(
                Some(r.line),
                Some(&r.path),
                "no content (truncated record?)".into(),
            ));
        }
        let t = String::from_utf8_lossy(&r.content);
        let begins = t.matches("-----BEGIN ").count();
        let ends = t.matches("-----END ").count();
        if begins != ends {
            return Err(err(
                Some(r.line),
                Some(&r.path),
                format!("PEM is cut off ({begins} BEGIN, {ends} END lines): truncated record"),
            ));
        }
    }
    Ok(records)
}

/// What `pattern` leaves of `path` (the part kept below the destination), if it matches.
fn matches<'p>(pattern: &str, path: &'p str) -> Option<&'p str> {
    if let Some(dir) = pattern.strip_suffix("/**") {
        return path
            .strip_prefix(dir)?
            .strip_prefix('/')
            .filter(|r| !r.is_empty());
    }
    if let Some(dir) = pattern.strip_suffix("/*") {
        let rest = path.strip_prefix(dir)?.strip_prefix('/')?;
        return (!rest.is_empty() && !rest.contains('/')).then_some(rest);
    }
    if let Some(prefix) = pattern.strip_suffix('*') {
        let (dir, name_prefix) = prefix.rsplit_once('/').unwrap_or(("", prefix));
        let rest = if dir.is_empty() {
            path
        } else {
            path.strip_prefix(dir)?.strip_prefix('/')?
        };
        return (rest.starts_with(name_prefix) && !rest.contains('/')).then_some(rest);
    }
    (pattern == path).then(|| path.rsplit('/').next().unwrap_or(path))
}

/// Holds a key or a credential: mode 0600 whatever the rule's file mode. Fails closed: under
/// `/etc/kubernetes/pki` only a file that holds nothing but certificates or public keys is
/// public; elsewhere (manifests) a file is secret when it names a key, holds a private key,
/// client key data, a token, or is a Secret.
pub(crate) fn is_secret(dest: &Path, content: &[u8]) -> bool {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let t = String::from_utf8_lossy(content);
    if name.ends_with(".key")
        || t.contains("PRIVATE KEY-----")
        || t.contains("client-key-data:")
        || t.contains("\n    token:")
        || t.contains("token: ")
        || t.lines().any(|l| l.trim() == "kind: Secret")
    {
        return true;
    }
    dest.starts_with("/etc/kubernetes/pki") && !only_public_pem(&t)
}

/// Text that is one or more PEM blocks of certificates or public keys, and nothing else.
fn only_public_pem(t: &str) -> bool {
    let mut blocks = 0;
    let mut inside: Option<&str> = None;
    for l in t.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match (
            inside,
            l.strip_prefix("-----BEGIN ")
                .and_then(|r| r.strip_suffix("-----")),
        ) {
            (None, Some(label @ ("CERTIFICATE" | "PUBLIC KEY"))) => inside = Some(label),
            (None, _) => return false,
            (Some(label), _) if l == format!("-----END {label}-----") => {
                inside = None;
                blocks += 1;
            }
            (Some(_), _) => {}
        }
    }
    blocks > 0 && inside.is_none()
}

/// One file to place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub record: String,
    pub dest: PathBuf,
    pub owner: &'static str,
    pub mode: u32,
    pub label: Option<Context>,
    pub content: Vec<u8>,
}

/// One directory the placements need, with its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DirPlacement {
    pub dest: PathBuf,
    pub owner: &'static str,
    pub mode: u32,
    pub label: Option<Context>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub dirs: Vec<DirPlacement>,
    pub files: Vec<Placement>,
}

/// Every directory between the rule's base and the file gets the rule's metadata (once).
fn add_dirs(dirs: &mut Vec<DirPlacement>, rule: &Rule, dest: &Path, label: &Option<Context>) {
    let base = Path::new(rule.base);
    let mut d = dest.parent();
    while let Some(dir) = d {
        if !dir.starts_with(base) {
            break;
        }
        if !dirs.iter().any(|x| x.dest == dir) {
            dirs.push(DirPlacement {
                dest: dir.to_path_buf(),
                owner: rule.owner,
                mode: rule.dir_mode,
                label: label.clone(),
            });
        }
        d = dir.parent();
    }
}

/// Maps every record to its destination; any unknown record, or material the role must not
/// hold, fails the whole bundle.
pub(crate) fn plan(
    records: &[Record],
    layout: &[Rule],
    role: Role,
    bootstrap_kubeconfig: &Path,
    file: &Path,
) -> Result<Plan, BundleError> {
    let err = |r: &Record, msg: String| BundleError {
        file: file.to_path_buf(),
        line: Some(r.line),
        record: Some(r.path.clone()),
        message: msg,
    };
    let mut out = Plan::default();
    let mut dirs: Vec<DirPlacement> = Vec::new();
    // What kubelet starts pods from, renamed after everything else (`Rule::starts_pods`),
    // whatever the bundle's order (Terraform writes its records sorted by name, so
    // `static-manifests/` comes before `tls/`).
    let mut pods: Vec<Placement> = Vec::new();
    for r in records {
        let Some((rule, rest)) = layout
            .iter()
            .find_map(|rule| matches(rule.pattern, &r.path).map(|rest| (rule, rest)))
        else {
            let known: Vec<&str> = layout.iter().map(|r| r.pattern).collect();
            return Err(err(
                r,
                format!("unknown destination (known: {})", known.join(", ")),
            ));
        };
        if rule.etcd && role == Role::Worker {
            return Err(err(r, "etcd credentials are refused on a worker: workers never hold etcd client or server keys".into()));
        }
        if rule.controller_only && role == Role::Worker {
            return Err(err(
                r,
                "control-plane material is refused on a worker".into(),
            ));
        }
        let label = rule
            .label
            .map(|l| l.parse::<Context>().expect("layout labels are valid"));
        let dest = match rule.dest {
            Some(d) => Path::new(d).join(rest),
            None if rule.pattern.contains('*') => {
                return Err(err(r, "unknown destination: no rule places etcd files other than peer*, server* and etcd-client*".into()))
            }
            None => bootstrap_kubeconfig.to_path_buf(),
        };
        if rule.dest.is_some() {
            add_dirs(&mut dirs, rule, &dest, &label);
        }
        if let Some(first) = out.files.iter().chain(&pods).find(|p| p.dest == dest) {
            return Err(err(
                r,
                format!(
                    "goes to {}, as {} does: two records may not share a destination",
                    dest.display(),
                    first.record
                ),
            ));
        }
        let mode = if is_secret(&dest, &r.content) {
            rule.secret_mode
        } else {
            rule.file_mode
        };
        let placement = Placement {
            record: r.path.clone(),
            dest,
            owner: rule.owner,
            mode,
            label,
            content: r.content.clone(),
        };
        if rule.starts_pods {
            pods.push(placement);
        } else {
            out.files.push(placement);
        }
    }
    out.files.extend(pods);
    // Parents before children.
    dirs.sort_by_key(|d| d.dest.components().count());
    out.dirs = dirs;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
    const KEY: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----";

    fn bundle(records: &[(&str, &str)]) -> Vec<u8> {
        // As Typhoon's Terraform writes it: join(format("##### %s\n%s", k, v), "\n").
        records
            .iter()
            .map(|(k, v)| format!("##### {k}\n{v}"))
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes()
    }

    fn f() -> &'static Path {
        Path::new("/var/lib/nodectl/inbox/assets")
    }

    fn controller_plan(b: &[u8]) -> Result<Plan, BundleError> {
        let r = parse(b, f())?;
        plan(
            &r,
            TYPHOON_LAYOUT,
            Role::Controller,
            Path::new("/etc/kubernetes/kubeconfig"),
            f(),
        )
    }

    #[test]
    fn parses_records_like_typhoons_awk() {
        let b = bundle(&[
            ("tls/k8s/ca.crt", CA),
            ("auth/admin.conf", "apiVersion: v1\nkind: Config"),
        ]);
        let r = parse(&b, f()).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].path, "tls/k8s/ca.crt");
        assert_eq!(
            String::from_utf8(r[0].content.clone()).unwrap(),
            format!("{CA}\n")
        );
        assert_eq!(r[1].content, b"apiVersion: v1\nkind: Config\n");
        assert_eq!(r[1].line, 5);
    }

    #[test]
    fn static_manifests_are_placed_after_every_file_a_pod_reads() {
        // Terraform's order (records sorted by name): static-manifests/ before tls/.
        let b = bundle(&[
            (
                "auth/admin.conf",
                "users:\n- user:\n    client-key-data: abc",
            ),
            ("manifests/coredns/deployment.yaml", "kind: Deployment"),
            ("static-manifests/kube-apiserver.yaml", "kind: Pod"),
            ("static-manifests/kube-scheduler.yaml", "kind: Pod"),
            ("tls/etcd/etcd-client.key", KEY),
            ("tls/k8s/apiserver.key", KEY),
            ("tls/k8s/ca.crt", CA),
        ]);
        let p = controller_plan(&b).unwrap();
        let records: Vec<&str> = p.files.iter().map(|x| x.record.as_str()).collect();
        assert_eq!(
            records,
            [
                "auth/admin.conf",
                "manifests/coredns/deployment.yaml",
                "tls/etcd/etcd-client.key",
                "tls/k8s/apiserver.key",
                "tls/k8s/ca.crt",
                "static-manifests/kube-apiserver.yaml",
                "static-manifests/kube-scheduler.yaml",
            ]
        );
    }

    #[test]
    fn lays_out_as_typhoon_does() {
        let b = bundle(&[
            ("tls/etcd/peer.crt", CA),
            ("tls/etcd/server.key", KEY),
            ("tls/etcd/etcd-client.crt", CA),
            ("tls/k8s/ca.crt", CA),
            ("tls/k8s/ca.key", KEY),
            (
                "auth/admin.conf",
                "users:\n- user:\n    client-key-data: abc",
            ),
            ("static-manifests/kube-apiserver.yaml", "kind: Pod"),
            ("manifests/coredns/deployment.yaml", "kind: Deployment"),
            ("kubelet/kubeconfig", "users:\n- user:\n    token: abc.def"),
        ]);
        let p = controller_plan(&b).unwrap();
        let get = |rec: &str| p.files.iter().find(|x| x.record == rec).unwrap();
        assert_eq!(
            get("tls/etcd/peer.crt").dest,
            PathBuf::from("/etc/ssl/etcd/etcd/peer.crt")
        );
        assert_eq!(
            (
                get("tls/etcd/peer.crt").owner,
                get("tls/etcd/peer.crt").mode
            ),
            ("etcd", 0o600)
        );
        assert_eq!(
            get("tls/etcd/etcd-client.crt").dest,
            PathBuf::from("/etc/kubernetes/pki/etcd-client.crt")
        );
        assert_eq!(get("tls/k8s/ca.crt").mode, 0o644);
        assert_eq!(get("tls/k8s/ca.key").mode, 0o600);
        assert_eq!(get("auth/admin.conf").mode, 0o600);
        assert_eq!(
            get("static-manifests/kube-apiserver.yaml").dest,
            PathBuf::from("/etc/kubernetes/manifests/kube-apiserver.yaml")
        );
        assert_eq!(
            get("manifests/coredns/deployment.yaml").dest,
            PathBuf::from("/opt/bootstrap/assets/manifests/coredns/deployment.yaml")
        );
        assert_eq!(
            get("kubelet/kubeconfig").dest,
            PathBuf::from("/etc/kubernetes/kubeconfig")
        );
        assert_eq!(get("kubelet/kubeconfig").mode, 0o600);
        // Shared files: s0, no categories. Private ones (etcd, bootstrap assets, the bootstrap
        // token): no shared label.
        for x in &p.files {
            let private = x.dest.starts_with("/etc/ssl/etcd")
                || x.dest.starts_with("/opt/bootstrap")
                || x.dest == Path::new("/etc/kubernetes/kubeconfig");
            match &x.label {
                Some(l) => assert!(!private && l.is_shared_level(), "{x:?}"),
                None => assert!(private, "{x:?}"),
            }
        }
        let dir = |d: &str| p.dirs.iter().find(|x| x.dest == Path::new(d)).unwrap();
        assert_eq!(
            (
                dir("/etc/kubernetes/pki").mode,
                dir("/etc/kubernetes/pki").owner
            ),
            (0o700, CONTROL_PLANE)
        );
        // The control plane's keys and kubeconfigs: its uid's, 0600.
        for r in ["auth/admin.conf", "tls/k8s/ca.key"] {
            assert_eq!((get(r).owner, get(r).mode), (CONTROL_PLANE, 0o600), "{r}");
        }
        assert_eq!(
            (
                dir("/etc/ssl/etcd/etcd").mode,
                dir("/etc/ssl/etcd/etcd").owner
            ),
            (0o700, "etcd")
        );
        assert!(p
            .dirs
            .iter()
            .any(|x| x.dest == Path::new("/opt/bootstrap/assets/manifests/coredns")));
        let order: Vec<&Path> = p.dirs.iter().map(|d| d.dest.as_path()).collect();
        let i = |d: &str| order.iter().position(|x| *x == Path::new(d)).unwrap();
        assert!(
            i("/opt/bootstrap/assets/manifests") < i("/opt/bootstrap/assets/manifests/coredns")
        );
    }

    #[test]
    fn refuses_bad_bundles_with_file_line_and_record() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "the bundle is empty"),
            (
                b"hello\n##### tls/k8s/ca.crt\nx".to_vec(),
                "content before the first",
            ),
            (bundle(&[("../etc/shadow", "x")]), "escapes the bundle"),
            (bundle(&[("/etc/shadow", "x")]), "absolute path"),
            (bundle(&[("tls//k8s", "x")]), "empty path component"),
            (
                b"##### tls/k8s/ca.crt\n".to_vec(),
                "no content (truncated record?)",
            ),
            (
                format!("##### tls/k8s/ca.key\n{}", &KEY[..40]).into_bytes(),
                "PEM is cut off",
            ),
            (
                b"##### tls/k8s/ca.crt\nx\n#####".to_vec(),
                "marker without a path",
            ),
            (
                bundle(&[("tls/k8s/ca.crt", CA), ("tls/k8s/ca.crt", CA)]),
                "appears twice",
            ),
            (bundle(&[("secrets/x", "x")]), "unknown destination"),
            (
                bundle(&[("tls/etcd/ca.crt", CA)]),
                "no rule places etcd files",
            ),
        ];
        for (b, want) in cases {
            let e = controller_plan(&b).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} should contain {want:?}");
            assert!(e.starts_with("/var/lib/nodectl/inbox/assets"), "{e}");
            assert!(e.ends_with("nothing was placed"), "{e}");
        }
        let e = controller_plan(&bundle(&[("tls/k8s/ca.crt", CA), ("../x", "y")])).unwrap_err();
        assert_eq!((e.line, e.record.as_deref()), (Some(5), Some("../x")));
    }

    #[test]
    fn workers_refuse_etcd_and_control_plane_material() {
        let r = parse(
            &bundle(&[
                ("kubelet/kubeconfig", "x"),
                ("tls/etcd/etcd-client.key", KEY),
            ]),
            f(),
        )
        .unwrap();
        let e = plan(
            &r,
            TYPHOON_LAYOUT,
            Role::Worker,
            Path::new("/etc/kubernetes/kubeconfig"),
            f(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("etcd credentials are refused on a worker"),
            "{e}"
        );
        let r = parse(&bundle(&[("tls/k8s/ca.key", KEY)]), f()).unwrap();
        let e = plan(
            &r,
            TYPHOON_LAYOUT,
            Role::Worker,
            Path::new("/etc/kubernetes/kubeconfig"),
            f(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("control-plane material is refused on a worker"),
            "{e}"
        );
        let r = parse(&bundle(&[("kubelet/kubeconfig", "x")]), f()).unwrap();
        let p = plan(
            &r,
            TYPHOON_LAYOUT,
            Role::Worker,
            Path::new("/etc/kubernetes/kubeconfig"),
            f(),
        )
        .unwrap();
        assert_eq!(p.files.len(), 1);
    }

    #[test]
    fn pattern_matching() {
        assert_eq!(
            matches("tls/etcd/peer*", "tls/etcd/peer.key"),
            Some("peer.key")
        );
        assert_eq!(matches("tls/etcd/peer*", "tls/etcd/server.key"), None);
        assert_eq!(matches("tls/etcd/peer*", "tls/etcd/peer/x"), None);
        assert_eq!(matches("auth/*", "auth/a/b"), None);
        assert_eq!(
            matches("manifests/**", "manifests/a/b.yaml"),
            Some("a/b.yaml")
        );
        assert_eq!(matches("manifests/**", "manifests"), None);
        assert_eq!(
            matches("kubelet/kubeconfig", "kubelet/kubeconfig"),
            Some("kubeconfig")
        );
    }

    /// Modes fail closed: a pki file is public only when it holds nothing but certificates or
    /// public keys; a Secret or token anywhere is private (issue 14, item 9).
    #[test]
    fn only_certificates_and_public_keys_are_public() {
        let b = bundle(&[
            ("tls/k8s/ca.crt", CA),
            (
                "tls/k8s/service-account.pub",
                "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----",
            ),
            (
                "tls/k8s/token.yaml",
                "apiVersion: v1\nkind: Secret\nstringData:\n  id: abcdef",
            ),
            ("tls/k8s/extra.conf", "something: that is not a certificate"),
            ("tls/k8s/mixed.crt", &format!("{CA}\n{KEY}")),
            (
                "manifests/bootstrap-token.yaml",
                "kind: Secret\nstringData:\n  token-secret: x",
            ),
            ("manifests/coredns/service.yaml", "kind: Service"),
        ]);
        let p = plan(
            &parse(&b, f()).unwrap(),
            TYPHOON_LAYOUT,
            Role::Controller,
            Path::new("/etc/kubernetes/kubeconfig"),
            f(),
        )
        .unwrap();
        let mode = |rec: &str| p.files.iter().find(|x| x.record == rec).unwrap().mode;
        assert_eq!(mode("tls/k8s/ca.crt"), 0o644);
        assert_eq!(mode("tls/k8s/service-account.pub"), 0o644);
        assert_eq!(mode("tls/k8s/token.yaml"), 0o600);
        assert_eq!(mode("tls/k8s/extra.conf"), 0o600);
        assert_eq!(mode("tls/k8s/mixed.crt"), 0o600);
        assert_eq!(mode("manifests/bootstrap-token.yaml"), 0o600);
        assert_eq!(mode("manifests/coredns/service.yaml"), 0o644);
    }

    #[test]
    fn two_records_with_one_destination_and_oversized_bundles_are_refused() {
        let b = bundle(&[
            ("tls/etcd/etcd-client.key", KEY),
            ("tls/k8s/etcd-client.key", KEY),
        ]);
        let e = plan(
            &parse(&b, f()).unwrap(),
            TYPHOON_LAYOUT,
            Role::Controller,
            Path::new("/etc/kubernetes/kubeconfig"),
            f(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("two records may not share a destination")
                && e.contains("tls/etcd/etcd-client.key"),
            "{e}"
        );
        let big = vec![b'#'; MAX_BUNDLE_BYTES + 1];
        let e = parse(&big, f()).unwrap_err().to_string();
        assert!(e.contains("more than a bundle may hold"), "{e}");
    }
}
