//! The steps that bring a node up, and their dependencies:
//!
//! ```text
//! node-files ───────────────┐
//! kubelet-unit ─────────────┼──> kubelet-running
//! bootstrap-kubeconfig ─────┘
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use nodectl_units::kubelet::{self, KubeletSpec};

use crate::config::{Network, Role, Runtime};
use crate::context::Cx;
use crate::engine::{Change, Engine, Observation, Step};
use crate::fsio::{DirSpec, FileSpec};
use crate::host::Os;

pub const SYSTEMD_DIR: &str = "/etc/systemd/system";
/// Written before kubelet's definition changes and removed once kubelet was restarted on it, so
/// a crash between the two still restarts kubelet on the next pass.
pub const RESTART_MARKER: &str = "/run/nodectl/kubelet.restart-pending";
pub const MANAGED_HEADER: &str = "# Managed by nodectl";

/// The steps of a node, in an engine.
pub fn engine() -> Engine {
    Engine::new(vec![
        Box::new(NodeFiles),
        Box::new(KubeletUnit),
        Box::new(BootstrapKubeconfig),
        Box::new(KubeletRunning),
    ])
    .expect("the built-in step graph is acyclic")
}

/// A set of directories and files a step owns, plus files it removes when it wrote them.
#[derive(Default)]
struct FileSet {
    dirs: Vec<DirSpec>,
    files: Vec<FileSpec>,
    /// Files removed when present and carrying [`MANAGED_HEADER`] (never an operator's file).
    remove_if_ours: Vec<PathBuf>,
}

impl FileSet {
    fn changes(&self, cx: &Cx) -> anyhow::Result<Vec<Change>> {
        let w = cx.writer();
        let mut out = Vec::new();
        for d in &self.dirs {
            let diff = w.check_dir(d)?;
            if !diff.is_empty() {
                let what = if diff.missing {
                    format!("create directory {} ({:04o})", d.path.display(), d.mode)
                } else {
                    format!("fix directory {}", d.path.display())
                };
                out.push(Change::new(what, diff.to_string()));
            }
        }
        for f in &self.files {
            let diff = w.check(f)?;
            if !diff.is_empty() {
                let what = if diff.missing {
                    format!("write {} ({:04o})", f.path.display(), f.mode)
                } else if diff.content {
                    format!("update {}", f.path.display())
                } else {
                    format!("fix {}", f.path.display())
                };
                out.push(Change::new(what, diff.to_string()));
            }
        }
        for p in &self.remove_if_ours {
            if is_ours(&cx.root.path(p)) {
                out.push(Change::new(
                    format!("remove {}", p.display()),
                    "written by nodectl and no longer wanted by the settings",
                ));
            }
        }
        Ok(out)
    }

    /// Applies; returns whether anything under `/etc/systemd/system` changed.
    fn apply(&self, cx: &Cx) -> anyhow::Result<bool> {
        let w = cx.writer();
        let mut unit_changed = false;
        for d in &self.dirs {
            w.ensure_dir(d)?;
        }
        for f in &self.files {
            let out = w.write(f)?;
            if out != crate::fsio::Outcome::Unchanged && f.path.starts_with(SYSTEMD_DIR) {
                unit_changed = true;
            }
        }
        for p in &self.remove_if_ours {
            if is_ours(&cx.root.path(p)) {
                w.remove(p)?;
                unit_changed |= p.starts_with(SYSTEMD_DIR);
            }
        }
        Ok(unit_changed)
    }
}

fn is_ours(real: &Path) -> bool {
    std::fs::read_to_string(real).is_ok_and(|t| t.starts_with(MANAGED_HEADER))
}

fn summary(n: usize, what: &str) -> String {
    format!("{n} {what} in place")
}

/// Host files kubelet and the CNI depend on: kernel modules, sysctls, logind's inhibitor delay
/// for graceful node shutdown, the directories kubelet mounts, and on FCOS with flannel the
/// `.link` file that keeps udev from replacing flannel's MAC.
pub struct NodeFiles;

