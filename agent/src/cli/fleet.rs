//! `nodectl fleet`: `kubectl nodectl fleet` (the kubectl-nodectl crate) on a node, with an
//! operator's kubeconfig: every Node's nodectld state, unhealthy first. Exit 0: every node's
//! `NodectlReady` is `True`; 2: some node's is not (for scripts); 1: error.

pub use kubectl_nodectl::cli::fleet_cmd as run;
pub use kubectl_nodectl::load::Target;
