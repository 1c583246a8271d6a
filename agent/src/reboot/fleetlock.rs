//! The FleetLock protocol (coreos/zincati `docs/development/fleetlock/protocol.md`), served by
//! nodectld so that Zincati's `[updates.fleet_lock] base_url` points at the node itself:
//!
//! - `POST /v1/pre-reboot`: take (or keep) a reboot slot; `POST /v1/steady-state`: give it back;
//! - header `fleet-lock-protocol: true` on every request;
//! - body `{"client_params":{"id":"<non-empty>","group":"<^[a-zA-Z0-9.-]+$>"}}`;
//! - 200 on success; otherwise 4xx/5xx with a JSON body `{"kind": ..., "value": ...}`, `kind`
//!   low-cardinality.
//!
//! The decisions (slots, drain, readiness) are the [`Coordinator`]'s; this module checks
//! requests and maps outcomes to the protocol.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;

/// Path of the request that takes (or keeps) a reboot slot before rebooting.
pub const PRE_REBOOT: &str = "/v1/pre-reboot";
/// Path of the request that gives the slot back once the node is up again.
pub const STEADY_STATE: &str = "/v1/steady-state";
pub(crate) const HEADER: &str = "fleet-lock-protocol";
/// Bodies are a few dozen bytes; anything larger is refused unread.
const MAX_BODY: usize = 64 * 1024;

/// Who asks, from the request body's `client_params`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct ClientParams {
    /// The client's id (Zincati's app-specific machine id); never empty.
    pub id: String,
    /// The reboot group the slot is taken in; matches `^[a-zA-Z0-9.-]+$`.
    pub group: String,
}

#[derive(Deserialize)]
struct Body {
    client_params: ClientParams,
}

/// A refusal: the HTTP status and the protocol's `kind`/`value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status, e.g. 423 while the lock is held.
    pub status: StatusCode,
    /// The protocol's low-cardinality reason, one of [`KINDS`].
    pub kind: &'static str,
    /// Details for humans, e.g. who holds the slots.
    pub value: String,
    /// When asking again makes sense (the group settles); not sent (FleetLock has no field).
    pub retry_after: Option<std::time::Duration>,
}

impl Refusal {
    /// A refusal with `status`, `kind` and `value`.
    pub fn new(status: StatusCode, kind: &'static str, value: impl Into<String>) -> Self {
        Refusal {
            status,
            kind,
            value: value.into(),
            retry_after: None,
        }
    }
}

pub use kinds::KINDS;

mod kinds;

/// Which FleetLock request it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `POST /v1/pre-reboot`: take or keep a slot.
    PreReboot,
    /// `POST /v1/steady-state`: give the slot back.
    SteadyState,
}

impl Op {
    /// The journal's `MESSAGE_ID` of its success: a slot granted, or released.
    fn message_id(self) -> &'static str {
        match self {
            Op::PreReboot => crate::logging::ids::REBOOT_GRANTED,
            Op::SteadyState => crate::logging::ids::REBOOT_RELEASED,
        }
    }
}

/// Checks a request against the protocol (pure).
pub fn check(
    method: &Method,
    path: &str,
    header: Option<&str>,
    body: &[u8],
) -> Result<(Op, ClientParams), Refusal> {
    let op = check_head(method, path, header)?;
    Ok((op, check_body(body)?))
}

/// Method, path and header: checked before any of the body is read.
fn check_head(method: &Method, path: &str, header: Option<&str>) -> Result<Op, Refusal> {
    let op = match path {
        PRE_REBOOT => Op::PreReboot,
        STEADY_STATE => Op::SteadyState,
        p => {
            return Err(Refusal::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("{}: not a FleetLock endpoint", p.escape_debug()),
            ))
        }
    };
    if method != Method::POST {
        return Err(Refusal::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{method} {path}: only POST"),
        ));
    }
    if header.map(str::trim) != Some("true") {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "missing_header",
            format!("the {HEADER}: true header is required"),
        ));
    }
    Ok(op)
}

