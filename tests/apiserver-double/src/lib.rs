//! An HTTPS stand-in for the part of kube-apiserver (and kube-controller-manager's CSR approver
//! and signer) that kubelet's TLS bootstrap touches, run by tests on loopback.
//!
//! What it does as upstream does:
//! - authentication: bootstrap tokens (`Authorization: Bearer <id>.<secret>` ->
//!   `system:bootstrap:<id>` in `system:bootstrappers`), client certificates signed by its CA
//!   (CN -> user, O -> groups); `system:authenticated` for both; 401 otherwise. As upstream, the
//!   TLS handshake accepts any client certificate and the authenticator verifies it (chain and
//!   validity), so an expired or foreign certificate gets a 401 `Status`, not a TLS alert;
//! - revocation ([`Double::revoke`]) stands in for what makes a real apiserver refuse a node's
//!   certificate (expiry, a rotated client CA, an authenticating webhook): 401 from then on;
//! - authorization as Typhoon's RBAC has it: bootstrappers create/get/list/watch CSRs (nodeclient),
//!   nodes create/get/list/watch CSRs (selfnodeclient); 403 otherwise;
//! - `certificates.k8s.io/v1` CertificateSigningRequests: create (409 AlreadyExists on a taken
//!   name, `spec.username`/`groups` set from the requester), get (404 NotFound), list and watch
//!   with `fieldSelector=metadata.name=<name>`, `resourceVersion`, `timeoutSeconds` and
//!   `allowWatchBookmarks` (newline-delimited JSON events; a BOOKMARK before a timeout closes it);
//! - approval by the rules of the kubelet-client auto-approver (`sarapprove.go`): signer
//!   `kubernetes.io/kube-apiserver-client-kubelet`, O exactly `[system:nodes]`, CN `system:node:*`,
//!   no SANs, usages {digital signature, key encipherment, client auth} or {digital signature,
//!   client auth}; nodeclient for bootstrappers, selfnodeclient when the requester is the CN;
//!   condition `Approved`/`AutoApproved`;
//! - signing with its CA for the configured duration (Typhoon: 72h; a shorter
//!   `spec.expirationSeconds` wins);
//! - errors as `Status` objects with `reason` and `code`;
//! - `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`: who the caller is.
//!
//! What it does not: anything else of the API, admission, real RBAC evaluation, etcd, HTTP/2,
//! protobuf. docs/testing.md lists this too.
//!
//! Lists of Nodes and Leases are paged (`limit`, `continue`: [`paging`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};

/// A request with its body read (bodies here are small: patches, objects, CSRs).
type Req = Request<Bytes>;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::broadcast;

mod events;
mod faults;
mod nodes;
mod paging;
mod persist;
mod pods;

pub use faults::Fault;

pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// What the approver does with a request it recognizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approval {
    /// Approve and sign at once (kube-controller-manager's auto-approver).
    Auto,
    /// Approve and sign after this long.
    After(Duration),
    /// Leave it pending until [`Double::approve`].
    Manual,
    Deny(String),
    Fail(String),
}

#[derive(Clone, Debug)]
pub struct Options {
    /// `<id>.<secret>` bootstrap tokens.
    pub bootstrap_tokens: Vec<String>,
    pub signing_duration: Duration,
    pub approval: Approval,
    /// The CA's key (PEM), to serve as the same CA across restarts (its certificate is made
    /// again from the same key and name, which is what a client's trust anchor holds).
    pub ca_key_pem: Option<String>,
    /// The ValidatingAdmissionPolicy of `packaging/kubernetes/reboot-lease-policy.yaml` is
    /// installed: a node may add, change or remove only its own reboot slot entry
    /// (`<node>.reboot-holders.nodectl.io/slot`) in a Lease. On by default, as the shipped
    /// manifests install it; a test that turns it off says why.
    pub reboot_lease_policy: bool,
    /// The namespace the shipped RBAC names for the reboot Leases (its Role and RoleBinding,
    /// and the policy's binding, `packaging/kubernetes/`): a node may use Leases there and in
    /// no other namespace (RBAC's 403), and the policy binds there. An operator who sets
    /// `reboot.namespace` applies the manifests to that namespace: set it here alike.
    pub reboot_namespace: String,
    /// Keep Leases, Nodes and pods in this file across restarts (`persist.rs`): read at start,
    /// written after each write request.
    pub state_file: Option<std::path::PathBuf>,
    /// The signer's clock is this far ahead of the node's: issued certificates are valid from
    /// `now + clock_ahead - 5 s` (kube-controller-manager's signer backdates by 5 minutes at most,
    /// pkg/controller/certificates/authority/authority.go `Sign`; a skewed clock does the rest).
    pub clock_ahead: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bootstrap_tokens: vec!["abcdef.0123456789abcdef".into()],
            signing_duration: Duration::from_secs(72 * 3600),
            approval: Approval::Auto,
            ca_key_pem: None,
            reboot_lease_policy: true,
            reboot_namespace: "nodectl-reboot".into(),
            state_file: None,
            clock_ahead: Duration::ZERO,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

#[derive(Clone, Debug)]
struct Event {
    rv: u64,
    kind: &'static str,
    /// `certificatesigningrequests` or `leases`.
    resource: &'static str,
    object: Value,
}

/// What a watch follows: one resource, in one namespace (Leases), by name or all.
#[derive(Clone)]
struct Watched {
    resource: &'static str,
    namespace: Option<String>,
    name: Option<String>,
}

impl Watched {
    fn matches(&self, e: &Event) -> bool {
        e.resource == self.resource
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| e.object["metadata"]["namespace"] == ns)
            && self
                .name
                .as_deref()
                .is_none_or(|n| e.object["metadata"]["name"] == n)
    }
}

/// The verbs the shipped Role `nodectl-reboot-lease` (packaging/kubernetes/rbac.yaml) grants
/// nodes on Leases; the double answers nodes only these (agent/tests/shipped_manifests.rs holds
/// the two together).
pub const LEASE_VERBS: &[&str] = &["get", "create", "update", "watch"];

struct State {
    rv: u64,
    csrs: BTreeMap<String, Value>,
    log: Vec<Event>,
    /// Requests as received (for tests to inspect).
    received: Vec<Value>,
    /// When each request's certificate was issued.
    signed: BTreeMap<String, std::time::Instant>,
    /// (CN, serial) of every certificate issued.
    issued: Vec<(String, Vec<u8>)>,
    /// coordination.k8s.io/v1 Leases by (namespace, name), and every version ever stored.
    leases: BTreeMap<(String, String), Value>,
    lease_history: Vec<Value>,
    /// Nodes by name.
    nodes: BTreeMap<String, Value>,
    /// core/v1 Events by (namespace, name).
    events: BTreeMap<(String, String), Value>,
    /// Pods by (namespace, name).
    pods: BTreeMap<(String, String), Value>,
    /// Every authenticated request: (user, method, path).
    requests: Vec<(String, String, String)>,
    /// The query of every authenticated request that has one: (path, query).
    queries: Vec<(String, String)>,
    /// The distinct User-Agent headers of authenticated requests (API Priority and Fairness and
    /// the audit log tell clients apart by them).
    user_agents: std::collections::BTreeSet<String>,
    /// Every request, faulted or not: (method, path, since the start).
    times: Vec<(String, String, Duration)>,
    /// Pods a PodDisruptionBudget protects now (eviction refused with 429).
    protected: std::collections::BTreeSet<(String, String)>,
}

