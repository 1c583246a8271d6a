//! What `nodectl status` shows, as one serializable value (the `--json` schema, documented in
//! docs/status.md) and as text for people.

pub mod condition;
pub mod events;
pub mod heartbeat;
pub mod metrics;
pub mod report;
mod text;

use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::engine::Report;
use crate::host::Host;
use crate::util::time::{now_secs, rfc3339};

pub(crate) use text::{render_plan, render_steps};

/// Bumped only on incompatible changes; fields may be added without a bump.
pub(crate) const SCHEMA_VERSION: u32 = 1;

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
    /// Whether reboot coordination runs (and, for FleetLock, whether Zincati asks it): none
    /// when `reboot.strategy` is off.
    #[serde(default)]
    pub coordination: Option<Coordination>,
    /// `nodectl audit`'s findings, summarised.
    pub audit: Option<AuditSummary>,
    /// The `NodectlReady` condition last sent to the node's Node, and when.
    #[serde(default)]
    pub node_condition: Option<condition::ConditionReport>,
}

/// Whether reboot coordination runs, and whether the updater asks it (issue 65: a coordinator
/// that failed to start, or Zincati pointed elsewhere, no longer looks like coordination off).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coordination {
    /// `reboot.strategy`.
    pub strategy: String,
    /// `up`: serving FleetLock or following the updater; `waiting`: for the node's own
    /// credentials; `failed`: did not start; `ended`: stopped after it started. A failed or
    /// ended coordination is started again after a backoff.
    pub state: String,
    /// Why it failed or ended.
    pub error: Option<String>,
    /// Failed starts and ends in a row (0 once it starts).
    pub failures: u32,
    /// Unix time of the next start (failed, ended).
    pub retry_at: Option<u64>,
    /// `fleet-lock`: whether Zincati's configuration points at this nodectld.
    pub zincati: Option<crate::reboot::zincati::ZincatiCheck>,
}

impl Coordination {
    /// Failed to start or ended: reboots wait (Zincati's requests stay unanswered, update_engine's
    /// reboots are not taken).
    pub fn is_down(&self) -> bool {
        matches!(self.state.as_str(), "failed" | "ended")
    }

    /// What is wrong with reboot coordination, in a sentence: down, or Zincati not asking it
    /// (no clock in it: the condition's message stays the same while the problem does).
    pub fn problem(&self) -> Option<String> {
        if self.is_down() {
            return Some(format!(
                "reboot coordination ({}) {}: {}",
                self.strategy,
                self.state,
                self.error.as_deref().unwrap_or("no reason given")
            ));
        }
        self.zincati.as_ref().and_then(|z| z.problem.clone())
    }
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
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// `system:node:<name>`.
    pub subject: String,
    /// RFC 3339, UTC.
    pub not_before: String,
    pub not_after: String,
    /// When nodectld renews it if kubelet has not (jittered 92-96% of its lifetime).
    pub rotate_at: String,
    /// Seconds until expiry (negative: expired).
    pub expires_in_s: i64,
}

impl Credentials {
    /// The same certificate (its expiry countdown aside).
    pub fn same_certificate(&self, other: &Credentials) -> bool {
        (&self.subject, &self.not_before, &self.not_after)
            == (&other.subject, &other.not_before, &other.not_after)
    }

    /// The node's certificate, as of `now`.
    pub fn of(h: &crate::credentials::Held, now: std::time::SystemTime) -> Credentials {
        let secs = |t: std::time::SystemTime| match t.duration_since(now) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64),
        };
        Credentials {
            subject: h.subject.clone(),
            not_before: rfc3339(h.validity.not_before),
            not_after: rfc3339(h.validity.not_after),
            rotate_at: rfc3339(h.rotate_at),
            expires_in_s: secs(h.validity.not_after),
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::time::human_duration;
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
        let m = metrics::render(&st, None);
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
        // Every sample line belongs to a declared metric: a `_total` a counter, the rest gauges
        // (the real `promtool check metrics` runs on a daemon's file: tier 1 `metrics_promtool`).
        for l in m.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            assert!(m.contains(&format!("# TYPE {name} {kind}\n")), "{l}");
        }
        assert!(
            m.contains(&format!(
                "\nnodectl_build_info{{version=\"{}\"}} 1\n",
                env!("CARGO_PKG_VERSION")
            )),
            "{m}"
        );
    }
}
