//! The operator's checks around a reboot ([`super::super::commands`]): pre-reboot checks once
//! the slot is taken and before the drain (a failure gives the slot back and backs off:
//! doubling from `Policy::check_backoff`, at most an hour), post-reboot checks after the boot
//! before the release (a failure keeps the slot: the node is not back yet).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::super::commands::{self, Phase, RunCommand};
use super::super::fleetlock::{ClientParams, Refusal};
use super::super::gates::Blocked;
use super::super::lease::LeaseLock;
use super::super::slots::Slots;
use super::{internal, LeaseCoordinator};

/// The longest back-off after failed pre-reboot checks.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// What the checks of this coordinator know.
#[derive(Default)]
pub(super) struct CheckState {
    /// Runs a command as a transient unit (set by the daemon: systemd over D-Bus).
    pub(super) runner: Mutex<Option<RunCommand>>,
    /// One run of post-reboot checks at a time (Zincati may ask again while they run; the
    /// pre-reboot ones run under the coordinator's pre-reboot lock).
    running: tokio::sync::Mutex<()>,
    /// Pre-reboot checks failed this many times in a row; no new try before the instant.
    failures: Mutex<(u32, Option<Instant>)>,
}

impl LeaseCoordinator {
    /// Sets what runs the pre- and post-reboot commands.
    pub fn set_command_runner(&self, r: RunCommand) {
        *self.checks.runner.lock().expect("runner") = Some(r);
    }

    fn runner(&self) -> Result<RunCommand, Refusal> {
        self.checks
            .runner
            .lock()
            .expect("runner")
            .clone()
            .ok_or_else(|| internal("reboot checks are set, but nothing runs them here"))
    }

    /// While the last pre-reboot checks' back-off lasts: the refusal (no slot is asked for).
    pub(super) fn pre_backoff(&self) -> Option<Refusal> {
        let (n, until) = *self.checks.failures.lock().expect("failures");
        let left = until?.checked_duration_since(Instant::now())?;
        let mut r = Refusal::new(
            StatusCode::LOCKED,
            "pre_check_failed",
            format!(
                "the pre-reboot checks failed {n} time(s) in a row; next try in {} s",
                left.as_secs() + 1
            ),
        );
        r.retry_after = Some(left);
        Some(r)
    }

    /// Runs the pre-reboot checks for a slot just taken (nothing cordoned or drained yet); a
    /// failure gives the slot back and backs off.
    pub(super) async fn pre_checks(
        &self,
        p: &ClientParams,
        lock: &LeaseLock,
        slots: &Slots,
    ) -> Result<(), Refusal> {
        let checks = &self.policy.checks;
        if checks.pre.is_empty() {
            return Ok(());
        }
        let d = format!("running {} pre-reboot check(s)", checks.pre.len());
        self.set("checking", d, &p.group, slots.holders.clone());
        // (nothing to run them is a failure too: the slot is not kept unchecked)
        let ran = match self.runner() {
            Ok(r) => commands::run(&r, checks, Phase::PreReboot, &self.node, &p.group).await,
            Err(r) => Err(r.value),
        };
        let Err(e) = ran else {
            *self.checks.failures.lock().expect("failures") = (0, None);
            return Ok(());
        };
        // Nothing is drained yet: the slot goes back at once for another node to use.
        let holders = match lock.modify(|s| s.release(&self.node)).await {
            Ok((_, s)) => s.holders,
            Err(le) => {
                tracing::warn!("giving the slot back after failed pre-reboot checks: {le}");
                slots.holders.clone()
            }
        };
        let backoff = {
            let mut f = self.checks.failures.lock().expect("failures");
            f.0 += 1;
            let b = self
                .policy
                .check_backoff
                .saturating_mul(1 << (f.0 - 1).min(16))
                .min(MAX_BACKOFF);
            f.1 = Some(Instant::now() + b);
            b
        };
        let d = format!(
            "{e}; slot released, next try in {} s",
            backoff.as_secs().max(1)
        );
        let found = [Blocked {
            gate: "pre-reboot",
            detail: d.clone(),
        }];
        self.note_blocked(&p.group, &found, &d);
        self.set("blocked", d.clone(), &p.group, holders);
        let mut r = Refusal::new(StatusCode::LOCKED, "pre_check_failed", d);
        r.retry_after = Some(backoff);
        Err(r)
    }

    /// Runs the post-reboot checks (the node is back, kubelet active, the Node Ready); a
    /// failure keeps the slot (asked again at the next steady-state).
    pub(super) async fn post_checks(&self, p: &ClientParams, slots: &Slots) -> Result<(), Refusal> {
        let checks = &self.policy.checks;
        if checks.post.is_empty() {
            return Ok(());
        }
        let runner = self.runner()?;
        let _one = self.checks.running.lock().await;
        let ran = commands::run(&runner, checks, Phase::PostReboot, &self.node, &p.group).await;
        let Err(e) = ran else {
            return Ok(());
        };
        let d = format!("{e}; slot kept");
        let found = [Blocked {
            gate: "post-reboot",
            detail: d.clone(),
        }];
        self.note_blocked(&p.group, &found, &d);
        self.set(
            "waiting-for-ready",
            d.clone(),
            &p.group,
            slots.holders.clone(),
        );
        Err(Refusal::new(StatusCode::LOCKED, "post_check_failed", d))
    }
}
