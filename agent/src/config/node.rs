//! `[node]`: the role, the node's name, its labels and taints.

use serde::{Deserialize, Serialize};

use super::check::Check;
use super::fragment::NodeSection;
use super::ConfigError;
use crate::util::names;

/// The node's role in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Runs the control plane as static pods (and etcd).
    Controller,
    /// Runs workloads.
    Worker,
}

/// A taint as kubelet's `--register-with-taints` takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint(pub String);

/// `[node]`, validated.
pub(crate) struct Node {
    pub(crate) role: Role,
    pub(crate) name: String,
    pub(crate) labels: Vec<String>,
    pub(crate) taints: Vec<Taint>,
}

impl Node {
    /// Validates `[node]`; the node name defaults to `hostname`.
    pub(crate) fn with_config(
        f: &NodeSection,
        c: &Check,
        hostname: &str,
    ) -> Result<Node, ConfigError> {
        let role = match f.role.as_deref() {
            Some("controller") => Role::Controller,
            Some("worker") => Role::Worker,
            Some(v) => return Err(c.bad("node.role", v)),
            None => {
                return Err(c.at(
                    "node.role",
                    format!(
                        "is required: set it to {} in a file under /etc/nodectl/config.d",
                        super::schema::expected("node.role")
                    ),
                ))
            }
        };
        let name = f.name.clone().unwrap_or_else(|| hostname.to_string());
        if !names::is_dns_subdomain(&name) {
            return Err(match f.name {
                Some(_) => c.bad("node.name", &name),
                None => c.at(
                    "node.name",
                    format!("not set, and the hostname {name:?} is not a valid node name: set node.name"),
                ),
            });
        }
        let labels = f
            .labels
            .iter()
            .flatten()
            .map(|l| names::parse_label(l))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| c.at("node.labels", e.to_string()))?;
        let taints = f
            .taints
            .iter()
            .flatten()
            .map(|t| names::parse_taint(t).map(Taint))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| c.at("node.taints", e.to_string()))?;
        Ok(Node {
            role,
            name,
            labels,
            taints,
        })
    }
}
