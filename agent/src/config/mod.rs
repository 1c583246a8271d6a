//! Layered configuration, as Zincati does it: TOML fragments in
//! `/usr/lib/nodectl/config.d`, `/run/nodectl/config.d`, `/etc/nodectl/config.d` (`*.toml`,
//! merged in lexical order of file name; a same-named file in a later directory masks the earlier
//! one, a symlink to `/dev/null` or an empty file masks without adding keys; later keys win).
//!
//! Three stages: each file is checked against [`SCHEMA`] and kept as a [`Fragment`], fragments
//! are merged key by key ([`Merged`]), then [`Settings::validate`] turns the merge into one typed
//! value, each section validated by its own module (`with_config`, with its named defaults
//! beside it). Errors name the file, the key and what was expected.
//!
//! Adding a key: its line in [`SCHEMA`] (kind, what it expects), its field in the section
//! (`fragment.rs`; a test fails when one is missing), its validation and default in the section's
//! module, and its line in docs/config.md (a test checks).

mod check;
mod fragment;
mod kubelet;
mod node;
mod paths;
mod reboot;
mod reboot_gates;
mod schema;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[cfg(test)]
use fragment::Fragment;
pub(crate) use fragment::{load, load_files, Merged};
#[cfg(test)]
use kubelet::DEFAULT_IMAGE;
pub use kubelet::{Runtime, PROVIDER_ID_AWS};
pub use node::{Role, Taint};
pub use paths::Network;
#[cfg(test)]
pub(crate) use reboot::DEFAULT_LISTEN;
pub use reboot::{RebootPolicy, RebootStrategy};
pub use reboot_gates::{whole as whole_pattern, AlertGate, RebootGates, Unreachable};
#[cfg(test)]
use schema::{Kind, SCHEMA};

use crate::host::Host;

/// Config directories, lowest precedence first (paths on the node, under the root).
pub(crate) const CONFIG_DIRS: [&str; 3] = [
    "/usr/lib/nodectl/config.d",
    "/run/nodectl/config.d",
    "/etc/nodectl/config.d",
];

/// A refused configuration: the file, the key and what was expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub struct ConfigError {
    /// The fragment the problem is in; `None` when it comes from the merge (e.g. a missing key).
    pub file: Option<PathBuf>,
    /// Dotted key, e.g. `node.role`.
    pub key: String,
    /// What is wrong, and what is expected.
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

/// The validated configuration the agent runs with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// `node.role`.
    pub role: Role,
    /// `node.name`, or the hostname.
    pub node_name: String,
    /// `node.labels`.
    pub labels: Vec<String>,
    /// `node.taints`.
    pub taints: Vec<Taint>,
    /// `kubelet.image`.
    pub kubelet_image: String,
    /// `kubelet.runtime`.
    pub runtime: Runtime,
    /// `kubelet.bootstrap_kubeconfig`.
    pub bootstrap_kubeconfig: PathBuf,
    /// `kubelet.kubeconfig`: the node kubeconfig nodectld writes.
    pub kubeconfig: PathBuf,
    /// kubelet's `seccompDefault`: every pod gets the RuntimeDefault profile.
    pub seccomp_default: bool,
    /// How often the API server is asked whether it still accepts the node's certificate (a
    /// 401 sends the node back to the bootstrap token); 0: never.
    pub credentials_check_secs: u64,
    /// How often the `NodectlReady` condition is sent when nothing changed (a change is sent
    /// at once); 0: never sent.
    pub condition_heartbeat_secs: u64,
    /// `kubelet.cluster_dns`.
    pub cluster_dns: std::net::IpAddr,
    /// `kubelet.cluster_domain`.
    pub cluster_domain: String,
    /// `kubelet.cloud_provider`.
    #[serde(default)]
    pub cloud_provider: Option<String>,
    /// `kubelet.provider_id` (`aws`: from the instance metadata).
    #[serde(default)]
    pub provider_id: Option<String>,
    /// `network.provider`.
    pub network: Network,
    /// `secrets.inbox`.
    pub secrets_inbox: PathBuf,
    /// `reboot.strategy`.
    pub reboot: RebootStrategy,
    /// The other `reboot.*` keys.
    pub reboot_policy: RebootPolicy,
    /// Trees kept at their managed labels (read first, written only where they differ).
    pub relabel: Vec<PathBuf>,
    /// The fragments that made these settings, in merge order.
    pub files: Vec<PathBuf>,
}

