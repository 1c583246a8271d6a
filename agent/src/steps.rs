//! The steps that bring a node up, and their dependencies:
//!
//! ```text
//! node-files ──────────────────────────────┐
//! kubelet-unit ────────────────────────────┤
//! secrets ──> relabel ─────────────────────┤
//! secrets ──> bootstrap-kubeconfig ──> kubelet-ca ───────────┼──> kubelet-running
//!             bootstrap-kubeconfig ──> kubelet-credentials ──┘
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
pub const KUBELET_YAML: &str = "/etc/kubernetes/kubelet.yaml";
/// The cluster CA kubelet verifies clients against, taken from the bootstrap kubeconfig.
pub const KUBELET_CA: &str = "/etc/kubernetes/ca.crt";

/// The steps of a node, in an engine.
pub fn engine() -> Engine {
    Engine::new(vec![
        Box::new(NodeFiles),
        Box::new(KubeletUnit),
        Box::new(Secrets),
        Box::new(Relabel::default()),
        Box::new(BootstrapKubeconfig),
        Box::new(KubeletCa),
        Box::new(crate::kubelet_credentials::KubeletCredentials::default()),
        Box::new(KubeletRunning),
    ])
    .expect("the built-in step graph is acyclic")
}

/// A set of directories and files a step owns, plus files it removes when it wrote them.
#[derive(Default)]
pub(crate) struct FileSet {
    pub(crate) dirs: Vec<DirSpec>,
    pub(crate) files: Vec<FileSpec>,
    /// Files removed when present and carrying [`MANAGED_HEADER`] (never an operator's file).
    pub(crate) remove_if_ours: Vec<PathBuf>,
}

