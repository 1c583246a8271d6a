//! Kubernetes Events on the node's own Node for what an operator alerts on (the journal's
//! `MESSAGE_ID` events, [`crate::logging::noted`]): the condition flipping, a reboot slot taken
//! or given back, a drain begun, a certificate request denied; so `kubectl describe node` and
//! `kubectl nodectl describe` show them (pure: what to send, and whether).
//!
//! Deduplicated and rate-limited as client-go's event recorder does it
//! (`staging/src/k8s.io/client-go/tools/record/events_cache.go`): `eventLogger.eventObserve`
//! sends an event identical to one already sent (same type, reason, message) as a PATCH of that
//! event's `count` and `lastTimestamp`, not a new object; `EventSourceObjectSpamFilter` lets
//! through a burst of 25 and then one every 5 minutes (a token bucket per source and object:
//! here, this nodectld and its Node), whatever the kind. Not done: client-go's aggregation of
//! similar events with differing messages (nodectld's are few and their messages short).

use std::collections::VecDeque;

use serde_json::{json, Value};

use crate::logging::{ids, noted::Noted};
use crate::util::time::rfc3339;

/// The component events are reported from (`source.component`, `reportingComponent`), named
/// where the kubectl plugin that lists them takes it from.
pub use kubectl_nodectl::names::EVENT_COMPONENT as COMPONENT;

/// client-go's defaults (`events_cache.go`: `defaultSpamBurst`, `defaultSpamQPS`).
pub const SPAM_BURST: f64 = 25.0;
pub const SPAM_EVERY_SECS: f64 = 300.0;

/// Events already sent that a repeat is counted on (client-go keeps 4096; nodectld's kinds are
/// few).
const REMEMBERED: usize = 64;

/// An event's message is cut here (events.k8s.io's `note` limit; core/v1 events are read by
/// every `describe`).
const MAX_MESSAGE: usize = 1024;

/// One event to tell the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// CamelCase, as Kubernetes reasons are.
    pub reason: &'static str,
    pub message: String,
    /// Unix seconds: when it was logged.
    pub at: u64,
}

/// The Event a journal line with a `MESSAGE_ID` calls for (none for others).
pub fn note_of(n: &Noted) -> Option<Note> {
    let (type_, reason) = match n.id {
        ids::CONDITION_CHANGED if n.status == "True" => ("Normal", "NodectlReady"),
        ids::CONDITION_CHANGED if n.status == "False" => ("Warning", "NodectlNotReady"),
        ids::CONDITION_CHANGED => ("Normal", "NodectlUnknown"),
        ids::REBOOT_GRANTED => ("Normal", "RebootSlotTaken"),
        ids::REBOOT_RELEASED => ("Normal", "RebootSlotReleased"),
        ids::DRAINING => ("Normal", "Draining"),
        ids::REBOOT_BLOCKED => ("Warning", "RebootBlocked"),
        ids::REBOOT_COORDINATION_FAILED => ("Warning", "RebootCoordinationFailed"),
        ids::REBOOT_UNCOORDINATED => ("Warning", "RebootUncoordinated"),
        ids::CSR_DENIED => ("Warning", "CertificateRequestDenied"),
        _ => return None,
    };
    let message: String = n.message.chars().take(MAX_MESSAGE).collect();
    Some(Note {
        type_,
        reason,
        message,
        at: n.at,
    })
}

/// What to do with a note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A new Event of this name (`<node>.<nanoseconds, hex>`, as client-go names them).
    Create { name: String },
    /// The same event again: the Event of this name, counted `count` times now.
    Count {
        name: String,
        count: u32,
        first_at: u64,
    },
    /// Over the rate limit: not sent (it is in the journal).
    Drop,
}

#[derive(Clone, Debug)]
struct Sent {
    key: (&'static str, &'static str, String),
    name: String,
    count: u32,
    first_at: u64,
}

/// Decides, note by note, whether and how each is sent.
#[derive(Debug)]
pub struct Correlator {
    sent: VecDeque<Sent>,
    tokens: f64,
    /// Unix milliseconds of the last refill.
    refilled_ms: u64,
}

impl Default for Correlator {
    fn default() -> Self {
        Correlator {
            sent: VecDeque::new(),
            tokens: SPAM_BURST,
            refilled_ms: 0,
        }
    }
}

impl Correlator {
    /// The action for `n` at `now_ms` (unix milliseconds; the name's nanoseconds come from
    /// `nanos`, unique per call).
    pub fn decide(&mut self, n: &Note, node: &str, now_ms: u64, nanos: u128) -> Action {
        if self.refilled_ms != 0 {
            let gained = now_ms.saturating_sub(self.refilled_ms) as f64 / 1000.0 / SPAM_EVERY_SECS;
            self.tokens = (self.tokens + gained).min(SPAM_BURST);
        }
        self.refilled_ms = now_ms;
        if self.tokens < 1.0 {
            return Action::Drop;
        }
        self.tokens -= 1.0;
        let key = (n.type_, n.reason, n.message.clone());
        if let Some(i) = self.sent.iter().position(|s| s.key == key) {
            let mut s = self.sent.remove(i).expect("found");
            s.count += 1;
            let a = Action::Count {
                name: s.name.clone(),
                count: s.count,
                first_at: s.first_at,
            };
            self.sent.push_back(s);
            return a;
        }
        let name = format!("{node}.{nanos:x}");
        self.sent.push_back(Sent {
            key,
            name: name.clone(),
            count: 1,
            first_at: n.at,
        });
        while self.sent.len() > REMEMBERED {
            self.sent.pop_front();
        }
        Action::Create { name }
    }

