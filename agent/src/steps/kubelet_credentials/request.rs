//! The certificate request running in the background of the daemon, and the phase it leaves
//! behind (running, backing off after an unreachable server, refused by the cluster).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::super::kubelet::{issued, RESTART_MARKER};
use crate::config::Settings;
use crate::credentials::bootstrap::{Bootstrap, BootstrapError, Issued, Via};
use crate::credentials::check::Facts;
use crate::credentials::policy::{backoff, refused_backoff, APPROVAL_WAIT};
use crate::engine::{Cx, Waker};
use crate::fsio::{FileSpec, Writer};
use crate::root::Root;
use crate::util::time::{left, rfc3339};

/// Where the node's certificate request stands.
#[derive(Clone, Debug, Default)]
pub(super) enum Phase {
    #[default]
    Idle,
    /// A controller's first request, left for the pass after the one that starts kubelet
    /// (standalone): the request's work (client, key, connection) would otherwise delay
    /// kubelet's start in the same pass (issue 18). `pass`: when the deferring pass started.
    Deferred { pass: SystemTime },
    Running {
        via: Via,
        request: Option<String>,
        since: SystemTime,
    },
    /// The server was unreachable or failed; retry at `until`, or at once when the bootstrap
    /// kubeconfig changes (a new server address or cluster CA makes success likely) or, on a
    /// controller, when kubelet starts a new API server pod on it (see [`api_server_pods`]).
    Backoff {
        attempt: u32,
        since: SystemTime,
        until: SystemTime,
        reason: String,
        bootstrap_kubeconfig: Option<Vec<u8>>,
        /// The controller's API server pods when the backoff began (`None` on a worker).
        api_pods: Option<Vec<String>>,
        /// In the daemon, the request retries by itself at `until` ([`start`]'s task), without
        /// a pass: an unreachable API server costs a connection attempt, not a pass of every
        /// step. A pass is woken when the certificate comes, the cluster refuses, or the
        /// failure changes.
        by_itself: bool,
    },
    /// Denied or failed by the cluster; retry at `until` or when the operator acts.
    Refused {
        since: SystemTime,
        until: SystemTime,
        reason: String,
        bootstrap_kubeconfig: Option<Vec<u8>>,
    },
}

/// The step's state across passes.
#[derive(Default)]
pub(super) struct State {
    pub(super) phase: Phase,
    /// Counts failed attempts in a row (backoff).
    failures: u32,
    /// Counts denied or failed requests in a row (their longer backoff).
    refusals: u32,
    done: Option<tokio::sync::watch::Receiver<bool>>,
    /// A pass waits for the request's end ([`await_end`]): a backoff that begins within that
    /// wait is seen by the pass itself, so it wakes the daemon for no second pass (one pass per
    /// attempt while the API server is away).
    awaited: bool,
    /// Counts requests started by passes: a task retrying by itself stops once another started.
    generation: u64,
    /// Why the last attempt failed, while they fail (a retry failing otherwise wakes a pass).
    failing: Option<String>,
}

pub(super) type Shared = Arc<Mutex<State>>;

fn lock(state: &Shared) -> std::sync::MutexGuard<'_, State> {
    state.lock().expect("credentials state")
}

impl Phase {
    /// No new request now: one runs, a backoff has time left, or a refusal stands (no operator
    /// action, no new bootstrap kubeconfig, its backoff not over).
    pub(super) fn holds_off(&self, cx: &Cx) -> bool {
        match self {
            Phase::Running { .. } => true,
            Phase::Backoff {
                since,
                until,
                bootstrap_kubeconfig,
                ..
            }
            | Phase::Refused {
                since,
                until,
                bootstrap_kubeconfig,
                ..
            } => {
                !overridden(cx, *since)
                    && left(*until) > Duration::ZERO
                    && *bootstrap_kubeconfig == super::files::bootstrap_kubeconfig_bytes(cx)
                    && !self.new_api_server_pod(cx)
            }
            Phase::Idle | Phase::Deferred { .. } => false,
        }
    }

    /// A backoff a new API server pod on this controller ends: success is likely soon, and the
    /// server answers first on this node.
    fn new_api_server_pod(&self, cx: &Cx) -> bool {
        match self {
            Phase::Backoff {
                api_pods: Some(before),
                ..
            } => api_server_pods(&cx.root, &cx.settings)
                .is_some_and(|now| now.iter().any(|p| !before.contains(p))),
            _ => false,
        }
    }
}

/// Where kubelet keeps its pods' logs: one directory per pod sandbox,
/// `<namespace>_<name>_<uid>`, made when kubelet creates the sandbox (pkg/kubelet/kuberuntime,
/// `BuildPodLogsDirectory` in helpers.go, called from `createPodSandbox`).
pub(crate) const POD_LOGS: &str = "/var/log/pods";

