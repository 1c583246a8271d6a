//! What must hold before this node takes a reboot slot, asked before every new slot and never
//! while one is held (a node waiting on a gate holds no slot: kured#792):
//!
//! - no running pod on this node matches `reboot.block_on_pods` (label selectors, as kured's
//!   `--blocking-pod-selector`): one list of the node's own pods (`spec.nodeName`, which the Node
//!   authorizer allows), matched here;
//! - no alert of Prometheus's `/api/v1/alerts` (the endpoint kured's `--prometheus-url` asks)
//!   whose name matches `reboot.block_on_alerts` whole and no `reboot.ignore_alerts` is firing
//!   (or pending, with `reboot.block_on_pending_alerts`); a Prometheus that cannot be asked
//!   blocks unless `reboot.alerts_unreachable = "allow"`.
//!
//! The decisions are pure ([`blocking_pods`], [`blocking_alerts`]); the asking is below them.

use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use regex::Regex;

use crate::config::{RebootGates, Unreachable};
use crate::util::labels::{self, Selector};

/// The most bytes of Prometheus's answer read (a few thousand alerts).
const MAX_ALERTS_BYTES: usize = 4 << 20;
/// How long Prometheus may take to answer.
const ALERTS_TIMEOUT: Duration = Duration::from_secs(10);
/// The most names one gate's finding lists (the rest counted).
const MAX_NAMED: usize = 5;

/// One gate that does not let the reboot go ahead now, and why (names of pods and alerts, never
/// their contents).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// `pods` or `alerts`.
    pub gate: &'static str,
    /// For the status, the condition and the journal.
    pub detail: String,
}

/// What the gates found, in one line ("" when nothing blocks).
pub fn describe(found: &[Blocked]) -> String {
    found
        .iter()
        .map(|b| b.detail.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The alerts gate, compiled.
#[derive(Clone, Debug)]
struct Alerts {
    url: String,
    block: Regex,
    ignore: Vec<Regex>,
    pending: bool,
    unreachable: Unreachable,
}

/// The gates of `[reboot]`, compiled (none: [`Gates::default`]).
#[derive(Clone, Debug, Default)]
pub struct Gates {
    pods: Vec<Selector>,
    namespaces: Vec<String>,
    alerts: Option<Alerts>,
}

/// "a, b, c and 2 more" (a gate's findings, a drain's pods).
pub(crate) fn named(items: &[String]) -> String {
    let mut s = items
        .iter()
        .take(MAX_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > MAX_NAMED {
        s.push_str(&format!(" and {} more", items.len() - MAX_NAMED));
    }
    s
}

/// The pods (`namespace/name (selector)`) that block: on the list (the node's own), not finished
/// (phase other than Succeeded, Failed or Unknown, as kured's field selector), in one of
/// `namespaces` (empty: any), matching one of `selectors`.
pub fn blocking_pods(pods: &[Pod], selectors: &[Selector], namespaces: &[String]) -> Vec<String> {
    pods.iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed" | "Unknown")
            )
        })
        .filter_map(|p| {
            let ns = p.metadata.namespace.as_deref().unwrap_or_default();
            if !namespaces.is_empty() && !namespaces.iter().any(|n| n == ns) {
                return None;
            }
            let empty = Default::default();
            let l = p.metadata.labels.as_ref().unwrap_or(&empty);
            let s = selectors.iter().find(|s| s.matches(l))?;
            let name = p.metadata.name.as_deref().unwrap_or_default();
            Some(format!("{ns}/{name} ({s})"))
        })
        .collect()
}

/// The alert names that block, from the body of `/api/v1/alerts`
/// (`{"status":"success","data":{"alerts":[{"labels":{"alertname":..},"state":"firing"}]}}`;
/// web/api/v1/api.go `alerts`), each once; an answer that is not that is an error.
fn blocking_alerts(body: &[u8], a: &Alerts) -> Result<Vec<String>, String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        status: String,
        #[serde(default)]
        data: Option<Data>,
    }
    #[derive(serde::Deserialize)]
    struct Data {
        alerts: Vec<Alert>,
    }
    #[derive(serde::Deserialize)]
    struct Alert {
        #[serde(default)]
        labels: std::collections::BTreeMap<String, String>,
        state: String,
    }
    let ans: Answer = serde_json::from_slice(body)
        .map_err(|e| format!("the answer is not Prometheus's alerts JSON ({e})"))?;
    let Some(data) = ans.data.filter(|_| ans.status == "success") else {
        return Err(format!(
            "Prometheus answered status {:?}",
            ans.status.chars().take(32).collect::<String>()
        ));
    };
    let mut out: Vec<String> = data
        .alerts
        .into_iter()
        .filter(|al| al.state == "firing" || (a.pending && al.state == "pending"))
        .filter_map(|al| al.labels.get("alertname").cloned())
        .filter(|n| a.block.is_match(n) && !a.ignore.iter().any(|i| i.is_match(n)))
        .map(|n| kubectl_nodectl::text::printable(&n.chars().take(128).collect::<String>()))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

