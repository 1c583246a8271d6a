//! When nodectld writes to its own Node, and what: the decisions the daemon's reporter and the
//! fleet simulation (agent/tests/fleet_writes.rs) share, so the writes the simulation counts are
//! the ones nodectld makes.
//!
//! A Node write is fanned out to every watcher of Nodes (the scheduler, every CNI agent,
//! controllers), which is why kubelet moved its heartbeats to Leases (KEP-589). So:
//! - the condition is written at once when its status or reason changes; a change of its
//!   message alone at most every [`MESSAGE_MIN_INTERVAL`]; otherwise only as its heartbeat,
//!   every `kubelet.condition_heartbeat_secs` less up to a tenth (jitter), the first one
//!   after a start anywhere from a tenth of it to all of it (a fleet that started together
//!   does not beat in step);
//! - the annotations only when they change (never as a heartbeat);
//! - after a failed request, again after a capped, jittered backoff (2 s doubling to 5 min) or
//!   at the heartbeat when retrying sooner would not help.

use super::condition::{self, Condition, ConditionReport};
use super::report::{self, NodeWrites, ReportError};
use super::Status;

/// A condition whose message alone changed is written at most this often (seconds).
pub const MESSAGE_MIN_INTERVAL: u64 = 60;
const BACKOFF_FIRST: u64 = 2;
const BACKOFF_MAX: u64 = 300;

/// The heartbeat after a write at `jitter` (0..1): `every` less up to a tenth of it.
pub fn heartbeat_interval(every: u64, jitter: f64) -> u64 {
    every - ((every / 10) as f64 * jitter.clamp(0.0, 1.0)) as u64
}

/// The first heartbeat after a reporter's first write at `jitter` (0..1): anywhere from a tenth
/// of `every` to all of it.
pub fn first_interval(every: u64, jitter: f64) -> u64 {
    (every / 10).max(1) + ((every - every / 10) as f64 * jitter.clamp(0.0, 1.0)) as u64
}

/// When the condition `want` is next due, given what was last written (0: now).
pub fn condition_due_at(
    last: Option<&ConditionReport>,
    want: &Condition,
    heartbeat_at: u64,
) -> u64 {
    match last {
        Some(l) if l.sent_at > 0 => {
            if l.condition.status != want.status || l.condition.reason != want.reason {
                0
            } else if l.condition.message != want.message {
                (l.sent_at + MESSAGE_MIN_INTERVAL).min(heartbeat_at)
            } else {
                heartbeat_at
            }
        }
        _ => 0,
    }
}

/// What one step did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// When to step again at the latest (a change steps earlier).
    pub next_at: u64,
    /// The condition report to publish (status, metrics), when it changed.
    pub report: Option<ConditionReport>,
    /// A request was refused with 401: the certificate may no longer be accepted.
    pub unauthorized: bool,
    /// Requests made.
    pub writes: u32,
}

/// One node's reporter state.
#[derive(Debug)]
pub struct Heartbeat {
    every: u64,
    last: Option<ConditionReport>,
    /// When the condition's heartbeat is due (after the last write).
    heartbeat_at: u64,
    sent_annotations: Option<Vec<(&'static str, String)>>,
    backoff: u64,
    retry_at: u64,
    /// No condition written by this reporter yet.
    first_write: bool,
}

impl Heartbeat {
    /// A reporter writing the condition every `every` seconds, going on from `last` (what an
    /// earlier reporter of this daemon wrote: not written again before its heartbeat).
    pub fn new(every: u64, last: Option<ConditionReport>) -> Heartbeat {
        let heartbeat_at = last
            .as_ref()
            .filter(|l| l.sent_at > 0)
            .map_or(0, |l| l.sent_at + every);
        Heartbeat {
            every,
            last,
            heartbeat_at,
            sent_annotations: None,
            backoff: BACKOFF_FIRST,
            retry_at: 0,
            first_write: heartbeat_at == 0,
        }
    }

    /// Writes what `st` calls for at `now` and is due; `jitter` (0..1) spreads the next
    /// heartbeat and backoff.
    pub async fn step(
        &mut self,
        st: &Status,
        now: u64,
        jitter: f64,
        node: &str,
        api: &mut dyn NodeWrites,
    ) -> Outcome {
        let want = condition::condition(st);
        let ann = condition::annotations(st);
        let mut out = Outcome::default();
        if now < self.retry_at {
            out.next_at = self.retry_at;
            return out;
        }
        if condition_due_at(self.last.as_ref(), &want, self.heartbeat_at) <= now {
            let transition_at = condition::transition_at(self.last.as_ref(), &want, now);
            let body = report::condition_patch(&want, now, transition_at);
            out.writes += 1;
            match api.patch_status(body).await {
                Ok(()) => {
                    log_sent(self.last.as_ref(), &want, node);
                    self.heartbeat_at = now
                        + if self.first_write {
                            // A fleet restarted together (an update of nodectld) beats spread
                            // over the whole interval from its first heartbeat on, not in step.
                            first_interval(self.every, jitter)
                        } else {
                            heartbeat_interval(self.every, jitter)
                        };
                    self.first_write = false;
                    self.last = Some(ConditionReport {
                        condition: want.clone(),
                        sent_at: now,
                        transition_at,
                        error: None,
                        next_at: self.heartbeat_at,
                    });
                    self.backoff = BACKOFF_FIRST;
                }
                Err(e) => return self.failed(e, now, jitter, out),
            }
            out.report = self.last.clone();
        }
        if self.sent_annotations.as_ref() != Some(&ann) {
            out.writes += 1;
            match api.patch_meta(report::annotations_patch(&ann)).await {
                Ok(()) => {
                    self.sent_annotations = Some(ann);
                    self.backoff = BACKOFF_FIRST;
                }
                Err(e) => return self.failed(e, now, jitter, out),
            }
        }
        out.next_at = condition_due_at(self.last.as_ref(), &want, self.heartbeat_at);
        out
    }

