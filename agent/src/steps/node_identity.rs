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
use crate::engine::{Change, Cx, Observation, Step};

/// Where DNS is configured.
pub(crate) const RESOLV_CONF: &str = "/etc/resolv.conf";
/// How often a waiting step looks again without an event (transient hostnames raise none).
const RECHECK: Duration = Duration::from_secs(5);
/// [`RECHECK`] as this run takes it (test timers shorten it in a debug build).
fn recheck() -> Duration {
    crate::util::timers::scaled(RECHECK)
}

/// The node's name and DNS, waited for.
pub(crate) struct NodeIdentity;

/// Whether resolv.conf names something (a line that is neither blank nor a comment), as
/// Typhoon's `grep '^[^#[:space:]]' /etc/resolv.conf`.
pub(crate) fn dns_configured(resolv_conf: &str) -> bool {
    resolv_conf
        .lines()
        .any(|l| l.starts_with(|c: char| c != '#' && c != ';' && !c.is_whitespace()))
}

/// With the provider id from the instance metadata: the metadata service, when its file lacks
/// what kubelet's `--provider-id` takes (not written yet, or not both variables), and a waiting
/// message naming it.
fn metadata_missing(cx: &Cx) -> Option<(&'static str, String)> {
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
        (service, format!(
            "the instance metadata ({zone_var}, {instance_var}) in {env_file}, written by {service}, for kubelet's --provider-id"
        ))
    })
}

/// What to do about a metadata service whose file is missing, from its state: start it when it
/// is not running and has not failed (nothing else pulls it in: Fedora CoreOS presets only
/// afterburn's check-in units, and Typhoon's kubelet.service `Requires=` it, but kubelet starts
/// only after this step), wait while it runs, and name a failure (no restart loop: the
/// service retries the metadata endpoint itself).
#[derive(Debug, PartialEq, Eq)]
enum MetadataService {
    Start,
    Wait,
    Failed(String),
}

fn metadata_service(service: &str, state: &nodectl_units::systemd::UnitState) -> MetadataService {
    match state.active.as_str() {
        "activating" | "active" | "reloading" => MetadataService::Wait,
        _ if state.job != 0 => MetadataService::Wait,
        "failed" => MetadataService::Failed(format!(
            "{service} failed ({}): journalctl -u {service} says why; systemctl restart {service} once fixed",
            if state.result.is_empty() { "no result" } else { &state.result }
        )),
        _ if state.load == "not-found" || state.load == "masked" => {
            MetadataService::Failed(format!("{service} is {}", state.load))
        }
        _ => MetadataService::Start,
    }
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
                cx.recheck_in(recheck());
                return Ok(Observation::Waiting(format!(
                    "a hostname other than {name:?} (node.name is not set, so the node is named after its hostname)"
                )));
            }
            let resolv = crate::util::bounded::read_to_string(&cx.root.path(RESOLV_CONF), crate::util::bounded::MAX_SMALL_BYTES).unwrap_or_default();
            if !dns_configured(&resolv) {
                cx.recheck_in(recheck());
                return Ok(Observation::Waiting(format!(
                    "a nameserver in {RESOLV_CONF} (kubelet and the pods need DNS)"
                )));
            }
            if let Some((service, w)) = metadata_missing(cx) {
                cx.recheck_in(recheck());
                let state = cx.systemd.brief(service, false).await?;
                return Ok(match metadata_service(service, &state) {
                    MetadataService::Start => Observation::Changes(vec![Change::new(
                        format!("start {service}"),
                        format!("nothing else starts it before kubelet, and nodectld waits for {w}"),
                    )]),
                    MetadataService::Wait => Observation::Waiting(w),
                    MetadataService::Failed(why) => Observation::Waiting(format!("{w}; {why}")),
                });
            }
            Ok(Observation::Converged(format!(
                "node name {name}; DNS configured"
            )))
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            // Queued, not waited for: the service is a oneshot that may take a while to reach
            // the metadata endpoint; the recheck and the observe after this see its file.
            if let Some((service, _)) = metadata_missing(cx) {
                if metadata_service(service, &cx.systemd.brief(service, false).await?)
                    == MetadataService::Start
                {
                    tracing::info!(
                        unit = service,
                        "starting: kubelet's provider id needs the instance metadata"
                    );
                    cx.systemd.queue(service, false).await?;
                }
            }
            Ok(())
        }
        .boxed()
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

    /// systemd's view of afterburn.service under the offline stand-in.
    fn afterburn(cx: &Cx, active: &str, result: &str) {
        let p = cx
            .root
            .path("/")
            .join(nodectl_units::systemd::Offline::STATE_FILE);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let unit = serde_json::json!({"load": "loaded", "active": active, "sub": "dead",
            "unit_file": "static", "result": result, "restarts": 0, "exit_status": 0});
        let calls =
            serde_json::json!({"reload": 0, "start": 0, "restart": 0, "stop": 0, "enable": 0});
        let st = serde_json::json!({"units": {"afterburn.service": unit}, "calls": calls});
        std::fs::write(p, st.to_string()).unwrap();
    }

    /// An AWS node (provider id from afterburn's metadata): nothing else starts afterburn.service
    /// before kubelet (FCOS presets only its check-in units; Typhoon's kubelet `Requires=` it,
    /// but kubelet waits for this step), so the step starts it, waits for its file, and names a
    /// failure without starting it again and again.
    #[tokio::test]
    async fn an_aws_node_starts_the_metadata_service_and_waits_for_its_file() {
        let (_d, mut cx) = Cx::scratch();
        cx.settings = crate::config::Settings::from_toml(
            "[node]\nrole = \"worker\"\n[kubelet]\nprovider_id = \"aws\"\n",
            &cx.host,
            "n1",
        );
        std::fs::create_dir_all(cx.root.path("/etc")).unwrap();
        std::fs::write(cx.root.path(RESOLV_CONF), "nameserver 10.0.0.2\n").unwrap();
        afterburn(&cx, "inactive", "success");
        let step = NodeIdentity;
        match step.observe(&cx).await.unwrap() {
            Observation::Changes(c) => assert_eq!(c[0].what, "start afterburn.service"),
            o => panic!("{o:?}"),
        }
        step.apply(&cx).await.unwrap();
        let starts = |cx: &Cx| match &cx.systemd {
            nodectl_units::systemd::Systemd::Offline(o) => o.calls().unwrap().start,
            _ => unreachable!(),
        };
        assert_eq!(starts(&cx), 1);
        match step.observe(&cx).await.unwrap() {
            Observation::Waiting(w) => assert!(w.contains("/run/metadata/afterburn"), "{w}"),
            o => panic!("{o:?}"),
        }
        // A failed service: named, not started again.
        afterburn(&cx, "failed", "exit-code");
        match step.observe(&cx).await.unwrap() {
            Observation::Waiting(w) => {
                assert!(w.contains("afterburn.service failed (exit-code)"), "{w}")
            }
            o => panic!("{o:?}"),
        }
        step.apply(&cx).await.unwrap();
        assert_eq!(
            starts(&cx),
            0,
            "(the state file was rewritten: no start since)"
        );
        std::fs::create_dir_all(cx.root.path("/run/metadata")).unwrap();
        std::fs::write(
            cx.root.path("/run/metadata/afterburn"),
            "AFTERBURN_AWS_AVAILABILITY_ZONE=us-east-1a\nAFTERBURN_AWS_INSTANCE_ID=i-0123\n",
        )
        .unwrap();
        assert!(matches!(
            step.observe(&cx).await.unwrap(),
            Observation::Converged(_)
        ));
    }
}
