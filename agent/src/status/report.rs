//! Sends the `NodectlReady` condition and nodectld's annotations to the node's own Node, with
//! the node's own credentials only: the node kubeconfig nodectld wrote (a client certificate,
//! never a token), and only for the Node its certificate names (`system:node:<name>`), which is
//! all NodeRestriction lets a node change. node-problem-detector does the same with
//! `PATCH nodes/<name>/status`, a strategic merge keyed on the condition's `type`.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

use super::condition::{Condition, CONDITION_TYPE};
use super::Credentials;
use crate::root::Root;
use crate::util::time::rfc3339;

/// The two writes nodectld makes to its Node.
pub trait NodeWrites: Send {
    /// `PATCH nodes/<name>/status` (strategic merge) with `body`.
    fn patch_status(&mut self, body: serde_json::Value) -> BoxFuture<'_, Result<(), ReportError>>;
    /// `PATCH nodes/<name>` (JSON merge) with `body`.
    fn patch_meta(&mut self, body: serde_json::Value) -> BoxFuture<'_, Result<(), ReportError>>;
}

/// One request's bound (connect, TLS, the answer).
const TIMEOUT: Duration = Duration::from_secs(10);

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
    /// The API server did not accept the node's certificate (401).
    #[error("{0}")]
    Unauthorized(String),
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

/// The condition as a strategic merge patch of `nodes/<name>/status` (merged by `type`:
/// kubelet's conditions are kept). Unix times.
pub fn condition_patch(c: &Condition, heartbeat_at: u64, transition_at: u64) -> Value {
    json!({"status": {"conditions": [{
        "type": CONDITION_TYPE,
        "status": c.status,
        "reason": c.reason,
        "message": c.message,
        "lastHeartbeatTime": rfc3339(at(heartbeat_at)),
        "lastTransitionTime": rfc3339(at(transition_at)),
    }]}})
}