    /// Records a failed request: what was written before stays, the error and the next
    /// attempt are added.
    fn failed(&mut self, e: ReportError, now: u64, jitter: f64, mut out: Outcome) -> Outcome {
        let mut next = self.last.clone().unwrap_or_default();
        next.error = Some(e.to_string());
        out.unauthorized = matches!(e, ReportError::Unauthorized(_));
        if e.waits_for_heartbeat() {
            out.next_at = now + self.every;
            next.next_at = 0;
        } else {
            tracing::warn!(error = %e, retry_in_s = self.backoff, "NodectlReady condition not sent");
            let half = self.backoff / 2;
            let wait = (half + (jitter.clamp(0.0, 1.0) * half as f64) as u64).max(1);
            self.retry_at = now + wait;
            out.next_at = self.retry_at;
            next.next_at = self.retry_at;
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        }
        out.report = Some(next);
        out
    }
}

/// The condition written: a flip, or the first written since nodectld started, carries its
/// `MESSAGE_ID` (what an operator alerts on); a heartbeat does not.
fn log_sent(last: Option<&ConditionReport>, want: &Condition, node: &str) {
    let flipped = last.is_none_or(|l| l.sent_at == 0 || l.condition.status != want.status);
    if flipped {
        tracing::info!(
            message_id = crate::logging::ids::CONDITION_CHANGED,
            status = %want.status,
            reason = %want.reason,
            node = %node,
            "NodectlReady condition is now {} ({}){}{}",
            want.status,
            want.reason,
            if want.message.is_empty() { "" } else { ": " },
            want.message
        );
    } else {
        tracing::debug!(status = %want.status, reason = %want.reason, "NodectlReady condition sent");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{StepReport, StepState};
    use futures_util::future::BoxFuture;
    use serde_json::Value;

    /// Records the writes; fails them while `fail` holds an error.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<(&'static str, Value)>,
        fail: Option<fn() -> ReportError>,
    }

    impl NodeWrites for Recorder {
        fn patch_status(&mut self, body: Value) -> BoxFuture<'_, Result<(), ReportError>> {
            self.writes.push(("status", body));
            let r = self.fail.map_or(Ok(()), |f| Err(f()));
            Box::pin(async move { r })
        }
        fn patch_meta(&mut self, body: Value) -> BoxFuture<'_, Result<(), ReportError>> {
            self.writes.push(("meta", body));
            let r = self.fail.map_or(Ok(()), |f| Err(f()));
            Box::pin(async move { r })
        }
    }

    fn status(state: StepState) -> Status {
        Status {
            steps: vec![StepReport {
                id: "secrets".into(),
                description: String::new(),
                deps: vec![],
                state,
            }],
            ..Status::default()
        }
    }

    fn converged() -> Status {
        status(StepState::Converged {
            detail: "ok".into(),
        })
    }

    fn failed(msg: &str) -> Status {
        status(StepState::Failed { error: msg.into() })
    }

    #[tokio::test]
    async fn idle_writes_only_the_condition_as_its_heartbeat() {
        let mut hb = Heartbeat::new(1200, None);
        let mut api = Recorder::default();
        let st = converged();
        let t0 = 1_800_000_000;
        let o = hb.step(&st, t0, 1.0, "n1", &mut api).await;
        // the first step writes both
        assert_eq!(o.writes, 2);
        assert_eq!(api.writes[0].0, "status");
        assert_eq!(api.writes[1].0, "meta");
        assert_eq!(
            o.next_at,
            t0 + 1200,
            "the first heartbeat: up to the whole interval"
        );
        // a change of nothing: nothing written before the heartbeat
        let o = hb.step(&st, t0 + 500, 0.0, "n1", &mut api).await;
        assert_eq!((o.writes, o.next_at), (0, t0 + 1200));
        // the heartbeat: the condition alone, then every interval less up to a tenth
        let o = hb.step(&st, t0 + 1080, 0.0, "n1", &mut api).await;
        assert_eq!(o.writes, 0, "not before it is due");
        let o = hb.step(&st, t0 + 1200, 1.0, "n1", &mut api).await;
        assert_eq!(o.writes, 1);
        assert_eq!(api.writes.last().unwrap().0, "status");
        assert_eq!(
            o.next_at,
            t0 + 1200 + 1080,
            "a tenth less at the most jitter"
        );
        let written = &api.writes.last().unwrap().1["status"]["conditions"][0];
        assert_eq!(written["lastTransitionTime"], "2027-01-15T08:00:00Z");
        assert_eq!(written["lastHeartbeatTime"], "2027-01-15T08:20:00Z");
        // 24 h idle: one write per heartbeat, no annotation
        let mut at = o.next_at;
        let before = api.writes.len();
        while at < t0 + 86_400 {
            at = hb.step(&st, at, 0.5, "n1", &mut api).await.next_at;
        }
        let n = api.writes.len() - before;
        assert!(api.writes[before..].iter().all(|(k, _)| *k == "status"));
        assert!((74..=76).contains(&n), "{n} heartbeats in a day at 1140 s");
    }

    #[tokio::test]
    async fn a_flip_is_written_at_once_a_new_message_at_most_every_minute() {
        let mut hb = Heartbeat::new(1200, None);
        let mut api = Recorder::default();
        let t0 = 1_800_000_000;
        hb.step(&failed("attempt 1"), t0, 0.0, "n1", &mut api).await;
        let n = api.writes.len();
        // the message alone changed: held back to a minute after the last write
        let o = hb
            .step(&failed("attempt 2"), t0 + 5, 0.0, "n1", &mut api)
            .await;
        assert_eq!((o.writes, o.next_at), (0, t0 + 60));
        let o = hb
            .step(&failed("attempt 3"), t0 + 60, 0.0, "n1", &mut api)
            .await;
        assert_eq!(o.writes, 1);
        assert_eq!(
            api.writes.last().unwrap().1["status"]["conditions"][0]["message"],
            "secrets: attempt 3"
        );
        // the status flipped: at once, with its transition time
        let o = hb.step(&converged(), t0 + 61, 0.0, "n1", &mut api).await;
        assert_eq!(o.writes, 1);
        assert_eq!(api.writes.len(), n + 2);
        let c = &api.writes.last().unwrap().1["status"]["conditions"][0];
        assert_eq!(c["status"], "True");
        assert_eq!(c["lastTransitionTime"], c["lastHeartbeatTime"]);
    }

    #[tokio::test]
    async fn failures_back_off_capped_and_a_401_is_told() {
        let mut hb = Heartbeat::new(1200, None);
        let mut api = Recorder {
            fail: Some(|| ReportError::Unauthorized("401".into())),
            ..Default::default()
        };
        let st = converged();
        let mut at = 1_800_000_000;
        let mut waits = vec![];
        for _ in 0..12 {
            let o = hb.step(&st, at, 1.0, "n1", &mut api).await;
            assert!(o.unauthorized);
            assert!(o.report.unwrap().error.unwrap().contains("401"));
            waits.push(o.next_at - at);
            at = o.next_at;
        }
        assert_eq!(waits[..4], [2, 4, 8, 16]);
        assert_eq!(*waits.last().unwrap(), BACKOFF_MAX);
        // a step before the backoff ends writes nothing
        let n = api.writes.len();
        let o = hb.step(&st, at - 1, 1.0, "n1", &mut api).await;
        assert_eq!((o.writes, api.writes.len()), (0, n));
        // once it works: both written, and the backoff starts over
        api.fail = None;
        let o = hb.step(&st, at, 0.0, "n1", &mut api).await;
        assert_eq!(o.writes, 2);
        assert!(o.report.unwrap().error.is_none());
        // a Node kubelet has not registered yet: the heartbeat, not a backoff
        api.fail = Some(|| ReportError::NotRegistered("n1".into()));
        let o = hb.step(&failed("x"), at + 1, 0.0, "n1", &mut api).await;
        assert_eq!(o.next_at, at + 1 + 1200);
        assert!(!o.unauthorized);
    }

    #[test]
    fn a_restarted_reporter_goes_on_from_what_was_written() {
        let last = ConditionReport {
            condition: condition::condition(&converged()),
            sent_at: 1000,
            transition_at: 900,
            error: None,
            next_at: 2000,
        };
        let want = condition::condition(&converged());
        let hb = Heartbeat::new(1200, Some(last.clone()));
        assert_eq!(
            condition_due_at(hb.last.as_ref(), &want, hb.heartbeat_at),
            2200
        );
        assert_eq!(heartbeat_interval(1200, 0.0), 1200);
        assert_eq!(heartbeat_interval(1200, 1.0), 1080);
        assert_eq!(heartbeat_interval(5, 1.0), 5);
        assert_eq!(first_interval(1200, 0.0), 120);
        assert_eq!(first_interval(1200, 1.0), 1200);
        assert_eq!(first_interval(1, 0.5), 1);
    }
}
