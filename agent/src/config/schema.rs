//! Every key, its kind and what it expects ([`SCHEMA`]); the shape check of one file against it
//! (unknown tables and keys with the nearest known ones, wrong types).

use std::path::Path;

use super::{err, ConfigError};

/// What a key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A string.
    Str,
    /// A list of strings.
    List,
    /// A list of strings, or one string of comma-separated items (as kubelet's `--node-labels`
    /// and `--register-with-taints` take them, and Typhoon's modules pass `node_labels` and
    /// `node_taints` to their templates); `""` is none.
    Items,
    /// `true` or `false`.
    Bool,
    /// An integer.
    Int,
    /// A list of lists of strings (commands as argv).
    Argvs,
}

/// Every key: (table, key, kind, what is expected). The docs test checks each appears in
/// docs/config.md; the parser uses it to reject unknown keys (with suggestions) and wrong types.
pub(crate) const SCHEMA: &[(&str, &str, Kind, &str)] = &[
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
        Kind::Items,
        "a list of \"key=value\" labels (or one string of them, comma-separated)",
    ),
    (
        "node",
        "taints",
        Kind::Items,
        "a list of \"key=value:Effect\" taints (or one string of them, comma-separated)",
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
        "seconds from 0 (never) to 604800 (a week)",
    ),
    (
        "kubelet",
        "condition_heartbeat_secs",
        Kind::Int,
        "seconds from 0 (never report) to 86400 (a day)",
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
        "kubelet",
        "cloud_provider",
        Kind::Str,
        "\"external\" (a cloud controller manager initializes the node)",
    ),
    (
        "kubelet",
        "provider_id",
        Kind::Str,
        "\"aws\" (from the instance metadata) or a provider id like \"aws:///us-east-1a/i-0123\"",
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
        "\"off\", \"fleet-lock\", \"update-engine\" or \"reboot-required\"",
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
        "a number of concurrent reboots from 1 to 10000",
    ),
    (
        "reboot",
        "namespace",
        Kind::Str,
        "a Kubernetes namespace name",
    ),
    (
        "reboot",
        "drain_timeout_secs",
        Kind::Int,
        "seconds from 0 to 31536000",
    ),
    (
        "reboot",
        "stale_after_secs",
        Kind::Int,
        "seconds from 60 to 31536000",
    ),
    (
        "reboot",
        "abandon_after_secs",
        Kind::Int,
        "seconds from 5 to 86400",
    ),
    ("reboot", "wait_for_inhibitors", Kind::Bool, "true or false"),
    ("reboot", "drain_force", Kind::Bool, "true or false"),
    (
        "reboot",
        "fleetlock_users",
        Kind::List,
        "a list of local user names",
    ),
    (
        "reboot",
        "fleetlock_units",
        Kind::List,
        "a list of systemd service names (NAME.service)",
    ),
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
    (
        "reboot",
        "block_on_pods",
        Kind::List,
        "a list of label selectors (as kubectl -l takes them)",
    ),
    (
        "reboot",
        "block_on_pods_namespaces",
        Kind::List,
        "a list of namespace names",
    ),
    (
        "reboot",
        "prometheus_url",
        Kind::Str,
        "an http:// or https:// URL without credentials",
    ),
    (
        "reboot",
        "block_on_alerts",
        Kind::Str,
        "a regular expression (RE2 syntax) matching whole alert names",
    ),
    (
        "reboot",
        "ignore_alerts",
        Kind::List,
        "a list of regular expressions (RE2 syntax) matching whole alert names",
    ),
    (
        "reboot",
        "block_on_pending_alerts",
        Kind::Bool,
        "true or false",
    ),
    (
        "reboot",
        "alerts_unreachable",
        Kind::Str,
        "\"block\" or \"allow\"",
    ),
    (
        "reboot",
        "settle_secs",
        Kind::Int,
        "seconds from 0 to 86400",
    ),
    (
        "reboot",
        "pre_commands",
        Kind::Argvs,
        "a list of commands, each a list of strings beginning with an absolute path",
    ),
    (
        "reboot",
        "post_commands",
        Kind::Argvs,
        "a list of commands, each a list of strings beginning with an absolute path",
    ),
    (
        "reboot",
        "command_timeout_secs",
        Kind::Int,
        "seconds from 1 to 86400",
    ),
    ("selinux", "relabel", Kind::List, "a list of absolute paths"),
];

/// What a key expects, as the schema says it (for errors about values).
pub(crate) fn expected(dotted: &str) -> &'static str {
    SCHEMA
        .iter()
        .find(|(t, k, _, _)| dotted.split_once('.') == Some((*t, *k)))
        .map(|(_, _, _, e)| *e)
        .unwrap_or("")
}

/// Checks one file's table against the schema: every table and key known, every value of its
/// kind. `file` is only used in errors.
pub(crate) fn check(table: &toml::Table, file: &Path) -> Result<(), ConfigError> {
    let tables: Vec<&str> = {
        let mut t: Vec<&str> = SCHEMA.iter().map(|(t, _, _, _)| *t).collect();
        t.dedup();
        t
    };
    for (name, value) in table {
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
            check_key(name, key, v, file)?;
        }
    }
    Ok(())
}

fn check_key(table: &str, key: &str, v: &toml::Value, file: &Path) -> Result<(), ConfigError> {
    let dotted = format!("{table}.{key}");
    let Some((_, _, kind, expected)) = SCHEMA.iter().find(|(t, k, _, _)| *t == table && *k == key)
    else {
        let known = SCHEMA
            .iter()
            .filter(|(t, _, _, _)| *t == table)
            .map(|(_, k, _, _)| *k);
        return Err(err(
            Some(file),
            &dotted,
            format!("unknown key{}", suggest(key, known)),
        ));
    };
    let type_ok = match kind {
        Kind::List => v.as_array().is_some_and(|a| a.iter().all(|x| x.is_str())),
        Kind::Items => v.is_str() || v.as_array().is_some_and(|a| a.iter().all(|x| x.is_str())),
        Kind::Str => v.is_str(),
        Kind::Bool => v.is_bool(),
        Kind::Int => v.is_integer(),
        Kind::Argvs => v.as_array().is_some_and(|a| {
            a.iter()
                .all(|c| c.as_array().is_some_and(|c| c.iter().all(|x| x.is_str())))
        }),
    };
    if !type_ok {
        return Err(err(
            Some(file),
            &dotted,
            format!("expected {expected}, found {} `{v}`", v.type_str()),
        ));
    }
    Ok(())
}

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
