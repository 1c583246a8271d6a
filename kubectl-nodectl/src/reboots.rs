//! `reboots`: every reboot group's Lease, its slot holders and what each holder's nodectld says
//! it is doing (pure: Leases and Nodes in, rows and text out).
//!
//! A holder is one annotation on its group's Lease, `<node>.reboot-holders.nodectl.io/slot`,
//! written by that node's nodectld (agent/src/reboot/lease.rs); a node whose `reboot-state` is
//! not `idle` and that holds no slot is shown too (waiting for its window or a slot).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};

use crate::names::{ANNOTATION_MEMBERS, ANNOTATION_REBOOT, ENTRY_SUFFIX, LEASE_PREFIX};
use crate::text::{age, printable, table};

/// A holder's entry as nodectld writes it (the fields the plugin reads; agent/src/reboot/slots.rs
/// `Holder` has more).
#[derive(Clone, Debug, Deserialize)]
struct Entry {
    node: String,
    since: u64,
    renewed: u64,
}

/// A node's entry after it gave its slot back, while its group settles (`reboot.settle_secs`).
#[derive(Clone, Debug, Deserialize)]
struct Released {
    node: String,
    released: u64,
    settle: u64,
}

/// One slot holder, or one node on its way to a reboot without a slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Row {
    /// The group's Lease (`reboot-<group>`); empty for a node that holds no slot.
    pub lease: String,
    /// The node.
    pub node: String,
    /// Unix seconds: when the slot was taken (0: holds none).
    pub since: u64,
    /// Unix seconds: when the holder last renewed it (0: holds none).
    pub renewed: u64,
    /// The node's `nodectl.io/reboot-state`; `gone` when no such Node exists.
    pub state: String,
    /// The Lease's members pattern (`nodectl.io/reboot-members`), when an operator set one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub members: String,
    /// A holder entry that does not parse (its annotation key), shown rather than hidden.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub unreadable: String,
    /// Unix seconds: the node gave its slot back then and its group settles (0: not such an
    /// entry); the row holds no slot.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub released: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The longest reason shown after a reboot state.
const MAX_WHY: usize = 160;

/// A state a gate, a hold or a stuck drain explains (`blocked`, `settling`, `held`, `draining`)
/// with its reason, from the node's condition message ("node converged; reboot blocked: pods
/// running here: ..."); other states as they are.
fn with_why(state: &str, n: &Node) -> String {
    if !matches!(state, "blocked" | "settling" | "held" | "draining") {
        return state.to_string();
    }
    let why = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == crate::names::CONDITION_TYPE))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.split_once(&format!("; reboot {state}: ")))
        .map(|(_, why)| printable(&why.chars().take(MAX_WHY).collect::<String>()));
    match why {
        Some(w) if !w.is_empty() => format!("{state}: {w}"),
        _ => state.to_string(),
    }
}

/// The holders of every reboot Lease (by Lease, then when taken), then the nodes that are
/// rebooting or waiting to without a slot. Leases not named `reboot-*` are left out.
pub fn rows(leases: &[Lease], nodes: &[Node]) -> Vec<Row> {
    let state: BTreeMap<&str, String> = nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.as_deref()?;
            let s = n
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_REBOOT))
                .map_or(String::new(), |s| printable(s));
            let s = with_why(&s, n);
            Some((name, s))
        })
        .collect();
    let mut out = Vec::new();
    for l in leases {
        let Some(name) = l.metadata.name.as_deref() else {
            continue;
        };
        if !name.starts_with(LEASE_PREFIX) {
            continue;
        }
        let ann = l.metadata.annotations.clone().unwrap_or_default();
        let members = ann
            .get(ANNOTATION_MEMBERS)
            .map_or(String::new(), |m| printable(m));
        let unreadable = |name: &str, owner: &str, k: &str| Row {
            lease: name.into(),
            node: printable(owner),
            since: 0,
            renewed: 0,
            state: state.get(owner).cloned().unwrap_or("gone".into()),
            members: members.clone(),
            unreadable: printable(k),
            released: 0,
        };
        let mut held: Vec<Row> = Vec::new();
        for (k, v) in &ann {
            let Some(owner) = k.strip_suffix(ENTRY_SUFFIX) else {
                continue;
            };
            let row = match serde_json::from_str::<Entry>(v) {
                Ok(e) if e.node == owner => Row {
                    lease: name.into(),
                    state: state.get(e.node.as_str()).cloned().unwrap_or("gone".into()),
                    node: printable(&e.node),
                    since: e.since,
                    renewed: e.renewed,
                    members: members.clone(),
                    unreadable: String::new(),
                    released: 0,
                },
                Ok(_) => unreadable(name, owner, k),
                Err(_) => match serde_json::from_str::<Released>(v) {
                    Ok(r) if r.node == owner => Row {
                        lease: name.into(),
                        node: printable(&r.node),
                        since: 0,
                        renewed: 0,
                        state: format!("released (group settles {} s)", r.settle),
                        members: members.clone(),
                        unreadable: String::new(),
                        released: r.released.max(1),
                    },
                    _ => unreadable(name, owner, k),
                },
            };
            held.push(row);
        }
        held.sort_by(|a, b| a.since.cmp(&b.since).then_with(|| a.node.cmp(&b.node)));
        if held.is_empty() {
            held.push(Row {
                lease: name.into(),
                node: String::new(),
                since: 0,
                renewed: 0,
                state: String::new(),
                members,
                unreadable: String::new(),
                released: 0,
            });
        }
        out.extend(held);
    }
    // (a released entry holds no slot: that node's own state is shown on a row of its own)
    let holding: Vec<String> = out
        .iter()
        .filter(|r| r.released == 0)
        .map(|r| r.node.clone())
        .collect();
    for (node, s) in &state {
        if !s.is_empty() && s != "idle" && !holding.iter().any(|h| h == node) {
            out.push(Row {
                lease: String::new(),
                node: printable(node),
                since: 0,
                renewed: 0,
                state: s.clone(),
                members: String::new(),
                unreadable: String::new(),
                released: 0,
            });
        }
    }
    out
}