impl NodeFiles {
    fn set(cx: &Cx) -> FileSet {
        let s = &cx.settings;
        let mut sysctl = format!("{MANAGED_HEADER}\nfs.inotify.max_user_watches=16184\n");
        if cx.host.os == Os::FedoraCoreos {
            sysctl.push_str("net.ipv4.conf.default.rp_filter=0\nnet.ipv4.conf.*.rp_filter=0\n");
        }
        let mut files = vec![
            FileSpec::new(
                "/etc/modules-load.d/nodectl.conf",
                format!("{MANAGED_HEADER}\nbr_netfilter\nnf_conntrack\n"),
                0o644,
            ),
            FileSpec::new("/etc/sysctl.d/50-nodectl.conf", sysctl, 0o644),
            FileSpec::new(
                "/etc/systemd/logind.conf.d/50-nodectl-inhibitors.conf",
                format!("{MANAGED_HEADER}: graceful node shutdown (kubelet shutdownGracePeriod 45s)\n[Login]\nInhibitDelayMaxSec=45s\n"),
                0o644,
            ),
        ];
        let link = PathBuf::from("/etc/systemd/network").join(kubelet::FLANNEL_LINK);
        let mut remove_if_ours = Vec::new();
        if s.network == Network::Flannel && cx.host.os == Os::FedoraCoreos {
            files.push(FileSpec::new(&link, kubelet::flannel_link(), 0o644));
        } else {
            remove_if_ours.push(link);
        }
        let dirs = [
            ("/etc/kubernetes", 0o755),
            ("/etc/kubernetes/manifests", 0o755),
            ("/etc/cni/net.d", 0o755),
            ("/opt/cni/bin", 0o755),
            ("/var/lib/kubelet", 0o700),
            ("/var/lib/kubelet/volumeplugins", 0o755),
        ]
        .into_iter()
        .map(|(p, m)| DirSpec::new(p, m))
        .collect();
        FileSet {
            dirs,
            files,
            remove_if_ours,
        }
    }
}

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
            let changes = set.changes(cx)?;
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
            Self::set(cx).apply(cx)?;
            Ok(())
        }
        .boxed()
    }
}

/// kubelet.service and the agent's image drop-in, enabled; systemd reloaded only when a unit
/// file changed, kubelet restarted only when its definition changed while it runs.
pub struct KubeletUnit;

impl KubeletUnit {
    pub fn spec(cx: &Cx) -> KubeletSpec {
        let s = &cx.settings;
        KubeletSpec {
            runtime: match s.runtime {
                Runtime::Podman => kubelet::Runtime::Podman,
                Runtime::Docker => kubelet::Runtime::Docker,
            },
            role: match s.role {
                Role::Controller => kubelet::Role::Controller,
                Role::Worker => kubelet::Role::Worker,
            },
            labels: s.labels.clone(),
            taints: s.taints.iter().map(|t| t.0.clone()).collect(),
            bootstrap_kubeconfig: s.bootstrap_kubeconfig.display().to_string(),
            kubeconfig: s.kubeconfig.display().to_string(),
            config: "/etc/kubernetes/kubelet.yaml".into(),
            selinux: cx.host.selinux.active(),
        }
    }

    fn set(cx: &Cx) -> FileSet {
        let dir = PathBuf::from(SYSTEMD_DIR);
        FileSet {
            dirs: vec![DirSpec::new(dir.join("kubelet.service.d"), 0o755)],
            files: vec![
                FileSpec::new(
                    dir.join(kubelet::KUBELET_UNIT),
                    Self::spec(cx).unit(),
                    0o644,
                ),
                FileSpec::new(
                    dir.join("kubelet.service.d").join(kubelet::IMAGE_DROPIN),
                    KubeletSpec::image_dropin(&cx.settings.kubelet_image),
                    0o644,
                ),
            ],
            remove_if_ours: Vec::new(),
        }
    }
}

fn kubelet_is_up(active: &str) -> bool {
    matches!(active, "active" | "activating" | "reloading")
}