impl Settings {
    /// Validates the merge. `host` supplies OS-dependent defaults (runtime), `hostname` the
    /// default node name.
    pub fn validate(m: &Merged, host: &Host, hostname: &str) -> Result<Self, ConfigError> {
        let f = m.sections()?;
        let c = check::Check { merged: m };
        let node = node::Node::with_config(&f.node, &c, hostname)?;
        let kubelet = kubelet::Kubelet::with_config(&f.kubelet, &c, host)?;
        let network = Network::with_config(&f.network, &c)?;
        let secrets_inbox = paths::inbox(&f.secrets, &c)?;
        let (reboot, reboot_policy) = RebootPolicy::with_config(&f.reboot, &c, host.os, node.role)?;
        let relabel = paths::relabel(&f.selinux, &c)?;
        Ok(Settings {
            role: node.role,
            node_name: node.name,
            labels: node.labels,
            taints: node.taints,
            kubelet_image: kubelet.image,
            runtime: kubelet.runtime,
            bootstrap_kubeconfig: kubelet.bootstrap_kubeconfig,
            kubeconfig: kubelet.kubeconfig,
            seccomp_default: kubelet.seccomp_default,
            credentials_check_secs: kubelet.credentials_check_secs,
            condition_heartbeat_secs: kubelet.condition_heartbeat_secs,
            cluster_dns: kubelet.cluster_dns,
            cluster_domain: kubelet.cluster_domain,
            cloud_provider: kubelet.cloud_provider,
            provider_id: kubelet.provider_id,
            network,
            secrets_inbox,
            reboot,
            reboot_policy,
            relabel,
            files: m.files.clone(),
        })
    }

    /// Settings from one fragment's text (tests).
    #[cfg(test)]
    pub(crate) fn from_toml(text: &str, host: &Host, hostname: &str) -> Self {
        Settings::from_toml_checked(text, host, hostname).expect("valid test config")
    }

