//! The `kubelet-running` step: kubelet.service started once everything it needs is in place.
//!
//! Not once the bootstrap bundle is: a controller's kubelet runs standalone before its bundle
//! comes, as Typhoon's does (kubelet.service enabled in Ignition, or started by kubelet.path),
//! so when the bundle comes only the placement and the static pods' own start stand between it
//! and a running control plane. Nothing a pod reads is ever seen before it is in place: every
//! file is renamed in with its final owner, mode and label, and the static manifests kubelet
//! starts pods from are renamed last (`layout::Rule::starts_pods`). In a pass that finds a
//! bundle, the bundle is placed before kubelet starts (`after`).

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use nodectl_units::kubelet::{self};

use super::kubelet::*;
use crate::engine::{Change, Cx, Observation, Step};

/// kubelet is started once everything it needs is in place.
pub(crate) struct KubeletRunning;

impl Step for KubeletRunning {
    fn id(&self) -> &'static str {
        "kubelet-running"
    }
    fn description(&self) -> &'static str {
        "kubelet.service is started (after its files, unit and credentials)"
    }
    fn deps(&self) -> &'static [&'static str] {
        &[
            "node-identity",
            "node-files",
            "kubelet-unit",
            "relabel",
            "bootstrap-kubeconfig",
            "kubelet-ca",
            "kubelet-credentials",
        ]
    }
    /// A bundle found in the same pass is placed first; one that waits (a controller's, not
    /// copied in yet) or is refused holds nothing kubelet needs to start.
    fn after(&self) -> &'static [&'static str] {
        &["secrets"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let st = cx.systemd.brief(kubelet::KUBELET_UNIT, false).await?;
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
