//! One pass and its publication: apply what was loaded, then the status (for GetStatus),
//! sd_notify's READY=1 and STATUS=, the metrics file.

use std::sync::Arc;
use std::time::Duration;

use nodectl_units::systemd::Systemd;
use sd_notify::NotifyState;

use super::shared::{Shared, State, Trigger};
use crate::config::Settings;
use crate::engine::{Cx, Engine, Report, StepState};
use crate::host::Host;
use crate::root::Root;
use crate::status::{AuditSummary, Credentials, HostStatus, Pass, Status};

/// What a pass runs with, for the daemon's life.
pub(super) struct Passes {
    pub(super) root: Root,
    pub(super) engine: Engine,
    pub(super) systemd: Systemd,
    pub(super) shared: Arc<Shared>,
}

/// Tells systemd (outside systemd there is no NOTIFY_SOCKET; sd_notify then does nothing).
pub(super) fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify");
    }
}

/// The file_contexts subsets a labeler opened, for the log.
pub(super) fn prefixes(opened: &[std::path::PathBuf]) -> String {
    let v: Vec<String> = opened.iter().map(|p| p.display().to_string()).collect();
    format!("subsets {}", v.join(", "))
}

fn applied(report: &Report) -> usize {
    report
        .steps
        .iter()
        .map(|s| match &s.state {
            StepState::Applied { changes } => changes.len(),
            _ => 0,
        })
        .sum()
}

impl Passes {
    /// One pass: apply what was loaded, publish the status. Returns when a step asked to be
    /// looked at again.
    pub(super) async fn run(
        &self,
        loaded: Result<(Host, Settings), crate::load::LoadError>,
        trigger: Trigger,
        passes: u64,
    ) -> Option<Duration> {
        self.shared.set_state(State::Converging).await;
        let (line, recheck) = match loaded {
            Err(e) => (self.publish_error(&e).await, None),
            Ok((host, settings)) => self.apply(host, settings, trigger, passes).await,
        };
        {
            let mut st = self.shared.status.lock().await;
            st.daemon.state = State::Ready.as_str().into();
            st.daemon.ready = true;
            st.daemon.passes = passes;
            st.daemon.status_line = line.clone();
        }
        self.shared.state_changed().await;
        crate::memory::release_freed();
        super::metrics::write(&self.root, &self.shared).await;
        self.shared.changed.notify_one();
        self.shared.passed.notify_one();
        notify(&[NotifyState::Ready, NotifyState::Status(&line)]);
        recheck
    }

    /// No valid settings: the status says why, and nothing is applied.
    async fn publish_error(&self, e: &crate::load::LoadError) -> String {
        let msg = e.to_string();
        tracing::error!("cannot load host or settings, waiting for a config change: {msg}");
        let host = crate::load::host(&self.root).ok().map(|h| {
            let l = nodectl_selinux::Labeler::new(self.root.dir(), &h.selinux);
            HostStatus::new(&h, &l)
        });
        let mut st = self.shared.status.lock().await;
        st.config_error = Some(msg.clone());
        st.settings = None;
        st.steps.clear();
        st.waiting_for.clear();
        st.host = host;
        format!("waiting for a valid config: {msg}")
    }

    async fn apply(
        &self,
        host: Host,
        settings: Settings,
        trigger: Trigger,
        passes: u64,
    ) -> (String, Option<Duration>) {
        let mut cx = Cx::new(self.root.clone(), host, settings, self.systemd.for_pass());
        cx.forced = trigger.forced();
        cx.activating = passes == 1;
        cx.facts = self.shared.facts.clone();
        cx.settled = self.shared.settled.clone();
        let wake = self.shared.wake.clone();
        cx.waker = Some(Arc::new(move || {
            let _ = wake.send(Trigger::Credentials);
        }));
        // A bundle read and checked on its thread from here, beside the bus questions below
        // (secrets is first in a pass: it waits for the read soon after the engine begins).
        self.engine.start_ahead(&cx);
        // kubelet-unit's question, on its way while the steps before it run.
        cx.systemd
            .ask_ahead(nodectl_units::kubelet::KUBELET_UNIT)
            .await;
        // kubelet-running's job signals, followed from now: the AddMatch (one bus round trip)
        // is answered while the steps before it run.
        cx.systemd
            .watch_jobs_ahead(nodectl_units::kubelet::KUBELET_UNIT)
            .await;
        let report = engine_apply(&self.engine, &cx).await;
        // (info: rare, once per policy version, and it costs a pass 50-160 ms under TCG)
        if let Some(t) = cx.labeler.opened_in() {
            tracing::info!(
                "file_contexts handle opened for a default label not cached yet ({:.1} ms; {})",
                t.as_secs_f64() * 1e3,
                prefixes(&cx.labeler.opened())
            );
        }
        let line = Status::summary(&report);
        let n = applied(&report);
        tracing::info!(
            trigger = trigger.name(),
            duration_ms = report.duration_ms,
            changes = n,
            status = %line,
            "pass finished ({}, {} ms, {n} changes): {line}",
            trigger.name(),
            report.duration_ms,
        );
        let recheck = cx.take_recheck();
        // The audit walks directories and checks signatures: only when what it reads may have
        // changed (or on the resync timer), not after a pass that a request's end woke.
        let reaudit = trigger.reaudits() || n > 0;
        self.publish(cx, &report, trigger, reaudit).await;
        (line, recheck)
    }

    /// The pass's report and what it observed, into the status.
    async fn publish(&self, cx: Cx, report: &Report, trigger: Trigger, reaudit: bool) {
        let calls = self.systemd.calls().ok();
        let kubelet = self
            .systemd
            .state(nodectl_units::kubelet::KUBELET_UNIT)
            .await
            .ok();
        let kubelet_image = crate::steps::running_image(&self.systemd).await;
        // File reads: done before the status is locked (GetStatus waits on that lock).
        let audit =
            reaudit.then(|| AuditSummary::of(&crate::audit::run_on(&self.root, &cx.settings)));
        let credentials = crate::credentials::read(&self.root)
            .map(|h| Credentials::of(&h, std::time::SystemTime::now()));
        let mut st = self.shared.status.lock().await;
        let new_certificate = match (&st.credentials, &credentials) {
            (Some(a), Some(b)) => !a.same_certificate(b),
            (None, Some(_)) => true,
            _ => false,
        };
        if new_certificate {
            // (the first pass's too: nodectld started) asked once, not on a timer
            self.shared.recheck_credentials.notify_one();
        }
        st.config_error = None;
        st.host = Some(HostStatus::new(&cx.host, &cx.labeler));
        if let Some(a) = audit {
            st.audit = Some(a);
        }
        st.settings = Some(cx.settings);
        st.set_report(report);
        st.systemd_calls = calls;
        st.credentials = credentials;
        st.kubelet_image = kubelet_image;
        if let Some(k) = kubelet {
            st.set_kubelet(k);
        }
        st.daemon.last_pass = Some(Pass {
            finished_at: crate::util::time::now_secs(),
            duration_ms: report.duration_ms,
            trigger: trigger.name().into(),
            changes_applied: applied(report),
            failed_steps: report.failed().iter().map(|s| s.id.clone()).collect(),
        });
    }
}

async fn engine_apply(engine: &Engine, cx: &Cx) -> Report {
    engine.apply_started(cx).await
}