fn check_body(body: &[u8]) -> Result<ClientParams, Refusal> {
    let b: Body = serde_json::from_slice(body).map_err(|e| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            "decode_error",
            format!("expected {{\"client_params\":{{\"id\":...,\"group\":...}}}}: {e}"),
        )
    })?;
    let p = b.client_params;
    if p.id.is_empty() {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "invalid_id",
            "client_params.id must not be empty",
        ));
    }
    if !crate::util::names::valid_group(&p.group) {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "invalid_group",
            format!(
                "client_params.group {:?} must match ^[a-zA-Z0-9.-]+$",
                p.group
            ),
        ));
    }
    Ok(p)
}

/// Decides pre-reboot and steady-state.
pub trait Coordinator: Send + Sync + 'static {
    /// `Ok(message)`: the reboot may proceed (200).
    fn pre_reboot<'a>(&'a self, p: &'a ClientParams) -> BoxFuture<'a, Result<String, Refusal>>;
    /// `Ok(message)`: the slot is released (or was not held) (200).
    fn steady_state<'a>(&'a self, p: &'a ClientParams) -> BoxFuture<'a, Result<String, Refusal>>;
}

fn json_refusal(r: &Refusal) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"kind": r.kind, "value": r.value}).to_string();
    Response::builder()
        .status(r.status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("response")
}

/// Who may call the endpoint: a process of one of `reboot.fleetlock_units` (its cgroup) running
/// as one of `reboot.fleetlock_users`.
#[derive(Clone, Debug, Default)]
pub struct Callers {
    /// The allowed uids.
    pub uids: Vec<u32>,
    /// Their names, for refusals.
    pub names: Vec<String>,
    /// The cgroup directories (`/sys/fs/cgroup/system.slice/zincati.service`) whose processes
    /// may call; looked up at each connection (a unit's cgroup is made anew at each start).
    pub cgroups: Vec<std::path::PathBuf>,
    /// The units' names, for refusals.
    pub units: Vec<String>,
}

/// A connection's peer: its socket's owner and whether it may call.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    owner: Option<super::peer::Owner>,
    allowed: bool,
}

impl Peer {
    fn nobody() -> Peer {
        Peer {
            owner: None,
            allowed: false,
        }
    }

    /// Served only when the kernel has the client's socket established, owned by an allowed
    /// uid and made in an allowed unit's cgroup (a process outside it that took Zincati's uid,
    /// or a closed socket, is not Zincati).
    fn of(local: std::net::SocketAddr, peer: std::net::SocketAddr, callers: &Callers) -> Peer {
        let owner = super::peer::owner(local, peer).unwrap_or_else(|e| {
            tracing::warn!("FleetLock endpoint: looking up a connection's owner: {e}");
            None
        });
        let allowed = owner.is_some_and(|o| {
            o.established
                && callers.uids.contains(&o.uid)
                && o.cgroup.is_some_and(|id| {
                    callers
                        .cgroups
                        .iter()
                        .any(|d| super::peer::cgroup_id(d) == Some(id))
                })
        });
        Peer { owner, allowed }
    }

    fn refusal(&self, callers: &Callers) -> Refusal {
        let who = match self.owner {
            None => "an unknown socket".to_string(),
            Some(o) if !o.established => format!("a socket no longer connected (uid {})", o.uid),
            Some(o) => match o.cgroup {
                Some(id) => format!("uid {} in cgroup {id}", o.uid),
                None => format!("uid {} (the kernel names no cgroup)", o.uid),
            },
        };
        Refusal::new(
            StatusCode::FORBIDDEN,
            "forbidden_peer",
            format!(
                "the connection is from {who}; only {} in {} may call (reboot.fleetlock_users, reboot.fleetlock_units)",
                callers.names.join(", "),
                callers.units.join(", ")
            ),
        )
    }
}

