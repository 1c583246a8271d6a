//! The Prometheus text exposition of a status, for node_exporter's textfile collector.

use std::fmt::Write as _;

use super::Status;

/// The Prometheus text exposition of a status (for node_exporter's textfile collector).
/// `memory`: nodectld's resident memory (all, anonymous), when known.
pub(crate) fn render(st: &Status, memory: Option<(u64, u64)>) -> String {
    let mut o = String::new();
    // (a `_total` is a counter, as Prometheus's naming rules have it: `promtool check metrics`
    // refuses the suffix on anything else; the rest are gauges)
    let mut gauge = |name: &str, help: &str, samples: &[(String, f64)]| {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(o, "{name}{labels} {v}");
        }
    };
    gauge(
        "nodectl_build_info",
        "nodectld's version (1; the version in the label).",
        &[(
            format!("{{version=\"{}\"}}", env!("CARGO_PKG_VERSION")),
            1.0,
        )],
    );
    steps(st, &mut gauge);
    audit_and_credentials(st, &mut gauge);
    daemon(st, memory, &mut gauge);
    reboot(st, &mut gauge);
    node_condition(st, &mut gauge);
    o
}

/// Each step's state in the last pass, one series per state (1 for the current one).
fn steps(st: &Status, gauge: &mut Gauge) {
    const STATES: [&str; 6] = [
        "converged",
        "pending",
        "applied",
        "waiting",
        "blocked",
        "failed",
    ];
    let samples: Vec<(String, f64)> = st
        .steps
        .iter()
        .flat_map(|s| {
            STATES.iter().map(move |state| {
                (
                    format!("{{step=\"{}\",state=\"{state}\"}}", s.id),
                    f64::from(u8::from(s.state.name() == *state)),
                )
            })
        })
        .collect();
    if !samples.is_empty() {
        gauge(
            "nodectl_step_state",
            "Each step's state in the last pass (1 for its state; nodectl status says why).",
            &samples,
        );
    }
}

fn node_condition(st: &Status, gauge: &mut Gauge) {
    let Some(c) = &st.node_condition else { return };
    if c.sent_at > 0 {
        let samples: Vec<(String, f64)> = ["True", "False", "Unknown"]
            .iter()
            .map(|s| {
                (
                    format!("{{status=\"{s}\"}}"),
                    f64::from(u8::from(c.condition.status == *s)),
                )
            })
            .collect();
        gauge(
            "nodectl_node_condition",
            "The NodectlReady condition last sent to this node's Node (1 for its status).",
            &samples,
        );
        gauge(
            "nodectl_node_condition_sent_timestamp_seconds",
            "When the NodectlReady condition was last sent (Unix time).",
            &[(String::new(), c.sent_at as f64)],
        );
    }
    gauge(
        "nodectl_node_condition_failing",
        "1 while the last attempt to send the NodectlReady condition failed (nodectl status says why).",
        &[(String::new(), f64::from(u8::from(c.error.is_some())))],
    );
}

/// A gauge's writer: name, help, samples (labels, value).
type Gauge<'a> = dyn FnMut(&str, &str, &[(String, f64)]) + 'a;

fn audit_and_credentials(st: &Status, gauge: &mut Gauge) {
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
}

fn daemon(st: &Status, memory: Option<(u64, u64)>, gauge: &mut Gauge) {
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
    if let Some((rss, anon)) = memory {
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
}

fn reboot(st: &Status, gauge: &mut Gauge) {
    if let Some(c) = st.coordination.as_ref().filter(|c| c.state != "waiting") {
        gauge(
            "nodectl_reboot_coordination_up",
            "Whether reboot coordination runs (1) or failed to start or ended (0; started again after a backoff, nodectl status says why).",
            &[(String::new(), f64::from(u8::from(!c.is_down())))],
        );
    }
    if let Some(z) = st.coordination.as_ref().and_then(|c| c.zincati.as_ref()) {
        gauge(
            "nodectl_reboot_zincati_coordinated",
            "Whether Zincati's configuration has it ask this nodectld before rebooting (0: it reboots without it, or cannot read its configuration; nodectl status names the fragment).",
            &[(String::new(), f64::from(u8::from(z.problem.is_none())))],
        );
    }
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
        gauge(
            "nodectl_reboot_drain_blocked_pods",
            "While draining: pods the drain waits for that a PodDisruptionBudget does not let go, or that no controller manages (nodectl status names them).",
            &[(String::new(), f64::from(r.drain_blocked))],
        );
    }
}
