//! `[reboot]`'s gates: what must hold before a node takes a reboot slot (no matching pod runs on
//! it, no matching alert fires), how long a group settles between reboots, and the commands run
//! before a reboot and after it. Checked here (every selector parsed, every pattern compiled,
//! every command's program an absolute path); the reboot layer compiles them again to use them.

use serde::{Deserialize, Serialize};

use super::check::Check;
use super::fragment::RebootSection;
use super::ConfigError;
use crate::util::{labels, names};

/// The most selectors, patterns or commands a gate takes.
pub const MAX_GATE_ITEMS: usize = 32;
/// The most arguments of one command, and bytes of one argument.
const MAX_ARGS: usize = 64;
const MAX_ARG_BYTES: usize = 4096;
/// Seconds a pre- or post-reboot command may run before it is killed and counts as failed.
pub(crate) const DEFAULT_COMMAND_TIMEOUT_SECS: i64 = 300;
/// The longest regular expression taken (compiled with the `regex` crate's size limits too).
pub const MAX_PATTERN: usize = 1024;

/// What a Prometheus that cannot be asked does to a reboot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unreachable {
    /// No slot is taken until Prometheus answers (the default: no news is not good news).
    Block,
    /// Reboots go ahead as if no alert fired (logged).
    Allow,
}

/// The alerts gate: Prometheus's `/api/v1/alerts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertGate {
    /// Prometheus's base URL (`http(s)://host:port[/prefix]`).
    pub url: String,
    /// Alerts whose name matches this whole block a reboot.
    pub block: String,
    /// ... unless their name matches one of these whole.
    pub ignore: Vec<String>,
    /// Pending alerts block too (else firing ones only).
    pub pending: bool,
    /// When Prometheus cannot be asked.
    pub unreachable: Unreachable,
}

/// The gates and checks of `[reboot]` (all empty: none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootGates {
    /// Label selectors: a running pod on this node matching one blocks taking a slot.
    pub block_on_pods: Vec<String>,
    /// Only pods of these namespaces count (empty: every namespace).
    pub block_on_pods_namespaces: Vec<String>,
    /// Prometheus's alerts, when `reboot.prometheus_url` is set.
    pub alerts: Option<AlertGate>,
    /// Seconds the group settles after a holder's release before its next slot is granted.
    pub settle_secs: u64,
    /// Run once the slot is taken, before the drain; one failing releases the slot.
    pub pre_commands: Vec<Vec<String>>,
    /// Run after the reboot, once kubelet is active and the Node Ready, before the slot is
    /// released; one failing keeps the slot.
    pub post_commands: Vec<Vec<String>>,
    /// How long each command may run.
    pub command_timeout_secs: u64,
}

/// A regular expression as the gates use it: compiled whole (`^(?:...)$`), bounded.
pub fn whole(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_PATTERN {
        return Err(format!("longer than {MAX_PATTERN} bytes"));
    }
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(1 << 20)
        .build()
        .map_err(|e| e.to_string())
}

fn bounded<'a>(key: &str, v: &'a [String], c: &Check) -> Result<&'a [String], ConfigError> {
    if v.len() > MAX_GATE_ITEMS {
        return Err(c.at(key, format!("at most {MAX_GATE_ITEMS} items")));
    }
    Ok(v)
}

fn commands(
    key: &str,
    v: Option<&Vec<Vec<String>>>,
    c: &Check,
) -> Result<Vec<Vec<String>>, ConfigError> {
    let v = v.cloned().unwrap_or_default();
    if v.len() > MAX_GATE_ITEMS {
        return Err(c.at(key, format!("at most {MAX_GATE_ITEMS} commands")));
    }
    for (i, argv) in v.iter().enumerate() {
        let what = |m: &str| c.at(key, format!("command {}: {m}", i + 1));
        match argv.first() {
            None => {
                return Err(what(
                    "empty (a command is its program's path, then its arguments)",
                ))
            }
            Some(p) if !p.starts_with('/') || p.split('/').any(|s| s == "..") => {
                return Err(what(&format!("{p:?} is not an absolute path without ..")))
            }
            Some(_) => {}
        }
        if argv.len() > MAX_ARGS {
            return Err(what(&format!("more than {MAX_ARGS} arguments")));
        }
        if argv
            .iter()
            .any(|a| a.len() > MAX_ARG_BYTES || a.contains('\0'))
        {
            return Err(what(&format!(
                "an argument longer than {MAX_ARG_BYTES} bytes or with a NUL"
            )));
        }
    }
    Ok(v)
}