/// The annotations as a JSON merge patch of the Node.
pub fn annotations_patch(annotations: &[(&'static str, String)]) -> Value {
    let map: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({"metadata": {"annotations": map}})
}

/// The node's own writes to its own Node over one long-lived client: made with the node
/// kubeconfig when first needed, and again once the certificate changed or a request failed.
/// Only the node's own certificate is used (a client certificate, never a token), and only for
/// the Node it names (`system:node:<name>`), which is all NodeRestriction lets a node change.
pub struct KubeNode {
    root: Root,
    kubeconfig: PathBuf,
    node: String,
    /// The node's certificate as the last pass read it.
    credentials: Option<Credentials>,
    client: Option<kube::Client>,
}

impl KubeNode {
    pub fn new(root: Root, kubeconfig: PathBuf, node: String) -> KubeNode {
        KubeNode {
            root,
            kubeconfig,
            node,
            credentials: None,
            client: None,
        }
    }

    /// The certificate the last pass read: another one (rotated, replaced) drops the client.
    pub fn set_credentials(&mut self, c: Option<&Credentials>) {
        let same = match (&self.credentials, c) {
            (Some(a), Some(b)) => a.same_certificate(b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.client = None;
            self.credentials = c.cloned();
        }
    }

    /// The client, made if there is none: checks that only the node's own certificate is used,
    /// for its own Node (and the Events about it: `daemon::events`).
    pub async fn client(&mut self) -> Result<kube::Client, ReportError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let own = format!("system:node:{}", self.node);
        match self.credentials.as_ref().map(|c| c.subject.as_str()) {
            None => return Err(ReportError::NoCredentials("no client certificate".into())),
            Some(s) if s != own => {
                return Err(ReportError::Refused(format!(
                    "the node's certificate is for {s}, not {own}: nothing is sent for another node"
                )))
            }
            Some(_) => {}
        }
        let kubeconfig = &self.kubeconfig;
        let text = self
            .root
            .read(kubeconfig)
            .map_err(|e| ReportError::NoCredentials(format!("{}: {e}", kubeconfig.display())))?;
        let text = String::from_utf8_lossy(&text);
        let kc = crate::kubeconfig::parse(&text, kubeconfig)
            .map_err(|e| ReportError::Api(e.to_string()))?;
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
        let conn = crate::kubeconfig::connect(&self.root, kubeconfig, false)
            .await
            .map_err(|e| ReportError::Api(e.to_string()))?;
        self.client = Some(conn.client.clone());
        Ok(conn.client)
    }

    /// After a failed request: the next one makes the client again (its files may have
    /// changed).
    pub fn drop_client(&mut self) {
        self.client = None;
    }

    async fn write(&mut self, status: bool, body: Value) -> Result<(), ReportError> {
        let nodes: Api<Node> = Api::all(self.client().await?);
        let pp = PatchParams::default();
        let r = if status {
            bounded(
                &self.node,
                nodes.patch_status(&self.node, &pp, &Patch::Strategic(body)),
            )
            .await
        } else {
            bounded(
                &self.node,
                nodes.patch(&self.node, &pp, &Patch::Merge(body)),
            )
            .await
        };
        if r.is_err() {
            self.drop_client();
        }
        crate::memory::release_freed();
        r
    }
}

impl NodeWrites for KubeNode {
    fn patch_status(&mut self, body: Value) -> BoxFuture<'_, Result<(), ReportError>> {
        Box::pin(self.write(true, body))
    }

    fn patch_meta(&mut self, body: Value) -> BoxFuture<'_, Result<(), ReportError>> {
        Box::pin(self.write(false, body))
    }
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
        Ok(Err(kube::Error::Api(s))) if s.code == 401 => Err(ReportError::Unauthorized(format!(
            "the API server refused the node's certificate ({} {})",
            s.code, s.reason
        ))),
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
    use std::path::Path;

    const KUBECONFIG: &str = "/var/lib/kubelet/kubeconfig";

    fn up() -> Condition {
        Condition {
            status: "True".into(),
            reason: "Converged".into(),
            message: "node converged".into(),
        }
    }

    /// One report as nodectld makes it: the condition, then the annotations.
    async fn send(
        root: &Root,
        node: &str,
        subject: Option<&str>,
        c: &Condition,
    ) -> Result<(), ReportError> {
        let mut k = KubeNode::new(root.clone(), KUBECONFIG.into(), node.into());
        k.set_credentials(cert(subject).as_ref());
        k.patch_status(condition_patch(c, 1_800_000_000, 1_799_999_000))
            .await?;
        k.patch_meta(annotations_patch(&[])).await
    }

    fn cert(subject: Option<&str>) -> Option<Credentials> {
        subject.map(|s| Credentials {
            subject: s.into(),
            not_after: "2027-01-01T00:00:00Z".into(),
            ..Credentials::default()
        })
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

        send(&root, "n1", Some("system:node:n1"), &c).await.unwrap();
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
        let e = send(&root, "n2", Some("system:node:n1"), &c)
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
        let e = send(&root, "n1", Some("system:node:n1"), &c)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("a token is configured"), "{e}");
        assert!(!e.to_string().contains("0123456789abcdef"), "{e}");
        // no credentials yet
        let e = send(&root, "n1", None, &c).await.unwrap_err();
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

    #[tokio::test]
    async fn one_client_serves_until_the_certificate_changes_or_a_request_fails() {
        let api = Double::start(Options::default()).await.unwrap();
        api.set_node("n1", true);
        let d = tempfile::tempdir().unwrap();
        let root = Root::new(d.path());
        std::fs::create_dir_all(root.path("/var/lib/kubelet")).unwrap();
        std::fs::write(
            root.path(KUBECONFIG),
            api.client_kubeconfig("system:node:n1", &["system:nodes"])
                .unwrap(),
        )
        .unwrap();
        let mut k = KubeNode::new(root.clone(), KUBECONFIG.into(), "n1".into());
        k.set_credentials(cert(Some("system:node:n1")).as_ref());
        k.patch_status(condition_patch(&up(), 1_800_000_000, 1_800_000_000))
            .await
            .unwrap();
        // the kubeconfig is read once: gone, the client it made still serves
        std::fs::remove_file(root.path(KUBECONFIG)).unwrap();
        k.set_credentials(cert(Some("system:node:n1")).as_ref());
        k.patch_meta(annotations_patch(&[(
            "nodectl.io/agent-version",
            "x".into(),
        )]))
        .await
        .unwrap();
        assert_eq!(
            api.node("n1").unwrap()["metadata"]["annotations"]["nodectl.io/agent-version"],
            "x"
        );
        // another certificate: the client is made again (here: no kubeconfig to make it from)
        let mut rotated = cert(Some("system:node:n1")).unwrap();
        rotated.not_after = "2027-02-01T00:00:00Z".into();
        k.set_credentials(Some(&rotated));
        let e = k.patch_meta(annotations_patch(&[])).await.unwrap_err();
        assert!(matches!(e, ReportError::NoCredentials(_)), "{e}");
        // a 401 is told apart (the daemon asks for a SelfSubjectReview on it)
        std::fs::write(
            root.path(KUBECONFIG),
            api.client_kubeconfig("system:node:n1", &["system:nodes"])
                .unwrap(),
        )
        .unwrap();
        api.inject(
            "/api/v1/nodes/n1",
            nodectl_apiserver_double::Fault::Status {
                code: 401,
                retry_after: None,
            },
            1,
        );
        let e = k.patch_meta(annotations_patch(&[])).await.unwrap_err();
        assert!(matches!(e, ReportError::Unauthorized(_)), "{e}");
    }
}
