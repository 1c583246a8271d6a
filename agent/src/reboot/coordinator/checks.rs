//! The operator's checks around a reboot ([`super::super::commands`]): pre-reboot checks once
//! the slot is held and before the drain, until their pass is recorded in the slot's entry (a
//! failure gives the slot back and backs off: doubling from `Policy::check_backoff`, at most
//! an hour; a slot that could not be given back is asked again before anything else),
//! post-reboot checks after the boot before the release (a failure keeps the slot: the node is
//! not back yet).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::super::commands::{self, Phase, RunCommand};
use super::super::fleetlock::{ClientParams, Refusal};
use super::super::gates::Blocked;
use super::super::lease::LeaseLock;
use super::super::slots::Slots;
use super::{internal, LeaseCoordinator};

/// How long a pre-reboot request waits for an earlier one of this node still under way before
/// it answers `in_progress`.
pub(super) const PRE_LOCK_WAIT: Duration = Duration::from_secs(5);

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
    /// After failed pre-reboot checks: how many in a row, and no new try before when.
    failures: Mutex<Failures>,
}

/// What failed pre-reboot checks left.
#[derive(Default)]
struct Failures {
    /// Failed this many times in a row.
    count: u32,
    /// No new try before this.
    until: Option<Instant>,
    /// The slot they were run for could not be given back: every request refuses until it
    /// is (issue 64: before, only a warning, and the next request drained on the kept slot).
    owe_release: bool,
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

    /// The answer to a pre-reboot request while an earlier one is still under way (its checks,
    /// its drain): what it is doing, from the status.
    pub(super) fn in_progress(&self) -> Refusal {
        let st = self.status.lock().expect("status").clone();
        Refusal::new(
            StatusCode::LOCKED,
            "in_progress",
            format!(
                "an earlier pre-reboot request of this node is still under way ({}: {}); ask again",
                st.state, st.detail
            ),
        )
    }

    /// While the last pre-reboot checks' back-off lasts: the refusal (no slot is asked for).
    pub(super) fn pre_backoff(&self) -> Option<Refusal> {
        let f = self.checks.failures.lock().expect("failures");
        let (n, until) = (f.count, f.until);
        drop(f);
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

    /// After failed checks whose slot could not be given back: gives it back now, or refuses
    /// (`pre_check_failed`) while it cannot.
    pub(super) async fn owed_release(
        &self,
        p: &ClientParams,
        lock: &LeaseLock,
        force: bool,
    ) -> Result<(), Refusal> {
        if force || !self.checks.failures.lock().expect("failures").owe_release {
            return Ok(());
        }
        match lock.modify(|s| s.release(&self.node)).await {
            Ok(_) => {
                tracing::info!(group = %p.group, "gave back the slot kept after failed pre-reboot checks");
                self.checks.failures.lock().expect("failures").owe_release = false;
                Ok(())
            }
            Err(e) => Err(Refusal::new(
                StatusCode::LOCKED,
                "pre_check_failed",
                format!(
                    "the pre-reboot checks failed and the slot could not be given back yet ({e}); no reboot until it is"
                ),
            )),
        }
    }

    /// Runs the pre-reboot checks for this node's slot and records their pass in its entry; a
    /// failure gives the slot back and backs off. The checks belong to the slot: they run
    /// while its entry does not record their pass, whether the slot was just taken or kept
    /// from a request that never finished them (given up, nodectld restarted, their failure's
    /// release refused). Nothing is cordoned before they pass, so a failure gives the slot back
    /// clean. A slot past them (e.g. across a restart mid-drain) goes on; so does a maintenance
    /// hold an operator's reboot took over (marked checked then: the operator's), and a forced
    /// reboot.
    pub(super) async fn pre_checks(
        &self,
        p: &ClientParams,
        lock: &LeaseLock,
        slots: Slots,
        force: bool,
    ) -> Result<Slots, Refusal> {
        let checks = &self.policy.checks;
        if checks.pre.is_empty() || force || !slots.unchecked(&self.node) {
            return Ok(slots);
        }
        let d = format!("running {} pre-reboot check(s)", checks.pre.len());
        self.set("checking", d, &p.group, slots.holders.clone());
        // (nothing to run them is a failure too: the slot is not kept unchecked)
        let ran = match self.runner() {
            Ok(r) => commands::run(&r, checks, Phase::PreReboot, &self.node, &p.group).await,
            Err(r) => Err(r.value),
        };
        let Err(e) = ran else {
            *self.checks.failures.lock().expect("failures") = Failures::default();
            // (not recorded: the slot stays unchecked, and the next request runs them again)
            let (_, slots) = lock
                .modify(|s| s.set_checked(&self.node))
                .await
                .map_err(|e| internal(format!("recording the pre-reboot checks' pass: {e}")))?;
            return Ok(slots);
        };
        // Nothing is drained yet: the slot goes back at once for another node to use.
        let (holders, kept) = match lock.modify(|s| s.release(&self.node)).await {
            Ok((_, s)) => (s.holders, false),
            Err(le) => {
                tracing::warn!("giving the slot back after failed pre-reboot checks: {le} (asked again before any other reboot of this node)");
                (slots.holders.clone(), true)
            }
        };
        let backoff = {
            let mut f = self.checks.failures.lock().expect("failures");
            f.count += 1;
            f.owe_release = kept;
            let b = self
                .policy
                .check_backoff
                .saturating_mul(1 << (f.count - 1).min(16))
                .min(MAX_BACKOFF);
            f.until = Some(Instant::now() + b);
            b
        };
        let d = format!(
            "{e}; {}, next try in {} s",
            if kept {
                "the slot could not be given back yet"
            } else {
                "slot released"
            },
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
