//! What the steps share about kubelet: its files, the restart marker, starting it.

use nodectl_units::kubelet;

use crate::engine::Cx;

pub(crate) const SYSTEMD_DIR: &str = "/etc/systemd/system";
/// Written before kubelet's definition changes and removed once kubelet was restarted on it, so
/// a crash between the two still restarts kubelet on the next pass.
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