fn alerts(f: &RebootSection, c: &Check) -> Result<Option<AlertGate>, ConfigError> {
    let Some(url) = f.prometheus_url.as_deref() else {
        for key in [
            "block_on_alerts",
            "ignore_alerts",
            "block_on_pending_alerts",
            "alerts_unreachable",
        ] {
            if c.merged.origin(&format!("reboot.{key}")).is_some() {
                return Err(c.at(
                    &format!("reboot.{key}"),
                    "set without reboot.prometheus_url: no alert is asked for",
                ));
            }
        }
        return Ok(None);
    };
    // The value is never quoted in these errors: it may hold a password.
    let key = "reboot.prometheus_url";
    if url.contains('@') {
        return Err(c.at(
            key,
            "credentials in the URL are refused (they would show in logs and status)",
        ));
    }
    let uri: Option<hyper::Uri> = url.parse().ok();
    let ok = uri.as_ref().is_some_and(|u| {
        matches!(u.scheme_str(), Some("http") | Some("https"))
            && u.host().is_some_and(|h| !h.is_empty())
            && u.query().is_none()
    });
    if !ok {
        return Err(c.at(
            key,
            format!(
                "expected {} (the value is not shown)",
                super::schema::expected(key)
            ),
        ));
    }
    let block = f.block_on_alerts.clone().unwrap_or_else(|| ".*".into());
    whole(&block).map_err(|e| c.at("reboot.block_on_alerts", e))?;
    let ignore = f.ignore_alerts.clone().unwrap_or_default();
    for p in bounded("reboot.ignore_alerts", &ignore, c)? {
        whole(p).map_err(|e| c.at("reboot.ignore_alerts", format!("{p:?}: {e}")))?;
    }
    Ok(Some(AlertGate {
        url: url.trim_end_matches('/').to_string(),
        block,
        ignore,
        pending: f.block_on_pending_alerts.unwrap_or(false),
        unreachable: match f.alerts_unreachable.as_deref() {
            None | Some("block") => Unreachable::Block,
            Some("allow") => Unreachable::Allow,
            Some(v) => return Err(c.bad("reboot.alerts_unreachable", v)),
        },
    }))
}

