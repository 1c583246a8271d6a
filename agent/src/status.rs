//! What `nodectl status` shows, as one serializable value (the `--json` schema, documented in
//! docs/status.md) and as text for people.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::engine::{Report, StepState};
use crate::host::Host;
use crate::util::time::{human_duration, now_secs, rfc3339};

/// Bumped only on incompatible changes; fields may be added without a bump.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Status {
    pub schema_version: u32,
    /// `daemon`: read from nodectld over D-Bus. `disk`: nodectld is not reachable; this
    /// `nodectl` observed the node itself (nothing was changed).
    pub source: String,
    pub daemon: Daemon,
    pub host: Option<HostStatus>,
    /// The error that stops the agent from loading its settings (file, key, expected).
    pub config_error: Option<String>,
    pub settings: Option<Settings>,
    pub steps: Vec<crate::engine::StepReport>,
    /// What the node waits for from outside.
    pub waiting_for: Vec<String>,
    pub systemd_calls: Option<nodectl_units::systemd::CallCounts>,
    /// kubelet.service as systemd reports it (followed by signal while nodectld runs).
    pub kubelet: Option<nodectl_units::systemd::UnitState>,
    /// The last failure seen (kept after kubelet recovered, so a flapping kubelet shows).
    pub kubelet_last_failure: Option<Failure>,
    /// The image kubelet.service runs: `KUBELET_IMAGE` as systemd has it loaded, so an
    /// operator's drop-in shows; null when systemd is not asked (scratch root).
    #[serde(default)]
    pub kubelet_image: Option<String>,
    /// The node's client certificate (`/var/lib/kubelet/pki/kubelet-client-current.pem`).
    pub credentials: Option<Credentials>,
    /// Reboot coordination (FleetLock), while nodectld serves it.
    pub reboot: Option<crate::reboot::coordinator::RebootStatus>,
    /// `nodectl audit`'s findings, summarised.
    pub audit: Option<AuditSummary>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditSummary {
    pub high: usize,
    pub medium: usize,
    pub low: usize,
    /// The ids found (each once).
    pub ids: Vec<String>,
}

impl AuditSummary {
    pub fn of(findings: &[crate::audit::Finding]) -> Self {
        use crate::audit::Severity;
        let n = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
        let mut ids: Vec<String> = findings.iter().map(|f| f.id.clone()).collect();
        ids.dedup();
        ids.sort();
        ids.dedup();
        AuditSummary {
            high: n(Severity::High),
            medium: n(Severity::Medium),
            low: n(Severity::Low),
            ids,
        }
    }

    /// Runs the audit on the node (for status).
    pub fn read(root: &crate::root::Root, settings: &Settings) -> Self {
        let os = ["/etc/os-release", "/usr/lib/os-release"]
            .iter()
            .find_map(|p| std::fs::read_to_string(root.path(p)).ok())
            .unwrap_or_default();
        let label_of = |p: &std::path::Path| {
            nodectl_selinux::relabel::stored_label(&root.path(p))
                .ok()
                .flatten()
        };
        Self::of(&crate::audit::audit(root, settings, &os, &label_of))
    }
}

/// The image kubelet.service runs, as systemd has it loaded (an operator's drop-in included).
pub async fn kubelet_image(systemd: &nodectl_units::systemd::Systemd) -> Option<String> {
    use nodectl_units::kubelet::{IMAGE_VAR, KUBELET_UNIT};
    systemd
        .environment_var(KUBELET_UNIT, IMAGE_VAR)
        .await
        .ok()
        .flatten()
}

