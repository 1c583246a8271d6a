//! The `node-files` step: kernel modules, sysctls, logind's inhibitor delay, kubelet.yaml,
//! kubelet's directories and the flannel `.link` file.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use nodectl_units::kubelet::{self};

use super::fileset::{managed_label, summary, FileSet};
use super::kubelet::*;
use super::relabel::Relabel;
use crate::config::{Network, Role};
use crate::engine::{Change, Cx, Observation, Step};
use crate::fsio::{DirSpec, FileSpec};
use crate::host::Os;

/// Files systemd applies only at boot, the oneshot service that applies them now, and the
/// marker that keeps that restart owed across a crash: written before the file changes,
/// removed after the restart (a crash in between restarts the service on the next pass; a
/// second run of these oneshots is harmless).
const APPLIED_BY: [(&str, &str, &str); 2] = [
    (
        "/etc/modules-load.d",
        "systemd-modules-load.service",
        "/run/nodectl/systemd-modules-load.restart-pending",
    ),
    (
        "/etc/sysctl.d",
        "systemd-sysctl.service",
        "/run/nodectl/systemd-sysctl.restart-pending",
    ),
];

/// `change` may change what the oneshot applies: a new, updated or removed file in `dir`, or a
/// label fix (a wrong label may be why the oneshot could not read the file at boot). An owner or
/// mode fix alone changes nothing for it (it reads as root).
fn applies(change: &Change, dir: &str) -> bool {
    change.what.contains(dir) && (!change.what.starts_with("fix ") || change.why.contains("label"))
}

/// Host files kubelet and the CNI depend on: kernel modules, sysctls, logind's inhibitor delay
/// for graceful node shutdown, the directories kubelet mounts, and on FCOS with flannel the
/// `.link` file that keeps udev from replacing flannel's MAC.
pub(crate) struct NodeFiles;

impl NodeFiles {
    fn set(cx: &Cx) -> FileSet {
        let s = &cx.settings;
        let sysctl = kubelet::sysctl_conf(cx.host.os == Os::FedoraCoreos);
        let mut files = vec![
            FileSpec::new(kubelet::MODULES_LOAD_FILE, kubelet::modules_load_conf(), 0o644),
            FileSpec::new(kubelet::SYSCTL_FILE, sysctl, 0o644),
            FileSpec::new(
                "/etc/systemd/logind.conf.d/50-nodectl-inhibitors.conf",
                format!("{MANAGED_HEADER}: graceful node shutdown (kubelet shutdownGracePeriod 45s)\n[Login]\nInhibitDelayMaxSec=45s\n"),
                0o644,
            ),
        ];
        let kubelet_yaml = kubelet::KubeletConfig {
            cluster_dns: s.cluster_dns.to_string(),
            cluster_domain: s.cluster_domain.clone(),
            seccomp_default: s.seccomp_default,
            client_ca_file: KUBELET_CA.into(),
            standalone: false,
        };
        let mut remove_if_ours = Vec::new();
        if s.role == Role::Controller {
            let standalone = kubelet::KubeletConfig {
                standalone: true,
                ..kubelet_yaml.clone()
            };
            files.push(FileSpec {
                label: managed_label(cx, Path::new(KUBELET_STANDALONE_YAML)),
                ..FileSpec::new(KUBELET_STANDALONE_YAML, standalone.render(), 0o644)
            });
        } else {
            remove_if_ours.push(PathBuf::from(KUBELET_STANDALONE_YAML));
        }
        files.push(FileSpec {
            label: managed_label(cx, Path::new(KUBELET_YAML)),
            ..FileSpec::new(KUBELET_YAML, kubelet_yaml.render(), 0o644)
        });
        let link = PathBuf::from("/etc/systemd/network").join(kubelet::FLANNEL_LINK);
        // udev's default MACAddressPolicy=persistent would replace flannel.1's MAC on FCOS and on
        // other systemd hosts; Flatcar ships its own link file for flannel.
        if s.network == Network::Flannel && cx.host.os != Os::Flatcar {
            files.push(FileSpec::new(&link, kubelet::flannel_link(), 0o644));
        } else {
            remove_if_ours.push(link);
        }
        let dirs = [
            ("/etc/kubernetes", 0o755),
            ("/etc/kubernetes/manifests", 0o755),
            ("/var/lib/kubelet", 0o700),
            // kubelet's container mounts it; podman refuses a missing host path.
            ("/var/lib/containerd", 0o711),
        ]
        .into_iter()
        .map(|(p, m)| DirSpec {
            label: managed_label(cx, Path::new(p)),
            ..DirSpec::new(p, m)
        })
        .chain(PLUGIN_DIRS.iter().map(|p| DirSpec {
            label: Some(Relabel::label()),
            ..DirSpec::new(p, 0o750)
        }))
        .chain([DirSpec {
            label: Some(Relabel::label()),
            ..DirSpec::new(VOLUME_PLUGIN_DIR, 0o755)
        }])
        .chain(CNI_DIRS.iter().map(|p| DirSpec {
            label: cni_label(cx, p),
            ..DirSpec::new(p, 0o755)
        }))
        .collect();
        FileSet {
            dirs,
            files,
            remove_if_ours,
        }
    }
}