impl RebootGates {
    /// Validates the gates' keys of `[reboot]`.
    pub(crate) fn with_config(f: &RebootSection, c: &Check) -> Result<Self, ConfigError> {
        let pods = f.block_on_pods.clone().unwrap_or_default();
        for s in bounded("reboot.block_on_pods", &pods, c)? {
            if s.trim().is_empty() {
                return Err(c.at(
                    "reboot.block_on_pods",
                    "an empty selector would match every pod",
                ));
            }
            labels::parse(s).map_err(|e| c.at("reboot.block_on_pods", format!("{s:?}: {e}")))?;
        }
        let namespaces = f.block_on_pods_namespaces.clone().unwrap_or_default();
        if !namespaces.is_empty() && pods.is_empty() {
            return Err(c.at(
                "reboot.block_on_pods_namespaces",
                "set without reboot.block_on_pods: no pod is asked for",
            ));
        }
        // (issue 64: in every namespace, anyone who may create a pod there with spec.nodeName
        // and a matching label, shown to every Node reader in the condition's message, could
        // hold back this node's security updates for good)
        if namespaces.is_empty() && !pods.is_empty() {
            return Err(c.at(
                "reboot.block_on_pods",
                "set without reboot.block_on_pods_namespaces: name the namespaces whose pods may hold back reboots (a pod in any other, which any tenant may create with this node's name and the label, would)",
            ));
        }
        for n in bounded("reboot.block_on_pods_namespaces", &namespaces, c)? {
            if !names::is_dns_label(n) {
                return Err(c.bad("reboot.block_on_pods_namespaces", n));
            }
        }
        Ok(RebootGates {
            block_on_pods: pods,
            block_on_pods_namespaces: namespaces,
            alerts: alerts(f, c)?,
            settle_secs: c.int("reboot.settle_secs", f.settle_secs, 0, (0, 86_400))? as u64,
            pre_commands: commands("reboot.pre_commands", f.pre_commands.as_ref(), c)?,
            post_commands: commands("reboot.post_commands", f.post_commands.as_ref(), c)?,
            command_timeout_secs: c.int(
                "reboot.command_timeout_secs",
                f.command_timeout_secs,
                DEFAULT_COMMAND_TIMEOUT_SECS,
                (1, 86_400),
            )? as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Settings;
    use crate::host::Host;

    fn gates(toml: &str) -> Result<super::RebootGates, String> {
        Settings::from_toml_checked(
            &format!("[node]\nrole = \"worker\"\n[reboot]\n{toml}"),
            &Host::generic(),
            "n1",
        )
        .map(|s| s.reboot_policy.gates)
        .map_err(|e| e.to_string())
    }

    #[test]
    fn the_gates_are_checked_key_by_key() {
        let g = gates("block_on_pods = [\"app=backup\", \"batch.kubernetes.io/job-name\"]\nblock_on_pods_namespaces = [\"ops\"]\nprometheus_url = \"http://prom:9090/\"\nignore_alerts = [\"Watchdog\", \"Info.*\"]\nsettle_secs = 20\n").unwrap();
        assert_eq!(g.block_on_pods.len(), 2);
        let a = g.alerts.unwrap();
        assert_eq!(a.url, "http://prom:9090");
        assert_eq!(a.block, ".*");
        assert_eq!(a.unreachable, super::Unreachable::Block);
        assert_eq!(g.settle_secs, 20);
        assert_eq!(g.command_timeout_secs, 300);
        for (toml, key, says) in [
            (
                "block_on_pods = [\"app in backup\"]",
                "reboot.block_on_pods",
                "parenthesized",
            ),
            (
                "block_on_pods = [\" \"]",
                "reboot.block_on_pods",
                "every pod",
            ),
            (
                "block_on_pods = [\"app=backup\"]",
                "reboot.block_on_pods",
                "set without reboot.block_on_pods_namespaces",
            ),
            (
                "block_on_pods = [\"a\"]\nblock_on_pods_namespaces = [\"Kube\"]",
                "reboot.block_on_pods_namespaces",
                "namespace",
            ),
            (
                "prometheus_url = \"prom:9090\"",
                "reboot.prometheus_url",
                "http://",
            ),
            (
                "prometheus_url = \"ftp://prom\"",
                "reboot.prometheus_url",
                "http://",
            ),
            (
                "prometheus_url = \"http://u:secret@prom\"",
                "reboot.prometheus_url",
                "credentials",
            ),
            (
                "prometheus_url = \"http://p\"\nblock_on_alerts = \"(\"",
                "reboot.block_on_alerts",
                "regex",
            ),
            (
                "prometheus_url = \"http://p\"\nalerts_unreachable = \"maybe\"",
                "reboot.alerts_unreachable",
                "\"block\"",
            ),
            (
                "ignore_alerts = [\"x\"]",
                "reboot.ignore_alerts",
                "without reboot.prometheus_url",
            ),
            ("settle_secs = -1", "reboot.settle_secs", "seconds"),
            (
                "pre_commands = [[]]",
                "reboot.pre_commands",
                "command 1: empty",
            ),
            (
                "post_commands = [[\"/bin/true\"], [\"true\"]]",
                "reboot.post_commands",
                "command 2",
            ),
            (
                "pre_commands = [[\"/bin/../bin/true\"]]",
                "reboot.pre_commands",
                "without ..",
            ),
            (
                "command_timeout_secs = 0",
                "reboot.command_timeout_secs",
                "seconds",
            ),
            (
                "prometheus_url = \"u:secret@prom:9090\"",
                "reboot.prometheus_url",
                "credentials",
            ),
            (
                "prometheus_url = \"http://prom/?secret\"",
                "reboot.prometheus_url",
                "not shown",
            ),
            (
                "block_on_pending_alerts = true",
                "reboot.block_on_pending_alerts",
                "without",
            ),
            (
                "block_on_pods_namespaces = [\"ops\"]",
                "reboot.block_on_pods_namespaces",
                "without",
            ),
        ] {
            let e = gates(toml).unwrap_err();
            assert!(e.contains(key) && e.contains(says), "{toml}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
