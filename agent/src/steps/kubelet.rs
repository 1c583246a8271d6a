//! What the steps share about kubelet: its files, the restart marker, starting it.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use nodectl_units::kubelet;

use crate::engine::Cx;
use crate::fsio::FileSpec;

pub(crate) const SYSTEMD_DIR: &str = "/etc/systemd/system";
/// Written before kubelet's definition or inputs change (`pending`, `credentials`, `issued`:
/// who wrote it and what is owed), rewritten `ready <time>` once they are all in place, just
/// before the restart, and removed after it: a crash before the restart still restarts kubelet
/// on the next pass, and a crash after it does not restart kubelet twice (it started after the
/// `ready` time). See [`Pending`].
pub(crate) const RESTART_MARKER: &str = "/run/nodectl/kubelet.restart-pending";
pub(crate) use nodectl_units::kubelet::MANAGED_HEADER;
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
    /// `pending` (kubelet-unit): kubelet's unit files are changing; reload, then restart.
    Reload,
    /// `credentials` (kubelet-credentials): the files kubelet reads at start are changing;
    /// restart, no reload.
    Credentials,
    /// `issued` (the certificate request, before it stores the certificate): restart once the
    /// request has ended, no reload.
    Issued,
    /// `ready <µs>`: everything was in place; kubelet has not started since.
    Restart,
    /// `ready <µs>` and kubelet (re)started since, or a start job is queued for it: only the
    /// marker is left to remove (a crash came between the restart and the removal).
    Done,
}

/// Why kubelet is to be restarted (what the marker says until it is `ready`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Why {
    Unit,
    Credentials,
}

/// The marker's content when the certificate request has a new certificate to store: `issued`
/// and where `kubelet-client-current.pem` pointed then (`-` for no link), so that a crash
/// before the switch is told from one after it ([`issued_switched`]).
pub(crate) fn issued(root: &crate::root::Root) -> String {
    let was = crate::credentials::store::current_target(root);
    format!(
        "issued {}\n",
        was.as_deref()
            .map_or("-".into(), |p| p.display().to_string())
    )
}

/// For an `issued` marker: whether the node's credentials were switched since it was written
/// (the link points elsewhere now). A request that died before its switch changed nothing
/// kubelet reads: no restart is owed for it. A marker without the link's old target (written
/// before the target was recorded) counts as switched.
pub(crate) fn issued_switched(cx: &Cx) -> bool {
    let Ok(text) = std::fs::read_to_string(cx.root.path(RESTART_MARKER)) else {
        return true;
    };
    let Some(was) = text.trim().strip_prefix("issued ") else {
        return true;
    };
    let was = (was != "-").then(|| std::path::PathBuf::from(was));
    was != crate::credentials::store::current_target(&cx.root)
}

/// Records that kubelet must be restarted on what is about to change.
pub(crate) fn mark_restart(cx: &Cx, why: Why) -> anyhow::Result<()> {
    let text = match why {
        Why::Unit => "pending\n",
        Why::Credentials => "credentials\n",
    };
    cx.writer()
        .write(&FileSpec::new(RESTART_MARKER, text, 0o600))
        .context("recording the pending kubelet restart")?;
    Ok(())
}

/// What the marker asks for: its content, and for `ready <µs>` (CLOCK_MONOTONIC, as systemd's
/// `InactiveExitTimestampMonotonic`: a step of the wall clock changes neither), whether
/// kubelet started since or has a start job queued.
pub(crate) async fn restart_pending(cx: &Cx) -> anyhow::Result<Pending> {
    // (written by nodectld only: 0600 root in /run/nodectl; anything unreadable or unknown
    // asks for the most: reload and restart)
    let text = match std::fs::read_to_string(cx.root.path(RESTART_MARKER)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Pending::Nothing),
        Err(_) => return Ok(Pending::Reload),
    };
    let ready = match text.trim() {
        "credentials" => return Ok(Pending::Credentials),
        t if t == "issued" || t.starts_with("issued ") => return Ok(Pending::Issued),
        t => match t
            .strip_prefix("ready ")
            .and_then(|us| us.parse::<u64>().ok())
        {
            Some(us) => Duration::from_micros(us),
            None => return Ok(Pending::Reload),
        },
    };
    let st = cx.systemd.brief(kubelet::KUBELET_UNIT, false).await?;
    if st.job != 0 {
        return Ok(Pending::Done); // the restart queued in nodectld's first pass, not run yet
    }
    let started = cx.systemd.started_at(kubelet::KUBELET_UNIT).await?;
    Ok(match started {
        Some(t) if t >= ready => Pending::Done,
        _ => Pending::Restart,
    })
}

/// Ends what the marker asks for (`pending`, as read before): systemd reloaded first when
/// the unit files changed; unless kubelet already started on the new definition, the marker
/// says `ready` with the time, then a running kubelet (`up`) is restarted; the marker is
/// removed when `remove` (not while a certificate request may still write it).
pub(crate) async fn finish_restart(
    cx: &Cx,
    pending: Pending,
    up: bool,
    remove: bool,
) -> anyhow::Result<()> {
    let remove = match pending {
        Pending::Nothing => return Ok(()),
        Pending::Done => remove,
        // kubelet is not running: it starts (kubelet-running) on the files as they are now,
        // so nothing is owed; but what a running request was issued is not stored yet.
        _ if !up => remove || pending != Pending::Issued,
        _ => remove,
    };
    match pending {
        Pending::Nothing | Pending::Done => {}
        Pending::Reload | Pending::Credentials | Pending::Issued | Pending::Restart => {
            if pending == Pending::Reload {
                cx.systemd.reload().await?;
            }
            if up {
                let now = nodectl_units::systemd::monotonic().as_micros();
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
