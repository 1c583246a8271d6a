//! `describe NODE`: one node's nodectld state in full: its condition (with the last heartbeat),
//! kubelet's `Ready`, every `nodectl.io/` annotation, the reboot slot it holds (pure).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use serde::Serialize;

use crate::names::{CONDITION_TYPE, EVENT_COMPONENT};
use crate::text::{age, printable};
use crate::{fleet, reboots};

/// What `describe` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Description {
    #[serde(flatten)]
    pub row: fleet::Row,
    /// The condition's `lastHeartbeatTime`.
    pub last_heartbeat: String,
    /// kubelet's `Ready` condition status (`none` when kubelet never reported).
    pub kubelet_ready: String,
    /// Every `nodectl.io/` annotation.
    pub annotations: BTreeMap<String, String>,
    /// The reboot slot it holds, or the reboot it waits for.
    pub reboot_slot: Option<reboots::Row>,
    /// nodectld's Events about the Node, newest last; `None` when they could not be read.
    pub events: Option<Vec<EventRow>>,
}

/// One Event nodectld wrote about the Node.
#[derive(Clone, Debug, Serialize)]
pub struct EventRow {
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    /// How many times it happened.
    pub count: i32,
    /// When it last happened (RFC 3339).
    pub last: String,
    pub message: String,
}

/// nodectld's Events among `events` (those about other nodes or from others left out), oldest
/// first.
pub fn event_rows(node: &str, events: &[Event]) -> Vec<EventRow> {
    let mut rows: Vec<(String, EventRow)> = events
        .iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Node")
                && e.involved_object.name.as_deref() == Some(node)
                && e.source.as_ref().and_then(|s| s.component.as_deref()) == Some(EVENT_COMPONENT)
        })
        .map(|e| {
            let last = e
                .last_timestamp
                .as_ref()
                .or(e.first_timestamp.as_ref())
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            let text = |s: &Option<String>| s.as_deref().map(printable).unwrap_or_default();
            (
                last.clone(),
                EventRow {
                    type_: text(&e.type_),
                    reason: text(&e.reason),
                    count: e.count.unwrap_or(1),
                    last,
                    message: text(&e.message),
                },
            )
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.into_iter().map(|(_, r)| r).collect()
}

/// `node` described, its slot found in `leases`, with `events` (`None`: not readable).
pub fn describe(node: &Node, leases: &[Lease], events: Option<&[Event]>) -> Description {
    let conds = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let cond = |t: &str| conds.and_then(|c| c.iter().find(|c| c.type_ == t));
    let name = node.metadata.name.clone().unwrap_or_default();
    Description {
        row: fleet::row(node),
        last_heartbeat: cond(CONDITION_TYPE)
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        kubelet_ready: cond("Ready").map_or("none".into(), |c| printable(&c.status)),
        annotations: node
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("nodectl.io/"))
            .map(|(k, v)| (printable(k), printable(v)))
            .collect(),
        reboot_slot: reboots::rows(leases, std::slice::from_ref(node))
            .into_iter()
            // (a released entry holds no slot: the node's own row says what it does)
            .find(|r| r.node == printable(&name) && r.released == 0),
        events: events.map(|e| event_rows(&name, e)),
    }
}

/// The text for people; ages against `now` (unix seconds).
pub fn render(d: &Description, now: u64) -> String {
    let r = &d.row;
    let mut o = String::new();
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    let _ = writeln!(o, "Name:            {}", r.name);
    let _ = writeln!(o, "Role:            {}", r.role);
    let _ = writeln!(o, "Ready (kubelet): {}", d.kubelet_ready);
    let state = if r.reason.is_empty() {
        r.nodectl.clone()
    } else {
        format!("{} ({})", r.nodectl, r.reason)
    };
    let _ = writeln!(o, "NodectlReady:    {state}");
    let _ = writeln!(o, "  Message:       {}", dash(&r.message));
    let _ = writeln!(o, "  Since:         {}", dash(&r.since));
    let _ = writeln!(o, "  Heartbeat:     {}", dash(&d.last_heartbeat));
    let _ = writeln!(o, "Annotations:");
    if d.annotations.is_empty() {
        let _ = writeln!(o, "  (none: nodectld never reported)");
    }
    for (k, v) in &d.annotations {
        let _ = writeln!(o, "  {k}: {v}");
    }
    let ago = |t: u64| age(now as i64 - t as i64);
    let slot = match &d.reboot_slot {
        None => "none".to_string(),
        Some(s) if s.lease.is_empty() => format!("none ({})", s.state),
        Some(s) if !s.unreadable.is_empty() => format!("{}: an unreadable entry", s.lease),
        Some(s) => format!(
            "{}, taken {} ago, renewed {} ago ({})",
            s.lease,
            ago(s.since),
            ago(s.renewed),
            dash(&s.state)
        ),
    };
    let _ = writeln!(o, "Reboot slot:     {slot}");
    match &d.events {
        None => {
            let _ = writeln!(o, "Events:          (not readable with these credentials)");
        }
        Some(e) if e.is_empty() => {
            let _ = writeln!(o, "Events:          <none>");
        }
        Some(e) => {
            let _ = writeln!(o, "Events:");
            let cells: Vec<[String; 5]> = e
                .iter()
                .map(|r| {
                    let when = r
                        .last
                        .parse::<jiff::Timestamp>()
                        .map(|t| age(now as i64 - t.as_second()))
                        .unwrap_or_default();
                    [
                        r.type_.clone(),
                        r.reason.clone(),
                        when,
                        format!("x{}", r.count),
                        r.message.clone(),
                    ]
                })
                .collect();
            for l in
                crate::text::table(["TYPE", "REASON", "AGE", "COUNT", "MESSAGE"], &cells).lines()
            {
                let _ = writeln!(o, "  {l}");
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{ANNOTATION_REBOOT, ENTRY_SUFFIX};

    #[test]
    fn a_node_holding_a_slot() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w1", "annotations": {ANNOTATION_REBOOT: "draining",
                "nodectl.io/agent-version": "0.1.0", "other.io/x": "y"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"},
                {"type": CONDITION_TYPE, "status": "True", "reason": "Converged", "message": "",
                 "lastHeartbeatTime": "2026-12-01T00:10:00Z",
                 "lastTransitionTime": "2026-12-01T00:00:00Z"}]}}))
        .unwrap();
        let lease: Lease = serde_json::from_value(serde_json::json!({"metadata": {
            "name": "reboot-workers", "annotations": {format!("w1{ENTRY_SUFFIX}"):
                r#"{"node":"w1","since":100,"renewed":160}"#}}}))
        .unwrap();
        let d = describe(&node, &[lease], Some(&[]));
        let text = render(&d, 400);
        assert!(
            text.contains("NodectlReady:    True (Converged)\n"),
            "{text}"
        );
        assert!(
            text.contains("  Heartbeat:     2026-12-01T00:10:00Z\n"),
            "{text}"
        );
        assert!(
            text.contains("  nodectl.io/agent-version: 0.1.0\n"),
            "{text}"
        );
        assert!(!text.contains("other.io"), "{text}");
        assert!(
            text.contains(
                "Reboot slot:     reboot-workers, taken 5m ago, renewed 4m ago (draining)"
            ),
            "{text}"
        );
    }
}