/// At most this many connections at once; a new one closes the oldest (one whose peer may not
/// call first), so idle connections cannot keep Zincati out.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// At most this many requests run detached from their connections, each to its end even when
/// its client left (more run attached, bounded by the connections).
pub(crate) const MAX_IN_FLIGHT: usize = 16;
/// The request head must arrive within this, the body within this after it.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// Refusals are logged at most this many times a minute (a local loop must not flood the
/// journal); the rest are counted and the count logged with the next one.
const REFUSAL_LOGS_PER_MINUTE: u64 = 10;

fn log_refusal(r: &Refusal, path: &str) {
    static WINDOW: AtomicU64 = AtomicU64::new(0);
    static LOGGED: AtomicU64 = AtomicU64::new(0);
    static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
    let minute = crate::util::time::now_secs() / 60;
    if WINDOW.swap(minute, Ordering::Relaxed) != minute {
        LOGGED.store(0, Ordering::Relaxed);
    }
    if LOGGED.fetch_add(1, Ordering::Relaxed) < REFUSAL_LOGS_PER_MINUTE {
        let suppressed = SUPPRESSED.swap(0, Ordering::Relaxed);
        tracing::warn!(kind = r.kind, path = %path.escape_debug(), suppressed, "FleetLock request refused: {}", r.value);
    } else {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Handles one HTTP request: the peer, then method, path and header, then a declared length,
/// and only then the body (bounded in size and time).
pub(crate) async fn handle<C: Coordinator>(
    c: Arc<C>,
    peer: Peer,
    callers: Arc<Callers>,
    in_flight: Arc<tokio::sync::Semaphore>,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let header = req.headers().get(HEADER).and_then(|v| v.to_str().ok());
    let head = if peer.allowed {
        check_head(req.method(), &path, header)
    } else {
        Err(peer.refusal(&callers))
    };
    let op = match head {
        Ok(op) => op,
        Err(r) => {
            log_refusal(&r, &path);
            return json_refusal(&r);
        }
    };
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        let r = Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("bodies are at most {MAX_BODY} bytes"),
        );
        log_refusal(&r, &path);
        return json_refusal(&r);
    }
    let read = http_body_util::Limited::new(req.into_body(), MAX_BODY).collect();
    let body = match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            return json_refusal(&Refusal::new(
                StatusCode::BAD_REQUEST,
                "decode_error",
                format!("reading the body: {e}"),
            ))
        }
        Err(_) => {
            return json_refusal(&Refusal::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!(
                    "the body did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            ))
        }
    };
    let params = match check_body(&body) {
        Ok(p) => p,
        Err(r) => {
            log_refusal(&r, &path);
            return json_refusal(&r);
        }
    };
    let result = run(c, op, params, &in_flight).await;
    match result {
        Ok(msg) => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from(msg)))
            .expect("response"),
        Err(r) => json_refusal(&r),
    }
}

/// Runs one request to its end in a task of its own, whether or not its client waits for the
/// answer (issue 64: Zincati gives up on a slow answer and hyper then drops the handler, which
/// stopped a pre-reboot between its checks and their record; a connection closed for a newer
/// one did too). Every step of a request is bounded (the checks by their timeout, the drain's
/// wait by its own), and so is the number of such tasks: over it, a request runs attached to
/// its connection, as every request did before (the connections are bounded too).
async fn run<C: Coordinator>(
    c: Arc<C>,
    op: Op,
    params: ClientParams,
    in_flight: &Arc<tokio::sync::Semaphore>,
) -> Result<String, Refusal> {
    let permit = in_flight.clone().try_acquire_owned().ok();
    let detached = permit.is_some();
    let run = async move {
        let _permit = permit;
        let result = match op {
            Op::PreReboot => c.pre_reboot(&params).await,
            Op::SteadyState => c.steady_state(&params).await,
        };
        match &result {
            Ok(msg) => {
                tracing::info!(message_id = op.message_id(), op = ?op, group = %params.group, "FleetLock: {msg}")
            }
            Err(r) => {
                tracing::info!(op = ?op, group = %params.group, kind = r.kind, "FleetLock: {}", r.value)
            }
        }
        result
    };
    if !detached {
        return run.await;
    }
    tokio::spawn(run).await.unwrap_or_else(|e| {
        Err(Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("the request ended before its answer: {e}"),
        ))
    })
}