impl FileSet {
    pub(crate) fn changes(&self, cx: &Cx) -> anyhow::Result<Vec<Change>> {
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

    /// Applies; returns the node paths of the files written or removed.
    pub(crate) fn apply(&self, cx: &Cx) -> anyhow::Result<Vec<PathBuf>> {
        let w = cx.writer();
        let mut changed = Vec::new();
        for d in &self.dirs {
            w.ensure_dir(d)?;
        }
        for f in &self.files {
            if w.write(f)? != crate::fsio::Outcome::Unchanged {
                changed.push(f.path.clone());
            }
        }
        for p in &self.remove_if_ours {
            if is_ours(&cx.root.path(p)) {
                w.remove(p)?;
                changed.push(p.clone());
            }
        }
        Ok(changed)
    }
}

/// The label of a path inside a managed tree (`selinux.relabel`), so what nodectld creates there
/// is born with the label the relabel step keeps; `None` elsewhere (the policy's default).
pub(crate) fn managed_label(cx: &Cx, path: &Path) -> Option<nodectl_selinux::Context> {
    cx.settings
        .relabel
        .iter()
        .any(|t| path.starts_with(t))
        .then(Relabel::label)
}

fn is_ours(real: &Path) -> bool {
    std::fs::read_to_string(real).is_ok_and(|t| t.starts_with(MANAGED_HEADER))
}

fn summary(n: usize, what: &str) -> String {
    format!("{n} {what} in place")
}

/// Files systemd applies only at boot, and the oneshot service that applies them now.
const APPLIED_BY: [(&str, &str); 2] = [
    ("/etc/modules-load.d", "systemd-modules-load.service"),
    ("/etc/sysctl.d", "systemd-sysctl.service"),
];

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
        let kubelet_yaml = kubelet::KubeletConfig {
            cluster_dns: s.cluster_dns.to_string(),
            cluster_domain: s.cluster_domain.clone(),
            seccomp_default: s.seccomp_default,
            client_ca_file: KUBELET_CA.into(),
        };
        files.push(FileSpec {
            label: managed_label(cx, Path::new(KUBELET_YAML)),
            ..FileSpec::new(KUBELET_YAML, kubelet_yaml.render(), 0o644)
        });
        let link = PathBuf::from("/etc/systemd/network").join(kubelet::FLANNEL_LINK);
        let mut remove_if_ours = Vec::new();
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
            ("/etc/cni/net.d", 0o755),
            ("/opt/cni/bin", 0o755),
            ("/var/lib/kubelet", 0o700),
            ("/var/lib/kubelet/volumeplugins", 0o755),
            // kubelet's container mounts it; podman refuses a missing host path.
            ("/var/lib/containerd", 0o711),
        ]
        .into_iter()
        .map(|(p, m)| DirSpec {
            label: managed_label(cx, Path::new(p)),
            ..DirSpec::new(p, m)
        })
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
            let mut changes = set.changes(cx)?;
            for (dir, unit) in APPLIED_BY {
                if changes.iter().any(|c| c.what.contains(dir)) {
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
            let changed = Self::set(cx).apply(cx)?;
            for (dir, unit) in APPLIED_BY {
                if changed.iter().any(|p| p.starts_with(dir)) {
                    cx.systemd.restart(unit).await?;
                }
            }
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
            env_file: crate::kubelet_credentials::KUBELET_ENV.into(),
            config: "/etc/kubernetes/kubelet.yaml".into(),
            // As Typhoon: relabel options where SELinux enforces (FCOS), none where it is only
            // permissive (Flatcar) or absent.
            selinux: cx.host.selinux.mode == nodectl_selinux::Mode::Enforcing,
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

pub(crate) fn kubelet_is_up(active: &str) -> bool {
    matches!(active, "active" | "activating" | "reloading")
}

/// Starts (or restarts) kubelet.service: waits for the job, except in nodectld's first pass
/// (see [`Cx::activating`]), where the job is queued and runs once the pass has ended.
pub(crate) async fn start_kubelet(cx: &Cx, restart: bool) -> anyhow::Result<()> {
    if cx.activating {
        cx.systemd.queue(kubelet::KUBELET_UNIT, restart).await?;
        tracing::info!(
            unit = kubelet::KUBELET_UNIT,
            "{} queued: it runs once nodectld is ready (kubelet is ordered after it)",
            if restart { "restart" } else { "start" }
        );
    } else if restart {
        cx.systemd.restart(kubelet::KUBELET_UNIT).await?;
    } else {
        cx.systemd.start(kubelet::KUBELET_UNIT).await?;
    }
    Ok(())
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
            // One read decides everything below: writing files and reloading neither stop
            // kubelet nor disable its unit file.
            let before = cx.systemd.state(kubelet::KUBELET_UNIT).await?;
            let was_up = kubelet_is_up(&before.active);
            let pending = !set.changes(cx)?.is_empty();
            if pending && was_up {
                cx.writer()
                    .write(&FileSpec::new(RESTART_MARKER, "", 0o600))
                    .context("recording the pending kubelet restart")?;
            }
            let changed = !set.apply(cx)?.is_empty();
            // EnableUnitFiles reads unit files from disk: enable first, then one reload covers
            // both the new files and the new symlinks.
            let enable = before.unit_file != "enabled";
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
                if was_up {
                    tracing::info!(
                        unit = kubelet::KUBELET_UNIT,
                        "restarting: definition changed"
                    );
                    start_kubelet(cx, true).await?;
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
        &["secrets"]
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
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Removed after the node got its own certificate: not needed until that
                    // certificate expires or is refused.
                    let held = crate::kubelet_credentials::read(&cx.root);
                    let now = std::time::SystemTime::now();
                    match held {
                        Some(h)
                            if !h.validity.expired(now)
                                && cx.root.path(&cx.settings.kubeconfig).is_file() =>
                        {
                            Observation::Converged(format!(
                                "{} absent, not needed: the node holds its own certificate",
                                p.display()
                            ))
                        }
                        _ => Observation::Waiting(format!(
                            "{} (placed by provisioning: Ignition or SSH)",
                            p.display()
                        )),
                    }
                }
                Err(e) => return Err(e).with_context(|| real.display().to_string()),
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, _cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move { Ok(()) }.boxed()
    }
}

/// `/etc/kubernetes/ca.crt` (kubelet.yaml's `clientCAFile`), taken from the bootstrap
/// kubeconfig's cluster by parsing it, not by a grep/awk/base64 pipeline.
pub struct KubeletCa;

impl KubeletCa {
    /// The kubeconfig the CA comes from: the bootstrap kubeconfig, or once it was removed after
    /// the node got its certificate, the node kubeconfig.
    fn source(cx: &Cx) -> &Path {
        let s = &cx.settings;
        if !cx.root.path(&s.bootstrap_kubeconfig).exists() && cx.root.path(&s.kubeconfig).exists() {
            &s.kubeconfig
        } else {
            &s.bootstrap_kubeconfig
        }
    }

    fn spec(cx: &Cx) -> anyhow::Result<FileSpec> {
        let pem = crate::kubeconfig::cluster_ca(&cx.root, Self::source(cx))?;
        Ok(FileSpec {
            label: managed_label(cx, Path::new(KUBELET_CA)),
            ..FileSpec::new(KUBELET_CA, pem, 0o644)
        })
    }
}

impl Step for KubeletCa {
    fn id(&self) -> &'static str {
        "kubelet-ca"
    }
    fn description(&self) -> &'static str {
        "the cluster CA for kubelet, from the bootstrap kubeconfig"
    }
    fn deps(&self) -> &'static [&'static str] {
        &["bootstrap-kubeconfig"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let set = FileSet {
                files: vec![Self::spec(cx)?],
                ..FileSet::default()
            };
            let changes = set.changes(cx)?;
            Ok(if changes.is_empty() {
                Observation::Converged(format!(
                    "{KUBELET_CA} matches {}",
                    Self::source(cx).display()
                ))
            } else {
                Observation::Changes(changes)
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            cx.writer().write(&Self::spec(cx)?)?;
            Ok(())
        }
        .boxed()
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
        &[
            "node-files",
            "kubelet-unit",
            "secrets",
            "relabel",
            "bootstrap-kubeconfig",
            "kubelet-ca",
            "kubelet-credentials",
        ]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let st = cx.systemd.state(kubelet::KUBELET_UNIT).await?;
            Ok(if kubelet_is_up(&st.active) {
                Observation::Converged(format!("kubelet.service {} ({})", st.active, st.sub))
            } else if st.job != 0 {
                Observation::Converged(format!(
                    "kubelet.service {} ({}), a job queued for it (it runs once nodectld is ready)",
                    st.active, st.sub
                ))
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
            start_kubelet(cx, false).await?;
            Ok(())
        }
        .boxed()
    }
}

/// How long a bundle must be left alone (no modification) before it is read: a bundle copied in
/// place (scp) is complete once its writer stopped. Renaming a finished file into the inbox is
/// always safe.
pub const BUNDLE_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Bootstrap secrets: bundles dropped into the inbox are checked whole, then every file is placed
/// with its final owner, mode and label through the one atomic write; the bundle is then removed
/// from the inbox. On a controller, kubelet waits until the control plane's certificates are in
/// place.
pub struct Secrets;

impl Secrets {
    /// Regular, non-hidden files in the inbox, by name (node paths).
    fn bundles(cx: &Cx) -> anyhow::Result<Vec<PathBuf>> {
        let inbox = &cx.settings.secrets_inbox;
        let real = cx.root.path(inbox);
        let entries = match std::fs::read_dir(&real) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(e).with_context(|| format!("reading the inbox {}", real.display()))
            }
        };
        let mut out = Vec::new();
        for e in entries {
            let e = e.with_context(|| real.display().to_string())?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !e.file_type()?.is_file() {
                continue;
            }
            out.push(inbox.join(name));
        }
        out.sort();
        Ok(out)
    }

    /// The files a bundle places, checked whole (nothing is placed from an invalid bundle).
    fn fileset(cx: &Cx, bundle: &Path) -> anyhow::Result<FileSet> {
        let real = cx.root.path(bundle);
        let bytes = std::fs::read(&real).with_context(|| format!("reading {}", real.display()))?;
        let records = crate::bundle::parse(&bytes, bundle)?;
        let plan = crate::bundle::plan(
            &records,
            crate::bundle::TYPHOON_LAYOUT,
            cx.settings.role,
            &cx.settings.bootstrap_kubeconfig,
            bundle,
        )?;
        let owner = |name: &str, what: &Path| {
            crate::accounts::resolve(&cx.root, name).map_err(|e| {
                anyhow::anyhow!(
                    "{}: {e} (owner of {}); nothing was placed",
                    bundle.display(),
                    what.display()
                )
            })
        };
        let mut set = FileSet::default();
        for d in &plan.dirs {
            let (uid, gid) = owner(d.owner, &d.dest)?;
            set.dirs.push(DirSpec {
                path: d.dest.clone(),
                mode: d.mode,
                uid,
                gid,
                label: d.label.clone(),
            });
        }
        for f in plan.files {
            let (uid, gid) = owner(f.owner, &f.dest)?;
            set.files.push(FileSpec {
                path: f.dest,
                content: f.content,
                mode: f.mode,
                uid,
                gid,
                label: f.label,
            });
        }
        Ok(set)
    }

    fn settling(cx: &Cx, bundle: &Path) -> bool {
        std::fs::metadata(cx.root.path(bundle))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < BUNDLE_SETTLE)
    }

    /// On a controller the control plane needs its certificates before kubelet starts.
    fn controller_ready(cx: &Cx) -> bool {
        cx.settings.role != Role::Controller || cx.root.path("/etc/kubernetes/pki/ca.crt").exists()
    }
}

