//! Sends the `NodectlReady` condition and nodectld's annotations to the node's own Node, with
//! the node's own credentials only: the node kubeconfig nodectld wrote (a client certificate,
//! never a token), and only for the Node its certificate names (`system:node:<name>`), which is
//! all NodeRestriction lets a node change. node-problem-detector does the same with
//! `PATCH nodes/<name>/status`, a strategic merge keyed on the condition's `type`.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::condition::{Condition, CONDITION_TYPE};
use crate::root::Root;
use crate::util::time::rfc3339;

/// One request's bound (connect, TLS, the answer).
const TIMEOUT: Duration = Duration::from_secs(10);

/// What is about to be sent.
pub struct Report<'a> {
    pub node: &'a str,
    /// The node certificate's subject as the status read it (`system:node:<name>`).
    pub subject: Option<&'a str>,
    pub condition: &'a Condition,
    /// Unix times.
    pub heartbeat_at: u64,
    pub transition_at: u64,
    pub annotations: &'a [(&'static str, String)],
}

/// Why nothing was sent, or what the API server said. Never quotes the kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The node has no credentials of its own yet (nothing is sent with the bootstrap token).
    #[error("no node credentials yet ({0})")]
    NoCredentials(String),
    #[error("{0}")]
    Refused(String),
    /// The Node object does not exist yet (kubelet registers it).
    #[error("node {0:?} is not registered yet (kubelet registers it)")]
    NotRegistered(String),
    #[error("{0}")]
    Api(String),
}

impl ReportError {
    /// A local reason (no request was made): retry on the next change, not after a backoff.
    pub fn is_local(&self) -> bool {
        matches!(
            self,
            ReportError::NoCredentials(_) | ReportError::Refused(_)
        )
    }

    /// Retrying soon would not help: a local reason, or a Node kubelet has not registered yet
    /// (the API server answered; nothing signals the registration, so the next heartbeat or
    /// change tries again, and an idle node stays idle).
    pub fn waits_for_heartbeat(&self) -> bool {
        self.is_local() || matches!(self, ReportError::NotRegistered(_))
    }
}

/// Checks that only the node's own certificate is used, for its own Node; then patches the
/// condition (status subresource) and the annotations.
pub async fn send(root: &Root, kubeconfig: &Path, r: &Report<'_>) -> Result<(), ReportError> {
    let own = format!("system:node:{}", r.node);
    match r.subject {
        None => return Err(ReportError::NoCredentials("no client certificate".into())),
        Some(s) if s != own => {
            return Err(ReportError::Refused(format!(
                "the node's certificate is for {s}, not {own}: nothing is sent for another node"
            )))
        }
        Some(_) => {}
    }
    let text = root
        .read(kubeconfig)
        .map_err(|e| ReportError::NoCredentials(format!("{}: {e}", kubeconfig.display())))?;
    let text = String::from_utf8_lossy(&text);
    let kc =
        crate::kubeconfig::parse(&text, kubeconfig).map_err(|e| ReportError::Api(e.to_string()))?;
    if kc.auth_infos.iter().any(|a| {
        a.auth_info
            .as_ref()
            .is_some_and(|i| i.token.is_some() || i.token_file.is_some())
    }) {
        return Err(ReportError::Refused(format!(
            "{}: a token is configured: only the node's client certificate is used",
            kubeconfig.display()
        )));
    }
    let conn = crate::kubeconfig::connect(root, kubeconfig, false)
        .await
        .map_err(|e| ReportError::Api(e.to_string()))?;
    let nodes: Api<Node> = Api::all(conn.client);
    let pp = PatchParams::default();
    let condition = json!({"status": {"conditions": [{
        "type": CONDITION_TYPE,
        "status": r.condition.status,
        "reason": r.condition.reason,
        "message": r.condition.message,
        "lastHeartbeatTime": rfc3339(at(r.heartbeat_at)),
        "lastTransitionTime": rfc3339(at(r.transition_at)),
    }]}});
    bounded(
        r.node,
        nodes.patch_status(r.node, &pp, &Patch::Strategic(condition)),
    )
    .await?;
    let annotations: serde_json::Map<String, serde_json::Value> = r
        .annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let meta = json!({"metadata": {"annotations": annotations}});
    bounded(r.node, nodes.patch(r.node, &pp, &Patch::Merge(meta))).await
}

fn at(secs: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(secs)
}

