//! `kubectl nodectl`: a fleet's nodectld state from an operator's workstation, and the names of
//! what nodectld writes in the Kubernetes API (which the agent takes from here).
//!
//! Layers: `names`, `text` (pure) -> `fleet`, `reboots`, `describe` (pure: API objects in, rows
//! and text out) -> `load` (kubeconfig, client, paged lists) -> `cli`.

pub mod cli;
pub mod describe;
pub mod exit;
pub mod fleet;
pub mod load;
pub mod names;
pub mod reboots;
pub mod text;