impl Step for Secrets {
    fn id(&self) -> &'static str {
        "secrets"
    }
    fn description(&self) -> &'static str {
        "bootstrap secrets from the inbox, placed with final owner, mode and label"
    }
    fn deps(&self) -> &'static [&'static str] {
        &["node-files"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let bundles = Self::bundles(cx)?;
            let mut changes = Vec::new();
            for b in &bundles {
                if Self::settling(cx, b) {
                    cx.recheck_in(BUNDLE_SETTLE);
                    return Ok(Observation::Waiting(format!(
                        "{} to be completely written (modified less than {}s ago)",
                        b.display(),
                        BUNDLE_SETTLE.as_secs()
                    )));
                }
                let set = Self::fileset(cx, b)?;
                changes.extend(set.changes(cx)?);
                changes.push(Change::new(
                    format!("remove {} from the inbox", b.display()),
                    format!("its {} files are placed", set.files.len()),
                ));
            }
            if !changes.is_empty() {
                return Ok(Observation::Changes(changes));
            }
            if !Self::controller_ready(cx) {
                return Ok(Observation::Waiting(format!(
                    "the bootstrap assets bundle in {} (a controller needs /etc/kubernetes/pki)",
                    cx.settings.secrets_inbox.display()
                )));
            }
            Ok(Observation::Converged(format!(
                "no bundle pending in {}",
                cx.settings.secrets_inbox.display()
            )))
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            for b in Self::bundles(cx)? {
                if Self::settling(cx, &b) {
                    continue;
                }
                // Checked whole before anything is written.
                let set = Self::fileset(cx, &b)?;
                set.apply(cx)?;
                tracing::info!(bundle = %b.display(), files = set.files.len(), "placed {} files from {}", set.files.len(), b.display());
                cx.writer().remove(&b)?;
            }
            Ok(())
        }
        .boxed()
    }
}

