//! Layered configuration, as Zincati does it: TOML fragments in
//! `/usr/lib/nodectl/config.d`, `/run/nodectl/config.d`, `/etc/nodectl/config.d` (`*.toml`,
//! merged in lexical order of file name; a same-named file in a later directory masks the earlier
//! one, a symlink to `/dev/null` or an empty file masks without adding keys; later keys win).
//!
//! Three stages: each file is checked against [`SCHEMA`] and parsed into a [`Fragment`] (every
//! field optional), fragments are merged, then [`Settings::validate`] turns the merge into one
//! typed value. Errors name the file, the key and what was expected.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::{Host, Os};
use crate::root::Root;

/// Config directories, lowest precedence first (paths on the node, under the root).
pub const CONFIG_DIRS: [&str; 3] = [
    "/usr/lib/nodectl/config.d",
    "/run/nodectl/config.d",
    "/etc/nodectl/config.d",
];

/// What a key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Str,
    List,
    Bool,
    Int,
}

/// Every key: (table, key, kind, what is expected). The docs test checks each appears in
/// docs/config.md; the parser uses it to reject unknown keys (with suggestions) and wrong types.
pub const SCHEMA: &[(&str, &str, Kind, &str)] = &[
    ("node", "role", Kind::Str, "\"controller\" or \"worker\""),
    (
        "node",
        "name",
        Kind::Str,
        "a DNS-1123 subdomain (lowercase letters, digits, '-', '.')",
    ),
    (
        "node",
        "labels",
        Kind::List,
        "a list of \"key=value\" labels",
    ),
    (
        "node",
        "taints",
        Kind::List,
        "a list of \"key=value:Effect\" taints",
    ),
    ("kubelet", "image", Kind::Str, "a container image reference"),
    ("kubelet", "runtime", Kind::Str, "\"podman\" or \"docker\""),
    (
        "kubelet",
        "bootstrap_kubeconfig",
        Kind::Str,
        "an absolute path",
    ),
    ("kubelet", "kubeconfig", Kind::Str, "an absolute path"),
    ("kubelet", "seccomp_default", Kind::Bool, "true or false"),
    (
        "kubelet",
        "credentials_check_secs",
        Kind::Int,
        "seconds >= 0 (0: never)",
    ),
    (
        "kubelet",
        "cluster_dns",
        Kind::Str,
        "an IP address (the cluster DNS service)",
    ),
    (
        "kubelet",
        "cluster_domain",
        Kind::Str,
        "a DNS domain, e.g. \"cluster.local\"",
    ),
    (
        "network",
        "provider",
        Kind::Str,
        "\"calico\", \"flannel\" or \"cilium\"",
    ),
    ("secrets", "inbox", Kind::Str, "an absolute path"),
    (
        "reboot",
        "strategy",
        Kind::Str,
        "\"off\", \"fleet-lock\" or \"update-engine\"",
    ),
    (
        "reboot",
        "listen",
        Kind::Str,
        "an address:port for the FleetLock endpoint",
    ),
    (
        "reboot",
        "group",
        Kind::Str,
        "a group name matching ^[a-zA-Z0-9.-]+$",
    ),
    (
        "reboot",
        "group_slots",
        Kind::Int,
        "a number of concurrent reboots >= 1",
    ),
    (
        "reboot",
        "namespace",
        Kind::Str,
        "a Kubernetes namespace name",
    ),
    ("reboot", "drain_timeout_secs", Kind::Int, "seconds >= 0"),
    ("reboot", "stale_after_secs", Kind::Int, "seconds >= 60"),
    (
        "reboot",
        "windows",
        Kind::List,
        "a list of windows like \"Sat,Sun 23:30 60m\" (days, start, length)",
    ),
    (
        "reboot",
        "time_zone",
        Kind::Str,
        "\"UTC\", \"localtime\" or an IANA time zone name",
    ),
    ("selinux", "relabel", Kind::List, "a list of absolute paths"),
];