/// One open connection: how to close it, and whether its peer may call.
struct Open {
    task: tokio::task::AbortHandle,
    allowed: Arc<AtomicBool>,
}

/// Serves the protocol on `listener` to `callers` until the task is dropped.
pub async fn serve<C: Coordinator>(listener: tokio::net::TcpListener, c: Arc<C>, callers: Callers) {
    let callers = Arc::new(callers);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut open: VecDeque<Open> = VecDeque::new();
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors and the like: do not spin on it.
                tracing::warn!("FleetLock endpoint: accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        open.retain(|o| !o.task.is_finished());
        if open.len() >= MAX_CONNECTIONS {
            let i = open
                .iter()
                .position(|o| !o.allowed.load(Ordering::Relaxed))
                .unwrap_or(0);
            if let Some(o) = open.remove(i) {
                o.task.abort();
            }
        }
        let allowed = Arc::new(AtomicBool::new(false));
        let (c, callers, flag) = (c.clone(), callers.clone(), allowed.clone());
        let in_flight = in_flight.clone();
        let task = tokio::spawn(async move {
            let addrs = (tcp.local_addr(), tcp.peer_addr());
            let who = callers.clone();
            let peer = match addrs {
                (Ok(l), Ok(p)) => tokio::task::spawn_blocking(move || Peer::of(l, p, &who))
                    .await
                    .unwrap_or_else(|_| Peer::nobody()),
                _ => Peer::nobody(),
            };
            flag.store(peer.allowed, Ordering::Relaxed);
            let svc = hyper::service::service_fn(move |req| {
                let (c, peer, callers) = (c.clone(), peer.clone(), callers.clone());
                let in_flight = in_flight.clone();
                async move { Ok::<_, Infallible>(handle(c, peer, callers, in_flight, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(16 * 1024)
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                .await;
        });
        open.push_back(Open {
            task: task.abort_handle(),
            allowed,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &[u8] = br#"{"client_params":{"id":"abc","group":"default"}}"#;

    fn kind(r: Result<(Op, ClientParams), Refusal>) -> &'static str {
        r.err().map_or("ok", |r| r.kind)
    }

    #[test]
    fn requests_are_checked_as_the_protocol_says() {
        let post = Method::POST;
        let (op, p) = check(&post, PRE_REBOOT, Some("true"), OK).unwrap();
        assert_eq!(op, Op::PreReboot);
        assert_eq!(
            p,
            ClientParams {
                id: "abc".into(),
                group: "default".into()
            }
        );
        assert_eq!(
            check(&post, STEADY_STATE, Some("true"), OK).unwrap().0,
            Op::SteadyState
        );
        assert_eq!(
            kind(check(&post, "/v1/other", Some("true"), OK)),
            "not_found"
        );
        assert_eq!(
            kind(check(&Method::GET, PRE_REBOOT, Some("true"), OK)),
            "method_not_allowed"
        );
        assert_eq!(kind(check(&post, PRE_REBOOT, None, OK)), "missing_header");
        assert_eq!(
            kind(check(&post, PRE_REBOOT, Some("false"), OK)),
            "missing_header"
        );
        assert_eq!(
            kind(check(&post, PRE_REBOOT, Some("true"), b"{}")),
            "decode_error"
        );
        assert_eq!(
            kind(check(
                &post,
                PRE_REBOOT,
                Some("true"),
                br#"{"client_params":{"id":"","group":"default"}}"#
            )),
            "invalid_id"
        );
        assert_eq!(
            kind(check(
                &post,
                PRE_REBOOT,
                Some("true"),
                br#"{"client_params":{"id":"a","group":"bad group"}}"#
            )),
            "invalid_group"
        );
        // Every kind the check produces is documented.
        for k in [
            "not_found",
            "method_not_allowed",
            "missing_header",
            "decode_error",
            "invalid_id",
            "invalid_group",
        ] {
            assert!(KINDS.iter().any(|(n, _, _)| *n == k), "{k}");
        }
    }
}