    /// As [`Settings::from_toml`], the error returned.
    #[cfg(test)]
    pub(crate) fn from_toml_checked(
        text: &str,
        host: &Host,
        hostname: &str,
    ) -> Result<Self, ConfigError> {
        let f = Path::new("/etc/nodectl/config.d/10-test.toml");
        let mut m = Merged::default();
        m.add(Fragment::parse(text, f)?, f);
        Settings::validate(&m, host, hostname)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{Host, Os};
    use crate::root::Root;

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

    /// Typhoon's modules pass worker labels and taints joined with commas (`join(",",
    /// var.node_labels)`, `""` for none); the templates write them as one string.
    #[test]
    fn labels_and_taints_take_typhoons_comma_joined_strings() {
        let host = crate::host::Host::generic();
        let s = Settings::from_toml(
            "[node]\nrole = \"worker\"\nlabels = \"pool=blue, example.com/tier=gold,\"\ntaints = \"\"\n",
            &host,
            "n1",
        );
        assert_eq!(s.labels, ["pool=blue", "example.com/tier=gold"]);
        assert!(s.taints.is_empty());
        let s = Settings::from_toml(
            "[node]\nrole = \"worker\"\ntaints = \"a=b:NoSchedule,c:NoExecute\"\n",
            &host,
            "n1",
        );
        let taints: Vec<&str> = s.taints.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(taints, ["a=b:NoSchedule", "c:NoExecute"]);
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
        // FleetLock is served to this node only (issue 14, item 3).
        let e = settings(
            &[(
                "30.toml",
                "[node]\nrole = \"worker\"\n[reboot]\nlisten = \"0.0.0.0:9455\"\n",
            )],
            &Host::generic(),
        )
        .unwrap_err();
        assert_eq!(e.key, "reboot.listen");
        assert!(e.to_string().contains("not a loopback address"), "{e}");
        // Only Zincati's user by default; names are checked; the abandon time is bounded.
        let ok = settings(
            &[("30.toml", "[node]\nrole = \"worker\"\n")],
            &Host::generic(),
        )
        .unwrap();
        assert_eq!(ok.reboot_policy.fleetlock_users, ["zincati"]);
        assert_eq!(ok.reboot_policy.fleetlock_units, ["zincati.service"]);
        assert_eq!(ok.reboot_policy.abandon_after_secs, 1800);
        for (text, key) in [
            (
                "[reboot]\nfleetlock_users = [\"Zin cati\"]\n",
                "reboot.fleetlock_users",
            ),
            (
                "[reboot]\nfleetlock_users = [\"\"]\n",
                "reboot.fleetlock_users",
            ),
            (
                "[reboot]\nfleetlock_units = [\"../zincati.service\"]\n",
                "reboot.fleetlock_units",
            ),
            (
                "[reboot]\nfleetlock_units = [\"zincati\"]\n",
                "reboot.fleetlock_units",
            ),
            (
                "[reboot]\nabandon_after_secs = 0\n",
                "reboot.abandon_after_secs",
            ),
            (
                "[reboot]\nabandon_after_secs = 9223372036854775807\n",
                "reboot.abandon_after_secs",
            ),
        ] {
            let e = settings(
                &[("30.toml", &format!("[node]\nrole = \"worker\"\n{text}"))],
                &Host::generic(),
            )
            .unwrap_err();
            assert_eq!(e.key, key, "{text}");
        }
        // A literal provider id goes into kubelet.service's command line: nothing systemd or a
        // shell would interpret.
        for bad in [
            "aws:///z/i-1;x",
            "aws:///z/%n",
            "aws:///z/\"x",
            "aws:///z/i 1",
            "noscheme",
        ] {
            let text = format!("[node]\nrole = \"worker\"\n[kubelet]\nprovider_id = {bad:?}\n");
            let e = settings(&[("30.toml", &text)], &Host::generic()).unwrap_err();
            assert_eq!(e.key, "kubelet.provider_id", "{bad}");
        }
        // Bounded: near i64::MAX the interval would overflow `Instant + Duration` (a panic, and
        // with panic=abort the end of nodectld); a group of 2^32+1 slots would wrap to 1.
        for (key, frag) in [
            (
                "kubelet.credentials_check_secs",
                "[kubelet]\ncredentials_check_secs = 9223372036854775807\n",
            ),
            ("reboot.group_slots", "[reboot]\ngroup_slots = 4294967297\n"),
            (
                "reboot.drain_timeout_secs",
                "[reboot]\ndrain_timeout_secs = 9223372036854775807\n",
            ),
            (
                "reboot.stale_after_secs",
                "[reboot]\nstale_after_secs = 9223372036854775807\n",
            ),
        ] {
            let text = format!("[node]\nrole = \"worker\"\n{frag}");
            let e = settings(&[("30.toml", &text)], &Host::generic()).unwrap_err();
            assert_eq!(e.key, key);
            assert!(e.to_string().contains("at most"), "{e}");
        }

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
    fn no_relabel_tree_holds_or_is_inside_var_lib_kubelet() {
        for tree in ["/var/lib/kubelet", "/var/lib/kubelet/pods", "/var", "/"] {
            let e = settings(
                &[(
                    "10.toml",
                    &format!("[node]\nrole = \"worker\"\n[selinux]\nrelabel = [\"/etc/kubernetes\", \"{tree}\"]\n"),
                )],
                &Host::generic(),
            )
            .unwrap_err();
            assert_eq!(e.key, "selinux.relabel", "{tree}");
            assert!(e.to_string().contains("/var/lib/kubelet"), "{e}");
        }
        let s = settings(
            &[("10.toml", "[node]\nrole = \"worker\"\n[selinux]\nrelabel = [\"/etc/kubernetes\", \"/var/lib/kubelet-other\"]\n")],
            &Host::generic(),
        )
        .unwrap();
        assert_eq!(s.relabel.len(), 2);
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
    fn every_schema_key_has_a_section_field() {
        let mut text = String::new();
        for (t, k, kind, _) in SCHEMA {
            let v = match kind {
                Kind::Str => "\"x\"",
                Kind::List | Kind::Items => "[\"x\"]",
                Kind::Bool => "true",
                Kind::Int => "1",
                Kind::Argvs => "[[\"/x\"]]",
            };
            text.push_str(&format!("[{t}]\n{k} = {v}\n"));
        }
        let mut m = Merged::default();
        for chunk in text.split_inclusive('\n').collect::<Vec<_>>().chunks(2) {
            let f = file("10.toml");
            m.add(Fragment::parse(&chunk.concat(), &f).unwrap(), &f);
        }
        let s = m.sections().unwrap();
        assert_eq!(s.reboot.time_zone.as_deref(), Some("x"));
        assert_eq!(s.selinux.relabel, Some(vec!["x".to_string()]));
    }

    #[test]
    fn every_key_is_documented() {
        let doc = include_str!("../../../docs/config.md");
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
