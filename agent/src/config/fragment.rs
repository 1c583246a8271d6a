//! Fragments: one config file each, checked against the schema, merged key by key in order
//! (later files win), with the file each value came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{err, schema, ConfigError, CONFIG_DIRS};
use crate::root::Root;

/// One config file, checked against [`schema::SCHEMA`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Fragment {
    table: toml::Table,
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
        schema::check(&table, file)?;
        Ok(Fragment { table })
    }
}

/// The merge of all fragments, with the file each value came from.
#[derive(Debug, Default, Clone)]
pub struct Merged {
    table: toml::Table,
    origin: BTreeMap<String, PathBuf>,
    /// The fragments merged, in order.
    pub files: Vec<PathBuf>,
}

impl Merged {
    /// Adds a fragment: its keys replace the same keys merged before.
    pub fn add(&mut self, frag: Fragment, file: &Path) {
        for (name, value) in frag.table {
            let toml::Value::Table(inner) = value else {
                continue; // refused by the schema check
            };
            let section = self
                .table
                .entry(name.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(merged) = section {
                for (key, v) in inner {
                    self.origin
                        .insert(format!("{name}.{key}"), file.to_path_buf());
                    merged.insert(key, v);
                }
            }
        }
        self.files.push(file.to_path_buf());
    }

    /// The file a dotted key's value came from.
    pub(crate) fn origin(&self, key: &str) -> Option<&Path> {
        self.origin.get(key).map(PathBuf::as_path)
    }

    /// The merge as typed sections (every field optional).
    pub(crate) fn sections(&self) -> Result<Sections, ConfigError> {
        toml::Value::Table(self.table.clone())
            .try_into()
            .map_err(|e: toml::de::Error| err(None, "", e.message().to_string()))
    }
}

/// The merged keys, typed; a key the schema knows but no section field holds is an error here
/// (a test sets every key).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Sections {
    #[serde(default)]
    pub(crate) node: NodeSection,
    #[serde(default)]
    pub(crate) kubelet: KubeletSection,
    #[serde(default)]
    pub(crate) network: NetworkSection,
    #[serde(default)]
    pub(crate) secrets: SecretsSection,
    #[serde(default)]
    pub(crate) reboot: RebootSection,
    #[serde(default)]
    pub(crate) selinux: SelinuxSection,
}

/// `[node]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeSection {
    pub(crate) role: Option<String>,
    pub(crate) name: Option<String>,
    #[serde(default, deserialize_with = "items")]
    pub(crate) labels: Option<Vec<String>>,
    #[serde(default, deserialize_with = "items")]
    pub(crate) taints: Option<Vec<String>>,
}

/// A [`super::schema::Kind::Items`] value: a list as is, or a string split at commas, each item
/// trimmed and empty ones skipped (kubelet's `ConfigurationMap.Set`; Typhoon's templates get
/// `join(",", var.node_labels)`, `""` when there are none).
fn items<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Items {
        List(Vec<String>),
        Joined(String),
    }
    Ok(Some(match Items::deserialize(d)? {
        Items::List(l) => l,
        Items::Joined(s) => s
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(String::from)
            .collect(),
    }))
}

/// `[kubelet]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KubeletSection {
    pub(crate) image: Option<String>,
    pub(crate) runtime: Option<String>,
    pub(crate) bootstrap_kubeconfig: Option<String>,
    pub(crate) kubeconfig: Option<String>,
    pub(crate) seccomp_default: Option<bool>,
    pub(crate) credentials_check_secs: Option<i64>,
    pub(crate) condition_heartbeat_secs: Option<i64>,
    pub(crate) cluster_dns: Option<String>,
    pub(crate) cluster_domain: Option<String>,
    pub(crate) cloud_provider: Option<String>,
    pub(crate) provider_id: Option<String>,
}

/// `[network]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NetworkSection {
    pub(crate) provider: Option<String>,
}

/// `[secrets]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SecretsSection {
    pub(crate) inbox: Option<String>,
}

/// `[reboot]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RebootSection {
    pub(crate) strategy: Option<String>,
    pub(crate) listen: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) group_slots: Option<i64>,
    pub(crate) namespace: Option<String>,
    pub(crate) drain_timeout_secs: Option<i64>,
    pub(crate) stale_after_secs: Option<i64>,
    pub(crate) abandon_after_secs: Option<i64>,
    pub(crate) fleetlock_users: Option<Vec<String>>,
    pub(crate) fleetlock_units: Option<Vec<String>>,
    pub(crate) wait_for_inhibitors: Option<bool>,
    pub(crate) drain_force: Option<bool>,
    pub(crate) windows: Option<Vec<String>>,
    pub(crate) time_zone: Option<String>,
    pub(crate) block_on_pods: Option<Vec<String>>,
    pub(crate) block_on_pods_namespaces: Option<Vec<String>>,
    pub(crate) prometheus_url: Option<String>,
    pub(crate) block_on_alerts: Option<String>,
    pub(crate) ignore_alerts: Option<Vec<String>>,
    pub(crate) block_on_pending_alerts: Option<bool>,
    pub(crate) alerts_unreachable: Option<String>,
    pub(crate) settle_secs: Option<i64>,
    pub(crate) pre_commands: Option<Vec<Vec<String>>>,
    pub(crate) post_commands: Option<Vec<Vec<String>>>,
    pub(crate) command_timeout_secs: Option<i64>,
}

/// `[selinux]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SelinuxSection {
    pub(crate) relabel: Option<Vec<String>>,
}

/// Finds the fragments in effect under `root`, in merge order. A file name seen in a later
/// directory replaces the earlier one; a symlink to /dev/null or an empty file masks.
pub(crate) fn fragment_files(root: &Root) -> Result<Vec<PathBuf>, ConfigError> {
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
            if by_name.len() > crate::util::bounded::MAX_FRAGMENTS {
                return Err(err(
                    Some(&real),
                    "",
                    format!(
                        "more than {} config fragments",
                        crate::util::bounded::MAX_FRAGMENTS
                    ),
                ));
            }
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

/// Reads and merges `files` alone, in this order (`nodectl config check FILES`: fragments an
/// operator is about to ship, read as given, within the same bounds).
pub(crate) fn load_files(files: &[PathBuf]) -> Result<Merged, ConfigError> {
    if files.len() > crate::util::bounded::MAX_FRAGMENTS {
        return Err(err(
            None,
            "",
            format!(
                "more than {} config fragments",
                crate::util::bounded::MAX_FRAGMENTS
            ),
        ));
    }
    let mut merged = Merged::default();
    for file in files {
        let text =
            crate::util::bounded::read_to_string(file, crate::util::bounded::MAX_INPUT_BYTES)
                .map_err(|e| err(Some(file), "", format!("cannot read: {e}")))?;
        let frag = Fragment::parse(&text, file)?;
        merged.add(frag, file);
    }
    Ok(merged)
}

/// Reads and merges every fragment under `root`.
pub(crate) fn load(root: &Root) -> Result<Merged, ConfigError> {
    let mut merged = Merged::default();
    for file in fragment_files(root)? {
        let text =
            crate::util::bounded::read_to_string(&file, crate::util::bounded::MAX_INPUT_BYTES)
                .map_err(|e| err(Some(&file), "", format!("cannot read: {e}")))?;
        let frag = Fragment::parse(&text, &file)?;
        merged.add(frag, &file);
    }
    Ok(merged)
}