pub const DEFAULT_IMAGE: &str = "quay.io/poseidon/kubelet:v1.36.1";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub struct ConfigError {
    /// The fragment the problem is in; `None` when it comes from the merge (e.g. a missing key).
    pub file: Option<PathBuf>,
    /// Dotted key, e.g. `node.role`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(p) => write!(f, "{}: ", p.display())?,
            None => f.write_str("config: ")?,
        }
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "key `{}`: {}", self.key, self.message)
        }
    }
}

fn err(file: Option<&Path>, key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        file: file.map(Path::to_path_buf),
        key: key.to_string(),
        message: message.into(),
    }
}

/// One config file, every field optional.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct Fragment {
    #[serde(default)]
    pub node: NodeFragment,
    #[serde(default)]
    pub kubelet: KubeletFragment,
    #[serde(default)]
    pub network: NetworkFragment,
    #[serde(default)]
    pub secrets: SecretsFragment,
    #[serde(default)]
    pub reboot: RebootFragment,
    #[serde(default)]
    pub selinux: SelinuxFragment,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct NodeFragment {
    pub role: Option<String>,
    pub name: Option<String>,
    pub labels: Option<Vec<String>>,
    pub taints: Option<Vec<String>>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct KubeletFragment {
    pub image: Option<String>,
    pub runtime: Option<String>,
    pub bootstrap_kubeconfig: Option<String>,
    pub kubeconfig: Option<String>,
    pub seccomp_default: Option<bool>,
    pub credentials_check_secs: Option<i64>,
    pub cluster_dns: Option<String>,
    pub cluster_domain: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct NetworkFragment {
    pub provider: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct SecretsFragment {
    pub inbox: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct RebootFragment {
    pub strategy: Option<String>,
    pub listen: Option<String>,
    pub group: Option<String>,
    pub group_slots: Option<i64>,
    pub namespace: Option<String>,
    pub drain_timeout_secs: Option<i64>,
    pub stale_after_secs: Option<i64>,
    pub windows: Option<Vec<String>>,
    pub time_zone: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct SelinuxFragment {
    pub relabel: Option<Vec<String>>,
}

/// Where a merged value came from, for error messages.
type Origin = BTreeMap<String, PathBuf>;

/// Levenshtein distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn suggest<'a>(word: &str, known: impl Iterator<Item = &'a str>) -> String {
    let known: Vec<&str> = known.collect();
    let near: Vec<&str> = {
        let mut v: Vec<(usize, &str)> = known
            .iter()
            .map(|k| (distance(word, k), *k))
            .filter(|(d, k)| *d <= 2.max(k.len() / 3))
            .collect();
        v.sort();
        v.into_iter().map(|(_, k)| k).collect()
    };
    let mut msg = String::new();
    if let Some(first) = near.first() {
        msg.push_str(&format!("; did you mean `{first}`?"));
    }
    msg.push_str(&format!(" (known: {})", known.join(", ")));
    msg
}

impl Fragment {
    /// Parses one file's text. `file` is only used in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ConfigError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            err(
                Some(file),
                "",
                format!("invalid TOML: {}", e.message().trim()),
            )
        })?;
        let tables: Vec<&str> = {
            let mut t: Vec<&str> = SCHEMA.iter().map(|(t, _, _, _)| *t).collect();
            t.dedup();
            t
        };
        for (name, value) in &table {
            if !tables.contains(&name.as_str()) {
                return Err(err(
                    Some(file),
                    name,
                    format!("unknown table{}", suggest(name, tables.iter().copied())),
                ));
            }
            let Some(inner) = value.as_table() else {
                return Err(err(Some(file), name, format!("expected a table [{name}]")));
            };
            for (key, v) in inner {
                let dotted = format!("{name}.{key}");
                let Some((_, _, kind, expected)) =
                    SCHEMA.iter().find(|(t, k, _, _)| t == name && k == key)
                else {
                    let known = SCHEMA
                        .iter()
                        .filter(|(t, _, _, _)| t == name)
                        .map(|(_, k, _, _)| *k);
                    return Err(err(
                        Some(file),
                        &dotted,
                        format!("unknown key{}", suggest(key, known)),
                    ));
                };
                let type_ok = match kind {
                    Kind::List => v.as_array().is_some_and(|a| a.iter().all(|x| x.is_str())),
                    Kind::Str => v.is_str(),
                    Kind::Bool => v.is_bool(),
                    Kind::Int => v.is_integer(),
                };
                if !type_ok {
                    return Err(err(
                        Some(file),
                        &dotted,
                        format!("expected {expected}, found {} `{v}`", v.type_str()),
                    ));
                }
            }
        }
        // Shape is checked: this cannot fail for a type reason any more.
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| err(Some(file), "", e.message().to_string()))
    }
}