/// The table for people; ages against `now` (unix seconds).
pub fn render(rows: &[Row], now: u64) -> String {
    let ago = |t: u64| {
        if t == 0 {
            String::new()
        } else {
            age(now as i64 - t as i64)
        }
    };
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                r.lease.clone(),
                r.node.clone(),
                if r.unreadable.is_empty() {
                    ago(r.since)
                } else {
                    "unreadable".into()
                },
                ago(r.renewed),
                r.state.clone(),
            ]
        })
        .collect();
    let mut o = table(["LEASE", "HOLDER", "SINCE", "RENEWED", "REBOOT"], &cells);
    let mut patterns: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| !r.members.is_empty())
        .map(|r| (r.lease.as_str(), r.members.as_str()))
        .collect();
    patterns.dedup();
    for (lease, m) in patterns {
        o.push_str(&format!("\n{lease}: members {m}"));
    }
    if o.ends_with(|c| c != '\n') {
        o.push('\n');
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, entries: &[(&str, &str)]) -> Lease {
        let ann: BTreeMap<String, String> = entries
            .iter()
            .map(|(k, v)| (format!("{k}{ENTRY_SUFFIX}"), v.to_string()))
            .collect();
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "annotations": ann}}))
            .unwrap()
    }

    fn node(name: &str, state: &str) -> Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name,
            "annotations": {ANNOTATION_REBOOT: state}}}))
        .unwrap()
    }

    #[test]
    fn holders_by_lease_then_nodes_waiting_without_a_slot() {
        let leases = [
            lease(
                "reboot-workers",
                &[
                    (
                        "w2",
                        r#"{"id":"x","node":"w2","since":900,"renewed":950,"boot":"b"}"#,
                    ),
                    ("w1", r#"{"node":"w1","since":800,"renewed":990}"#),
                ],
            ),
            lease("reboot-controllers", &[]),
            lease("kube-scheduler", &[]),
        ];
        let nodes = [
            node("w1", "rebooting"),
            node("w2", "draining"),
            node("w3", "waiting-for-slot"),
            node("w4", "idle"),
        ];
        let rows = rows(&leases, &nodes);
        let seen: Vec<(&str, &str, &str)> = rows
            .iter()
            .map(|r| (r.lease.as_str(), r.node.as_str(), r.state.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("reboot-workers", "w1", "rebooting"),
                ("reboot-workers", "w2", "draining"),
                ("reboot-controllers", "", ""),
                ("", "w3", "waiting-for-slot"),
            ]
        );
        let text = render(&rows, 1000);
        assert_eq!(
            text,
            "LEASE               HOLDER  SINCE  RENEWED  REBOOT\n\
             reboot-workers      w1      3m20s  10s      rebooting\n\
             reboot-workers      w2      100s   50s      draining\n\
             reboot-controllers  -       -      -        -\n\
             -                   w3      -      -        waiting-for-slot\n"
        );
    }

    /// A node's released entry (issue 41's settle time) is shown as such, with when it was
    /// released; one under another node's key is unreadable.
    #[test]
    fn a_released_entry_shows_the_group_settling() {
        let leases = [lease(
            "reboot-workers",
            &[
                ("w1", r#"{"node":"w1","released":990,"settle":20}"#),
                ("w2", r#"{"node":"w1","released":990,"settle":20}"#),
            ],
        )];
        let mut blocked = node("w1", "blocked");
        blocked.status = serde_json::from_value(serde_json::json!({"conditions": [
            {"type": crate::names::CONDITION_TYPE, "status": "True",
             "message": "node converged; reboot blocked: alerts firing: \u{1b}[2JDiskFull"}]}))
        .unwrap();
        let rows = rows(&leases, &[blocked]);
        // (the node's own row, apart from its released entry, says why it waits)
        let why = rows.iter().find(|r| r.lease.is_empty()).unwrap();
        assert_eq!(why.state, "blocked: alerts firing: \\u{1b}[2JDiskFull");
        assert_eq!(rows[0].state, "released (group settles 20 s)");
        assert_eq!((rows[0].since, rows[0].released), (0, 990));
        assert!(rows[0].unreadable.is_empty());
        assert!(!rows[1].unreadable.is_empty(), "{rows:?}");
    }

    /// An entry under another node's key, or one that does not parse, is shown as unreadable
    /// (never taken for the node it names), and its text cannot drive the terminal.
    #[test]
    fn a_forged_or_broken_entry_is_shown_unreadable_and_inert() {
        let leases = [lease(
            "reboot-a",
            &[
                ("w1", r#"{"node":"w2","since":1,"renewed":1}"#),
                ("w\u{1b}[2J", "not json"),
            ],
        )];
        let rows = rows(&leases, &[]);
        assert!(
            rows.iter()
                .all(|r| !r.unreadable.is_empty() && r.state == "gone"),
            "{rows:?}"
        );
        let text = render(&rows, 10);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("w\\u{1b}[2J"), "{text}");
        assert!(text.contains("unreadable"), "{text}");
    }
}
