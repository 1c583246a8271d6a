//! `[network]`, `[secrets]` and `[selinux]`: the CNI provider, the secrets inbox and the trees
//! kept at the shared container label.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::check::Check;
use super::fragment::{NetworkSection, SecretsSection, SelinuxSection};
use super::ConfigError;

/// Where bundles of bootstrap secrets are dropped.
pub(crate) const DEFAULT_INBOX: &str = "/var/lib/nodectl/inbox";
/// The trees kept at `container_file_t:s0` by default.
pub(crate) const DEFAULT_RELABEL: &[&str] = &["/etc/kubernetes"];

/// The cluster's CNI provider (Typhoon's choices).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Calico.
    Calico,
    /// flannel (needs the `.link` file that keeps udev off its MAC).
    Flannel,
    /// Cilium (the default).
    Cilium,
}

impl Network {
    /// Validates `network.provider`.
    pub(crate) fn with_config(f: &NetworkSection, c: &Check) -> Result<Network, ConfigError> {
        Ok(match f.provider.as_deref().unwrap_or("cilium") {
            "calico" => Network::Calico,
            "flannel" => Network::Flannel,
            "cilium" => Network::Cilium,
            v => return Err(c.bad("network.provider", v)),
        })
    }
}

/// Validates `secrets.inbox`.
pub(crate) fn inbox(f: &SecretsSection, c: &Check) -> Result<PathBuf, ConfigError> {
    c.path("secrets.inbox", f.inbox.as_ref(), DEFAULT_INBOX)
}

/// Validates `selinux.relabel`.
pub(crate) fn relabel(f: &SelinuxSection, c: &Check) -> Result<Vec<PathBuf>, ConfigError> {
    match &f.relabel {
        None => Ok(DEFAULT_RELABEL.iter().map(PathBuf::from).collect()),
        Some(list) => list
            .iter()
            .map(|p| {
                let p = c.abs_path("selinux.relabel", p)?;
                let kubelet = Path::new(KUBELET_DIR);
                if p.starts_with(kubelet) || kubelet.starts_with(&p) {
                    return Err(c.at(
                        "selinux.relabel",
                        format!(
                            "{} would give {KUBELET_DIR} (pods' volumes, the node's credentials) \
                             a label every container reads; nodectld labels its plugin socket \
                             directories itself",
                            p.display()
                        ),
                    ));
                }
                Ok(p)
            })
            .collect(),
    }
}

/// kubelet's root directory, which no relabel tree may contain or be inside.
const KUBELET_DIR: &str = "/var/lib/kubelet";
