//! The `node-identity` step: the node's name is known (a hostname other than `localhost` when
//! `node.name` is not set) and DNS is configured, before the node asks for its certificate or
//! starts kubelet. Typhoon's `wait-for-dns.service` does the same with two shell loops
//! (`hostname -s` not `localhost`; a line of `/etc/resolv.conf` that is not a comment), ordered
//! before kubelet: a node that registered as `localhost` would be refused by the Node authorizer
//! and the name in its certificate would never match.
//!
//! `/etc/hostname` and `/etc/resolv.conf` are watched (inotify); a hostname set without a file
//! (transient, from DHCP) is seen by a recheck every few seconds while the step waits.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use nodectl_units::kubelet::ProviderId;

use super::kubelet::provider_id;
use crate::engine::{Cx, Observation, Step};

/// Where DNS is configured.
pub(crate) const RESOLV_CONF: &str = "/etc/resolv.conf";
/// How often a waiting step looks again without an event (transient hostnames raise none).
const RECHECK: Duration = Duration::from_secs(5);

/// The node's name and DNS, waited for.
pub(crate) struct NodeIdentity;

/// Whether resolv.conf names something (a line that is neither blank nor a comment), as
/// Typhoon's `grep '^[^#[:space:]]' /etc/resolv.conf`.
pub(crate) fn dns_configured(resolv_conf: &str) -> bool {
    resolv_conf
        .lines()
        .any(|l| l.starts_with(|c: char| c != '#' && c != ';' && !c.is_whitespace()))
}

/// With the provider id from the instance metadata: what is missing of it (the metadata
/// service has not written its file, or not both variables), as a waiting message.
fn metadata_missing(cx: &Cx) -> Option<String> {
    let Some(ProviderId::AwsMetadata {
        service,
        env_file,
        zone_var,
        instance_var,
    }) = provider_id(cx)
    else {
        return None;
    };
    let text = crate::util::bounded::read_to_string(
        &cx.root.path(env_file),
        crate::util::bounded::MAX_SMALL_BYTES,
    )
    .unwrap_or_default();
    let set = |var: &str| {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .any(|(k, v)| k.trim() == var && !v.trim().is_empty())
    };
    (!(set(zone_var) && set(instance_var))).then(|| {
        format!(
            "the instance metadata ({zone_var}, {instance_var}) in {env_file}, written by {service}, for kubelet's --provider-id"
        )
    })
}

impl Step for NodeIdentity {
    fn id(&self) -> &'static str {
        "node-identity"
    }
    fn description(&self) -> &'static str {
        "the node's name (a hostname other than localhost) and DNS are known"
    }
    fn deps(&self) -> &'static [&'static str] {
        &[]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let name = &cx.settings.node_name;
            if name == "localhost" || name.starts_with("localhost.") {
                cx.recheck_in(RECHECK);
                return Ok(Observation::Waiting(format!(
                    "a hostname other than {name:?} (node.name is not set, so the node is named after its hostname)"
                )));
            }
            let resolv = crate::util::bounded::read_to_string(&cx.root.path(RESOLV_CONF), crate::util::bounded::MAX_SMALL_BYTES).unwrap_or_default();
            if !dns_configured(&resolv) {
                cx.recheck_in(RECHECK);
                return Ok(Observation::Waiting(format!(
                    "a nameserver in {RESOLV_CONF} (kubelet and the pods need DNS)"
                )));
            }
            if let Some(w) = metadata_missing(cx) {
                cx.recheck_in(RECHECK);
                return Ok(Observation::Waiting(w));
            }
            Ok(Observation::Converged(format!(
                "node name {name}; DNS configured"
            )))
        }
        .boxed()
    }
    fn apply<'a>(&'a self, _cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move { Ok(()) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_is_configured_by_a_line_that_is_not_a_comment() {
        assert!(dns_configured("# generated\nnameserver 10.0.0.2\n"));
        assert!(dns_configured("search example.com\n"));
        assert!(!dns_configured(""));
        assert!(!dns_configured("# nothing yet\n; nor here\n\n   \n"));
    }
}