/// Keeps the managed trees (`selinux.relabel`) at their label: shared `container_file_t:s0`.
/// One tracker per tree lives as long as the step (the daemon's life): after a first full scan,
/// a check reads only entries that changed since (inotify), so a pass with nothing changed costs
/// no label reads at all.
#[derive(Default)]
pub struct Relabel {
    trackers:
        std::sync::Mutex<std::collections::HashMap<PathBuf, nodectl_selinux::relabel::Tracker>>,
}

impl Relabel {
    pub fn label() -> nodectl_selinux::Context {
        nodectl_selinux::Context::shared_container_file()
    }

    /// Private files that carry a container-readable label now, with the label they should
    /// have (the policy default): (real path, current, wanted).
    fn private_fixes(
        cx: &Cx,
    ) -> Vec<(PathBuf, nodectl_selinux::Context, nodectl_selinux::Context)> {
        let mut out = Vec::new();
        for p in crate::credentials::paths(&cx.settings) {
            let real = cx.root.path(&p);
            let mut paths = vec![(p.clone(), real.clone())];
            if let Ok(rd) = std::fs::read_dir(&real) {
                for e in rd.flatten() {
                    paths.push((p.join(e.file_name()), e.path()));
                }
            }
            for (node, real) in paths {
                let Ok(Some(cur)) = cx.labeler.get(&real) else {
                    continue;
                };
                if !cur.to_string().contains(":container_file_t:") {
                    continue;
                }
                let Ok(meta) = std::fs::symlink_metadata(&real) else {
                    continue;
                };
                use std::os::unix::fs::MetadataExt;
                if let Some(want) = cx.labeler.private_for(&node, meta.mode()) {
                    if want != cur {
                        out.push((real, cur, want));
                    }
                }
            }
        }
        out
    }

    fn run(
        &self,
        cx: &Cx,
        dry_run: bool,
    ) -> anyhow::Result<Vec<(PathBuf, nodectl_selinux::relabel::Report)>> {
        let mut trackers = self.trackers.lock().expect("relabel trackers");
        trackers.retain(|t, _| cx.settings.relabel.iter().any(|x| cx.root.path(x) == *t));
        let mut out = Vec::new();
        let private: Vec<PathBuf> = crate::credentials::paths(&cx.settings)
            .iter()
            .map(|p| cx.root.path(p))
            .collect();
        for tree in &cx.settings.relabel {
            let real = cx.root.path(tree);
            if !real.exists() {
                continue;
            }
            let exclude: Vec<PathBuf> = private
                .iter()
                .filter(|p| p.starts_with(&real))
                .cloned()
                .collect();
            if trackers
                .get(&real)
                .is_some_and(|t| t.exclude() != exclude.as_slice())
            {
                trackers.remove(&real);
            }
            let tracker = match trackers.entry(real.clone()) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(
                    nodectl_selinux::relabel::Tracker::new(&real, &Self::label())
                        .with_context(|| format!("watching {}", real.display()))?
                        .with_exclude(exclude),
                ),
            };
            out.push((tree.clone(), tracker.check(&cx.labeler, dry_run)));
        }
        Ok(out)
    }
}