/// The merge of all fragments, with the file each value came from.
#[derive(Debug, Default, Clone)]
pub struct Merged {
    pub fragment: Fragment,
    origin: Origin,
    pub files: Vec<PathBuf>,
}

macro_rules! merge_fields {
    ($self:ident, $frag:ident, $file:ident, $table:ident: $($field:ident),+) => {
        $(
            if let Some(v) = $frag.$table.$field {
                $self.fragment.$table.$field = Some(v);
                $self.origin.insert(
                    concat!(stringify!($table), ".", stringify!($field)).to_string(),
                    $file.to_path_buf(),
                );
            }
        )+
    };
}

impl Merged {
    pub fn add(&mut self, frag: Fragment, file: &Path) {
        merge_fields!(self, frag, file, node: role, name, labels, taints);
        merge_fields!(
            self, frag, file,
            kubelet: image, runtime, bootstrap_kubeconfig, kubeconfig, seccomp_default, credentials_check_secs, cluster_dns, cluster_domain
        );
        merge_fields!(self, frag, file, network: provider);
        merge_fields!(self, frag, file, secrets: inbox);
        merge_fields!(
            self, frag, file,
            reboot: strategy, listen, group, group_slots, namespace, drain_timeout_secs, stale_after_secs, windows, time_zone
        );
        merge_fields!(self, frag, file, selinux: relabel);
        self.files.push(file.to_path_buf());
    }

    fn origin(&self, key: &str) -> Option<&Path> {
        self.origin.get(key).map(PathBuf::as_path)
    }
}

/// Finds the fragments in effect under `root`, in merge order. A file name seen in a later
/// directory replaces the earlier one; a symlink to /dev/null or an empty file masks.
pub fn fragment_files(root: &Root) -> Result<Vec<PathBuf>, ConfigError> {
    let mut by_name: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in CONFIG_DIRS {
        let real = root.path(dir);
        let entries = match std::fs::read_dir(&real) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(err(Some(&real), "", format!("cannot read directory: {e}"))),
        };
        for entry in entries {
            let entry = entry.map_err(|e| err(Some(&real), "", e.to_string()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".toml") || name.starts_with('.') {
                continue;
            }
            by_name.insert(name, entry.path());
        }
    }
    Ok(by_name
        .into_values()
        .filter(|p| {
            let masked = std::fs::read_link(p).is_ok_and(|t| t == Path::new("/dev/null"));
            !masked
        })
        .collect())
}

/// Reads and merges every fragment under `root`.
pub fn load(root: &Root) -> Result<Merged, ConfigError> {
    let mut merged = Merged::default();
    for file in fragment_files(root)? {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| err(Some(&file), "", format!("cannot read: {e}")))?;
        let frag = Fragment::parse(&text, &file)?;
        merged.add(frag, &file);
    }
    Ok(merged)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Controller,
    Worker,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Podman,
    Docker,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    Calico,
    Flannel,
    Cilium,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RebootStrategy {
    Off,
    FleetLock,
    UpdateEngine,
}

/// How reboots are coordinated (FleetLock endpoint, the group's Lease, the drain).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootPolicy {
    pub listen: std::net::SocketAddr,
    /// The group update_engine's reboots take a slot of (Zincati names its own in requests).
    pub group: String,
    pub group_slots: u32,
    pub namespace: String,
    pub drain_timeout_secs: u64,
    pub stale_after_secs: u64,
    /// When new reboot slots may be taken; empty: any time.
    pub windows: Vec<String>,
    pub time_zone: String,
}

/// A taint as kubelet's `--register-with-taints` takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint(pub String);

