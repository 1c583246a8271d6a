//! The `kubelet-unit` step: kubelet.service and nodectld's image drop-in, enabled; one reload
//! when a unit file systemd has loaded changed (none on a fresh node); a restart when kubelet's
//! definition changed while it runs.

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use nodectl_units::kubelet::{self, KubeletSpec};

use super::fileset::FileSet;
use super::kubelet::*;
use crate::config::{Role, Runtime};
use crate::engine::{Change, Cx, Observation, Step};
use crate::fsio::{DirSpec, FileSpec};

/// kubelet.service and the agent's image drop-in, enabled; systemd reloaded only when a unit
/// file changed, kubelet restarted only when its definition changed while it runs.
pub(crate) struct KubeletUnit;

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
            env_file: KUBELET_ENV.into(),
            // As Typhoon: relabel options where SELinux enforces (FCOS), none where it is only
            // permissive (Flatcar) or absent.
            selinux: cx.host.selinux.mode == nodectl_selinux::Mode::Enforcing,
            // kubelet's name is the kernel's hostname, lowercased and trimmed, unless overridden
            // (component-helpers node/util/hostname.go GetHostname; load::hostname).
            hostname_override: Some(&s.node_name)
                .filter(|n| **n != crate::load::hostname(&cx.root))
                .cloned(),
            cloud_provider: s.cloud_provider.clone(),
            provider_id: provider_id(cx),
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

/// kubelet.service enabled as systemd's EnableUnitFiles leaves it: its `[Install]` link
/// (`WantedBy=`) naming the unit file nodectl writes, read as a link (never followed). Then a
/// pass asks systemd only for the unit's state: GetUnitFileState makes systemd look the unit
/// up across its search paths (~20 ms under QEMU TCG, on the bundle's path to kubelet). Any
/// other finding (no link, another target, the offline stand-in) asks systemd as before.
fn enabled_by_link(cx: &Cx) -> bool {
    let link = Path::new(SYSTEMD_DIR)
        .join(format!("{}.wants", kubelet::WANTED_BY))
        .join(kubelet::KUBELET_UNIT);
    std::fs::read_link(cx.root.path(&link))
        .is_ok_and(|t| t == Path::new(SYSTEMD_DIR).join(kubelet::KUBELET_UNIT))
}

/// The unit's state, and whether its unit file is enabled.
async fn unit_state(cx: &Cx) -> anyhow::Result<(nodectl_units::systemd::UnitState, bool)> {
    let linked = enabled_by_link(cx);
    let state = cx.systemd.brief(kubelet::KUBELET_UNIT, !linked).await?;
    let enabled = linked || state.unit_file == "enabled";
    Ok((state, enabled))
}