/// Where the network's pods put their CNI configuration and plugins (flannel's and Cilium's
/// daemonsets write them through hostPath volumes).
pub(crate) const CNI_DIRS: [&str; 2] = ["/etc/cni/net.d", "/opt/cni/bin"];

/// Their label: where SELinux enforces, kubelet's unit mounts both with `:z` (as Typhoon's), so
/// every kubelet start labels them `container_file_t:s0`, which the network's pods need to
/// write there; nodectld gives them that label from the start rather than the policy's default,
/// which each kubelet start would undo and each pass after it put back (issue 38 found the two
/// fighting, in the bundle's pass). Elsewhere the policy's default (or a relabel tree's).
fn cni_label(cx: &Cx, path: &str) -> Option<nodectl_selinux::Context> {
    if cx.host.selinux.mode == nodectl_selinux::Mode::Enforcing {
        Some(Relabel::label())
    } else {
        managed_label(cx, Path::new(path))
    }
}

/// The directories in `/var/lib/kubelet` where kubelet's plugins (CSI drivers'
/// node-driver-registrar, device plugins: not privileged, each with its own MCS pair) create
/// their sockets: shared (`container_file_t:s0`), each directory alone, never the tree, and never
/// `/var/lib/kubelet` itself (pods' volumes, the node's credentials). kubelet labels the first
/// two the same way when it starts (pkg/kubelet/kubelet.go `setupDataDirs`,
/// `config.KubeletPluginsDirSELinuxLabel`), mode 0750; nodectld has them before kubelet's first
/// start, and `device-plugins/` too, which kubelet leaves at the policy default.
pub(crate) const PLUGIN_DIRS: [&str; 3] = [
    "/var/lib/kubelet/plugins_registry",
    "/var/lib/kubelet/plugins",
    "/var/lib/kubelet/device-plugins",
];

/// kubelet's `volumePluginDir` (flexvolume drivers): kube-controller-manager, a non-root
/// static pod with its own MCS pair, mounts it by hostPath (terraform-render-bootstrap's
/// manifest), so it is shared (`container_file_t:s0`) as Typhoon's `/var/lib/kubelet:z` mount
/// left it, not `/var/lib/kubelet`'s policy default (which that pod cannot read), 0755.
pub(crate) const VOLUME_PLUGIN_DIR: &str = "/var/lib/kubelet/volumeplugins";