struct Inner {
    opts: Mutex<Options>,
    /// Verifies client certificates after the handshake (chain to the CA, validity).
    client_verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    /// Serial numbers of revoked certificates.
    revoked: Mutex<Vec<Vec<u8>>>,
    state: Mutex<State>,
    events: broadcast::Sender<Event>,
    /// Bumped to close every open watch (a dropped connection mid-wait).
    drop_watches: broadcast::Sender<()>,
    /// Closes every open connection (the server going down).
    close_connections: broadcast::Sender<()>,
    /// Faults injected by a test, taken in order.
    faults: Mutex<Vec<faults::Injected>>,
    started: std::time::Instant,
    ca_key: rcgen::KeyPair,
    ca_params: rcgen::CertificateParams,
    ca_pem: String,
}

/// Injects faults into a running [`Double`] ([`Double::inject`]).
#[derive(Clone)]
pub struct Injector(Arc<Inner>);

impl Injector {
    /// The next `times` requests whose path starts with `prefix` get `fault`.
    pub fn inject(&self, prefix: &str, fault: Fault, times: usize) {
        self.0
            .faults
            .lock()
            .expect("faults")
            .push(faults::Injected {
                prefix: prefix.into(),
                fault,
                left: times,
            });
    }
}

/// A running double. Dropping it stops it.
pub struct Double {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    acceptor: tokio_rustls::TlsAcceptor,
    server: tokio::task::JoinHandle<()>,
    /// The port, held for the double's life by a socket bound to it that never listens
    /// (`SO_REUSEPORT` on both it and each listener): while the double is [`Double::down`],
    /// connections are refused as by a server that is down, and no other socket can take the
    /// port in between (a port dropped and bound again later is a race on a busy machine).
    _reserved: tokio::net::TcpSocket,
}

/// A TCP socket with `SO_REUSEADDR` and `SO_REUSEPORT`, bound to `addr`.
fn reuse_bound(addr: SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let s = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.set_reuseport(true)?;
    s.bind(addr)?;
    Ok(s)
}

/// A listener on the double's held port (see [`Double`]'s `_reserved`).
fn listen_on(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    reuse_bound(addr)?.listen(1024)
}

impl Drop for Double {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn status(code: StatusCode, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()
    })
}

type Body = BoxBody<Bytes, Infallible>;

fn reply(code: StatusCode, v: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())).boxed())
        .expect("response")
}

fn fail(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    reply(code, &status(code, reason, message))
}

