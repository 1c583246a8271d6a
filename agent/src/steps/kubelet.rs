//! What the steps share about kubelet: its files, the restart marker, starting it.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use nodectl_units::kubelet;

use crate::engine::Cx;
use crate::fsio::FileSpec;

pub(crate) const SYSTEMD_DIR: &str = "/etc/systemd/system";
/// Written (`pending`) before kubelet's definition or inputs change, rewritten (`ready <time>`)
/// once they are all in place, just before the restart, and removed after it: a crash before
/// the restart still restarts kubelet on the next pass, and a crash after it does not restart
/// kubelet twice (it started after the `ready` time). See [`restart_pending`].
pub(crate) const RESTART_MARKER: &str = "/run/nodectl/kubelet.restart-pending";
pub(crate) const MANAGED_HEADER: &str = "# Managed by nodectl";
pub(crate) const KUBELET_YAML: &str = "/etc/kubernetes/kubelet.yaml";
/// A controller's KubeletConfiguration before the node has its credentials (no webhook).
pub(crate) const KUBELET_STANDALONE_YAML: &str = "/etc/kubernetes/kubelet-standalone.yaml";
/// The cluster CA kubelet verifies clients against, taken from the bootstrap kubeconfig.
pub(crate) const KUBELET_CA: &str = "/etc/kubernetes/ca.crt";

/// kubelet.service's `EnvironmentFile=`: `KUBELET_KUBECONFIG` holds `--kubeconfig=...` once the
/// node has its own credentials, nothing before (standalone: static pods only).
pub const KUBELET_ENV: &str = "/etc/kubernetes/kubelet.env";

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

/// What the restart marker still asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pending {
    /// No marker.
    Nothing,
    /// Written before the change: systemd may not have the new definition yet (reload), and
    /// kubelet was not restarted on it.
    Reload,
    /// Everything was in place; kubelet has not started since.
    Restart,
    /// kubelet (re)started after everything was in place, before a crash kept the marker:
    /// only the marker is left to remove.
    Done,
}

/// Records that kubelet must be restarted on what is about to change.
pub(crate) fn mark_restart(cx: &Cx) -> anyhow::Result<()> {
    cx.writer()
        .write(&FileSpec::new(RESTART_MARKER, "pending\n", 0o600))
        .context("recording the pending kubelet restart")?;
    Ok(())
}

/// What the marker asks for: its content, and for `ready <µs>`, kubelet's last start time.
pub(crate) async fn restart_pending(cx: &Cx) -> anyhow::Result<Pending> {
    // (written by nodectld only: 0600 root in /run/nodectl; anything unreadable is `pending`)
    let text = match std::fs::read_to_string(cx.root.path(RESTART_MARKER)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Pending::Nothing),
        Err(_) => return Ok(Pending::Reload),
    };
    let Some(ready) = text
        .trim()
        .strip_prefix("ready ")
        .and_then(|us| us.parse::<u64>().ok())
    else {
        return Ok(Pending::Reload);
    };
    let ready = UNIX_EPOCH + Duration::from_micros(ready);
    let started = cx.systemd.started_at(kubelet::KUBELET_UNIT).await?;
    Ok(match started {
        Some(t) if t >= ready => Pending::Done,
        _ => Pending::Restart,
    })
}

/// Ends what the marker asks for: unless kubelet already started on the new definition, the
/// marker says `ready` with the time, then a running kubelet (`up`) is restarted; the marker is
/// removed when `remove` (not while a certificate request may still write it).
pub(crate) async fn finish_restart(cx: &Cx, up: bool, remove: bool) -> anyhow::Result<()> {
    match restart_pending(cx).await? {
        Pending::Nothing => return Ok(()),
        Pending::Done => {}
        Pending::Reload | Pending::Restart => {
            if up {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_micros();
                cx.writer()
                    .write(&FileSpec::new(
                        RESTART_MARKER,
                        format!("ready {now}\n"),
                        0o600,
                    ))
                    .context("recording the pending kubelet restart")?;
                start_kubelet(cx, true).await?;
            }
        }
    }
    if remove {
        cx.writer().remove(Path::new(RESTART_MARKER))?;
    }
    Ok(())
}

/// The image kubelet.service runs, as systemd has it loaded (an operator's drop-in included).
pub(crate) async fn running_image(systemd: &nodectl_units::systemd::Systemd) -> Option<String> {
    systemd
        .environment_var(kubelet::KUBELET_UNIT, kubelet::IMAGE_VAR)
        .await
        .ok()
        .flatten()
}

/// kubelet's `--provider-id` from `kubelet.provider_id`: `aws` is the instance metadata of the
/// OS's metadata service (coreos-metadata on Flatcar, afterburn elsewhere).
pub(crate) fn provider_id(cx: &Cx) -> Option<kubelet::ProviderId> {
    use crate::config::PROVIDER_ID_AWS;
    use kubelet::ProviderId;
    cx.settings.provider_id.as_deref().map(|p| match p {
        PROVIDER_ID_AWS if cx.host.os == crate::host::Os::Flatcar => ProviderId::COREOS_METADATA,
        PROVIDER_ID_AWS => ProviderId::AFTERBURN,
        literal => ProviderId::Literal(literal.into()),
    })
}