impl Step for KubeletUnit {
    fn id(&self) -> &'static str {
        "kubelet-unit"
    }
    fn description(&self) -> &'static str {
        "kubelet.service and its image drop-in, enabled"
    }
    fn deps(&self) -> &'static [&'static str] {
        &[]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let mut changes = Self::set(cx).changes(cx)?;
            let state = cx.systemd.state(kubelet::KUBELET_UNIT).await?;
            let marker = cx.root.path(RESTART_MARKER).exists();
            if !changes.is_empty() || marker {
                changes.push(Change::new(
                    "reload systemd",
                    "kubelet's unit files changed",
                ));
                if kubelet_is_up(&state.active) {
                    changes.push(Change::new(
                        "restart kubelet.service",
                        "its definition changed while it runs",
                    ));
                }
            }
            if state.unit_file != "enabled" {
                changes.push(Change::new(
                    "enable kubelet.service",
                    format!(
                        "unit file state is {}",
                        if state.unit_file.is_empty() {
                            "unknown"
                        } else {
                            &state.unit_file
                        }
                    ),
                ));
            }
            Ok(if changes.is_empty() {
                Observation::Converged(format!(
                    "kubelet.service enabled, image {}",
                    cx.settings.kubelet_image
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
            let marker = cx.root.path(RESTART_MARKER);
            let was_up = kubelet_is_up(&cx.systemd.state(kubelet::KUBELET_UNIT).await?.active);
            let pending = !set.changes(cx)?.is_empty();
            if pending && was_up {
                cx.writer()
                    .write(&FileSpec::new(RESTART_MARKER, "", 0o600))
                    .context("recording the pending kubelet restart")?;
            }
            let changed = set.apply(cx)?;
            // EnableUnitFiles reads unit files from disk: enable first, then one reload covers
            // both the new files and the new symlinks.
            let enable = cx.systemd.state(kubelet::KUBELET_UNIT).await?.unit_file != "enabled";
            if enable {
                cx.systemd
                    .enable(&[kubelet::KUBELET_UNIT.to_string()])
                    .await?;
            }
            if changed || enable || marker.exists() {
                cx.systemd.reload().await?;
            }
            if marker.exists() {
                // Restart only a running kubelet: a stopped one is started by kubelet-running,
                // after everything it depends on.
                if kubelet_is_up(&cx.systemd.state(kubelet::KUBELET_UNIT).await?.active) {
                    tracing::info!(
                        unit = kubelet::KUBELET_UNIT,
                        "restarting: definition changed"
                    );
                    cx.systemd.restart(kubelet::KUBELET_UNIT).await?;
                }
                cx.writer().remove(Path::new(RESTART_MARKER))?;
            }
            Ok(())
        }
        .boxed()
    }
}

/// The bootstrap kubeconfig kubelet starts with; provisioning (Ignition or SSH) places it.
pub struct BootstrapKubeconfig;

impl Step for BootstrapKubeconfig {
    fn id(&self) -> &'static str {
        "bootstrap-kubeconfig"
    }
    fn description(&self) -> &'static str {
        "the bootstrap kubeconfig kubelet needs is present"
    }
    fn deps(&self) -> &'static [&'static str] {
        &[]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let p = &cx.settings.bootstrap_kubeconfig;
            let real = cx.root.path(p);
            Ok(match std::fs::metadata(&real) {
                Ok(m) if m.is_file() && m.len() > 0 => {
                    Observation::Converged(format!("{} present", p.display()))
                }
                Ok(_) => Observation::Waiting(format!("{} is empty or not a file", p.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Observation::Waiting(
                    format!("{} (placed by provisioning: Ignition or SSH)", p.display()),
                ),
                Err(e) => return Err(e).with_context(|| real.display().to_string()),
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, _cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move { Ok(()) }.boxed()
    }
}

/// kubelet is started once everything it needs is in place.
pub struct KubeletRunning;

impl Step for KubeletRunning {
    fn id(&self) -> &'static str {
        "kubelet-running"
    }
    fn description(&self) -> &'static str {
        "kubelet.service is started (after its files, unit and credentials)"
    }
    fn deps(&self) -> &'static [&'static str] {
        &["node-files", "kubelet-unit", "bootstrap-kubeconfig"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let st = cx.systemd.state(kubelet::KUBELET_UNIT).await?;
            Ok(if kubelet_is_up(&st.active) {
                Observation::Converged(format!("kubelet.service {} ({})", st.active, st.sub))
            } else {
                Observation::Changes(vec![Change::new(
                    "start kubelet.service",
                    format!("it is {} ({})", st.active, st.sub),
                )])
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            cx.systemd.start(kubelet::KUBELET_UNIT).await?;
            Ok(())
        }
        .boxed()
    }
}
