//! `nodectl status` for people: one line per part of the node, then the step table; and plans.

use std::fmt::Write as _;

use super::Status;
use crate::engine::{Report, StepState};
use crate::host::Host;
use crate::util::time::{human_duration, now_secs};

impl Status {
    /// The status for people.
    pub fn render(&self) -> String {
        let mut o = String::new();
        self.daemon_lines(&mut o);
        self.host_line(&mut o);
        self.node_lines(&mut o);
        self.kubelet_line(&mut o);
        self.audit_line(&mut o);
        self.credentials_line(&mut o);
        self.reboot_line(&mut o);
        self.condition_line(&mut o);
        if !self.steps.is_empty() {
            o.push('\n');
            o.push_str(&render_steps(&self.steps));
        }
        o
    }

    fn daemon_lines(&self, o: &mut String) {
        let d = &self.daemon;
        if d.running {
            let _ = writeln!(
                o,
                "● nodectld: {}{} (pid {})",
                d.state,
                if d.ready && d.state != "ready" {
                    " (READY sent)"
                } else {
                    ""
                },
                d.pid.map_or("?".into(), |p| p.to_string())
            );
            let _ = writeln!(o, "    Status: {}", d.status_line);
            if let Some(p) = &d.last_pass {
                let ago = now_secs().saturating_sub(p.finished_at);
                let _ = writeln!(
                o,
                "  Last pass: {ago}s ago ({}), took {} ms, {} change(s) applied; {} pass(es) since start",
                p.trigger, p.duration_ms, p.changes_applied, d.passes
            );
            }
        } else {
            let _ = writeln!(o, "○ nodectld: not running ({})", d.state);
            let _ = writeln!(
                o,
                "    What follows was observed from disk by this command; nothing was changed."
            );
        }
    }

    fn host_line(&self, o: &mut String) {
        if let Some(h) = &self.host {
            let _ = writeln!(o, "       Host: {} ({})", h.host.name, os_label(&h.host));
            let se = &h.host.selinux;
            let mode = serde_json::to_value(se.mode)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let mut line = mode.to_string();
            if se.mls {
                line.push_str(", MLS/MCS");
            }
            if let Some(p) = &se.policy {
                let _ = write!(line, ", policy {p}");
            }
            match &h.labels_skipped_reason {
                None => line.push_str("; labels applied"),
                Some(r) => {
                    let _ = write!(line, "; labels skipped: {r}");
                }
            }
            let _ = writeln!(o, "    SELinux: {line}");
        }
    }

    fn node_lines(&self, o: &mut String) {
        if let Some(s) = &self.settings {
            let _ = writeln!(
                o,
                "       Node: {} {}, kubelet {} via {:?}, network {:?}",
                format!("{:?}", s.role).to_lowercase(),
                s.node_name,
                match self.kubelet_image.as_deref() {
                    Some(i) if i != s.kubelet_image => format!(
                        "{i} (a drop-in overrides the configured {})",
                        s.kubelet_image
                    ),
                    _ => s.kubelet_image.clone(),
                },
                s.runtime,
                s.network
            );
            let files: Vec<String> = s.files.iter().map(|f| f.display().to_string()).collect();
            let _ = writeln!(
                o,
                "     Config: {}",
                if files.is_empty() {
                    "(no files)".into()
                } else {
                    files.join(", ")
                }
            );
        }
        if let Some(e) = &self.config_error {
            let _ = writeln!(o, "     Config: ERROR {e}");
        }
    }

    fn kubelet_line(&self, o: &mut String) {
        if let Some(k) = &self.kubelet {
            let mut line = format!("{} ({})", k.active, k.sub);
            if k.load == "not-found" {
                line = "no unit yet".into();
            } else if k.restarts > 0 {
                let _ = write!(line, ", {} automatic restarts", k.restarts);
            }
            if let Some(f) = &self.kubelet_last_failure {
                let ago = now_secs().saturating_sub(f.at);
                let _ = write!(line, "; last failure {ago}s ago: {}", f.reason);
            }
            let _ = writeln!(o, "    Kubelet: {line}");
        }
    }

    fn audit_line(&self, o: &mut String) {
        if let Some(a) = &self.audit {
            let _ = writeln!(
                o,
                "      Audit: {}",
                if a.ids.is_empty() {
                    "no findings".to_string()
                } else {
                    format!(
                        "{} high, {} medium, {} low: {} (nodectl audit)",
                        a.high,
                        a.medium,
                        a.low,
                        a.ids.join(", ")
                    )
                }
            );
        }
    }

    fn credentials_line(&self, o: &mut String) {
        match &self.credentials {
            Some(c) if c.expires_in_s > 0 => {
                let _ = writeln!(
                    o,
                    "Credentials: {} valid until {} (in {}), renewal at {}",
                    c.subject,
                    c.not_after,
                    human_duration(c.expires_in_s),
                    c.rotate_at
                );
            }
            Some(c) => {
                let _ = writeln!(
                    o,
                    "Credentials: {} EXPIRED at {} ({} ago)",
                    c.subject,
                    c.not_after,
                    human_duration(-c.expires_in_s)
                );
            }
            None if self.settings.is_some() => {
                let _ = writeln!(o, "Credentials: none yet (TLS bootstrap pending)");
            }
            None => {}
        }
    }

