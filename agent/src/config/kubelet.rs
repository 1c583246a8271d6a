//! `[kubelet]`: the image, the runtime, the kubeconfigs, kubelet.yaml's settings and how often
//! the node's certificate is checked with the API server.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::check::Check;
use super::fragment::KubeletSection;
use super::ConfigError;
use crate::host::{Host, Os};
use crate::util::names;

/// The kubelet image when `kubelet.image` is not set (Typhoon's).
pub(crate) const DEFAULT_IMAGE: &str = "quay.io/poseidon/kubelet:v1.36.1";
/// Where provisioning places the bootstrap kubeconfig (Typhoon's path).
pub(crate) const DEFAULT_BOOTSTRAP_KUBECONFIG: &str = "/etc/kubernetes/kubeconfig";
/// The node kubeconfig nodectld writes for kubelet.
pub(crate) const DEFAULT_KUBECONFIG: &str = "/var/lib/kubelet/kubeconfig";
/// Typhoon's cluster DNS service address.
pub(crate) const DEFAULT_CLUSTER_DNS: &str = "10.3.0.10";
/// The cluster's DNS domain.
pub(crate) const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// Seconds between checks that the API server still accepts the node's certificate beyond
/// those a cause asks for (a new certificate, a 401): none by default.
pub(crate) const DEFAULT_CREDENTIALS_CHECK_SECS: i64 = 0;
/// The longest interval between those checks (a week; a certificate lives 72 h in Typhoon).
pub(crate) const MAX_CREDENTIALS_CHECK_SECS: i64 = 7 * 24 * 3600;
/// The `NodectlReady` condition's heartbeat: 20 min (less up to a tenth, jittered), so a fleet
/// of 1000 nodes writes its Nodes less than once a second at idle (status/heartbeat.rs).
pub(crate) const DEFAULT_CONDITION_HEARTBEAT_SECS: i64 = 1200;
pub(crate) const MAX_CONDITION_HEARTBEAT_SECS: i64 = 24 * 3600;

/// `kubelet.provider_id` that means: from the AWS instance metadata (afterburn on FCOS,
/// coreos-metadata on Flatcar).
pub const PROVIDER_ID_AWS: &str = "aws";

/// How kubelet's container is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// `podman run` (Fedora CoreOS).
    Podman,
    /// `docker run` (Flatcar).
    Docker,
}

/// `[kubelet]`, validated.
pub(crate) struct Kubelet {
    pub(crate) image: String,
    pub(crate) runtime: Runtime,
    pub(crate) bootstrap_kubeconfig: PathBuf,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) seccomp_default: bool,
    pub(crate) credentials_check_secs: u64,
    pub(crate) condition_heartbeat_secs: u64,
    pub(crate) cluster_dns: IpAddr,
    pub(crate) cluster_domain: String,
    pub(crate) cloud_provider: Option<String>,
    pub(crate) provider_id: Option<String>,
}

/// A provider id as kubelet takes it: `<provider>://<id>` (e.g. `aws:///us-east-1a/i-0123`).
fn is_provider_id(s: &str) -> bool {
    s.split_once("://").is_some_and(|(p, rest)| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !rest.is_empty()
            && !rest
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || "$%\"'\\;`".contains(c))
    })
}

impl Kubelet {
    /// Validates `[kubelet]`; the runtime defaults from the OS (docker on Flatcar).
    pub(crate) fn with_config(
        f: &KubeletSection,
        c: &Check,
        host: &Host,
    ) -> Result<Kubelet, ConfigError> {
        let image = f.image.clone().unwrap_or_else(|| DEFAULT_IMAGE.into());
        if image.is_empty() || image.chars().any(|ch| ch.is_whitespace() || ch == '$') {
            return Err(c.bad("kubelet.image", &image));
        }
        let runtime = match f.runtime.as_deref() {
            Some("podman") => Runtime::Podman,
            Some("docker") => Runtime::Docker,
            Some(v) => return Err(c.bad("kubelet.runtime", v)),
            None if host.os == Os::Flatcar => Runtime::Docker,
            None => Runtime::Podman,
        };
        let dns = f.cluster_dns.as_deref().unwrap_or(DEFAULT_CLUSTER_DNS);
        let cluster_domain = f
            .cluster_domain
            .clone()
            .unwrap_or_else(|| DEFAULT_CLUSTER_DOMAIN.into());
        if !names::is_dns_subdomain(&cluster_domain) {
            return Err(c.bad("kubelet.cluster_domain", &cluster_domain));
        }
        Ok(Kubelet {
            image,
            runtime,
            bootstrap_kubeconfig: c.path(
                "kubelet.bootstrap_kubeconfig",
                f.bootstrap_kubeconfig.as_ref(),
                DEFAULT_BOOTSTRAP_KUBECONFIG,
            )?,
            kubeconfig: c.path(
                "kubelet.kubeconfig",
                f.kubeconfig.as_ref(),
                DEFAULT_KUBECONFIG,
            )?,
            seccomp_default: f.seccomp_default.unwrap_or(false),
            credentials_check_secs: c.int(
                "kubelet.credentials_check_secs",
                f.credentials_check_secs,
                DEFAULT_CREDENTIALS_CHECK_SECS,
                (0, MAX_CREDENTIALS_CHECK_SECS),
            )? as u64,
            condition_heartbeat_secs: c.int(
                "kubelet.condition_heartbeat_secs",
                f.condition_heartbeat_secs,
                DEFAULT_CONDITION_HEARTBEAT_SECS,
                (0, MAX_CONDITION_HEARTBEAT_SECS),
            )? as u64,
            cluster_dns: dns.parse().map_err(|_| c.bad("kubelet.cluster_dns", dns))?,
            cluster_domain,
            cloud_provider: match f.cloud_provider.as_deref() {
                None => None,
                Some("external") => Some("external".into()),
                Some(v) => return Err(c.bad("kubelet.cloud_provider", v)),
            },
            provider_id: match f.provider_id.as_deref() {
                None => None,
                Some(v) if v == PROVIDER_ID_AWS || is_provider_id(v) => Some(v.into()),
                Some(v) => return Err(c.bad("kubelet.provider_id", v)),
            },
        })
    }
}