/// The name prefix of the pod log directories of this controller's API server: the static pod
/// from `kube-apiserver.yaml`, named `kube-apiserver-<node name>` by kubelet
/// (pkg/kubelet/config/common.go, `applyDefaults`: a static pod's name gets `-<nodeName>`).
pub(crate) fn api_server_pod_prefix(node_name: &str) -> String {
    format!("kube-system_kube-apiserver-{node_name}_")
}

/// At most this many entries of [`POD_LOGS`] are read.
const MAX_POD_DIRS: usize = 4096;

/// This controller's API server pod sandboxes, by log directory name (sorted); `None` on a
/// worker, whose API server is elsewhere.
pub(super) fn api_server_pods(root: &Root, settings: &Settings) -> Option<Vec<String>> {
    if settings.role != crate::config::Role::Controller {
        return None;
    }
    let prefix = api_server_pod_prefix(&settings.node_name);
    let mut pods: Vec<String> = std::fs::read_dir(root.path(POD_LOGS))
        .into_iter()
        .flatten()
        .flatten()
        .take(MAX_POD_DIRS)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    pods.sort();
    Some(pods)
}

/// An operator's pass overrides a backoff set before it began (not one its own attempt set).
fn overridden(cx: &Cx, since: SystemTime) -> bool {
    cx.forced && since < cx.started
}

/// What the background request needs from the pass that started it.
struct Job {
    state: Shared,
    root: Root,
    selinux: nodectl_selinux::HostSelinux,
    settings: Settings,
    facts: Arc<Facts>,
    waker: Option<Waker>,
    bootstrap_kubeconfig: Option<Vec<u8>>,
}

/// Leaves the request for the next pass (see [`Phase::Deferred`]).
pub(super) fn defer(state: &Shared, cx: &Cx) {
    let mut st = lock(state);
    if matches!(st.phase, Phase::Idle | Phase::Deferred { .. }) {
        st.phase = Phase::Deferred { pass: cx.started };
    }
}

