//! The drain of a node holding its slot: cordon, evictions round by round within one request,
//! and what the node waits for, said (issue 65, 4): PodDisruptionBudgets are waited for unless
//! an operator set `reboot.drain_timeout_secs`, and pods no controller manages are left (and
//! waited for) unless `reboot.drain_force`, as `kubectl drain` without `--force`.

use std::time::Duration;

use hyper::StatusCode;

use super::{internal, now, LeaseCoordinator};
use crate::reboot::drain::{Drainer, Progress};
use crate::reboot::fleetlock::{ClientParams, Refusal};
use crate::reboot::gates::named;
use crate::reboot::slots::Slots;

impl LeaseCoordinator {
    /// Cordons and evicts; grants the reboot once drained, or (`reboot.drain_timeout_secs`
    /// set) once that long has passed since the slot was taken.
    pub(super) async fn drain(
        &self,
        p: &ClientParams,
        slots: Slots,
        drainer: &Drainer,
    ) -> Result<String, Refusal> {
        let since = slots
            .holders
            .iter()
            .find(|h| h.node == self.node)
            .map_or(now(), |h| h.since);
        drainer.cordon(true).await.map_err(internal)?;
        let deadline = std::time::Instant::now() + self.policy.drain_wait;
        let mut evicted = 0;
        let progress = loop {
            let pr = drainer
                .evict_round(self.policy.drain_force)
                .await
                .map_err(internal)?;
            evicted += pr.evicted.len();
            if pr.done() || std::time::Instant::now() >= deadline {
                break pr;
            }
            if pr.evicted.is_empty() && pr.terminating.is_empty() {
                // only pods a budget or an operator frees: asking again now changes nothing
                break pr;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        if progress.done() {
            let d = format!(
                "drained ({evicted} pods evicted, {} left alone)",
                progress.skipped
            );
            self.set("rebooting", d.clone(), &p.group, slots.holders);
            return Ok(format!("reboot granted: {d}"));
        }
        let waited = now().saturating_sub(since);
        let timeout = self.policy.drain_timeout.as_secs();
        if timeout > 0 && waited >= timeout {
            let mut left = progress.blocked.clone();
            left.extend(progress.terminating.iter().cloned());
            left.extend(progress.unmanaged.iter().cloned());
            let d = format!(
                "drain timeout ({timeout} s, reboot.drain_timeout_secs) reached, going ahead with {} pods left: {}",
                left.len(),
                left.join(", ")
            );
            tracing::warn!(group = %p.group, "{d}");
            self.set("rebooting", d.clone(), &p.group, slots.holders);
            return Ok(format!("reboot granted: {d}"));
        }
        let d = detail(&progress, waited, timeout);
        self.set("draining", d.clone(), &p.group, slots.holders);
        self.status.lock().expect("status").drain_blocked = progress.stuck() as u32;
        Err(Refusal::new(StatusCode::LOCKED, "draining", d))
    }
}

/// What a drain not done yet waits for, and until when (pure).
fn detail(pr: &Progress, waited: u64, timeout: u64) -> String {
    let mut parts = vec![format!("draining for {waited} s")];
    if !pr.terminating.is_empty() {
        parts.push(format!(
            "{} evicted pods shutting down: {}",
            pr.terminating.len(),
            named(&pr.terminating)
        ));
    }
    if !pr.blocked.is_empty() {
        parts.push(format!(
            "{} pods their PodDisruptionBudget does not let go yet: {}",
            pr.blocked.len(),
            named(&pr.blocked)
        ));
    }
    if !pr.unmanaged.is_empty() {
        parts.push(format!(
            "{} pods no controller manages, which kubectl drain leaves without --force: {} (delete them, or reboot.drain_force = true evicts them, lost for good)",
            pr.unmanaged.len(),
            named(&pr.unmanaged)
        ));
    }
    let until = if timeout == 0 {
        "the reboot waits until they are gone (reboot.drain_timeout_secs = 0: never forced)"
            .to_string()
    } else {
        format!(
            "the reboot is granted when they are gone or in {} s (reboot.drain_timeout_secs)",
            timeout.saturating_sub(waited)
        )
    };
    format!("{}; {until}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detail_names_what_the_drain_waits_for_and_until_when() {
        let pr = Progress {
            blocked: vec!["apps/db-0".into()],
            unmanaged: vec!["ops/debug".into()],
            ..Progress::default()
        };
        let d = detail(&pr, 42, 0);
        assert_eq!(
            d,
            "draining for 42 s; 1 pods their PodDisruptionBudget does not let go yet: apps/db-0; 1 pods no controller manages, which kubectl drain leaves without --force: ops/debug (delete them, or reboot.drain_force = true evicts them, lost for good); the reboot waits until they are gone (reboot.drain_timeout_secs = 0: never forced)"
        );
        assert_eq!(pr.stuck(), 2);
        let d = detail(&pr, 42, 600);
        assert!(
            d.ends_with(
                "the reboot is granted when they are gone or in 558 s (reboot.drain_timeout_secs)"
            ),
            "{d}"
        );
    }
}