impl Alerts {
    /// GET `<url>/api/v1/alerts`, bounded in time and size; the error names the URL and what
    /// failed. Plain http over hyper's client connection (no TLS set up: a node without CA
    /// certificates still asks a Prometheus on http); https through kube's client (hyper over
    /// rustls, the node's CA certificates).
    async fn fetch(&self) -> Result<Vec<u8>, String> {
        let full = format!("{}/api/v1/alerts", self.url);
        let what = |e: &dyn std::fmt::Display| format!("asking {full}: {e}");
        let uri: hyper::Uri = full.parse().map_err(|e| what(&e))?;
        let ask = async {
            let (status, body) = if uri.scheme_str() == Some("http") {
                let resp = plain_get(&uri).await.map_err(|e| what(&e))?;
                (
                    resp.status(),
                    Limited::new(resp.into_body(), MAX_ALERTS_BYTES)
                        .collect()
                        .await,
                )
            } else {
                let resp = tls_get(&self.url).await.map_err(|e| what(&e))?;
                (
                    resp.status(),
                    Limited::new(resp.into_body(), MAX_ALERTS_BYTES)
                        .collect()
                        .await,
                )
            };
            if !status.is_success() {
                return Err(what(&format!("HTTP {status}")));
            }
            Ok(body.map_err(|e| what(&e))?.to_bytes().to_vec())
        };
        tokio::time::timeout(ALERTS_TIMEOUT, ask)
            .await
            .map_err(|_| what(&"no answer in time"))?
    }
}

/// One GET over a new plain TCP connection (HTTP/1.1).
async fn plain_get(
    uri: &hyper::Uri,
) -> Result<hyper::Response<hyper::body::Incoming>, Box<dyn std::error::Error + Send + Sync>> {
    let host = uri.host().ok_or("no host")?;
    let port = uri.port_u16().unwrap_or(80);
    let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let req = hyper::Request::get(path)
        .header(
            hyper::header::HOST,
            uri.authority().map_or("", |a| a.as_str()),
        )
        .header(hyper::header::ACCEPT, "application/json")
        .header(
            hyper::header::USER_AGENT,
            concat!("nodectld/", env!("CARGO_PKG_VERSION")),
        )
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    Ok(send.send_request(req).await?)
}

/// One GET through kube's client for `base` (https).
async fn tls_get(base: &str) -> Result<hyper::Response<kube::client::Body>, kube::Error> {
    let uri: hyper::Uri = base
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| kube::Error::Service(e.into()))?;
    let mut cfg = kube::Config::new(uri);
    cfg.connect_timeout = Some(ALERTS_TIMEOUT);
    cfg.read_timeout = Some(ALERTS_TIMEOUT);
    cfg.default_retry = false;
    let client = kube::Client::try_from(cfg)?;
    let req = hyper::Request::get("/api/v1/alerts")
        .header(hyper::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .map_err(|e| kube::Error::Service(e.into()))?;
    client.send(req).await
}

impl Gates {
    /// Compiles the checked settings (a pattern that does not compile here was refused by the
    /// config check: it is an error all the same, never a gate left out).
    pub fn new(g: &RebootGates) -> Result<Gates, String> {
        let pods = g
            .block_on_pods
            .iter()
            .map(|s| labels::parse(s))
            .collect::<Result<_, _>>()?;
        let alerts = match &g.alerts {
            None => None,
            Some(a) => Some(Alerts {
                url: a.url.clone(),
                block: crate::config::whole_pattern(&a.block)?,
                ignore: a
                    .ignore
                    .iter()
                    .map(|p| crate::config::whole_pattern(p))
                    .collect::<Result<_, _>>()?,
                pending: a.pending,
                unreachable: a.unreachable,
            }),
        };
        Ok(Gates {
            pods,
            namespaces: g.block_on_pods_namespaces.clone(),
            alerts,
        })
    }