impl Double {
    /// Answers `req` as the API server would answer `user`, with no connection: the same
    /// routing, authorization, admission (the Lease policy included) and storage as over TLS,
    /// recorded in [`Double::requests`] alike; no authentication, faults or transport. For
    /// simulations of many nodes (a thousand TLS clients would measure the machine, not the
    /// protocol). Not for watches (their answer does not end). Returns the status and the body.
    pub async fn call_as(&self, user: &User, req: Request<Bytes>) -> (StatusCode, Value) {
        let resp = self.respond_as(user, req).await;
        let code = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// As [`Double::call_as`], with the answer as it would stream (watches included): the
    /// service behind an in-process client (a `kube::Client` over `tower::service_fn`), so a
    /// simulation runs nodectl's own API code for many nodes, in virtual time.
    pub async fn respond_as(
        &self,
        user: &User,
        req: Request<Bytes>,
    ) -> Response<BoxBody<Bytes, Infallible>> {
        route(self.inner.clone(), user.clone(), req).await
    }

    /// Starts on 127.0.0.1 (a free port) with a fresh CA.
    pub async fn start(opts: Options) -> anyhow::Result<Double> {
        Self::start_on("127.0.0.1:0".parse()?, opts).await
    }

    /// Starts on `addr` (a port of the caller's choosing, e.g. to come back "up" after a stop).
    pub async fn start_on(addr: SocketAddr, opts: Options) -> anyhow::Result<Double> {
        let ca_key = match &opts.ca_key_pem {
            Some(pem) => rcgen::KeyPair::from_pem(pem)?,
            None => rcgen::KeyPair::generate()?,
        };
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes-ca");
        ca_params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "typhoon");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone())?;
        let client_verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .allow_unauthenticated()
        .build()?;
        let state_file = opts.state_file.clone();
        let (events, _) = broadcast::channel(1024);
        let (drop_watches, _) = broadcast::channel(16);
        let (close_connections, _) = broadcast::channel(16);
        let inner = Arc::new(Inner {
            opts: Mutex::new(opts),
            client_verifier: client_verifier.clone(),
            revoked: Mutex::new(Vec::new()),
            state: Mutex::new(State {
                rv: 1,
                csrs: BTreeMap::new(),
                log: Vec::new(),
                received: Vec::new(),
                signed: BTreeMap::new(),
                issued: Vec::new(),
                leases: BTreeMap::new(),
                lease_history: Vec::new(),
                nodes: BTreeMap::new(),
                events: BTreeMap::new(),
                pods: BTreeMap::new(),
                requests: Vec::new(),
                queries: Vec::new(),
                user_agents: Default::default(),
                times: Vec::new(),
                protected: Default::default(),
            }),
            events,
            drop_watches,
            close_connections,
            faults: Mutex::new(Vec::new()),
            started: std::time::Instant::now(),
            ca_pem: ca_cert.pem(),
            ca_key,
            ca_params,
        });
        if let Some(p) = &state_file {
            persist::load(&mut inner.state.lock().expect("state"), p)?;
        }
        // The serving certificate, for 127.0.0.1 and localhost.
        let srv_key = rcgen::KeyPair::generate()?;
        let mut srv =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
        srv.distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver");
        let issuer = rcgen::Issuer::from_params(&inner.ca_params, &inner.ca_key);
        let srv_cert = srv.signed_by(&srv_key, &issuer)?;
        let verifier = Arc::new(RequestClientCert(client_verifier));
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![srv_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(srv_key.serialize_der().into()),
        )?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let reserved = reuse_bound(addr)?;
        let addr = reserved.local_addr()?;
        let listener = listen_on(addr)?;
        let server = serve(listener, acceptor.clone(), inner.clone());
        Ok(Double {
            addr,
            inner,
            acceptor,
            server,
            _reserved: reserved,
        })
    }

    /// Stops listening: connections are refused, as to an apiserver that is down. (Open
    /// connections are left to end by themselves.)
    pub fn down(&mut self) {
        self.server.abort();
        let _ = self.inner.close_connections.send(());
    }

    /// Listens again on the same address, with the same CA and state.
    pub async fn up(&mut self) -> anyhow::Result<()> {
        self.server.abort();
        let listener = listen_on(self.addr)?;
        self.server = serve(listener, self.acceptor.clone(), self.inner.clone());
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn ca_pem(&self) -> &str {
        &self.inner.ca_pem
    }

    pub fn set_approval(&self, a: Approval) {
        self.inner.opts.lock().expect("opts").approval = a;
    }

    /// Every CSR as stored.
    pub fn csrs(&self) -> Vec<Value> {
        self.inner
            .state
            .lock()
            .expect("state")
            .csrs
            .values()
            .cloned()
            .collect()
    }

    /// Every create request body as received.
    pub fn received(&self) -> Vec<Value> {
        self.inner.state.lock().expect("state").received.clone()
    }

    /// Approves (and signs) a pending request, as an operator's `kubectl certificate approve`.
    pub fn approve(&self, name: &str) -> anyhow::Result<()> {
        approve_and_sign(&self.inner, name, "Approved", "AutoApproved", "approved")
    }

    /// When the request's certificate was issued (published to watchers).
    pub fn signed_at(&self, name: &str) -> Option<std::time::Instant> {
        self.inner
            .state
            .lock()
            .expect("state")
            .signed
            .get(name)
            .copied()
    }

    /// Refuses, from now on, every certificate issued so far to `user` (CN): 401 as for an
    /// unknown certificate. Certificates issued later are accepted.
    pub fn revoke(&self, user: &str) {
        let serials: Vec<Vec<u8>> = self
            .inner
            .state
            .lock()
            .expect("state")
            .issued
            .iter()
            .filter(|(cn, _)| cn == user)
            .map(|(_, s)| s.clone())
            .collect();
        self.inner.revoked.lock().expect("revoked").extend(serials);
    }

    /// One line per CSR change from now on (`ADDED <name> by <user>`, `MODIFIED <name>
    /// Approved issued`), for a process log.
    pub fn events(&self) -> EventLines {
        EventLines(self.inner.events.subscribe())
    }

    /// A kubeconfig authenticating as `user` in `groups` with a client certificate of the
    /// double's CA (embedded data), as an admin or a node would hold.
    pub fn client_kubeconfig(&self, user: &str, groups: &[&str]) -> anyhow::Result<String> {
        let key = rcgen::KeyPair::generate()?;
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
        p.distinguished_name.push(rcgen::DnType::CommonName, user);
        for g in groups {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, *g);
        }
        let now = std::time::SystemTime::now();
        p.not_before = (now - Duration::from_secs(60)).into();
        p.not_after = (now + Duration::from_secs(24 * 3600)).into();
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let issuer = rcgen::Issuer::from_params(&self.inner.ca_params, &self.inner.ca_key);
        let cert = p.signed_by(&key, &issuer)?;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        Ok(format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: double\n    user: u\ncurrent-context: c\n",
            self.url(),
            b64(&self.inner.ca_pem),
            b64(&cert.pem()),
            b64(&key.serialize_pem())
        ))
    }

    /// Adds a running pod on `node`.
    pub fn add_pod(&self, ns: &str, name: &str, node: &str, kind: PodKind) {
        let mut pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30},
            "status": {"phase": "Running"}});
        match kind {
            PodKind::Plain => {
                pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": true}])
            }
            PodKind::DaemonSet => {
                pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u2", "controller": true}])
            }
            PodKind::Mirror => {
                pod["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"})
            }
            PodKind::Bare => {}
        }
        self.inner
            .state
            .lock()
            .expect("state")
            .pods
            .insert((ns.into(), name.into()), pod);
    }

    /// Sets the labels of a pod `add_pod` made.
    pub fn label_pod(&self, ns: &str, name: &str, labels: &[(&str, &str)]) {
        let mut st = self.inner.state.lock().expect("state");
        if let Some(p) = st.pods.get_mut(&(ns.to_string(), name.to_string())) {
            p["metadata"]["labels"] = labels
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
    }

    /// Removes a pod (its workload ended and its object is gone).
    pub fn delete_pod(&self, ns: &str, name: &str) {
        let mut st = self.inner.state.lock().expect("state");
        st.pods.remove(&(ns.to_string(), name.to_string()));
    }

    /// A PodDisruptionBudget protects (or stops protecting) this pod.
    pub fn protect_pod(&self, ns: &str, name: &str, protected: bool) {
        let mut st = self.inner.state.lock().expect("state");
        let k = (ns.to_string(), name.to_string());
        if protected {
            st.protected.insert(k);
        } else {
            st.protected.remove(&k);
        }
    }

    /// Names of the pods on `node`.
    pub fn pods_on(&self, node: &str) -> Vec<String> {
        self.inner
            .state
            .lock()
            .expect("state")
            .pods
            .values()
            .filter(|p| p["spec"]["nodeName"] == node)
            .map(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    /// The Node as stored.
    pub fn node(&self, name: &str) -> Option<Value> {
        self.inner
            .state
            .lock()
            .expect("state")
            .nodes
            .get(name)
            .cloned()
    }

    /// Every version of every Lease ever stored, in order.
    pub fn lease_history(&self) -> Vec<Value> {
        self.inner
            .state
            .lock()
            .expect("state")
            .lease_history
            .clone()
    }

    /// Adds (or replaces) a Node with its Ready condition.
    pub fn set_node(&self, name: &str, ready: bool) {
        let node = json!({"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
        let mut st = self.inner.state.lock().expect("state");
        match st.nodes.get_mut(name) {
            Some(n) => n["status"] = node["status"].clone(),
            None => {
                st.nodes.insert(name.to_string(), node);
            }
        }
    }

    /// The next `times` requests whose path starts with `prefix` get `fault`.
    pub fn inject(&self, prefix: &str, fault: Fault, times: usize) {
        self.injector().inject(prefix, fault, times);
    }

    /// A handle that injects faults from elsewhere (e.g. a test's command runner, mid-request).
    pub fn injector(&self) -> Injector {
        Injector(self.inner.clone())
    }

    /// Every request so far, faulted or not: (method, path, when since the start).
    pub fn request_times(&self) -> Vec<(String, String, Duration)> {
        self.inner.state.lock().expect("state").times.clone()
    }

    /// The distinct User-Agent headers of authenticated requests so far ("(none)" for none).
    pub fn user_agents(&self) -> Vec<String> {
        let st = self.inner.state.lock().expect("state");
        st.user_agents.iter().cloned().collect()
    }

    /// The query of every authenticated request so far that had one: (path, query).
    pub fn queries(&self) -> Vec<(String, String)> {
        self.inner.state.lock().expect("state").queries.clone()
    }

    /// Every core/v1 Event stored, in (namespace, name) order.
    pub fn stored_events(&self) -> Vec<Value> {
        self.inner
            .state
            .lock()
            .expect("state")
            .events
            .values()
            .cloned()
            .collect()
    }

    /// Deletes every Event, as the API server's event TTL (`--event-ttl`, 1 h) does.
    pub fn expire_events(&self) {
        self.inner.state.lock().expect("state").events.clear();
    }

    /// Every authenticated request so far: (user, method, path).
    pub fn requests(&self) -> Vec<(String, String, String)> {
        self.inner.state.lock().expect("state").requests.clone()
    }

    pub fn delete_node(&self, name: &str) {
        self.inner.state.lock().expect("state").nodes.remove(name);
    }

    /// Closes every open watch stream, as a dropped connection would.
    pub fn drop_watches(&self) {
        let _ = self.inner.drop_watches.send(());
    }

    /// A bootstrap kubeconfig in Typhoon's form (nameless context, no current-context).
    /// The CA's key (PEM), for [`Options::ca_key_pem`].
    pub fn ca_key_pem(&self) -> String {
        self.inner.ca_key.serialize_pem()
    }

    pub fn bootstrap_kubeconfig(&self, token: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.inner.ca_pem);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: kubelet\n  user:\n    token: {token}\ncontexts:\n- context:\n    cluster: local\n    user: kubelet\n",
            self.url()
        )
    }
}

/// Accepts connections until aborted.
fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    inner: Arc<Inner>,
) -> tokio::task::JoinHandle<()> {
    let srv_inner = inner;
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, inner) = (acceptor.clone(), srv_inner.clone());
            let inner_closer = srv_inner.close_connections.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let peer = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| c.as_ref().to_vec());
                // Fired to drop this connection mid-answer (Fault::CutWatch).
                let cut = Arc::new(tokio::sync::Notify::new());
                let cut_conn = cut.clone();
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (inner, peer, cut) = (inner.clone(), peer.clone(), cut.clone());
                    async move {
                        let req = read_body(req).await;
                        let path = req.uri().path().to_string();
                        let at = inner.started.elapsed();
                        let method = req.method().to_string();
                        inner
                            .state
                            .lock()
                            .expect("state")
                            .times
                            .push((method, path.clone(), at));
                        let is_watch = req
                            .uri()
                            .query()
                            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true"));
                        match faults::take(&inner, &path, is_watch) {
                            Some(Fault::Reset) => Err(std::io::Error::new(
                                std::io::ErrorKind::ConnectionReset,
                                "injected reset",
                            )),
                            Some(Fault::Status { code, retry_after }) => {
                                Ok(faults::answer(code, retry_after))
                            }
                            Some(Fault::CutWatch) => Ok(faults::cut_watch(&cut)),
                            Some(Fault::Gone) => Ok(faults::gone()),
                            Some(Fault::Stall(d)) => {
                                tokio::time::sleep(d).await;
                                Ok(handle(inner, peer, req).await)
                            }
                            None => Ok(handle(inner, peer, req).await),
                        }
                    }
                });
                let mut closed = inner_closer.subscribe();
                tokio::select! {
                    _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc) => {}
                    _ = closed.recv() => {}
                    _ = cut_conn.notified() => {}
                }
            });
        }
    })
}