async fn bounded(
    node: &str,
    f: impl std::future::Future<Output = Result<Node, kube::Error>>,
) -> Result<(), ReportError> {
    match tokio::time::timeout(TIMEOUT, f).await {
        Err(_) => Err(ReportError::Api(format!(
            "the API server did not answer within {} s",
            TIMEOUT.as_secs()
        ))),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => {
            Err(ReportError::NotRegistered(node.into()))
        }
        Ok(Err(kube::Error::Api(s))) => Err(ReportError::Api(format!(
            "the API server refused ({} {}): {}",
            s.code, s.reason, s.message
        ))),
        Ok(Err(e)) => Err(ReportError::Api(format!(
            "the API server is not reachable: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodectl_apiserver_double::{Double, Options};

    const KUBECONFIG: &str = "/var/lib/kubelet/kubeconfig";

    fn up() -> Condition {
        Condition {
            status: "True".into(),
            reason: "Converged".into(),
            message: "node converged".into(),
        }
    }

    fn report<'a>(node: &'a str, subject: Option<&'a str>, c: &'a Condition) -> Report<'a> {
        Report {
            node,
            subject,
            condition: c,
            heartbeat_at: 1_800_000_000,
            transition_at: 1_799_999_000,
            annotations: &[],
        }
    }

    fn nodes_requests(api: &Double) -> Vec<(String, String, String)> {
        api.requests()
            .into_iter()
            .filter(|(_, _, p)| p.starts_with("/api/v1/nodes"))
            .collect()
    }

    #[tokio::test]
    async fn only_the_nodes_own_certificate_for_its_own_node_is_used() {
        let api = Double::start(Options::default()).await.unwrap();
        api.set_node("n1", true);
        api.set_node("n2", true);
        let d = tempfile::tempdir().unwrap();
        let root = Root::new(d.path());
        std::fs::create_dir_all(root.path("/var/lib/kubelet")).unwrap();
        let own = api
            .client_kubeconfig("system:node:n1", &["system:nodes"])
            .unwrap();
        std::fs::write(root.path(KUBECONFIG), &own).unwrap();
        let c = up();

        send(
            &root,
            Path::new(KUBECONFIG),
            &report("n1", Some("system:node:n1"), &c),
        )
        .await
        .unwrap();
        let n1 = api.node("n1").unwrap();
        let cond = n1["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == CONDITION_TYPE)
            .cloned()
            .unwrap();
        assert_eq!(cond["status"], "True");
        assert_eq!(cond["lastTransitionTime"], "2027-01-15T07:43:20Z");
        // strategic merge by type: kubelet's Ready condition is kept
        assert!(n1["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready"));
        let before = nodes_requests(&api).len();

        // the certificate names n1: nothing is sent for n2
        let e = send(
            &root,
            Path::new(KUBECONFIG),
            &report("n2", Some("system:node:n1"), &c),
        )
        .await
        .unwrap_err();
        assert!(
            e.is_local() && e.to_string().contains("nothing is sent for another node"),
            "{e}"
        );
        // a kubeconfig with a token (the bootstrap one) is never used
        std::fs::write(
            root.path(KUBECONFIG),
            api.bootstrap_kubeconfig("abcdef.0123456789abcdef"),
        )
        .unwrap();
        let e = send(
            &root,
            Path::new(KUBECONFIG),
            &report("n1", Some("system:node:n1"), &c),
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("a token is configured"), "{e}");
        assert!(!e.to_string().contains("0123456789abcdef"), "{e}");
        // no credentials yet
        let e = send(&root, Path::new(KUBECONFIG), &report("n1", None, &c))
            .await
            .unwrap_err();
        assert!(matches!(e, ReportError::NoCredentials(_)), "{e}");
        assert_eq!(
            nodes_requests(&api).len(),
            before,
            "{:?}",
            nodes_requests(&api)
        );

        // and the double refuses what NodeRestriction refuses
        let kc = crate::kubeconfig::parse(&own, Path::new("own")).unwrap();
        let nodes: Api<Node> = Api::all(crate::kubeconfig::client(kc, false).await.unwrap());
        let patch = json!({"status": {"conditions": [{"type": CONDITION_TYPE, "status": "True"}]}});
        let pp = PatchParams::default();
        match nodes
            .patch_status("n2", &pp, &Patch::Strategic(&patch))
            .await
        {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 403);
                assert!(
                    s.message
                        .contains("node \"n1\" is not allowed to modify node \"n2\""),
                    "{}",
                    s.message
                );
            }
            other => panic!("patching another node: {other:?}"),
        }
        let taint = json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
        match nodes.patch("n1", &pp, &Patch::Merge(&taint)).await {
            Err(kube::Error::Api(s)) => assert!(
                s.message.contains("not allowed to modify taints"),
                "{}",
                s.message
            ),
            other => panic!("changing its taints: {other:?}"),
        }
        assert_eq!(
            api.node("n2").unwrap()["status"]["conditions"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}
