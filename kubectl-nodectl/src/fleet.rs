//! `fleet`: every Node's nodectld state in one table, from what each nodectld put on its Node
//! (the `NodectlReady` condition and the `nodectl.io/*` annotations), unhealthy first (pure:
//! Node objects in, rows and text out).

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use crate::names::{
    ANNOTATION_AUDIT, ANNOTATION_CERT_EXPIRY, ANNOTATION_REBOOT, ANNOTATION_VERSION, CONDITION_TYPE,
};
use crate::text::{printable, table};

/// One node's row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Row {
    pub name: String,
    /// `controller` or `worker` (Typhoon's `node.kubernetes.io/controller` label).
    pub role: String,
    /// The condition's status (`True`, `False`, `Unknown`), `none` when nodectld never
    /// reported.
    pub nodectl: String,
    pub reason: String,
    pub message: String,
    /// `lastTransitionTime`.
    pub since: String,
    pub reboot: String,
    pub audit: String,
    pub version: String,
    pub certificate_not_after: String,
    /// The condition is `True`.
    pub ready: bool,
}

impl Row {
    /// Unhealthy first: failed, then unknown or never reported, then rebooting, then ready.
    fn rank(&self) -> u8 {
        match (self.nodectl.as_str(), self.reboot.as_str()) {
            ("False", _) => 0,
            ("True", "idle" | "") => 3,
            ("True", _) => 2,
            _ => 1,
        }
    }
}

/// The rows for these Nodes, unhealthy first, then by name.
pub fn rows(nodes: &[Node]) -> Vec<Row> {
    let mut rows: Vec<Row> = nodes.iter().map(row).collect();
    rows.sort_by(|a, b| a.rank().cmp(&b.rank()).then_with(|| a.name.cmp(&b.name)));
    rows
}

/// Every text a node wrote (its condition, its annotations) is made [`printable`]: a
/// compromised node must not drive the operator's terminal.
pub fn row(n: &Node) -> Row {
    let meta = &n.metadata;
    let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).cloned();
    let ann = |k: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(|v| printable(v))
            .unwrap_or_default()
    };
    let text = |s: Option<&String>| s.map(|s| printable(s)).unwrap_or_default();
    let controller = label("node.kubernetes.io/controller").as_deref() == Some("true")
        || label("node-role.kubernetes.io/control-plane").is_some();
    let cond = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == CONDITION_TYPE));
    Row {
        name: text(meta.name.as_ref()),
        role: if controller { "controller" } else { "worker" }.into(),
        nodectl: cond.map_or("none".into(), |c| printable(&c.status)),
        reason: text(cond.and_then(|c| c.reason.as_ref())),
        message: text(cond.and_then(|c| c.message.as_ref())),
        since: cond
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        reboot: ann(ANNOTATION_REBOOT),
        audit: ann(ANNOTATION_AUDIT),
        version: ann(ANNOTATION_VERSION),
        certificate_not_after: ann(ANNOTATION_CERT_EXPIRY),
        ready: cond.is_some_and(|c| c.status == "True"),
    }
}

/// The table for people.
pub fn render(rows: &[Row]) -> String {
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                r.role.clone(),
                if r.reason.is_empty() {
                    r.nodectl.clone()
                } else {
                    format!("{} ({})", r.nodectl, r.reason)
                },
                r.since.clone(),
                r.reboot.clone(),
                r.audit.clone(),
                r.version.clone(),
                r.certificate_not_after.clone(),
            ]
        })
        .collect();
    let head = [
        "NODE",
        "ROLE",
        "NODECTL",
        "SINCE",
        "REBOOT",
        "AUDIT",
        "VERSION",
        "CERT-NOT-AFTER",
    ];
    let mut o = table(head, &cells);
    for r in rows.iter().filter(|r| r.nodectl == "False") {
        let _ = writeln!(o, "\n{}: {}", r.name, r.message);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, status: Option<&str>, reason: &str, reboot: &str) -> Node {
        let mut v = serde_json::json!({"metadata": {"name": name, "annotations": {ANNOTATION_REBOOT: reboot}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        if let Some(s) = status {
            v["status"]["conditions"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({
                "type": CONDITION_TYPE, "status": s, "reason": reason, "message": "m",
                "lastTransitionTime": "2026-12-01T00:00:00Z"}));
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn unhealthy_first_then_rebooting_then_ready() {
        let rows = rows(&[
            node("a-ok", Some("True"), "Converged", "idle"),
            node("b-rebooting", Some("True"), "Converged", "draining"),
            node("c-failed", Some("False"), "SecretsFailed", "idle"),
            node("d-silent", None, "", ""),
        ]);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["c-failed", "d-silent", "b-rebooting", "a-ok"]);
        assert_eq!(rows[1].nodectl, "none");
        let text = render(&rows);
        assert!(
            text.lines().nth(1).unwrap().starts_with(
                "c-failed     worker  False (SecretsFailed)  2026-12-01T00:00:00Z  idle"
            ),
            "{text}"
        );
        assert!(text.ends_with("c-failed: m\n"), "{text}");
    }

    /// Issue 37, 9: what a node writes on its Node (message, reason, annotations) reaches the
    /// operator's terminal with its escapes shown, not obeyed.
    #[test]
    fn a_nodes_own_text_cannot_drive_the_terminal() {
        let mut n = node("evil", Some("False"), "X\x1b[8m", "\x1b]0;title\x07idle");
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].message =
            Some("\x1b[2J\x1b[Hall nodes healthy\r".into());
        let text = render(&rows(&[n]));
        assert!(
            !text.contains('\x1b') && !text.contains('\r') && !text.contains('\x07'),
            "{text:?}"
        );
        assert!(
            text.contains("evil: \\u{1b}[2J\\u{1b}[Hall nodes healthy\\u{d}"),
            "{text}"
        );
        assert!(text.contains("False (X\\u{1b}[8m)"), "{text}");
    }
}
