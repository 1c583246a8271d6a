//! The `NodectlReady` condition and nodectld's annotations on its Node: sent at once when they
//! change, else every `kubelet.condition_heartbeat_secs`; after a failed request, again after a
//! capped, jittered backoff (2 s doubling to 5 min) or at the next change once it ends. Never
//! before the node has its own credentials (status/report.rs checks what it sends with).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::shared::Shared;
use crate::config::Settings;
use crate::root::Root;
use crate::status::condition::{self, ConditionReport};
use crate::status::report::{self, Report};
use crate::util::time::now_secs;

const BACKOFF_FIRST: u64 = 2;
const BACKOFF_MAX: u64 = 300;

/// The reporting task and the settings it runs with.
#[derive(Default)]
pub(super) struct Reporter {
    task: Option<(tokio::task::JoinHandle<()>, Params)>,
}

#[derive(Clone, PartialEq, Eq)]
struct Params {
    kubeconfig: PathBuf,
    node: String,
    heartbeat: u64,
}

impl Reporter {
    /// Runs the reporting while the settings ask for it (restarted when they change).
    /// Invalid settings keep it running as it was, so the condition says why (`ConfigInvalid`).
    pub(super) fn follow(&mut self, root: &Root, s: Option<&Settings>, shared: &Arc<Shared>) {
        let Some(s) = s else { return };
        let want = Some(s)
            .filter(|s| s.condition_heartbeat_secs > 0)
            .map(|s| Params {
                kubeconfig: s.kubeconfig.clone(),
                node: s.node_name.clone(),
                heartbeat: s.condition_heartbeat_secs,
            });
        if let (Some((task, p)), Some(w)) = (&self.task, &want) {
            if p == w && !task.is_finished() {
                return;
            }
        }
        self.stop();
        if let Some(p) = want {
            let task = tokio::spawn(run(root.clone(), p.clone(), shared.clone()));
            self.task = Some((task, p));
        }
    }

    pub(super) fn stop(&mut self) {
        if let Some((task, _)) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(root: Root, p: Params, shared: Arc<Shared>) {
    let mut backoff = BACKOFF_FIRST;
    let mut retry_at = 0u64;
    let mut sent_annotations: Vec<(&'static str, String)> = Vec::new();
    loop {
        let st = shared.snapshot().await;
        let now = now_secs();
        let want = condition::condition(&st);
        let ann = condition::annotations(&st);
        let last = st.node_condition.clone();
        let due = condition::due(last.as_ref(), &want, now, p.heartbeat) || ann != sent_annotations;
        let mut wait = match &last {
            Some(l) if l.sent_at > 0 => (l.sent_at + p.heartbeat).saturating_sub(now),
            _ => p.heartbeat,
        };
        if due && now >= retry_at {
            let transition_at = condition::transition_at(last.as_ref(), &want, now);
            let r = Report {
                node: &p.node,
                subject: st.credentials.as_ref().map(|c| c.subject.as_str()),
                condition: &want,
                heartbeat_at: now,
                transition_at,
                annotations: &ann,
            };
            let mut next = ConditionReport {
                condition: want.clone(),
                sent_at: now,
                transition_at,
                error: None,
                next_at: now + p.heartbeat,
            };
            match report::send(&root, &p.kubeconfig, &r).await {
                Ok(()) => {
                    log_sent(last.as_ref(), &want);
                    backoff = BACKOFF_FIRST;
                    retry_at = 0;
                    sent_annotations = ann;
                    wait = p.heartbeat;
                }
                Err(e) => {
                    // what was sent before stays; the error and the next attempt are added
                    next = last.clone().unwrap_or_default();
                    next.error = Some(e.to_string());
                    if e.waits_for_heartbeat() {
                        wait = p.heartbeat;
                        next.next_at = 0;
                    } else {
                        tracing::warn!(error = %e, retry_in_s = backoff, "NodectlReady condition not sent");
                        let jittered =
                            backoff / 2 + (crate::util::jitter() * (backoff / 2) as f64) as u64;
                        retry_at = now + jittered.max(1);
                        wait = jittered.max(1);
                        next.next_at = retry_at;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                    }
                }
            }
            shared.status.lock().await.node_condition = Some(next);
            super::metrics::write(&root, &shared).await;
        } else if due {
            wait = retry_at.saturating_sub(now).max(1);
        }
        tokio::select! {
            _ = shared.changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(wait.max(1))) => {}
        }
    }
}

/// The condition sent: a flip, or the first sent since nodectld started, carries its
/// `MESSAGE_ID` (what an operator alerts on); a heartbeat does not.
fn log_sent(last: Option<&ConditionReport>, want: &condition::Condition) {
    let flipped = last.is_none_or(|l| l.sent_at == 0 || l.condition.status != want.status);
    if flipped {
        tracing::info!(
            message_id = crate::logging::ids::CONDITION_CHANGED,
            status = %want.status,
            reason = %want.reason,
            "NodectlReady condition is now {} ({})",
            want.status,
            want.reason
        );
    } else {
        tracing::info!(status = %want.status, reason = %want.reason, "NodectlReady condition sent");
    }
}
