//! What nodectld tells the cluster about itself, from its status (pure): the `NodectlReady`
//! condition on its Node (as node-problem-detector reports its own conditions), the annotations
//! an operator or a dashboard reads at a glance (when each is written: [`super::heartbeat`]).
//!
//! Condition: `True` (reason `Converged`) when every step converged; `False` when a step failed
//! (reason `<Step>Failed`, e.g. `KubeletCredentialsFailed`, the step's error as message); else
//! `Unknown` (`Waiting` with what the node waits for, or `Converging`).

use serde::{Deserialize, Serialize};

use super::Status;
use crate::engine::StepState;

/// The condition type and annotation keys (docs/status.md maps them to kured's and FLUO's),
/// named where the kubectl plugin that reads them takes them from.
pub use kubectl_nodectl::names::{
    ANNOTATION_AUDIT, ANNOTATION_CERT_EXPIRY, ANNOTATION_REBOOT, ANNOTATION_VERSION, CONDITION_TYPE,
};

/// A condition message is cut here (the API server keeps what it is given; a Node object is
/// read by every kubelet watch of it, so it stays short).
const MAX_MESSAGE: usize = 1024;

/// The condition as nodectld would report it now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// What was last sent to the API server (`nodectl status`, metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionReport {
    #[serde(flatten)]
    pub condition: Condition,
    /// Unix time of the last successful patch (0: never).
    pub sent_at: u64,
    /// Unix time the status last flipped (`lastTransitionTime`).
    pub transition_at: u64,
    /// Why the last attempt failed, or what it waits for (none after a success).
    pub error: Option<String>,
    /// Unix time of the next attempt (a heartbeat, or the end of a backoff).
    pub next_at: u64,
}

/// The condition the status calls for.
pub fn condition(st: &Status) -> Condition {
    if let Some(e) = &st.config_error {
        return Condition {
            status: "False".into(),
            reason: "ConfigInvalid".into(),
            message: cut(e),
        };
    }
    if let Some(s) = st
        .steps
        .iter()
        .find(|s| matches!(s.state, StepState::Failed { .. }))
    {
        let StepState::Failed { error } = &s.state else {
            unreachable!("matched above")
        };
        return Condition {
            status: "False".into(),
            reason: format!("{}Failed", camel(&s.id)),
            message: cut(&format!("{}: {error}", s.id)),
        };
    }
    // Reboot coordination down, or Zincati rebooting without it: updates stop or go around
    // nodectld, which no step's state shows (issue 65).
    if let Some(c) = &st.coordination {
        if let Some(problem) = c.problem() {
            let reason = if c.is_down() {
                "RebootCoordinationFailed"
            } else {
                "RebootUncoordinated"
            };
            return Condition {
                status: "False".into(),
                reason: reason.into(),
                message: cut(&problem),
            };
        }
    }
    if !st.waiting_for.is_empty() {
        return Condition {
            status: "Unknown".into(),
            reason: "Waiting".into(),
            message: cut(&format!("waiting for {}", st.waiting_for.join("; "))),
        };
    }
    let converged = !st.steps.is_empty()
        && st.steps.iter().all(|s| {
            matches!(
                s.state,
                StepState::Converged { .. } | StepState::Applied { .. }
            )
        });
    if converged {
        // A reboot held back by a gate or the group's settle time says so here too (the
        // condition is what `kubectl describe node` shows).
        let message = match st.reboot.as_ref().filter(|r| {
            matches!(r.state.as_str(), "blocked" | "settling" | "held")
                || (r.state == "draining" && r.drain_blocked > 0)
        }) {
            Some(r) => cut(&format!("node converged; reboot {}: {}", r.state, r.detail)),
            None => "node converged".into(),
        };
        Condition {
            status: "True".into(),
            reason: "Converged".into(),
            message,
        }
    } else {
        Condition {
            status: "Unknown".into(),
            reason: "Converging".into(),
            message: "a pass is under way".into(),
        }
    }
}