/// Whether systemd must re-read kubelet's unit files to see a change. Not when it has never
/// loaded them (`not-found`: a fresh node): systemd loads a not-found unit again by itself when
/// the unit directories changed since it last tried (src/core/manager.c,
/// `manager_unit_cache_should_retry_load`, called from `manager_load_unit_prepare` for LoadUnit and
/// StartUnit), so the first install costs no `daemon-reload` (about 4 s of the first pass under
/// QEMU TCG, issue 18). Once loaded, a changed file needs the reload.
fn needs_reload(state: &nodectl_units::systemd::UnitState) -> bool {
    state.load != "not-found"
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
            let t = std::time::Instant::now();
            let mut changes = Self::set(cx).changes(cx)?;
            let files = t.elapsed();
            let (state, enabled) = unit_state(cx).await?;
            let asked = t.elapsed() - files;
            // (a marker of the credentials is kubelet-credentials' to act on)
            let pending = restart_pending(cx).await?;
            tracing::debug!(
                target: "nodectl::engine",
                "kubelet-unit: files checked in {:.1} ms, systemd asked in {:.1} ms",
                files.as_secs_f64() * 1e3,
                asked.as_secs_f64() * 1e3
            );
            let reload =
                (!changes.is_empty() && needs_reload(&state)) || pending == Pending::Reload;
            if reload {
                changes.push(Change::new(
                    "reload systemd",
                    "kubelet's unit files changed",
                ));
            }
            if (reload || pending == Pending::Restart) && kubelet_is_up(&state.active) {
                changes.push(Change::new(
                    "restart kubelet.service",
                    "its definition changed while it runs",
                ));
            }
            if pending == Pending::Done {
                changes.push(Change::new(
                    format!("remove {RESTART_MARKER}"),
                    "kubelet was restarted on its new definition before the marker was removed",
                ));
            }
            if !enabled {
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
            // One read decides everything below: writing files and reloading neither stop
            // kubelet nor disable its unit file.
            let (before, enabled) = unit_state(cx).await?;
            let was_up = kubelet_is_up(&before.active);
            let pending = !set.changes(cx)?.is_empty();
            if pending && was_up {
                mark_restart(cx, Why::Unit)?;
            }
            let changed = !set.apply(cx)?.is_empty();
            // EnableUnitFiles reads unit files from disk: enable first, then one reload (when
            // one is needed) covers both the new files and the new symlinks. The symlinks only
            // matter at the next boot: this boot, kubelet is started by kubelet-running.
            let enable = !enabled;
            if enable {
                cx.systemd
                    .enable(&[kubelet::KUBELET_UNIT.to_string()])
                    .await?;
            }
            let marked = restart_pending(cx).await?;
            // (finish_restart reloads for a `pending` marker)
            if (changed || enable) && needs_reload(&before) && marked != Pending::Reload {
                cx.systemd.reload().await?;
            }
            if matches!(marked, Pending::Credentials | Pending::Issued) {
                return Ok(()); // kubelet-credentials restarts kubelet once its files are in
            }
            // Restart only a running kubelet: a stopped one is started by kubelet-running,
            // after everything it depends on.
            if was_up && matches!(marked, Pending::Reload | Pending::Restart) {
                tracing::info!(
                    unit = kubelet::KUBELET_UNIT,
                    "restarting: definition changed"
                );
            }
            finish_restart(cx, marked, was_up, true).await
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `[Install]` link naming nodectl's unit file says "enabled" without asking systemd;
    /// a link to another file (a unit shipped elsewhere) or none asks (the offline stand-in:
    /// never enabled here).
    #[tokio::test]
    async fn an_install_link_to_our_unit_file_is_enabled_without_asking_systemd() {
        let (_d, cx) = Cx::scratch();
        let root = &cx.root;
        assert!(!unit_state(&cx).await.unwrap().1);
        let wants = root.path("/etc/systemd/system/multi-user.target.wants");
        std::fs::create_dir_all(&wants).unwrap();
        let link = wants.join("kubelet.service");
        std::os::unix::fs::symlink("/usr/lib/systemd/system/kubelet.service", &link).unwrap();
        assert!(
            !unit_state(&cx).await.unwrap().1,
            "a link to another unit file"
        );
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("/etc/systemd/system/kubelet.service", &link).unwrap();
        assert!(unit_state(&cx).await.unwrap().1);
    }

    /// kubelet names its Node after the kernel's hostname (os.Hostname), not `/etc/hostname`:
    /// where the two differ, the override follows the kernel's name.
    #[test]
    fn the_override_is_judged_against_the_kernels_hostname_not_etc_hostname() {
        let (_d, mut cx) = Cx::scratch();
        let put = |p: &str, t: &str| {
            let p = cx.root.path(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, t).unwrap();
        };
        put("/etc/hostname", "static-name\n");
        put(crate::load::KERNEL_HOSTNAME, "Transient-Name\n");
        // node.name unset: the node is named as kubelet names itself, so no override.
        cx.settings = crate::config::Settings::from_toml(
            "[node]\nrole = \"worker\"\n",
            &cx.host,
            &crate::load::hostname(&cx.root),
        );
        assert_eq!(cx.settings.node_name, "transient-name");
        assert_eq!(KubeletUnit::spec(&cx).hostname_override, None);
        // node.name = the static name: kubelet would register as transient-name.
        cx.settings = crate::config::Settings::from_toml(
            "[node]\nrole = \"worker\"\nname = \"static-name\"\n",
            &cx.host,
            &crate::load::hostname(&cx.root),
        );
        assert_eq!(
            KubeletUnit::spec(&cx).hostname_override.as_deref(),
            Some("static-name")
        );
    }
}
