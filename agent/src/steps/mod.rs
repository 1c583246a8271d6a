//! The steps that bring a node up, and their dependencies (`──>`: needs it converged;
//! `··>`: runs after it in a pass, but is not held back while it waits or fails):
//!
//! ```text
//! node-identity ──> kubelet-credentials (below) ──────────────┐
//! node-files ──────────────────────────────┐
//! kubelet-unit ────────────────────────────┤
//!                secrets ··> relabel ──────┤
//!                secrets ──────────────────┤
//!                secrets ··> bootstrap-kubeconfig ──> kubelet-ca ──┼──> kubelet-running
//!                            bootstrap-kubeconfig ──> kubelet-credentials ──┘
//! ```
//!
//! kubelet-running needs every other step. A controller waiting for its bundle has its
//! bootstrap kubeconfig from provisioning, so kubelet's CA and env file are written then, and
//! the managed trees' first full label scan made, and the bundle's pass goes from its
//! placement to kubelet (issue 18).
//!
//! One file per step; what steps share is in `fileset` (files a step owns) and `kubelet`
//! (kubelet's paths, starting it). Adding a step: a new file with a type implementing
//! [`Step`], one line in [`engine`] (and in the dependency test below).

mod ahead;
mod bootstrap_kubeconfig;
pub(crate) mod bundle;
mod fileset;
mod inbox;
mod kubelet;
mod kubelet_ca;
mod kubelet_credentials;
mod kubelet_running;
mod kubelet_unit;
mod layout;
mod node_files;
mod node_identity;
mod relabel;
mod secrets;

pub(crate) use ahead::warm_labels;
pub(crate) use bootstrap_kubeconfig::BootstrapKubeconfig;
pub(crate) use bundle::CONTROL_PLANE_UID;
pub(crate) use kubelet::running_image;
pub use kubelet::KUBELET_ENV;
pub(crate) use kubelet_ca::KubeletCa;
pub(crate) use kubelet_credentials::{
    api_server_pod_prefix, KubeletCredentials, APPROVAL_WAIT, POD_LOGS,
};
pub(crate) use kubelet_running::KubeletRunning;
pub(crate) use kubelet_unit::KubeletUnit;
pub(crate) use node_files::NodeFiles;
pub(crate) use node_identity::{NodeIdentity, RESOLV_CONF};
pub(crate) use relabel::Relabel;
pub(crate) use secrets::Secrets;

use crate::engine::{Engine, Step};

/// The steps of a node, in an engine.
pub fn engine() -> Engine {
    Engine::new(all()).expect("the built-in step graph is acyclic")
}

/// Every step of a node (adding a step: one line here).
fn all() -> Vec<Box<dyn Step>> {
    vec![
        // (first: it needs no other step, and a bundle's pass places it before checking what
        // earlier passes made)
        Box::new(Secrets::default()),
        Box::new(NodeIdentity),
        Box::new(NodeFiles),
        Box::new(KubeletUnit),
        Box::new(Relabel::default()),
        Box::new(BootstrapKubeconfig),
        Box::new(KubeletCa),
        Box::new(KubeletCredentials::default()),
        Box::new(KubeletRunning),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubelet must never start before anything else the node needs: every other step is a
    /// (transitive) dependency of kubelet-running, but for the bundle, placed before kubelet
    /// starts when it is there and not awaited when it is not (a controller's kubelet runs
    /// standalone before its bundle, whose static manifests are renamed in last).
    #[test]
    fn kubelet_running_depends_on_every_other_step() {
        let steps = all();
        assert_eq!(
            engine().step_ids().len(),
            steps.len(),
            "the engine runs every step"
        );
        let deps = |id: &str| -> Vec<&'static str> {
            steps
                .iter()
                .find(|s| s.id() == id)
                .map(|s| {
                    let mut d = s.deps().to_vec();
                    if s.id() == "kubelet-running" {
                        assert_eq!(s.after(), ["secrets"], "ordered after the bundle");
                        d.extend(s.after());
                    }
                    d
                })
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