fn authenticate(inner: &Inner, peer: Option<&[u8]>, req: &Req) -> Option<User> {
    if let Some(auth) = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
    {
        let token = auth.strip_prefix("Bearer ")?;
        let opts = inner.opts.lock().expect("opts");
        if !opts.bootstrap_tokens.iter().any(|t| t == token) {
            return None;
        }
        let id = token.split('.').next().unwrap_or_default();
        return Some(User {
            name: format!("system:bootstrap:{id}"),
            groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
        });
    }
    let der = peer?;
    // Chain to the CA and validity now, as the apiserver's x509 authenticator checks them (on
    // the server's clock, which runs with its signer's: `clock_ahead`).
    let end = rustls::pki_types::CertificateDer::from(der);
    let ahead = inner.opts.lock().expect("opts").clock_ahead;
    let now = rustls::pki_types::UnixTime::since_unix_epoch(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            + ahead,
    );
    inner
        .client_verifier
        .verify_client_cert(&end, &[], now)
        .ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    if inner
        .revoked
        .lock()
        .expect("revoked")
        .iter()
        .any(|s| s.as_slice() == cert.raw_serial())
    {
        return None;
    }
    let cn = cert
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let mut groups: Vec<String> = cert
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    groups.push("system:authenticated".into());
    Some(User { name: cn, groups })
}

/// Typhoon's RBAC for CSRs: system:node-bootstrapper and the selfnodeclient/nodeclient roles.
fn may_use_csrs(u: &User) -> bool {
    u.groups
        .iter()
        .any(|g| g == "system:bootstrappers" || g == "system:nodes")
}