/// The Prometheus text exposition of a status (for node_exporter's textfile collector).
pub fn metrics(st: &Status) -> String {
    let mut o = String::new();
    let mut gauge = |name: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, v) in samples {
            let _ = writeln!(o, "{name}{labels} {v}");
        }
    };
    if let Some(a) = &st.audit {
        gauge(
            "nodectl_audit_findings",
            "Security audit findings on this node, by severity (nodectl audit).",
            &[
                ("{severity=\"high\"}".into(), a.high as f64),
                ("{severity=\"medium\"}".into(), a.medium as f64),
                ("{severity=\"low\"}".into(), a.low as f64),
            ],
        );
    }
    // Instants, not durations: the file is rewritten after a pass, and an alert computes
    // `... - time()` itself (a countdown would be as old as the last pass).
    let unix = |t: &str| {
        t.parse::<jiff::Timestamp>()
            .ok()
            .map(|t| t.as_second() as f64)
    };
    if let Some(c) = &st.credentials {
        if let (Some(not_after), Some(rotate_at)) = (unix(&c.not_after), unix(&c.rotate_at)) {
            gauge(
                "nodectl_credentials_expiry_timestamp_seconds",
                "When the node's client certificate expires (Unix time).",
                &[(String::new(), not_after)],
            );
            gauge(
                "nodectl_credentials_rotation_timestamp_seconds",
                "When nodectld renews the node's client certificate (Unix time).",
                &[(String::new(), rotate_at)],
            );
        }
    }
    if let Some(k) = &st.kubelet {
        gauge(
            "nodectl_kubelet_active",
            "Whether kubelet.service is active (1) or not (0), as systemd reports it.",
            &[(String::new(), f64::from(u8::from(k.active == "active")))],
        );
    }
    if let Some(p) = &st.daemon.last_pass {
        gauge(
            "nodectl_last_pass_timestamp_seconds",
            "When nodectld's last convergence pass finished (Unix time).",
            &[(String::new(), p.finished_at as f64)],
        );
        gauge(
            "nodectl_last_pass_duration_seconds",
            "Duration of nodectld's last convergence pass.",
            &[(String::new(), p.duration_ms as f64 / 1000.0)],
        );
        gauge(
            "nodectl_failed_steps",
            "Steps that failed in the last pass.",
            &[(String::new(), p.failed_steps.len() as f64)],
        );
    }
    if let Some((rss, anon)) = crate::memory::resident() {
        gauge(
            "nodectl_resident_memory_bytes",
            "nodectld's resident memory (all, and anonymous: the heap and stacks).",
            &[
                ("{kind=\"all\"}".into(), rss as f64),
                ("{kind=\"anonymous\"}".into(), anon as f64),
            ],
        );
    }
    gauge(
        "nodectl_passes_total",
        "Convergence passes since nodectld started.",
        &[(String::new(), st.daemon.passes as f64)],
    );
    if let Some(r) = &st.reboot {
        let states: Vec<(String, f64)> = crate::reboot::coordinator::STATES
            .iter()
            .map(|s| {
                (
                    format!("{{state=\"{s}\"}}"),
                    f64::from(u8::from(r.state == *s)),
                )
            })
            .collect();
        gauge(
            "nodectl_reboot_state",
            "This node's reboot state (1 for the current one; nodectl status shows the detail).",
            &states,
        );
        gauge(
            "nodectl_reboot_slots_held",
            "Holders of this node's reboot group, as last seen.",
            &[(String::new(), r.holders.len() as f64)],
        );
    }
    o
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// `system:node:<name>`.
    pub subject: String,
    /// RFC 3339, UTC.
    pub not_before: String,
    pub not_after: String,
    /// When nodectld renews it (jittered 70-90% of its lifetime).
    pub rotate_at: String,
    /// Seconds until expiry (negative: expired).
    pub expires_in_s: i64,
}

