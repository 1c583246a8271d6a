//! Kubernetes Events on the node's own Node ([`crate::status::events`]): what the journal
//! notes with a `MESSAGE_ID` ([`crate::logging::noted`]) is sent, deduplicated and
//! rate-limited, with the node's own certificate (the Node authorizer's rules let a node create
//! and patch Events; `KubeNode` refuses any other credentials). Runs beside the condition
//! reporter (`node_status`), with the same settings. Waits for a note or a change of state,
//! never polls; a failed send is retried with a backoff capped at 5 minutes, notes older than
//! the API server keeps Events (1 h) are dropped, at most `noted::MAX_QUEUED` wait.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};

use super::shared::Shared;
use crate::logging::noted;
use crate::root::Root;
use crate::status::events::{count_patch, event, note_of, Action, Correlator, Note};
use crate::status::report::{KubeNode, ReportError};
use crate::util::time::now_secs;

/// The API server's default `--event-ttl`: an Event older than this is gone anyway.
const EVENT_TTL_SECS: u64 = 3600;
const BACKOFF_MIN: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
const TIMEOUT: Duration = Duration::from_secs(20);

/// A note decided on, waiting to be sent.
struct Pending {
    note: Note,
    action: Action,
}

pub(super) async fn run(root: Root, kubeconfig: PathBuf, node: String, shared: Arc<Shared>) {
    let mut api = KubeNode::new(root, kubeconfig, node.clone());
    let mut corr = Correlator::default();
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut backoff: Option<Duration> = None;
    loop {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        for n in noted::take().iter().filter_map(note_of) {
            let action = corr.decide(
                &n,
                &node,
                now_ms as u64,
                now_ms * 1_000_000 + pending.len() as u128,
            );
            if action != Action::Drop {
                pending.push_back(Pending { note: n, action });
            } else {
                tracing::debug!(
                    reason = n.reason,
                    "event not sent: over the rate limit (25, then one per 5 minutes)"
                );
            }
        }
        while pending.len() > noted::MAX_QUEUED {
            pending.pop_front();
        }
        let now = now_secs();
        pending.retain(|p| now.saturating_sub(p.note.at) < EVENT_TTL_SECS);
        if !pending.is_empty() {
            let st = shared.snapshot().await;
            api.set_credentials(st.credentials.as_ref());
        }
        let mut failed = false;
        let mut no_credentials = false;
        while let Some(p) = pending.front() {
            match send(&mut api, &mut corr, &node, p).await {
                Ok(()) => {
                    pending.pop_front();
                    backoff = None;
                }
                Err(e) if e.refused_for_good => {
                    // (a 4xx other than 401 and 429: sending it again changes nothing, and it
                    // would hold back every later event)
                    tracing::warn!("event on Node {node} not sent: {}", e.message);
                    pending.pop_front();
                }
                Err(e) => {
                    no_credentials = e.no_credentials;
                    if e.unauthorized {
                        shared.recheck_credentials.notify_one();
                    }
                    tracing::debug!("events on Node {node}: not sent yet: {}", e.message);
                    api.drop_client();
                    failed = true;
                    break;
                }
            }
        }
        // without credentials of its own the node waits for them (a change of state), not a timer
        let wait = if failed && !no_credentials {
            let b = backoff.map_or(BACKOFF_MIN, |b| (b * 2).min(BACKOFF_MAX));
            backoff = Some(b);
            Some(b)
        } else {
            None
        };
        tokio::select! {
            _ = noted::wait() => {}
            // credentials may have come (a note kept for want of them)
            _ = shared.passed.notified(), if !pending.is_empty() && (!failed || no_credentials) => {}
            _ = tokio::time::sleep(wait.unwrap_or(Duration::ZERO)), if wait.is_some() => {}
        }
    }
}

/// `f`, or a transport error once [`TIMEOUT`] passed.
async fn bounded(
    f: impl std::future::Future<Output = Result<(), kube::Error>>,
) -> Result<(), kube::Error> {
    match tokio::time::timeout(TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {} s", TIMEOUT.as_secs()).into(),
        )),
    }
}

struct SendError {
    unauthorized: bool,
    /// The API server refused this event itself (400, 403, 409, 422...): dropped.
    refused_for_good: bool,
    /// The node has no certificate of its own yet (or one for another name).
    no_credentials: bool,
    message: String,
}

fn send_error(e: kube::Error) -> SendError {
    match e {
        kube::Error::Api(s) => SendError {
            unauthorized: s.code == 401,
            refused_for_good: (400..500).contains(&s.code) && ![401, 404, 429].contains(&s.code),
            no_credentials: false,
            message: format!(
                "the API server refused ({} {}): {}",
                s.code, s.reason, s.message
            ),
        },
        e => SendError {
            unauthorized: false,
            refused_for_good: false,
            no_credentials: false,
            message: format!("the API server is not reachable: {e}"),
        },
    }
}

async fn send(
    api: &mut KubeNode,
    corr: &mut Correlator,
    node: &str,
    p: &Pending,
) -> Result<(), SendError> {
    let client = api.client().await.map_err(|e| SendError {
        unauthorized: false,
        refused_for_good: false,
        no_credentials: matches!(e, ReportError::NoCredentials(_) | ReportError::Refused(_)),
        message: e.to_string(),
    })?;
    let events: Api<Event> = Api::namespaced(client, "default");
    let create = |name: &str, count: u32, first_at: u64| {
        let ev: Event =
            serde_json::from_value(event(node, &p.note, name, count, first_at)).expect("an Event");
        let events = events.clone();
        async move { events.create(&PostParams::default(), &ev).await.map(|_| ()) }
    };
    match &p.action {
        Action::Drop => Ok(()),
        Action::Create { name } => bounded(create(name, 1, p.note.at))
            .await
            .map_err(send_error),
        Action::Count {
            name,
            count,
            first_at,
        } => {
            let patch = count_patch(*count, p.note.at);
            let r = bounded(async {
                events
                    .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                    .map(|_| ())
            })
            .await;
            match r {
                // expired (the API server's event TTL): made again, counted on (client-go's
                // recordEvent does the same)
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    corr.forget(name);
                    bounded(create(name, *count, *first_at))
                        .await
                        .map_err(send_error)
                }
                r => r.map_err(send_error),
            }
        }
    }
}