async fn handle(inner: Arc<Inner>, peer: Option<Vec<u8>>, req: Req) -> Response<Body> {
    let Some(user) = authenticate(&inner, peer.as_deref(), &req) else {
        return fail(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    };
    route(inner, user, req).await
}

/// What the API server answers `user` (authenticated) for `req`; with a state file, the
/// objects kept after a request that may have written.
async fn route(inner: Arc<Inner>, user: User, req: Req) -> Response<Body> {
    let writes = req.method() != Method::GET;
    let resp = answer(inner.clone(), user, req).await;
    if writes {
        persist::after_write(&inner);
    }
    resp
}

async fn answer(inner: Arc<Inner>, user: User, req: Req) -> Response<Body> {
    let path = req.uri().path().to_string();
    {
        let mut st = inner.state.lock().expect("state");
        st.requests
            .push((user.name.clone(), req.method().to_string(), path.clone()));
        if let Some(q) = req.uri().query() {
            st.queries.push((path.clone(), q.to_string()));
        }
        let agent = req
            .headers()
            .get(hyper::header::USER_AGENT)
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .chars()
                    .take(200)
                    .collect()
            })
            .unwrap_or_else(|| "(none)".to_string());
        st.user_agents.insert(agent);
    }
    let query = query_of(&req);
    let req = match pods::route(&inner, &user, req).await {
        Ok(answer) => return answer,
        Err(req) => req,
    };
    match (req.method().clone(), path.as_str()) {
        (Method::POST, "/apis/authentication.k8s.io/v1/selfsubjectreviews") => reply(
            StatusCode::CREATED,
            &json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                    "metadata": {}, "status": {"userInfo": {"username": user.name, "groups": user.groups}}}),
        ),
        (Method::POST, CSR_PATH) => {
            if !may_use_csrs(&user) {
                return forbidden(&user, "create");
            }
            match json_of(&body_of(req).await, "the body") {
                Ok(obj) => create(&inner, &user, obj).await,
                Err(r) => *r,
            }
        }
        (Method::GET, CSR_PATH) => {
            if !may_use_csrs(&user) {
                return forbidden(&user, "list");
            }
            let name = query
                .get("fieldSelector")
                .and_then(|f| f.strip_prefix("metadata.name="))
                .map(String::from);
            if query.get("watch").map(String::as_str) == Some("true") {
                watch(
                    &inner,
                    Watched {
                        resource: CSRS,
                        namespace: None,
                        name,
                    },
                    &query,
                )
            } else {
                let st = inner.state.lock().expect("state");
                let items: Vec<Value> = st
                    .csrs
                    .values()
                    .filter(|c| name.as_deref().is_none_or(|n| c["metadata"]["name"] == n))
                    .cloned()
                    .collect();
                reply(
                    StatusCode::OK,
                    &json!({"kind": "CertificateSigningRequestList", "apiVersion": "certificates.k8s.io/v1",
                            "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
                )
            }
        }
        (Method::GET, p) if p.starts_with(CSR_PATH) => {
            if !may_use_csrs(&user) {
                return forbidden(&user, "get");
            }
            let name = p[CSR_PATH.len()..].trim_start_matches('/');
            match inner.state.lock().expect("state").csrs.get(name) {
                Some(c) => reply(StatusCode::OK, c),
                None => fail(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("certificatesigningrequests.certificates.k8s.io \"{name}\" not found"),
                ),
            }
        }
        (_, p) if p.starts_with(LEASES) => leases(&inner, &user, req, p).await,
        (_, "/api/v1/events") => events::route(&inner, &user, req, "", None).await,
        (_, p)
            if p.starts_with("/api/v1/namespaces/")
                && matches!(p.split('/').nth(5), Some("events")) =>
        {
            let parts: Vec<&str> = p.split('/').collect();
            let (ns, name) = (parts[4].to_string(), parts.get(6).map(|s| s.to_string()));
            events::route(&inner, &user, req, &ns, name.as_deref()).await
        }
        (_, p) if p == "/api/v1/nodes" || p.starts_with("/api/v1/nodes/") => {
            nodes::route(&inner, &user, req, p).await
        }
        (Method::GET, "/api/v1/pods") => {
            if !is_node_or_admin(&user) {
                return fail(StatusCode::FORBIDDEN, "Forbidden", "pods is forbidden");
            }
            let node = query
                .get("fieldSelector")
                .and_then(|f| f.strip_prefix("spec.nodeName="))
                .map(String::from);
            // The Node authorizer (plugin/pkg/auth/authorizer/node/node_authorizer.go, with
            // AuthorizeNodeWithSelectors, on by default since 1.32: KEP-4601) lets a node list
            // pods only with the field selector spec.nodeName=<itself>; RBAC grants nodes no
            // pod list (packaging/kubernetes/rbac.yaml says so).
            if let Some(me) = node_of(&user) {
                if node.as_deref() != Some(me) {
                    return fail(
                        StatusCode::FORBIDDEN,
                        "Forbidden",
                        &format!("pods is forbidden: User \"{}\" cannot list resource \"pods\" in API group \"\" at the cluster scope: can only list/watch pods with spec.nodeName field selector", user.name),
                    );
                }
            }
            let st = inner.state.lock().expect("state");
            let items: Vec<Value> = st
                .pods
                .values()
                .filter(|p| node.as_deref().is_none_or(|n| p["spec"]["nodeName"] == n))
                .cloned()
                .collect();
            reply(
                StatusCode::OK,
                &json!({"kind": "PodList", "apiVersion": "v1",
                        "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
            )
        }
        (Method::POST, p) if p.starts_with("/api/v1/namespaces/") && p.ends_with("/eviction") => {
            if !is_node_or_admin(&user) {
                return fail(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    "pods/eviction is forbidden",
                );
            }
            let parts: Vec<&str> = p.split('/').collect();
            // ["", "api", "v1", "namespaces", ns, "pods", name, "eviction"]
            let (ns, name) = match parts[..] {
                [_, _, _, _, ns, "pods", name, "eviction"] => (ns.to_string(), name.to_string()),
                _ => return fail(StatusCode::NOT_FOUND, "NotFound", "no such resource"),
            };
            let mut st = inner.state.lock().expect("state");
            let key = (ns, name.clone());
            let Some(pod) = st.pods.get(&key) else {
                return fail(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("pods \"{name}\" not found"),
                );
            };
            // NodeRestriction (plugin/pkg/admission/noderestriction/admission.go
            // `admitPodEviction`): a node evicts only pods bound to itself.
            if let Some(me) = node_of(&user) {
                if pod["spec"]["nodeName"].as_str() != Some(me) {
                    return fail(
                        StatusCode::FORBIDDEN,
                        "Forbidden",
                        &format!("pods \"{name}\" is forbidden: node \"{me}\" can only evict pods with spec.nodeName set to itself"),
                    );
                }
            }
            if st.protected.contains(&key) {
                // Upstream's answer when a PodDisruptionBudget does not allow the disruption
                // (pkg/registry/core/pod/storage/eviction.go, `checkAndDecrement`: the cause
                // names the budget; here one per pod, `<pod>-budget`).
                let mut v = status(
                    StatusCode::TOO_MANY_REQUESTS,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                );
                v["details"] = json!({"causes": [{"reason": "DisruptionBudget",
                    "message": format!("The disruption budget {name}-budget needs 1 healthy pods and has 1 currently")}]});
                return reply(StatusCode::TOO_MANY_REQUESTS, &v);
            }
            st.pods.remove(&key);
            reply(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            )
        }
        _ => fail(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        ),
    }
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/";
const CSRS: &str = "certificatesigningrequests";

/// The request with its body read (a body cut short reads as what arrived: empty).
async fn read_body(req: Request<Incoming>) -> Req {
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Request::from_parts(parts, bytes)
}

/// The request's query parameters, decoded as the API server decodes them (field selectors
/// carry `%3D` and `%2C`).
fn query_of(req: &Req) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

async fn body_of(req: Req) -> Bytes {
    req.into_body()
}

/// The body as JSON, or the API server's 400 `Status` (`what` is not JSON).
fn json_of(body: &[u8], what: &str) -> Result<Value, Box<Response<Body>>> {
    serde_json::from_slice(body).map_err(|_| {
        Box::new(fail(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("{what} is not JSON"),
        ))
    })
}

/// The node a user is to the Node authorizer and NodeRestriction: a member of `system:nodes`
/// (and not `system:masters`) named `system:node:<name>`; `Some("")` for a member of
/// `system:nodes` with another name, which both refuse everything node-scoped
/// (plugin/pkg/auth/nodeidentifier/default.go `NodeIdentity`).
fn node_of(u: &User) -> Option<&str> {
    if u.groups.iter().any(|g| g == "system:masters")
        || !u.groups.iter().any(|g| g == "system:nodes")
    {
        return None;
    }
    Some(u.name.strip_prefix("system:node:").unwrap_or(""))
}

fn is_node_or_admin(u: &User) -> bool {
    u.groups
        .iter()
        .any(|g| g == "system:nodes" || g == "system:masters")
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        v => *target = v.clone(),
    }
}

/// What owns a pod, for the drain's skip rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodKind {
    /// A ReplicaSet's pod (evicted by a drain).
    Plain,
    /// A DaemonSet's pod (skipped: it would come back at once).
    DaemonSet,
    /// A static pod's mirror (skipped: the API cannot evict it).
    Mirror,
    /// A pod no controller manages (`kubectl drain` leaves it without `--force`).
    Bare,
}

/// An object name as the API server validates it (lowercase RFC 1123 subdomain).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The annotation an operator sets on a group's Lease: who may take a slot in it (an RE2
/// pattern the node's name must match whole).
pub const MEMBERS: &str = "nodectl.io/reboot-members";

/// The policy's message for a node outside the members.
pub const NOT_A_MEMBER: &str = "this node is not a member of the Lease's group (the nodectl.io/reboot-members annotation an operator set): it may not take or renew a slot in it";

/// The ValidatingAdmissionPolicy `nodectl-reboot-lease-entries`
/// (packaging/kubernetes/reboot-lease-policy.yaml), as the API server would evaluate it for a
/// write of the Lease `new` over `old` (`None` on CREATE) by `user`. Matched: every member of
/// `system:nodes` and every `system:node:*` name (administrators are not). Then, in the order of
/// the policy's validations (the first failing one's message is returned): the user is
/// `system:node:<name>`; every reboot slot entry (`*.reboot-holders.nodectl.io/slot`) added,
/// changed or removed is the node's own; every other annotation, the labels, finalizers and
/// ownerReferences are unchanged (absent and empty alike; none on CREATE); of `spec` only
/// holderIdentity and leaseTransitions change, leaseTransitions by at most one (absent counts
/// as 0) and holderIdentity naming a node with an entry in `new`. A field set to JSON null counts
/// as absent (the API server drops it when it decodes the object).
/// Where an operator set [`MEMBERS`] on the stored Lease, only a node whose name matches it
/// adds or changes its own entry.
/// tests/lease_policy_cel.rs checks this against the policy's CEL, evaluated by a CEL
/// interpreter, case by case.
pub fn lease_entries_policy(
    user: &User,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), &'static str> {
    const SUFFIX: &str = ".reboot-holders.nodectl.io/slot";
    fn at<'a>(o: Option<&'a Value>, path: &[&str]) -> Option<&'a Value> {
        let mut v = o?;
        for p in path {
            v = v.get(p)?;
        }
        (!v.is_null()).then_some(v)
    }
    let me = user.name.strip_prefix("system:node:");
    if me.is_none() && !user.groups.iter().any(|g| g == "system:nodes") {
        return Ok(());
    }
    let Some(me) = me.filter(|m| !m.is_empty()) else {
        return Err(
            "a member of system:nodes must be a node (system:node:<name>) to write a reboot Lease",
        );
    };
    let own = format!("{me}{SUFFIX}");
    let new = Some(new);
    let empty = serde_json::Map::new();
    let annotations = |o| {
        at(o, &["metadata", "annotations"])
            .and_then(Value::as_object)
            .unwrap_or(&empty)
    };
    let (was, now) = (annotations(old), annotations(new));
    let changed = |k: &String, v: &Value| was.get(k) != Some(v);
    let entry = |k: &String| k.ends_with(SUFFIX) && *k != own;
    if now.iter().any(|(k, v)| entry(k) && changed(k, v)) {
        return Err("a node may add or change only its own reboot slot entry");
    }
    if was.keys().any(|k| entry(k) && !now.contains_key(k)) {
        return Err("a node may remove only its own reboot slot entry");
    }
    // Group membership, where an operator set it: the node's own entry added or changed only
    // when its name matches the pattern whole (CEL's `matches` with the policy's anchors).
    if let Some(members) = was.get(MEMBERS) {
        let member = members.as_str().and_then(|m| {
            regex::Regex::new(&format!("^system:node:(?:{m})$"))
                .ok()
                .map(|r| r.is_match(&user.name))
        });
        let taken = now.get(&own).is_some_and(|v| changed(&own, v));
        if taken && member != Some(true) {
            return Err(NOT_A_MEMBER);
        }
    }
    let other = |k: &String| !k.ends_with(SUFFIX);
    if now.iter().any(|(k, v)| other(k) && changed(k, v))
        || was.keys().any(|k| other(k) && !now.contains_key(k))
    {
        return Err("a node may add, change or remove no annotation but its own reboot slot entry");
    }
    let same = |field: &str, none: Value| {
        let path = ["metadata", field];
        at(new, &path).unwrap_or(&none) == at(old, &path).unwrap_or(&none)
    };
    if !same("labels", json!({})) {
        return Err("a node may not change the Lease's labels");
    }
    if !same("finalizers", json!([])) {
        return Err("a node may not change the Lease's finalizers");
    }
    if !same("ownerReferences", json!([])) {
        return Err("a node may not change the Lease's ownerReferences");
    }
    let kept = [
        "acquireTime",
        "leaseDurationSeconds",
        "renewTime",
        "preferredHolder",
        "strategy",
    ];
    if kept
        .iter()
        .any(|f| at(new, &["spec", f]) != at(old, &["spec", f]))
    {
        return Err(
            "a node may change only spec.holderIdentity and spec.leaseTransitions of the Lease",
        );
    }
    let transitions = |o| at(o, &["spec", "leaseTransitions"]).map(Value::as_i64);
    let step = match (transitions(old), transitions(new)) {
        (Some(None), _) | (_, Some(None)) => None,
        (o, n) => n
            .flatten()
            .unwrap_or(0)
            .checked_sub(o.flatten().unwrap_or(0)),
    };
    if !matches!(step, Some(0 | 1)) {
        return Err("spec.leaseTransitions may only stay or grow by one (the slot the node takes)");
    }
    match at(new, &["spec", "holderIdentity"]) {
        None => Ok(()),
        Some(Value::String(h)) if now.contains_key(&format!("{h}{SUFFIX}")) => Ok(()),
        Some(_) => {
            Err("spec.holderIdentity may only name a node with a reboot slot entry in the Lease")
        }
    }
}