/// The validated configuration the agent runs with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub role: Role,
    pub node_name: String,
    pub labels: Vec<String>,
    pub taints: Vec<Taint>,
    pub kubelet_image: String,
    pub runtime: Runtime,
    pub bootstrap_kubeconfig: PathBuf,
    pub kubeconfig: PathBuf,
    /// kubelet's `seccompDefault`: every pod gets the RuntimeDefault profile.
    pub seccomp_default: bool,
    /// How often the API server is asked whether it still accepts the node's certificate (a
    /// 401 sends the node back to the bootstrap token); 0: never.
    pub credentials_check_secs: u64,
    pub cluster_dns: std::net::IpAddr,
    pub cluster_domain: String,
    pub network: Network,
    pub secrets_inbox: PathBuf,
    pub reboot: RebootStrategy,
    pub reboot_policy: RebootPolicy,
    /// Trees kept at their managed labels (read first, written only where they differ).
    pub relabel: Vec<PathBuf>,
    /// The fragments that made these settings, in merge order.
    pub files: Vec<PathBuf>,
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain, what Kubernetes requires of node names.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label key: optional DNS-subdomain prefix and `/`, then a name of at most 63 characters of
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_dns_subdomain) && is_label_value(name) && !name.is_empty()
}

fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && v.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && v.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

fn parse_label(s: &str) -> Result<String, String> {
    let (k, v) = s.split_once('=').unwrap_or((s, ""));
    if !is_label_key(k) {
        return Err(format!("label {s:?}: key {k:?} is not a valid label key"));
    }
    if !is_label_value(v) {
        return Err(format!(
            "label {s:?}: value {v:?} is not a valid label value"
        ));
    }
    if k == "node.kubernetes.io/master" || k == "node-role.kubernetes.io/master" {
        return Err(format!("label {s:?}: the master label is deprecated; nodectl sets node.kubernetes.io/controller"));
    }
    Ok(s.to_string())
}

fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("taint {s:?}: expected key=value:Effect or key:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "taint {s:?}: effect {effect:?} must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
    if !is_label_key(k) || !is_label_value(v) {
        return Err(format!("taint {s:?}: {kv:?} is not a valid key=value"));
    }
    Ok(Taint(s.to_string()))
}

fn abs_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if !p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(format!("{s:?} must be an absolute path without `..`"));
    }
    Ok(p)
}