impl Step for NodeFiles {
    fn id(&self) -> &'static str {
        "node-files"
    }
    fn description(&self) -> &'static str {
        "kernel modules, sysctls, logind inhibitor delay, kubelet directories, flannel link"
    }
    fn deps(&self) -> &'static [&'static str] {
        &[]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let set = Self::set(cx);
            let mut changes = set.changes(cx)?;
            for (dir, unit, marker) in APPLIED_BY {
                if changes.iter().any(|c| applies(c, dir)) || cx.root.path(marker).exists() {
                    changes.push(Change::new(
                        format!("restart {unit}"),
                        format!("so the new {dir} file takes effect now, not at the next boot"),
                    ));
                }
            }
            Ok(if changes.is_empty() {
                Observation::Converged(summary(
                    set.files.len() + set.dirs.len(),
                    "files and directories",
                ))
            } else {
                Observation::Changes(changes)
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let set = Self::set(cx);
            let changes = set.changes(cx)?;
            for (dir, _, marker) in APPLIED_BY {
                if changes.iter().any(|c| applies(c, dir)) {
                    cx.writer()
                        .write(&FileSpec::new(marker, "pending\n", 0o600))
                        .with_context(|| format!("recording the restart {dir} needs"))?;
                }
            }
            set.apply(cx)?;
            let owed: Vec<_> = APPLIED_BY
                .iter()
                .filter(|(_, _, marker)| cx.root.path(marker).exists())
                .collect();
            // Both restarts at once (each waits for its job; modprobe alone takes a while).
            let restarts = owed.iter().map(|(_, unit, _)| cx.systemd.restart(unit));
            let results = futures_util::future::join_all(restarts).await;
            // A job that ended, even failed, is not owed again: the marker is for a crash
            // before the job (a oneshot failing on some file would otherwise be restarted,
            // and fail, in every pass). The failure is this pass's error.
            for (_, _, marker) in owed {
                cx.writer().remove(Path::new(marker))?;
            }
            results.into_iter().collect::<Result<Vec<()>, _>>()?;
            Ok(())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The directories a non-root control-plane pod or a plugin mounts carry the shared label;
    /// kubelet's own directory keeps the policy default.
    #[test]
    fn directories_pods_mount_are_shared_and_kubelets_own_is_not() {
        let (_d, cx) = Cx::scratch();
        let set = NodeFiles::set(&cx);
        let label = |p: &str| {
            set.dirs
                .iter()
                .find(|d| d.path == Path::new(p))
                .unwrap()
                .label
                .clone()
        };
        for p in PLUGIN_DIRS.iter().chain([&VOLUME_PLUGIN_DIR]) {
            assert_eq!(label(p), Some(Relabel::label()), "{p}");
        }
        assert_eq!(label("/var/lib/kubelet"), None);
    }

    /// Where SELinux enforces, the CNI directories carry the label kubelet's `:z` mounts give
    /// them at every start (the network's pods write there), so no pass undoes it; elsewhere the
    /// policy's default.
    #[test]
    fn the_cni_directories_keep_the_label_kubelets_mounts_give_them() {
        let label = |cx: &Cx, p: &str| {
            NodeFiles::set(cx)
                .dirs
                .iter()
                .find(|d| d.path == Path::new(p))
                .unwrap()
                .label
                .clone()
        };
        let (_d, mut cx) = Cx::scratch();
        for p in CNI_DIRS {
            assert_eq!(label(&cx, p), None, "{p}");
        }
        cx.host.selinux.mode = nodectl_selinux::Mode::Enforcing;
        for p in CNI_DIRS {
            assert_eq!(label(&cx, p), Some(Relabel::label()), "{p}");
        }
    }

    #[test]
    fn new_content_or_a_label_fix_owes_the_oneshot_a_restart_a_mode_or_owner_fix_does_not() {
        let c = |what: &str, why: &str| Change::new(what, why);
        let dir = "/etc/sysctl.d";
        for (what, why) in [
            ("write /etc/sysctl.d/50-nodectl.conf (0644)", "missing"),
            ("update /etc/sysctl.d/50-nodectl.conf", "content differs"),
            ("remove /etc/sysctl.d/50-nodectl.conf", "no longer wanted"),
            (
                "fix /etc/sysctl.d/50-nodectl.conf",
                "label system_u:object_r:var_t:s0 -> system_u:object_r:etc_t:s0",
            ),
        ] {
            assert!(applies(&c(what, why), dir), "{what}: {why}");
        }
        for (what, why) in [
            ("fix /etc/sysctl.d/50-nodectl.conf", "mode 0600 -> 0644"),
            ("fix directory /etc/sysctl.d", "owner 1000:0 -> 0:0"),
            ("write /etc/modules-load.d/nodectl.conf (0644)", "missing"),
        ] {
            assert!(!applies(&c(what, why), dir), "{what}: {why}");
        }
    }
}