    /// An Event that is gone from the API server (its TTL passed): a repeat creates it again
    /// under its name, counted on.
    pub fn forget(&mut self, name: &str) {
        self.sent.retain(|s| s.name != name);
    }
}

fn at(secs: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)
}

/// The core/v1 Event for `n` about Node `node` (as kubelet's recorder makes one about its Node:
/// `involvedObject` with the node's name as uid, in namespace `default`).
pub fn event(node: &str, n: &Note, name: &str, count: u32, first_at: u64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "type": n.type_,
        "reason": n.reason,
        "message": n.message,
        "count": count,
        "firstTimestamp": rfc3339(at(first_at)),
        "lastTimestamp": rfc3339(at(n.at)),
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT,
        "reportingInstance": node,
    })
}

/// A repeat: the strategic merge patch of the Event's `count` and `lastTimestamp`
/// (client-go's `eventObserve` patch).
pub fn count_patch(count: u32, last_at: u64) -> Value {
    json!({"count": count, "lastTimestamp": rfc3339(at(last_at))})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(reason: &'static str, message: &str) -> Note {
        Note {
            type_: "Normal",
            reason,
            message: message.into(),
            at: 100,
        }
    }

    #[test]
    fn a_repeat_is_counted_on_the_event_already_sent() {
        let mut c = Correlator::default();
        let a = c.decide(&note("RebootSlotTaken", "m"), "w1", 1_000, 0xabc);
        assert_eq!(
            a,
            Action::Create {
                name: "w1.abc".into()
            }
        );
        let b = c.decide(&note("RebootSlotReleased", "m"), "w1", 1_000, 0xabd);
        assert_eq!(
            b,
            Action::Create {
                name: "w1.abd".into()
            }
        );
        let again = c.decide(&note("RebootSlotTaken", "m"), "w1", 2_000, 0xabe);
        assert_eq!(
            again,
            Action::Count {
                name: "w1.abc".into(),
                count: 2,
                first_at: 100
            }
        );
        // another message is another event
        let other = c.decide(&note("RebootSlotTaken", "m2"), "w1", 2_000, 0xabf);
        assert!(matches!(other, Action::Create { .. }), "{other:?}");
        // an event the API server expired is made again
        c.forget("w1.abc");
        let anew = c.decide(&note("RebootSlotTaken", "m"), "w1", 3_000, 0xac0);
        assert_eq!(
            anew,
            Action::Create {
                name: "w1.ac0".into()
            }
        );
    }

    /// client-go's spam filter: a burst of 25, then one per 5 minutes, repeats included.
    #[test]
    fn a_burst_of_25_then_one_every_five_minutes() {
        let mut c = Correlator::default();
        let t0 = 1_000_000;
        let sent = (0..40)
            .filter(|i| c.decide(&note("Draining", &i.to_string()), "w1", t0, *i) != Action::Drop)
            .count();
        assert_eq!(sent, 25);
        assert_eq!(
            c.decide(&note("Draining", "x"), "w1", t0 + 299_000, 99),
            Action::Drop
        );
        assert_ne!(
            c.decide(&note("Draining", "x"), "w1", t0 + 301_000, 100),
            Action::Drop
        );
        assert_eq!(
            c.decide(&note("Draining", "y"), "w1", t0 + 302_000, 101),
            Action::Drop
        );
        // a quiet hour refills the whole burst, no more
        let later = t0 + 301_000 + 3_600_000 * 3;
        let sent = (0..40)
            .filter(|i| {
                c.decide(&note("Draining", &format!("z{i}")), "w1", later, 200 + i) != Action::Drop
            })
            .count();
        assert_eq!(sent, 25);
    }

    #[test]
    fn the_event_is_about_the_nodes_own_node_in_default() {
        let n = note("RebootSlotTaken", "slot of workers taken");
        let e = event("w1", &n, "w1.1", 1, 100);
        assert_eq!(e["metadata"]["namespace"], "default");
        assert_eq!(e["involvedObject"]["kind"], "Node");
        assert_eq!(e["involvedObject"]["name"], "w1");
        assert_eq!(e["source"]["component"], "nodectld");
        assert_eq!(e["firstTimestamp"], "1970-01-01T00:01:40Z");
        let noted = Noted {
            id: ids::CONDITION_CHANGED,
            message: "NodectlReady condition is now False (SecretsFailed)".into(),
            status: "False".into(),
            at: 5,
        };
        let n = note_of(&noted).unwrap();
        assert_eq!((n.type_, n.reason), ("Warning", "NodectlNotReady"));
    }
}