    fn condition_line(&self, o: &mut String) {
        let Some(c) = &self.node_condition else {
            return;
        };
        let now = now_secs();
        let sent = if c.sent_at > 0 {
            format!(
                "{}={} ({}), sent {}s ago, this status since {}s ago",
                super::condition::CONDITION_TYPE,
                c.condition.status,
                c.condition.reason,
                now.saturating_sub(c.sent_at),
                now.saturating_sub(c.transition_at)
            )
        } else {
            "not sent yet".to_string()
        };
        let error = c
            .error
            .as_ref()
            .map_or(String::new(), |e| format!("; last attempt: {e}"));
        let _ = writeln!(o, "  Condition: {sent}{error}");
    }

    fn reboot_line(&self, o: &mut String) {
        if let Some(c) = &self.coordination {
            self.coordination_lines(c, o);
        }
        if let Some(r) = self
            .reboot
            .as_ref()
            .filter(|_| self.coordination.as_ref().is_none_or(|c| !c.is_down()))
        {
            let holders: Vec<String> = r.holders.iter().map(|h| h.node.clone()).collect();
            let _ = writeln!(
                o,
                "    Reboots: {}{} ({}{})",
                r.state,
                if r.detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.detail)
                },
                if r.endpoint.starts_with("http") {
                    format!("FleetLock on {}", r.endpoint)
                } else {
                    format!("following {}", r.endpoint)
                },
                r.group.as_ref().map_or(String::new(), |g| format!(
                    "; group {g} held by {}",
                    if holders.is_empty() {
                        "nobody".to_string()
                    } else {
                        holders.join(", ")
                    }
                ))
            );
        }
    }
}

impl Status {
    /// Reboot coordination down or waiting, and what Zincati's configuration asks (FleetLock).
    fn coordination_lines(&self, c: &super::Coordination, o: &mut String) {
        if c.is_down() {
            let retry = c.retry_at.map_or(String::new(), |at| {
                format!("; started again in {} s", at.saturating_sub(now_secs()))
            });
            let _ = writeln!(
                o,
                "    Reboots: coordination {} ({}): {}{retry} ({} in a row)",
                c.state,
                c.strategy,
                c.error.as_deref().unwrap_or("no reason given"),
                c.failures
            );
        } else if c.state == "waiting" {
            let _ = writeln!(
                o,
                "    Reboots: {} starts once the node has its own credentials",
                c.strategy
            );
        }
        if let Some(z) = &c.zincati {
            let line = match &z.problem {
                Some(p) => format!("{}: {p}", z.state.to_uppercase()),
                None if z.state == "updates-off" => format!(
                    "updates off (updates.enabled = false in {})",
                    z.enabled.from.as_deref().unwrap_or("?")
                ),
                None => format!(
                    "asks nodectld ({} from {})",
                    z.base_url.value,
                    z.base_url.from.as_deref().unwrap_or("?")
                ),
            };
            let _ = writeln!(o, "    Zincati: {line}");
        }
    }
}

/// The step table: one line a step with its state and detail.
pub(crate) fn render_steps(steps: &[crate::engine::StepReport]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Steps:");
    let w = steps.iter().map(|s| s.id.len()).max().unwrap_or(0);
    for s in steps {
        let (mark, text) = match &s.state {
            StepState::Converged { detail } => ("✓", detail.clone()),
            StepState::Applied { changes } => ("✓", format!("applied {} change(s)", changes.len())),
            StepState::Pending { changes } => (
                "→",
                changes
                    .iter()
                    .map(|c| c.what.clone())
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            StepState::Waiting { waiting_for } => ("…", format!("waiting for {waiting_for}")),
            StepState::Blocked { blocked_by } => ("·", format!("after {}", blocked_by.join(", "))),
            StepState::Failed { error } => ("✗", error.clone()),
        };
        let _ = writeln!(o, "  {mark} {:w$}  {:9}  {text}", s.id, s.state.name());
    }
    o
}

fn os_label(h: &Host) -> &'static str {
    match h.os {
        crate::host::Os::FedoraCoreos => "Fedora CoreOS",
        crate::host::Os::Flatcar => "Flatcar",
        crate::host::Os::ContainerLinux => "Container Linux (end-of-life)",
        crate::host::Os::Generic => "generic systemd host",
    }
}

/// Prints a plan for people: changes first, then what waits or is blocked.
pub(crate) fn render_plan(report: &Report, heading: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{heading}");
    for s in &report.steps {
        match &s.state {
            StepState::Pending { changes } => {
                let _ = writeln!(o, "  {} ({}):", s.id, s.description);
                for c in changes {
                    let _ = writeln!(o, "    + {}  [{}]", c.what, c.why);
                }
            }
            StepState::Failed { error } => {
                let _ = writeln!(o, "  {}: cannot plan: {error}", s.id);
            }
            _ => {}
        }
    }
    for s in &report.steps {
        match &s.state {
            StepState::Waiting { waiting_for } => {
                let _ = writeln!(o, "  {}: waiting for {waiting_for}", s.id);
            }
            StepState::Blocked { blocked_by } => {
                let _ = writeln!(o, "  {}: after {}", s.id, blocked_by.join(", "));
            }
            _ => {}
        }
    }
    let n = report.pending_changes();
    if n == 0 {
        let _ = writeln!(o, "No changes.");
    } else {
        let _ = writeln!(o, "{n} change(s) pending.");
    }
    o
}