impl Credentials {
    /// The node's certificate as on disk, if any.
    pub fn read(root: &crate::root::Root) -> Option<Credentials> {
        let h = crate::credentials::read(root)?;
        let now = std::time::SystemTime::now();
        let secs = |t: std::time::SystemTime| match t.duration_since(now) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64),
        };
        Some(Credentials {
            subject: h.subject,
            not_before: rfc3339(h.validity.not_before),
            not_after: rfc3339(h.validity.not_after),
            rotate_at: rfc3339(h.rotate_at),
            expires_in_s: secs(h.validity.not_after),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub reason: String,
    /// Unix time, seconds.
    pub at: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Daemon {
    pub running: bool,
    /// `starting`, `converging`, `ready` or `stopping`; why it is not running otherwise.
    pub state: String,
    /// READY=1 was sent: the first pass is done or the agent waits on outside input.
    pub ready: bool,
    pub pid: Option<u32>,
    /// The sd_notify STATUS= line.
    pub status_line: String,
    pub passes: u64,
    pub last_pass: Option<Pass>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Pass {
    /// Unix time, seconds.
    pub finished_at: u64,
    pub duration_ms: u64,
    /// `startup`, `sighup`, `config-change`, `input-change`, `dbus`, `resync`.
    pub trigger: String,
    pub changes_applied: usize,
    pub failed_steps: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostStatus {
    #[serde(flatten)]
    pub host: Host,
    /// Whether labels are written, and why not when they are not.
    pub labels_applied: bool,
    pub labels_skipped_reason: Option<String>,
}

impl HostStatus {
    pub fn new(host: &Host, labeler: &nodectl_selinux::Labeler) -> Self {
        HostStatus {
            host: host.clone(),
            labels_applied: labeler.skipped().is_none(),
            labels_skipped_reason: labeler.skipped().map(|r| r.to_string()),
        }
    }
}

impl Status {
    /// Records kubelet's state; a failure is kept as the last one.
    pub fn set_kubelet(&mut self, st: nodectl_units::systemd::UnitState) {
        if let Some(reason) = st.failure() {
            self.kubelet_last_failure = Some(Failure {
                reason,
                at: now_secs(),
            });
        }
        self.kubelet = Some(st);
    }

    pub fn set_report(&mut self, report: &Report) {
        self.waiting_for = report.waiting_for();
        self.steps = report.steps.clone();
    }

    /// The one-line summary used for sd_notify STATUS=.
    pub fn summary(report: &Report) -> String {
        let failed = report.failed();
        if !failed.is_empty() {
            let ids: Vec<&str> = failed.iter().map(|s| s.id.as_str()).collect();
            return format!("failed: {}", ids.join(", "));
        }
        let waiting = report.waiting_for();
        if !waiting.is_empty() {
            return format!("waiting for {}", waiting.join("; "));
        }
        if report.all_done() {
            "node converged".into()
        } else {
            "converging".into()
        }
    }

    pub fn render(&self) -> String {
        let mut o = String::new();
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
        if let Some(r) = &self.reboot {
            let holders: Vec<String> = r
                .holders
                .iter()
                .map(|h| format!("{} ({})", h.node, h.id))
                .collect();
            let _ = writeln!(
                o,
                "    Reboots: {}{} (FleetLock on {}{})",
                r.state,
                if r.detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.detail)
                },
                r.endpoint,
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
        if !self.steps.is_empty() {
            o.push('\n');
            o.push_str(&render_steps(&self.steps));
        }
        o
    }
}

/// The step table: one line a step with its state and detail.
pub fn render_steps(steps: &[crate::engine::StepReport]) -> String {
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
pub fn render_plan(report: &Report, heading: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times_and_durations_for_people() {
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_796_000_000)),
            "2026-11-30T00:53:20Z"
        );
        assert_eq!(human_duration(72 * 3600 - 61), "71h 58m");
        assert_eq!(human_duration(725), "12m 5s");
        assert_eq!(human_duration(-182), "-3m 2s");
    }

    /// A certificate valid until 2026-12-03, renewed at 2026-12-02T09:00, 50 h left.
    fn credentials() -> Credentials {
        Credentials {
            subject: "system:node:w1".into(),
            not_before: "2026-11-30T00:00:00Z".into(),
            not_after: "2026-12-03T00:00:00Z".into(),
            rotate_at: "2026-12-02T09:00:00Z".into(),
            expires_in_s: 3600 * 50,
        }
    }

    #[test]
    fn status_shows_the_certificate_expiry_or_that_it_expired() {
        let mut st = Status {
            credentials: Some(credentials()),
            ..Status::default()
        };
        assert!(st.render().contains(
            "Credentials: system:node:w1 valid until 2026-12-03T00:00:00Z (in 50h 0m), renewal at 2026-12-02T09:00:00Z"
        ));
        st.credentials.as_mut().unwrap().expires_in_s = -90;
        assert!(st
            .render()
            .contains("Credentials: system:node:w1 EXPIRED at 2026-12-03T00:00:00Z (1m 30s ago)"));
    }

    #[test]
    fn the_node_line_shows_an_overriding_image() {
        let settings = crate::config::Settings::from_toml(
            "[node]\nrole = \"worker\"\n",
            &crate::host::Host::generic(),
            "w1",
        );
        let configured = settings.kubelet_image.clone();
        let mut st = Status {
            settings: Some(settings),
            kubelet_image: Some(configured.clone()),
            ..Status::default()
        };
        let line = |st: &Status| {
            st.render()
                .lines()
                .find(|l| l.trim_start().starts_with("Node:"))
                .unwrap()
                .to_string()
        };
        assert!(
            line(&st).contains(&format!("kubelet {configured} via")),
            "{}",
            line(&st)
        );
        st.kubelet_image = Some("registry.example/kubelet:fix".into());
        assert!(
            line(&st).contains(&format!(
                "kubelet registry.example/kubelet:fix (a drop-in overrides the configured {configured}) via"
            )),
            "{}",
            line(&st)
        );
    }

    #[test]
    fn metrics_carry_instants_and_one_reboot_state() {
        let st = Status {
            credentials: Some(credentials()),
            reboot: Some(crate::reboot::coordinator::RebootStatus {
                state: "draining".into(),
                ..Default::default()
            }),
            ..Status::default()
        };
        let m = metrics(&st);
        assert!(
            m.contains("\nnodectl_credentials_expiry_timestamp_seconds 1796256000\n"),
            "{m}"
        );
        assert!(
            m.contains("\nnodectl_credentials_rotation_timestamp_seconds 1796202000\n"),
            "{m}"
        );
        let states: Vec<&str> = m
            .lines()
            .filter(|l| l.starts_with("nodectl_reboot_state{"))
            .collect();
        assert_eq!(
            states.len(),
            crate::reboot::coordinator::STATES.len(),
            "{m}"
        );
        assert_eq!(
            states
                .iter()
                .filter(|l| l.ends_with(" 1"))
                .collect::<Vec<_>>(),
            [&"nodectl_reboot_state{state=\"draining\"} 1"]
        );
        // Every sample line belongs to a declared gauge.
        for l in m.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(m.contains(&format!("# TYPE {name} gauge\n")), "{l}");
        }
    }
}