impl Settings {
    /// Validates the merge. `host` supplies OS-dependent defaults (runtime), `hostname` the
    /// default node name.
    pub fn validate(m: &Merged, host: &Host, hostname: &str) -> Result<Self, ConfigError> {
        let f = &m.fragment;
        let at = |key: &str, msg: String| err(m.origin(key), key, msg);
        let expected = |key: &str| {
            SCHEMA
                .iter()
                .find(|(t, k, _, _)| format!("{t}.{k}") == key)
                .map(|(_, _, _, e)| *e)
                .unwrap_or("")
        };
        let bad = |key: &str, v: &str| at(key, format!("expected {}, found {v:?}", expected(key)));

        let role = match f.node.role.as_deref() {
            Some("controller") => Role::Controller,
            Some("worker") => Role::Worker,
            Some(v) => return Err(bad("node.role", v)),
            None => {
                return Err(at(
                    "node.role",
                    format!(
                        "is required: set it to {} in a file under /etc/nodectl/config.d",
                        expected("node.role")
                    ),
                ))
            }
        };
        let node_name = f.node.name.clone().unwrap_or_else(|| hostname.to_string());
        if !is_dns_subdomain(&node_name) {
            return Err(match f.node.name {
                Some(_) => bad("node.name", &node_name),
                None => at(
                    "node.name",
                    format!("not set, and the hostname {node_name:?} is not a valid node name: set node.name"),
                ),
            });
        }
        let labels = f
            .node
            .labels
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|l| parse_label(l))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| at("node.labels", e))?;
        let taints = f
            .node
            .taints
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|t| parse_taint(t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| at("node.taints", e))?;
        let kubelet_image = f
            .kubelet
            .image
            .clone()
            .unwrap_or_else(|| DEFAULT_IMAGE.into());
        if kubelet_image.is_empty() || kubelet_image.chars().any(|c| c.is_whitespace() || c == '$')
        {
            return Err(bad("kubelet.image", &kubelet_image));
        }
        let runtime = match f.kubelet.runtime.as_deref() {
            Some("podman") => Runtime::Podman,
            Some("docker") => Runtime::Docker,
            Some(v) => return Err(bad("kubelet.runtime", v)),
            None if host.os == Os::Flatcar => Runtime::Docker,
            None => Runtime::Podman,
        };
        let path = |key: &str, v: Option<&String>, default: &str| {
            abs_path(v.map(String::as_str).unwrap_or(default)).map_err(|e| at(key, e))
        };
        let bootstrap_kubeconfig = path(
            "kubelet.bootstrap_kubeconfig",
            f.kubelet.bootstrap_kubeconfig.as_ref(),
            "/etc/kubernetes/kubeconfig",
        )?;
        let kubeconfig = path(
            "kubelet.kubeconfig",
            f.kubelet.kubeconfig.as_ref(),
            "/var/lib/kubelet/kubeconfig",
        )?;
        let seccomp_default = f.kubelet.seccomp_default.unwrap_or(true);
        let dns = f.kubelet.cluster_dns.as_deref().unwrap_or("10.3.0.10");
        let cluster_dns = dns.parse().map_err(|_| bad("kubelet.cluster_dns", dns))?;
        let cluster_domain = f
            .kubelet
            .cluster_domain
            .clone()
            .unwrap_or_else(|| "cluster.local".into());
        if !is_dns_subdomain(&cluster_domain) {
            return Err(bad("kubelet.cluster_domain", &cluster_domain));
        }
        let network = match f.network.provider.as_deref().unwrap_or("cilium") {
            "calico" => Network::Calico,
            "flannel" => Network::Flannel,
            "cilium" => Network::Cilium,
            v => return Err(bad("network.provider", v)),
        };
        let secrets_inbox = path(
            "secrets.inbox",
            f.secrets.inbox.as_ref(),
            "/var/lib/nodectl/inbox",
        )?;
        let reboot = match f.reboot.strategy.as_deref().unwrap_or("off") {
            "off" => RebootStrategy::Off,
            "fleet-lock" => RebootStrategy::FleetLock,
            "update-engine" => RebootStrategy::UpdateEngine,
            v => return Err(bad("reboot.strategy", v)),
        };
        let int = |key: &str, v: Option<i64>, default: i64, min: i64| -> Result<i64, ConfigError> {
            match v {
                None => Ok(default),
                Some(n) if n >= min => Ok(n),
                Some(n) => Err(bad(key, &n.to_string())),
            }
        };
        let listen_text = f.reboot.listen.as_deref().unwrap_or("127.0.0.1:9455");
        let reboot_policy = RebootPolicy {
            listen: listen_text
                .parse()
                .map_err(|_| bad("reboot.listen", listen_text))?,
            group: match f.reboot.group.as_deref() {
                None => "default".into(),
                Some(g) if crate::reboot::slots::valid_group(g) => g.into(),
                Some(g) => return Err(bad("reboot.group", g)),
            },
            group_slots: int("reboot.group_slots", f.reboot.group_slots, 1, 1)? as u32,
            namespace: match f.reboot.namespace.as_deref() {
                None => "nodectl-reboot".into(),
                Some(n) if is_dns_label(n) => n.into(),
                Some(n) => return Err(bad("reboot.namespace", n)),
            },
            drain_timeout_secs: int(
                "reboot.drain_timeout_secs",
                f.reboot.drain_timeout_secs,
                600,
                0,
            )? as u64,
            stale_after_secs: int(
                "reboot.stale_after_secs",
                f.reboot.stale_after_secs,
                3600,
                60,
            )? as u64,
            windows: f.reboot.windows.clone().unwrap_or_default(),
            time_zone: f.reboot.time_zone.clone().unwrap_or_else(|| "UTC".into()),
        };
        let credentials_check_secs = int(
            "kubelet.credentials_check_secs",
            f.kubelet.credentials_check_secs,
            900,
            0,
        )? as u64;
        for w in &reboot_policy.windows {
            crate::reboot::windows::parse(w).map_err(|e| at("reboot.windows", e))?;
        }
        crate::reboot::windows::zone(&reboot_policy.time_zone)
            .map_err(|e| at("reboot.time_zone", e))?;
        let relabel = f
            .selinux
            .relabel
            .clone()
            .unwrap_or_else(|| vec!["/etc/kubernetes".into()])
            .iter()
            .map(|p| abs_path(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| at("selinux.relabel", e))?;
        Ok(Settings {
            role,
            node_name,
            labels,
            taints,
            kubelet_image,
            runtime,
            bootstrap_kubeconfig,
            kubeconfig,
            seccomp_default,
            credentials_check_secs,
            cluster_dns,
            cluster_domain,
            network,
            secrets_inbox,
            reboot,
            reboot_policy,
            relabel,
            files: m.files.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Host;

    fn file(name: &str) -> PathBuf {
        PathBuf::from(format!("/etc/nodectl/config.d/{name}"))
    }

    fn settings(frags: &[(&str, &str)], host: &Host) -> Result<Settings, ConfigError> {
        let mut m = Merged::default();
        for (name, text) in frags {
            m.add(Fragment::parse(text, &file(name))?, &file(name));
        }
        Settings::validate(&m, host, "node-1.example")
    }

    #[test]
    fn minimal_worker_gets_defaults() {
        let s = settings(
            &[("10-node.toml", "[node]\nrole = \"worker\"\n")],
            &Host::generic(),
        )
        .unwrap();
        assert_eq!(s.role, Role::Worker);
        assert_eq!(s.node_name, "node-1.example");
        assert_eq!(s.runtime, Runtime::Podman);
        assert_eq!(s.kubelet_image, DEFAULT_IMAGE);
        assert_eq!(
            s.bootstrap_kubeconfig,
            PathBuf::from("/etc/kubernetes/kubeconfig")
        );
        assert_eq!(s.reboot, RebootStrategy::Off);
    }

    #[test]
    fn runtime_defaults_from_os() {
        let s = settings(
            &[("10.toml", "[node]\nrole = \"worker\"\n")],
            &Host::with_os(Os::Flatcar),
        )
        .unwrap();
        assert_eq!(s.runtime, Runtime::Docker);
        let s = settings(
            &[("10.toml", "[node]\nrole = \"worker\"\n")],
            &Host::with_os(Os::FedoraCoreos),
        )
        .unwrap();
        assert_eq!(s.runtime, Runtime::Podman);
    }

    #[test]
    fn later_fragments_win_key_by_key() {
        let s = settings(
            &[
                (
                    "10-a.toml",
                    "[node]\nrole = \"worker\"\nname = \"a\"\n[kubelet]\nimage = \"img:1\"\n",
                ),
                ("20-b.toml", "[kubelet]\nimage = \"img:2\"\n"),
            ],
            &Host::generic(),
        )
        .unwrap();
        assert_eq!(
            (s.node_name.as_str(), s.kubelet_image.as_str()),
            ("a", "img:2")
        );
    }

    #[test]
    fn typo_names_file_key_and_nearest_known_key() {
        let e = settings(
            &[("20-node.toml", "[node]\nrol = \"worker\"\n")],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.file, Some(file("20-node.toml")));
        assert_eq!(e.key, "node.rol");
        let msg = e.to_string();
        assert!(msg.starts_with("/etc/nodectl/config.d/20-node.toml: key `node.rol`: unknown key; did you mean `role`?"), "{msg}");
        assert!(msg.contains("known: role, name, labels, taints"), "{msg}");

        let e = settings(
            &[("20.toml", "[kubelett]\nimage = \"x\"\n")],
            &Host::generic(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("did you mean `kubelet`?"), "{e}");
    }

    #[test]
    fn wrong_types_and_values_are_named() {
        let e = settings(&[("30.toml", "[node]\nrole = 3\n")], &Host::generic()).unwrap_err();
        assert_eq!(e.key, "node.role");
        assert!(
            e.to_string()
                .contains("expected \"controller\" or \"worker\", found integer `3`"),
            "{e}"
        );

        let e = settings(
            &[("30.toml", "[node]\nrole = \"master\"\n")],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.file.clone()),
            ("node.role", Some(file("30.toml")))
        );

        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\ntaints = [\"a=b:Sometimes\"]\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "node.taints");
        assert!(e.to_string().contains("NoSchedule"), "{e}");

        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\nlabels = [\"node.kubernetes.io/master=\"]\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "node.labels");

        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\n[secrets]\ninbox = \"relative/dir\"\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "secrets.inbox");

        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\nname = \"Bad_Name\"\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "node.name");

        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\n[kubelet]\nseccomp_default = \"yes\"\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "kubelet.seccomp_default");
        assert!(
            e.to_string()
                .contains("expected true or false, found string"),
            "{e}"
        );

        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\n[reboot]\ngroup = \"workers/1\"\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "reboot.group");
        let ok = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\n[reboot]\ngroup = \"Workers.eu-1\"\n[kubelet]\ncredentials_check_secs = 0\n",
            )],
            &Host::generic(),
        )
        .unwrap();
        assert_eq!(ok.reboot_policy.group, "Workers.eu-1");
        assert_eq!(ok.credentials_check_secs, 0);
        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\n[kubelet]\ncredentials_check_secs = -1\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "kubelet.credentials_check_secs");

        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\n[kubelet]\ncluster_dns = \"10.3.0\"\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "kubelet.cluster_dns");

        let e = settings(&[("30.toml", "[node\nrole=1")], &Host::generic()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/etc/nodectl/config.d/30.toml: invalid TOML"),
            "{e}"
        );
    }

    #[test]
    fn missing_role_is_an_error_that_says_where_to_set_it() {
        let e = settings(&[], &Host::generic()).unwrap_err();
        assert_eq!(e.key, "node.role");
        assert!(e.to_string().contains("/etc/nodectl/config.d"), "{e}");
    }

    #[test]
    fn labels_and_taints_accept_kubernetes_syntax() {
        let s = settings(
            &[("10.toml", "[node]\nrole = \"worker\"\nlabels = [\"example.com/pool=blue\", \"node.kubernetes.io/gpu\"]\ntaints = [\"dedicated=gpu:NoSchedule\", \"spot:PreferNoSchedule\"]\n")],
            &Host::generic(),
        )
        .unwrap();
        assert_eq!(s.labels.len(), 2);
        assert_eq!(s.taints[1], Taint("spot:PreferNoSchedule".into()));
    }

    #[test]
    fn every_key_is_documented() {
        let doc = include_str!("../../docs/config.md");
        for (t, k, _, _) in SCHEMA {
            let needle = format!("`{t}.{k}`");
            assert!(
                doc.contains(&needle),
                "docs/config.md does not document {needle}"
            );
        }
    }

    #[test]
    fn directories_mask_by_name_and_dev_null() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let w = |d: &str, n: &str, t: &str| {
            let p = root.path(d).join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, t).unwrap();
        };
        w(
            "/usr/lib/nodectl/config.d",
            "10-defaults.toml",
            "[node]\nrole = \"controller\"\n",
        );
        w(
            "/usr/lib/nodectl/config.d",
            "20-image.toml",
            "[kubelet]\nimage = \"vendor:1\"\n",
        );
        w(
            "/etc/nodectl/config.d",
            "10-defaults.toml",
            "[node]\nrole = \"worker\"\n",
        );
        std::os::unix::fs::symlink(
            "/dev/null",
            root.path("/etc/nodectl/config.d/20-image.toml"),
        )
        .unwrap();
        let m = load(&root).unwrap();
        assert_eq!(
            m.files,
            vec![root.path("/etc/nodectl/config.d/10-defaults.toml")]
        );
        let s = Settings::validate(&m, &Host::generic(), "n").unwrap();
        assert_eq!(s.role, Role::Worker);
        assert_eq!(s.kubelet_image, DEFAULT_IMAGE);
    }
}
