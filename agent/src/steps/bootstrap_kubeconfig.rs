//! The `bootstrap-kubeconfig` step: waits for the bootstrap kubeconfig provisioning places.

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use crate::engine::{Cx, Observation, Step};

/// The bootstrap kubeconfig kubelet starts with; provisioning (Ignition or SSH) places it.
pub(crate) struct BootstrapKubeconfig;

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
    /// A bundle may hold it (`kubelet/kubeconfig`): looked at after the bundle is placed, but
    /// not held back while a controller waits for its bundle (placed beforehand, it lets
    /// kubelet's CA and env file be written then, off the bundle's path to kubelet).
    fn after(&self) -> &'static [&'static str] {
        &["secrets"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let p = &cx.settings.bootstrap_kubeconfig;
            let real = cx.root.path(p);
            let own = || {
                crate::credentials::read(&cx.root).is_some_and(|h| {
                    !h.validity.expired(std::time::SystemTime::now())
                        && cx.root.path(&cx.settings.kubeconfig).is_file()
                })
            };
            Ok(match std::fs::symlink_metadata(&real) {
                Ok(m) if m.is_file() && m.len() > 0 => {
                    // Read as it would be used: trusted, nothing unsafe in it, held to the node
                    // kubeconfig. A file that is not is never used; while the node holds its own
                    // certificate that is all (reported), before it the node cannot go on.
                    match crate::kubeconfig::load_bootstrap(&cx.root, p, &cx.settings.kubeconfig) {
                        Ok(_) => Observation::Converged(format!("{} present", p.display())),
                        Err(e) if own() => {
                            tracing::warn!(error = %e, "bootstrap kubeconfig not used");
                            Observation::Converged(format!(
                                "not needed (the node holds its own certificate), and not used: {e}"
                            ))
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(_) if own() => Observation::Converged(format!(
                    "not needed (the node holds its own certificate), and not used: {} is empty or not a file",
                    p.display()
                )),
                Ok(_) => Observation::Waiting(format!("{} is empty or not a file", p.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Removed after the node got its own certificate: not needed until that
                    // certificate expires or is refused.
                    if own() {
                        Observation::Converged(format!(
                            "{} absent, not needed: the node holds its own certificate",
                            p.display()
                        ))
                    } else {
                        Observation::Waiting(format!(
                            "{} (placed by provisioning: Ignition or SSH)",
                            p.display()
                        ))
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