/// Starts a request in the background unless one runs; returns a receiver that turns true when
/// it ends.
pub(super) fn start(state: &Shared, cx: &Cx, via: Via) -> tokio::sync::watch::Receiver<bool> {
    let mut st = lock(state);
    if let (Phase::Running { .. }, Some(rx)) = (&st.phase, &st.done) {
        return rx.clone();
    }
    if st.phase.new_api_server_pod(cx) {
        // A new start, not a next step: failing again, it waits 2 s, not the doubled delay.
        tracing::info!("a new API server pod runs on this node: requesting again now");
        st.failures = 0;
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    st.phase = Phase::Running {
        via,
        request: None,
        since: SystemTime::now(),
    };
    st.done = Some(rx.clone());
    st.generation += 1;
    let generation = st.generation;
    drop(st);
    let job = Job {
        state: state.clone(),
        root: cx.root.clone(),
        selinux: cx.host.selinux.clone(),
        settings: cx.settings.clone(),
        facts: cx.facts.clone(),
        waker: cx.waker.clone(),
        bootstrap_kubeconfig: super::files::bootstrap_kubeconfig_bytes(cx),
    };
    tracing::info!(via = %via, node = %job.settings.node_name, "requesting a node client certificate");
    tokio::spawn(async move {
        let mut result = job.run(via).await;
        let mut first = true;
        loop {
            let end = job.record(result, first);
            crate::memory::release_freed();
            if std::mem::take(&mut first) {
                let _ = tx.send(true);
            }
            if let (Some(w), true) = (&job.waker, end.wake) {
                w();
            }
            let Some(at) = end.retry_at else { break };
            tokio::time::sleep(left(at)).await;
            if !job.retry_now(generation, via) {
                break;
            }
            tracing::info!(via = %via, node = %job.settings.node_name, "requesting a node client certificate again");
            result = job.run(via).await;
        }
    });
    rx
}

/// What a request's end asks of the daemon.
struct End {
    /// Wake it for a pass.
    wake: bool,
    /// Retry by itself then (a backoff in the daemon).
    retry_at: Option<SystemTime>,
}

/// Waits up to `wait` for the request behind `done` to end, within a pass: an end in that time
/// is the pass's to see (its check after the apply reads the phase), not a wakeup.
pub(super) async fn await_end(
    state: &Shared,
    mut done: tokio::sync::watch::Receiver<bool>,
    wait: std::time::Duration,
) {
    lock(state).awaited = true;
    let _ = tokio::time::timeout(wait, done.wait_for(|d| *d)).await;
    // (the phase and this flag change under one lock: a request that ends after this wakes
    // the daemon, one that ended before it left its phase for this pass to read)
    lock(state).awaited = false;
}

impl Job {
    /// A backoff's end, for the task retrying by itself: it goes on while its backoff is the
    /// phase and no pass started another request since (nor dropped the step: a new
    /// configuration makes new steps), and marks the attempt as running.
    fn retry_now(&self, generation: u64, via: Via) -> bool {
        let mut st = lock(&self.state);
        let ours = st.generation == generation
            && Arc::strong_count(&self.state) > 1
            && matches!(st.phase, Phase::Backoff { .. });
        if ours {
            st.phase = Phase::Running {
                via,
                request: None,
                since: SystemTime::now(),
            };
        }
        ours
    }

    /// The request; a 401 to the node's certificate falls back to the bootstrap token.
    async fn run(&self, via: Via) -> Result<Issued, BootstrapError> {
        let labeler = nodectl_selinux::Labeler::new(self.root.dir(), &self.selinux);
        let writer = Writer::new(&self.root, &labeler);
        let on_request = |name: &str| {
            tracing::info!(request = name, "waiting for approval and issuance");
            if let Phase::Running { request, .. } = &mut lock(&self.state).phase {
                *request = Some(name.to_string());
            }
        };
        // kubelet reads its credentials at start: restart it on the new ones. The marker is
        // written once the certificate is issued, before it is stored, so a crash before the
        // restart still restarts kubelet on the next pass.
        let on_issued = || {
            let marker = issued(&self.root);
            if let Err(e) = writer.write(&FileSpec::new(RESTART_MARKER, marker, 0o600)) {
                tracing::warn!("recording the pending kubelet restart: {e}");
            }
        };
        let s = &self.settings;
        let request = |via| Bootstrap {
            writer: &writer,
            via,
            node_name: &s.node_name,
            bootstrap_kubeconfig: &s.bootstrap_kubeconfig,
            kubeconfig: &s.kubeconfig,
            wait: APPROVAL_WAIT,
            on_request: Some(&on_request),
            on_issued: Some(&on_issued),
        };
        let result = request(via).run().await;
        if let (Via::NodeCertificate, Err(BootstrapError::Unauthorized { .. })) = (via, &result) {
            tracing::warn!(
                "the API server refused the node's certificate (401); requesting one with the bootstrap token"
            );
            self.facts.set_revoked(true);
            return request(Via::BootstrapToken).run().await;
        }
        result
    }

    /// The phase a request's end leaves: idle, refused (60 s doubling to an hour), or a backoff,
    /// and whether to wake the daemon: always but for a backoff, which wakes it only when the
    /// attempt was a pass's (`first`) that is not waiting for it any more (a pass that waits
    /// sees the phase itself), or when the failure changed; a backoff in the daemon is retried
    /// by the task itself.
    fn record(&self, result: Result<Issued, BootstrapError>, first: bool) -> End {
        let mut st = lock(&self.state);
        let before = st.failing.take();
        let now = SystemTime::now();
        st.phase = match result {
            Ok(issued) => {
                tracing::info!(
                    request = %issued.request,
                    not_after = %rfc3339(issued.validity.not_after),
                    "node client certificate issued and written"
                );
                st.failures = 0;
                st.refusals = 0;
                self.facts.set_revoked(false);
                Phase::Idle
            }
            Err(e @ (BootstrapError::Denied { .. } | BootstrapError::Failed { .. })) => {
                st.refusals += 1;
                let until = now + refused_backoff(st.refusals, crate::util::jitter());
                let reason = e.to_string();
                tracing::error!(
                    message_id = crate::logging::ids::CSR_DENIED,
                    refusals = st.refusals,
                    "{reason}; not asking again before {} unless an operator acts (nodectl converge)",
                    rfc3339(until)
                );
                Phase::Refused {
                    since: now,
                    until,
                    reason,
                    bootstrap_kubeconfig: self.bootstrap_kubeconfig.clone(),
                }
            }
            Err(e) => {
                st.failures += 1;
                let delay = backoff(st.failures, crate::util::jitter());
                let reason = e.to_string();
                tracing::warn!(
                    attempt = st.failures,
                    retry_in_s = delay.as_secs_f64(),
                    "{reason}; retrying in {:.0} s",
                    delay.as_secs_f64()
                );
                let by_itself = self.waker.is_some();
                st.failing = Some(reason.clone());
                let wake = (first && !st.awaited) || (!first && before.as_ref() != Some(&reason));
                let until = now + delay;
                st.phase = Phase::Backoff {
                    attempt: st.failures,
                    since: now,
                    until,
                    reason,
                    bootstrap_kubeconfig: self.bootstrap_kubeconfig.clone(),
                    api_pods: api_server_pods(&self.root, &self.settings),
                    by_itself,
                };
                return End {
                    wake,
                    retry_at: by_itself.then_some(until),
                };
            }
        };
        End {
            wake: true,
            retry_at: None,
        }
    }
}