/// The annotations the status calls for: reboot state, agent version, audit counts (no ids, no
/// paths), the certificate's expiry.
pub fn annotations(st: &Status) -> Vec<(&'static str, String)> {
    let reboot = match &st.coordination {
        Some(c) if c.is_down() => "coordination-failed",
        Some(c) if c.problem().is_some() => "uncoordinated",
        _ => st.reboot.as_ref().map_or("idle", |r| r.state.as_str()),
    };
    let mut out = vec![
        (ANNOTATION_REBOOT, reboot.to_string()),
        (ANNOTATION_VERSION, env!("CARGO_PKG_VERSION").to_string()),
    ];
    if let Some(a) = &st.audit {
        out.push((
            ANNOTATION_AUDIT,
            format!("high={},medium={},low={}", a.high, a.medium, a.low),
        ));
    }
    if let Some(c) = &st.credentials {
        out.push((ANNOTATION_CERT_EXPIRY, c.not_after.clone()));
    }
    out
}

/// `lastTransitionTime` for `want` sent at `now`: kept while the status stays the same.
pub fn transition_at(last: Option<&ConditionReport>, want: &Condition, now: u64) -> u64 {
    match last {
        Some(l) if l.sent_at > 0 && l.condition.status == want.status => l.transition_at,
        _ => now,
    }
}

/// The step id as a CamelCase reason (`kubelet-credentials` -> `KubeletCredentials`).
fn camel(id: &str) -> String {
    id.split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_MESSAGE {
        return s.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::StepReport;

    fn step(id: &str, state: StepState) -> StepReport {
        StepReport {
            id: id.into(),
            description: String::new(),
            deps: vec![],
            state,
        }
    }

    fn converged(id: &str) -> StepReport {
        step(
            id,
            StepState::Converged {
                detail: "ok".into(),
            },
        )
    }

    #[test]
    fn a_failed_step_is_the_reason_and_its_error_the_message() {
        let mut st = Status {
            steps: vec![converged("node-files"), converged("secrets")],
            ..Status::default()
        };
        assert_eq!(condition(&st).status, "True");
        assert_eq!(condition(&st).reason, "Converged");
        // A reboot held back by a gate shows in the message (issue 41); the status stays.
        st.reboot = Some(crate::reboot::coordinator::RebootStatus {
            state: "blocked".into(),
            detail: "pods running here: ops/backup-1 (app=backup)".into(),
            ..Default::default()
        });
        let c = condition(&st);
        assert_eq!(c.status, "True");
        assert_eq!(
            c.message,
            "node converged; reboot blocked: pods running here: ops/backup-1 (app=backup)"
        );
        st.reboot = None;
        st.steps.push(step(
            "kubelet-credentials",
            StepState::Failed {
                error: "the API server refused".into(),
            },
        ));
        let c = condition(&st);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "False",
                "KubeletCredentialsFailed",
                "kubelet-credentials: the API server refused"
            )
        );
        st.steps.pop();
        st.waiting_for = vec!["the bootstrap kubeconfig".into()];
        let c = condition(&st);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "Waiting")
        );
        assert_eq!(c.message, "waiting for the bootstrap kubeconfig");
        st.config_error = Some("x".repeat(5000));
        let c = condition(&st);
        assert_eq!(c.reason, "ConfigInvalid");
        assert!(c.message.len() <= MAX_MESSAGE + 3, "{}", c.message.len());
    }

    #[test]
    fn reports_go_out_on_a_change_or_a_heartbeat_and_transitions_keep_their_time() {
        use crate::status::heartbeat::condition_due_at as due_at;
        let up = Condition {
            status: "True".into(),
            reason: "Converged".into(),
            message: "m".into(),
        };
        let down = Condition {
            status: "False".into(),
            reason: "SecretsFailed".into(),
            message: "e".into(),
        };
        assert_eq!(due_at(None, &up, 0), 0);
        let sent = ConditionReport {
            condition: up.clone(),
            sent_at: 100,
            transition_at: 40,
            ..ConditionReport::default()
        };
        // the heartbeat as set after the write
        assert_eq!(due_at(Some(&sent), &up, 400), 400);
        assert_eq!(due_at(Some(&sent), &down, 400), 0);
        let other_message = Condition {
            message: "m2".into(),
            ..up.clone()
        };
        assert_eq!(due_at(Some(&sent), &other_message, 400), 160);
        assert_eq!(due_at(Some(&sent), &other_message, 130), 130);
        assert_eq!(transition_at(Some(&sent), &up, 400), 40);
        assert_eq!(transition_at(Some(&sent), &down, 400), 400);
        let never = ConditionReport { sent_at: 0, ..sent };
        assert_eq!(due_at(Some(&never), &up, 400), 0);
        assert_eq!(transition_at(Some(&never), &up, 101), 101);
    }
}