    /// No gate configured.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty() && self.alerts.is_none()
    }

    /// The gates that block now (none: the reboot may take a slot). An API error listing the
    /// pods blocks too (it is not known that none runs).
    pub async fn check(&self, client: &kube::Client, node: &str) -> Vec<Blocked> {
        let mut out = Vec::new();
        if !self.pods.is_empty() {
            let api: Api<Pod> = Api::all(client.clone());
            let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
            match api.list(&lp).await {
                Ok(list) => {
                    let found = blocking_pods(&list.items, &self.pods, &self.namespaces);
                    if !found.is_empty() {
                        out.push(Blocked {
                            gate: "pods",
                            detail: format!("pods running here: {}", named(&found)),
                        });
                    }
                }
                Err(e) => out.push(Blocked {
                    gate: "pods",
                    detail: format!("the pods on this node could not be listed: {e}"),
                }),
            }
        }
        if let Some(a) = &self.alerts {
            match a.fetch().await.and_then(|b| blocking_alerts(&b, a)) {
                Ok(found) if found.is_empty() => {}
                Ok(found) => out.push(Blocked {
                    gate: "alerts",
                    detail: format!("alerts firing: {}", named(&found)),
                }),
                Err(e) if a.unreachable == Unreachable::Allow => {
                    tracing::warn!("{e}; going ahead (reboot.alerts_unreachable = \"allow\")")
                }
                Err(e) => out.push(Blocked {
                    gate: "alerts",
                    detail: format!("{e} (reboot.alerts_unreachable = \"block\")"),
                }),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, labels: &[(&str, &str)], phase: &str) -> Pod {
        let l: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": name, "labels": l},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn pods_block_while_they_run_here_and_match() {
        let sel = vec![labels::parse("app=backup").unwrap()];
        let pods = [
            pod("ops", "backup-1", &[("app", "backup")], "Running"),
            pod("ops", "backup-0", &[("app", "backup")], "Succeeded"),
            pod("web", "front", &[("app", "web")], "Running"),
            pod("dev", "backup-2", &[("app", "backup")], "Pending"),
        ];
        assert_eq!(
            blocking_pods(&pods, &sel, &[]),
            ["ops/backup-1 (app=backup)", "dev/backup-2 (app=backup)"]
        );
        assert_eq!(
            blocking_pods(&pods, &sel, &["ops".into()]),
            ["ops/backup-1 (app=backup)"]
        );
        assert!(blocking_pods(&pods[1..3], &sel, &[]).is_empty());
    }

    fn alerts(block: &str, ignore: &[&str], pending: bool) -> Alerts {
        Alerts {
            url: "http://p".into(),
            block: crate::config::whole_pattern(block).unwrap(),
            ignore: ignore
                .iter()
                .map(|p| crate::config::whole_pattern(p).unwrap())
                .collect(),
            pending,
            unreachable: Unreachable::Block,
        }
    }

    #[test]
    fn alerts_block_by_whole_name_less_the_ignored() {
        let body = br#"{"status":"success","data":{"alerts":[
            {"labels":{"alertname":"NodeDown","instance":"a"},"state":"firing","value":"1"},
            {"labels":{"alertname":"NodeDown","instance":"b"},"state":"firing"},
            {"labels":{"alertname":"Watchdog"},"state":"firing"},
            {"labels":{"alertname":"DiskFillingSoon"},"state":"pending"},
            {"labels":{"alertname":"Evil\u001b[2J"},"state":"firing"}]}}"#;
        let a = alerts(".*", &["Watchdog"], false);
        assert_eq!(
            blocking_alerts(body, &a).unwrap(),
            ["Evil\\u{1b}[2J", "NodeDown"]
        );
        let a = alerts("Disk.*|Node", &[], true);
        assert_eq!(blocking_alerts(body, &a).unwrap(), ["DiskFillingSoon"]);
        for bad in [&b"<html>"[..], br#"{"status":"error","error":"x"}"#] {
            assert!(blocking_alerts(bad, &a).is_err());
        }
        assert!(
            blocking_alerts(br#"{"status":"success","data":{"alerts":[]}}"#, &a)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn findings_name_a_few_and_count_the_rest() {
        let items: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
        assert_eq!(named(&items), "p0, p1, p2, p3, p4 and 3 more");
    }
}