/// Leases: get, create (409 AlreadyExists, 422 for a name the API server would not accept), update with optimistic concurrency (409 Conflict on a
/// stale `metadata.resourceVersion`), as the API server does. Nodes and admins only.
async fn leases(inner: &Arc<Inner>, user: &User, req: Req, path: &str) -> Response<Body> {
    let rest = &path[LEASES.len()..];
    let (ns, name) = match rest.split('/').collect::<Vec<_>>()[..] {
        [ns, "leases"] => (ns.to_string(), None),
        [ns, "leases", name] => (ns.to_string(), Some(name.to_string())),
        _ => {
            return fail(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    };
    if !user
        .groups
        .iter()
        .any(|g| g == "system:nodes" || g == "system:masters")
    {
        return fail(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!("leases.coordination.k8s.io is forbidden: User \"{}\" cannot access resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"{ns}\"", user.name),
        );
    }
    let method = req.method().clone();
    let (policy, reboot_ns) = {
        let o = inner.opts.lock().expect("opts");
        (o.reboot_lease_policy, o.reboot_namespace.clone())
    };
    let admin = user.groups.iter().any(|g| g == "system:masters");
    let verb = match (&method, &name) {
        (&Method::GET, None)
            if req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true")) =>
        {
            "watch"
        }
        (&Method::GET, None) => "list",
        (&Method::GET, Some(_)) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, _) => "delete",
        _ => "",
    };
    // The shipped Role's verbs, in the one namespace its RoleBinding is in (RBAC: a node is
    // allowed no other verb on Leases, and none in another namespace).
    if !admin && (!LEASE_VERBS.contains(&verb) || ns != reboot_ns) {
        return fail(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!("leases.coordination.k8s.io is forbidden: User \"{}\" cannot {verb} resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"{ns}\"", user.name),
        );
    }
    if verb == "watch" {
        let query = query_of(&req);
        let name = query
            .get("fieldSelector")
            .and_then(|f| f.strip_prefix("metadata.name="))
            .map(String::from);
        return watch(
            inner,
            Watched {
                resource: "leases",
                namespace: Some(ns),
                name,
            },
            &query,
        );
    }
    let query = query_of(&req);
    let body = body_of(req).await;
    let not_found = |n: &str| {
        fail(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("leases.coordination.k8s.io \"{n}\" not found"),
        )
    };
    let creating = method == Method::POST;
    let mut st = inner.state.lock().expect("state");
    match (method, name) {
        (Method::GET, None) => {
            let items: Vec<(String, Value)> = st
                .leases
                .iter()
                .filter(|((n, _), _)| *n == ns)
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            match paging::page(items, &query, st.rv) {
                Ok(p) => reply(
                    StatusCode::OK,
                    &json!({"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
                            "metadata": p.metadata, "items": p.items}),
                ),
                Err(r) => *r,
            }
        }
        (Method::GET, Some(n)) => match st.leases.get(&(ns, n.clone())) {
            Some(l) => reply(StatusCode::OK, l),
            None => not_found(&n),
        },
        (Method::POST, None) | (Method::PUT, Some(_)) => {
            let mut obj = match json_of(&body, "the body") {
                Ok(o) => o,
                Err(r) => return *r,
            };
            let Some(n) = obj["metadata"]["name"].as_str().map(String::from) else {
                return fail(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "metadata.name is required",
                );
            };
            if creating && !is_dns_subdomain(&n) {
                return fail(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    &format!("Lease.coordination.k8s.io \"{n}\" is invalid: metadata.name: Invalid value: \"{n}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
                );
            }
            let key = (ns.clone(), n.clone());
            match (st.leases.get(&key), creating) {
                (Some(_), true) => {
                    return fail(
                        StatusCode::CONFLICT,
                        "AlreadyExists",
                        &format!("leases.coordination.k8s.io \"{n}\" already exists"),
                    )
                }
                (None, false) => return not_found(&n),
                (Some(cur), false) => {
                    // No resourceVersion: refused. Upstream's Lease strategy has
                    // AllowUnconditionalUpdate() == false (pkg/registry/coordination/lease/
                    // strategy.go), and the generic store then answers 422 (apiserver's
                    // pkg/registry/generic/registry/store.go `Update`): a writer that
                    // dropped the version would otherwise overwrite a slot another node took.
                    let rv = &obj["metadata"]["resourceVersion"];
                    if rv.is_null() || rv.as_str().is_some_and(str::is_empty) {
                        return fail(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "Invalid",
                            &format!("leases.coordination.k8s.io \"{n}\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"),
                        );
                    }
                    if *rv != cur["metadata"]["resourceVersion"] {
                        return fail(
                            StatusCode::CONFLICT,
                            "Conflict",
                            &format!("Operation cannot be fulfilled on leases.coordination.k8s.io \"{n}\": the object has been modified; please apply your changes to the latest version and try again"),
                        );
                    }
                }
                (None, true) => {}
            }
            // The binding matches the reboot namespace only (its namespaceSelector).
            if policy && ns == reboot_ns {
                if let Err(m) = lease_entries_policy(user, st.leases.get(&key), &obj) {
                    return fail(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        &format!("leases.coordination.k8s.io \"{n}\" is forbidden: ValidatingAdmissionPolicy 'nodectl-reboot-lease-entries' with binding 'nodectl-reboot-lease-entries' denied request: {m}"),
                    );
                }
            }
            st.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
            obj["metadata"]["namespace"] = json!(ns);
            obj["kind"] = json!("Lease");
            obj["apiVersion"] = json!("coordination.k8s.io/v1");
            st.leases.insert(key, obj.clone());
            st.lease_history.push(obj.clone());
            publish(
                &mut st,
                inner,
                if creating { "ADDED" } else { "MODIFIED" },
                "leases",
                &obj,
            );
            reply(
                if creating {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                &obj,
            )
        }
        _ => fail(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

fn forbidden(u: &User, verb: &str) -> Response<Body> {
    fail(
        StatusCode::FORBIDDEN,
        "Forbidden",
        &format!("certificatesigningrequests.certificates.k8s.io is forbidden: User \"{}\" cannot {verb} resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope", u.name),
    )
}

fn record(st: &mut State, inner: &Inner, kind: &'static str, object: &mut Value) {
    st.rv += 1;
    object["metadata"]["resourceVersion"] = json!(st.rv.to_string());
    publish(st, inner, kind, CSRS, object);
}

/// An event for watchers (and the log a watch resumes from) of `object`, stored at its
/// resourceVersion.
fn publish(
    st: &mut State,
    inner: &Inner,
    kind: &'static str,
    resource: &'static str,
    object: &Value,
) {
    let ev = Event {
        rv: st.rv,
        kind,
        resource,
        object: object.clone(),
    };
    st.log.push(ev.clone());
    let _ = inner.events.send(ev);
}

async fn create(inner: &Arc<Inner>, user: &User, mut obj: Value) -> Response<Body> {
    let name = match obj["metadata"]["name"].as_str() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => match obj["metadata"]["generateName"].as_str() {
            Some(g) => format!("{g}{:05x}", inner.state.lock().expect("state").rv),
            None => {
                return fail(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "metadata.name or generateName is required",
                )
            }
        },
    };
    {
        let mut st = inner.state.lock().expect("state");
        st.received.push(obj.clone());
        if st.csrs.contains_key(&name) {
            return fail(
                StatusCode::CONFLICT,
                "AlreadyExists",
                &format!(
                    "certificatesigningrequests.certificates.k8s.io \"{name}\" already exists"
                ),
            );
        }
        obj["metadata"]["name"] = json!(name);
        obj["metadata"]["uid"] = json!(format!("uid-{name}"));
        obj["spec"]["username"] = json!(user.name);
        obj["spec"]["groups"] = json!(user.groups);
        obj["status"] = json!({});
        let mut stored = obj.clone();
        record(&mut st, inner, "ADDED", &mut stored);
        st.csrs.insert(name.clone(), stored.clone());
        obj = stored;
    }
    let approval = inner.opts.lock().expect("opts").approval.clone();
    let bg = inner.clone();
    let n = name.clone();
    tokio::spawn(async move {
        match approval {
            Approval::Auto => auto_approve(&bg, &n),
            Approval::After(d) => {
                tokio::time::sleep(d).await;
                auto_approve(&bg, &n)
            }
            Approval::Manual => {}
            Approval::Deny(why) => {
                let _ = condition(&bg, &n, "Denied", "Denied", &why);
            }
            Approval::Fail(why) => {
                let _ = condition(&bg, &n, "Failed", "SignerFailed", &why);
            }
        }
    });
    reply(StatusCode::CREATED, &obj)
}

/// The kubelet-client recognizers of kube-controller-manager's approver.
pub fn recognize(csr: &Value) -> Result<&'static str, String> {
    if csr["spec"]["signerName"] != SIGNER {
        return Err(format!("signerName is not {SIGNER}"));
    }
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["spec"]["request"].as_str().unwrap_or(""))
        .map_err(|e| format!("spec.request is not base64: {e}"))?;
    let (_, p) = x509_parser::pem::parse_x509_pem(&pem)
        .map_err(|e| format!("spec.request is not PEM: {e}"))?;
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&p.contents)
            .map_err(|e| format!("not a certificate request: {e}"))?;
    req.verify_signature()
        .map_err(|e| format!("bad request signature: {e}"))?;
    let subj = &req.certification_request_info.subject;
    let orgs: Vec<&str> = subj
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .collect();
    if orgs != ["system:nodes"] {
        return Err(format!(
            "organization must be exactly [system:nodes], is {orgs:?}"
        ));
    }
    let cn = subj
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or("");
    if !cn.starts_with("system:node:") {
        return Err("common name must start with system:node:".into());
    }
    if let Some(exts) = req.requested_extensions() {
        for e in exts {
            if matches!(
                e,
                x509_parser::extensions::ParsedExtension::SubjectAlternativeName(_)
            ) {
                return Err("subject alternative names are not allowed".into());
            }
        }
    }
    let mut usages: Vec<&str> = csr["spec"]["usages"]
        .as_array()
        .map(|a| a.iter().filter_map(|u| u.as_str()).collect())
        .unwrap_or_default();
    usages.sort_unstable();
    if usages != ["client auth", "digital signature", "key encipherment"]
        && usages != ["client auth", "digital signature"]
    {
        return Err(format!("usages {usages:?} are not a kubelet client's"));
    }
    let groups: Vec<&str> = csr["spec"]["groups"]
        .as_array()
        .map(|a| a.iter().filter_map(|g| g.as_str()).collect())
        .unwrap_or_default();
    if csr["spec"]["username"] == cn {
        if groups.contains(&"system:nodes") {
            return Ok("selfnodeclient");
        }
        return Err("selfnodeclient needs a requester in system:nodes".into());
    }
    if groups.contains(&"system:bootstrappers") {
        return Ok("nodeclient");
    }
    Err("the requester may not ask for a node client certificate".into())
}

use x509_parser::prelude::FromDer;

fn auto_approve(inner: &Arc<Inner>, name: &str) {
    let csr = inner.state.lock().expect("state").csrs.get(name).cloned();
    let Some(csr) = csr else { return };
    // Unrecognized requests stay pending, as upstream leaves them for a person.
    if recognize(&csr).is_ok() {
        let _ = approve_and_sign(
            inner,
            name,
            "Approved",
            "AutoApproved",
            "Auto approving kubelet client certificate after SubjectAccessReview.",
        );
    }
}

/// Changes a stored request under the lock, records the change (a MODIFIED event to watchers)
/// and returns the new object.
fn modify(
    inner: &Arc<Inner>,
    name: &str,
    f: impl FnOnce(&mut Value, &mut State),
) -> anyhow::Result<Value> {
    let mut st = inner.state.lock().expect("state");
    let mut csr = st
        .csrs
        .get(name)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no CSR {name}"))?;
    f(&mut csr, &mut st);
    record(&mut st, inner, "MODIFIED", &mut csr);
    st.csrs.insert(name.to_string(), csr.clone());
    Ok(csr)
}

fn condition(
    inner: &Arc<Inner>,
    name: &str,
    kind: &str,
    reason: &str,
    message: &str,
) -> anyhow::Result<Value> {
    modify(inner, name, |csr, _| {
        let mut conds = csr["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conds.push(json!({"type": kind, "status": "True", "reason": reason, "message": message}));
        csr["status"]["conditions"] = json!(conds);
    })
}

fn approve_and_sign(
    inner: &Arc<Inner>,
    name: &str,
    kind: &str,
    reason: &str,
    message: &str,
) -> anyhow::Result<()> {
    let csr = condition(inner, name, kind, reason, message)?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["spec"]["request"].as_str().unwrap_or(""))?;
    let mut params = rcgen::CertificateSigningRequestParams::from_pem(std::str::from_utf8(&pem)?)?;
    let (mut duration, ahead) = {
        let o = inner.opts.lock().expect("opts");
        (o.signing_duration, o.clock_ahead)
    };
    if let Some(s) = csr["spec"]["expirationSeconds"].as_u64() {
        duration = duration.min(Duration::from_secs(s));
    }
    let now = std::time::SystemTime::now() + ahead;
    params.params.not_before = (now - Duration::from_secs(5)).into();
    params.params.not_after = (now + duration).into();
    params.params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let issuer = rcgen::Issuer::from_params(&inner.ca_params, &inner.ca_key);
    let cert = params.signed_by(&issuer)?;
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.der())?;
    let cn = parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let serial = parsed.raw_serial().to_vec();
    modify(inner, name, |csr, st| {
        st.issued.push((cn, serial));
        csr["status"]["certificate"] =
            json!(base64::engine::general_purpose::STANDARD.encode(cert.pem()));
        // Just before the event is published: a latency measured from here is not flattered.
        st.signed
            .insert(name.to_string(), std::time::Instant::now());
    })?;
    Ok(())
}

fn watch(inner: &Arc<Inner>, what: Watched, q: &BTreeMap<String, String>) -> Response<Body> {
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    let since: Option<u64> = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .filter(|v| *v > 0);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(64);
    let mut events = inner.events.subscribe();
    let mut dropper = inner.drop_watches.subscribe();
    // What happened before the watch started: from `since`, or the current objects as ADDED.
    let (backlog, current_rv): (Vec<Event>, u64) = {
        let st = inner.state.lock().expect("state");
        let current: Vec<&Value> = if what.resource == CSRS {
            st.csrs.values().collect()
        } else {
            st.leases.values().collect()
        };
        let b = match since {
            Some(rv) => st.log.iter().filter(|e| e.rv > rv).cloned().collect(),
            None => current
                .into_iter()
                .map(|o| Event {
                    rv: 0,
                    kind: "ADDED",
                    resource: what.resource,
                    object: o.clone(),
                })
                .collect(),
        };
        (b, st.rv)
    };
    tokio::spawn(async move {
        let line = |kind: &str, object: &Value| {
            Frame::data(Bytes::from(format!(
                "{}\n",
                json!({"type": kind, "object": object})
            )))
        };
        let mut last_rv = current_rv;
        for e in backlog.into_iter().filter(|e| what.matches(e)) {
            if tx.send(Ok(line(e.kind, &e.object))).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => {
                    if bookmarks {
                        let bm = if what.resource == CSRS {
                            json!({"kind": "CertificateSigningRequest", "apiVersion": "certificates.k8s.io/v1", "metadata": {"resourceVersion": last_rv.to_string()}})
                        } else {
                            json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", "metadata": {"resourceVersion": last_rv.to_string()}})
                        };
                        let _ = tx.send(Ok(line("BOOKMARK", &bm))).await;
                    }
                    return;
                }
                _ = dropper.recv() => return,
                ev = events.recv() => match ev {
                    Ok(e) => {
                        last_rv = e.rv;
                        if e.rv > current_rv && what.matches(&e) && tx.send(Ok(line(e.kind, &e.object))).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
            }
        }
    });
    let body = StreamBody::new(tokio_stream_from(rx));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(body))
        .expect("response")
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

pub struct EventLines(broadcast::Receiver<Event>);

impl EventLines {
    pub async fn recv(&mut self) -> Result<String, broadcast::error::RecvError> {
        let ev = loop {
            let ev = self.0.recv().await?;
            if ev.resource == CSRS {
                break ev;
            }
        };
        let o = &ev.object;
        let conditions: Vec<&str> = o["status"]["conditions"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["type"].as_str()).collect())
            .unwrap_or_default();
        Ok(format!(
            "{} {} by {} conditions=[{}]{}",
            ev.kind,
            o["metadata"]["name"].as_str().unwrap_or("?"),
            o["spec"]["username"].as_str().unwrap_or("?"),
            conditions.join(","),
            if o["status"]["certificate"].is_string() {
                " issued"
            } else {
                ""
            }
        ))
    }
}

/// The handshake half of upstream's `tls.RequestClientCert`: any presented certificate is taken
/// (its handshake signature is still verified), and the authenticator judges it afterwards.
#[derive(Debug)]
struct RequestClientCert(Arc<dyn rustls::server::danger::ClientCertVerifier>);

impl rustls::server::danger::ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.0.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Stands in for systemd's transient service where no systemd runs (tier 1; the nspawn tier runs
/// the real one): runs `argv` with `env`, killed after `timeout`, and answers as
/// nodectl-units' `run_transient` does: `Ok` when it exited 0, else "<unit>: job run finished
/// with result 'failed'" ('timeout' once killed). As systemd's src/core/service.c ends a
/// `Type=oneshot` start job: `done` when `ExecStart=` exits 0, `failed` when it does not,
/// `timeout` when `TimeoutStartSec=` passes (the process killed).
pub async fn transient_unit_standin(
    unit: &str,
    argv: &[String],
    env: &[String],
    timeout: std::time::Duration,
) -> Result<(), String> {
    let failed = |r: &str| format!("{unit}: job run finished with result '{r}'");
    let Some(program) = argv.first() else {
        return Err(failed("failed"));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env.iter().filter_map(|e| e.split_once('=')))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|_| failed("failed"))?;
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(st)) if st.success() => Ok(()),
        Ok(_) => Err(failed("failed")),
        Err(_) => {
            let _ = child.kill().await;
            Err(failed("timeout"))
        }
    }
}