fn relabel_errors(
    reports: &[(PathBuf, nodectl_selinux::relabel::Report)],
) -> Option<anyhow::Error> {
    let errors: Vec<String> = reports
        .iter()
        .flat_map(|(_, r)| r.errors.iter())
        .map(|e| format!("{}: {}", e.path.display(), e.error))
        .collect();
    (!errors.is_empty()).then(|| {
        let shown: Vec<&str> = errors.iter().take(5).map(String::as_str).collect();
        anyhow::anyhow!(
            "{} path(s) could not be relabeled: {}{}",
            errors.len(),
            shown.join("; "),
            if errors.len() > 5 { "; ..." } else { "" }
        )
    })
}

impl Step for Relabel {
    fn id(&self) -> &'static str {
        "relabel"
    }
    fn description(&self) -> &'static str {
        "managed trees carry their SELinux label (read first, written only where it differs)"
    }
    fn deps(&self) -> &'static [&'static str] {
        &["secrets"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            if let Some(why) = cx.labeler.skipped() {
                return Ok(Observation::Converged(format!("labels skipped: {why}")));
            }
            let reports = self.run(cx, true)?;
            if let Some(e) = relabel_errors(&reports) {
                return Err(e);
            }
            let mut changes = Vec::new();
            let mut examined = 0;
            for (tree, r) in &reports {
                examined += r.examined;
                if r.changed > 0 {
                    changes.push(Change::new(
                        format!(
                            "relabel {} entries under {} to {}",
                            r.changed,
                            tree.display(),
                            Self::label()
                        ),
                        format!(
                            "{} of {} entries carry another label",
                            r.changed, r.examined
                        ),
                    ));
                }
            }
            for (real, cur, want) in Self::private_fixes(cx) {
                changes.push(Change::new(
                    format!("relabel {} to {want}", real.display()),
                    format!("a node credential labeled {cur} is readable by containers"),
                ));
            }
            let how = if reports.iter().any(|(_, r)| r.full_scan) {
                "checked"
            } else {
                "changed since the last check"
            };
            Ok(if changes.is_empty() {
                Observation::Converged(format!(
                    "{examined} entries {how}, all labeled {}",
                    Self::label()
                ))
            } else {
                Observation::Changes(changes)
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let reports = self.run(cx, false)?;
            for (real, cur, want) in Self::private_fixes(cx) {
                cx.labeler.set_on_path(&real, &want)?;
                tracing::info!(path = %real.display(), "relabeled a node credential from {cur} to {want} (not readable by containers)");
            }
            for (tree, r) in &reports {
                tracing::info!(tree = %tree.display(), examined = r.examined, changed = r.changed, errors = r.errors.len(), "relabeled {} of {} entries under {}", r.changed, r.examined, tree.display());
            }
            match relabel_errors(&reports) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubelet must never start before anything else the node needs: every other step is a
    /// (transitive) dependency of kubelet-running.
    #[test]
    fn kubelet_running_depends_on_every_other_step() {
        let steps: Vec<Box<dyn Step>> = vec![
            Box::new(NodeFiles),
            Box::new(KubeletUnit),
            Box::new(Secrets),
            Box::new(Relabel::default()),
            Box::new(BootstrapKubeconfig),
            Box::new(KubeletCa),
            Box::new(crate::kubelet_credentials::KubeletCredentials::default()),
            Box::new(KubeletRunning),
        ];
        assert_eq!(
            engine().step_ids().len(),
            steps.len(),
            "a step was added to engine() but not to this test"
        );
        let deps = |id: &str| -> Vec<&'static str> {
            steps
                .iter()
                .find(|s| s.id() == id)
                .map(|s| s.deps().to_vec())
                .unwrap_or_default()
        };
        let mut reach = std::collections::BTreeSet::new();
        let mut todo = deps("kubelet-running");
        while let Some(d) = todo.pop() {
            if reach.insert(d) {
                todo.extend(deps(d));
            }
        }
        for s in &steps {
            if s.id() != "kubelet-running" {
                assert!(
                    reach.contains(s.id()),
                    "kubelet-running does not wait for {}",
                    s.id()
                );
            }
        }
    }
}
