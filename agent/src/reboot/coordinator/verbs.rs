//! The operator's verbs on this node's reboots: `nodectl reboot hold` takes (or keeps) this
//! node's slot of its group for maintenance, so no other node of the group reboots meanwhile
//! and no update reboots this one; `nodectl reboot release` gives it back; `nodectl reboot now`
//! reboots through the same slot, drain and gates (with `--force`: only the slot and the drain).

use hyper::StatusCode;

use super::super::fleetlock::{ClientParams, Refusal};
use super::super::lease::LeaseLock;
use super::super::slots::{Acquire, Release, Slots};
use super::{internal, now, LeaseCoordinator, ReleaseError};

/// The longest maintenance reason kept (it is written in the Lease and shown to every reader).
const MAX_REASON: usize = 256;

/// Who asks for the reboot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Zincati, update_engine, `/run/reboot-required`: a maintenance hold stops it.
    Updater,
    /// `nodectl reboot now`: a maintenance hold of this node's becomes the reboot's slot.
    Operator {
        /// Pass by the windows, the gates, the settle time and the checks.
        force: bool,
    },
}

impl LeaseCoordinator {
    /// This node's id and group, as its own requests carry them.
    pub fn params(&self) -> ClientParams {
        ClientParams {
            id: self.node_id.clone(),
            group: self.policy.group.clone(),
        }
    }

    /// What a maintenance hold of this node's slot does to a reboot: an updater's waits
    /// (`423 held`), an operator's clears it and goes on with the slot.
    pub(super) async fn held_for_maintenance(
        &self,
        p: &ClientParams,
        lock: &LeaseLock,
        slots: Slots,
        ask: Ask,
    ) -> Result<Slots, Refusal> {
        let Some(reason) = slots.hold_of(&self.node).map(str::to_string) else {
            return Ok(slots);
        };
        if ask == Ask::Updater {
            let d = format!(
                "this node holds its slot of group {} for maintenance ({reason}): reboots wait for `nodectl reboot release`",
                p.group
            );
            self.set("held", d.clone(), &p.group, slots.holders);
            return Err(Refusal::new(StatusCode::LOCKED, "held", d));
        }
        let (_, slots) = lock
            .modify(|s| {
                // (the operator's reboot: the pre-reboot checks are the operator's call here,
                // as before the hold; `--force` passes by them anyway)
                s.set_checked(&self.node);
                s.set_hold(&self.node, "")
            })
            .await
            .map_err(internal)?;
        tracing::info!(group = %p.group, "the maintenance hold becomes the slot of an operator's reboot");
        Ok(slots)
    }

    /// `nodectl reboot hold`: takes (or keeps) this node's slot of its group, marked held for
    /// maintenance with `reason`. The windows and gates do not apply (the operator decides);
    /// every slot held by others refuses it.
    pub async fn hold(&self, reason: &str) -> Result<String, ReleaseError> {
        let reason: String = kubectl_nodectl::text::printable(reason.trim())
            .chars()
            .take(MAX_REASON)
            .collect();
        let reason = if reason.is_empty() {
            "maintenance".to_string()
        } else {
            reason
        };
        let p = self.params();
        let (client, _) = self.client().await.map_err(|r| ReleaseError(r.value))?;
        let lock = LeaseLock::new(client, &self.policy.namespace, &p.group);
        let (got, slots) = lock
            .modify(|s| {
                let got = s.acquire(&p.id, &self.node, &self.boot_id, now(), self.policy.slots);
                s.set_hold(&self.node, &reason);
                got
            })
            .await
            .map_err(|e| ReleaseError(e.to_string()))?;
        if let Acquire::Full { holders } = got {
            return Err(ReleaseError(format!(
                "every slot of group {} is held, by {}: no hold taken",
                p.group,
                holders.join(", ")
            )));
        }
        let d = format!("held for maintenance: {reason}");
        tracing::warn!(group = %p.group, "reboot slot of group {} {d} (nodectl reboot hold)", p.group);
        self.set("held", d.clone(), &p.group, slots.holders);
        Ok(format!(
            "this node holds its slot of group {}: {d}",
            p.group
        ))
    }

    /// Starts an operator's reboot (`run`, the follower's loop) unless one is under way: a
    /// forced one replaces one that waits unforced; a second of the same kind is refused.
    pub fn start_operator_reboot(
        &self,
        force: bool,
        run: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        let mut cur = self.operator_reboot.lock().expect("operator reboot");
        if let Some((task, forced)) = cur.as_ref().filter(|(t, _)| !t.is_finished()) {
            if *forced || !force {
                return Err(
                    "a reboot asked by an operator is already under way (nodectl status)".into(),
                );
            }
            task.abort();
        }
        *cur = Some((tokio::spawn(run), force));
        Ok(())
    }

    /// Ends an operator's reboot that has not rebooted yet (a hold, new settings); true when
    /// there was one.
    pub fn cancel_operator_reboot(&self) -> bool {
        match self.operator_reboot.lock().expect("operator reboot").take() {
            Some((task, _)) if !task.is_finished() => {
                task.abort();
                true
            }
            _ => false,
        }
    }

    /// At the start of the coordination: a maintenance hold of this node's in the Lease is
    /// its state (`held`: settings changes wait for it, `nodectl reboot release` finds it).
    pub async fn recover_hold(&self) {
        let p = self.params();
        let Ok((client, _)) = self.client().await else {
            return;
        };
        let lock = LeaseLock::new(client, &self.policy.namespace, &p.group);
        if let Ok(slots) = lock.read().await {
            if let Some(reason) = slots.hold_of(&self.node).map(str::to_string) {
                let d = format!("held for maintenance: {reason}");
                self.set("held", d, &p.group, slots.holders);
            }
        }
    }

    /// Whether an operator's reboot (not forced) waits for logind's shutdown inhibitors.
    pub fn waits_for_inhibitors(&self) -> bool {
        self.policy.wait_for_inhibitors
    }

    /// `nodectl reboot release`: gives back this node's maintenance hold (its slot).
    pub async fn release_hold(&self) -> Result<String, ReleaseError> {
        let p = self.params();
        let (client, drainer) = self.client().await.map_err(|r| ReleaseError(r.value))?;
        let lock = LeaseLock::new(client, &self.policy.namespace, &p.group);
        let (r, slots) = lock
            .modify(|s| {
                if s.hold_of(&self.node).is_some() {
                    s.release(&self.node)
                } else {
                    Release::NotHeld
                }
            })
            .await
            .map_err(|e| ReleaseError(e.to_string()))?;
        if r == Release::NotHeld {
            return Err(ReleaseError(format!(
                "this node holds no slot of group {} for maintenance",
                p.group
            )));
        }
        // (only a cordon nodectld made: one left by a reboot that met the hold)
        if let Err(e) = drainer.cordon(false).await {
            tracing::warn!("uncordoning after the maintenance hold: {e}");
        }
        tracing::warn!(group = %p.group, "maintenance hold released (nodectl reboot release)");
        self.set("idle", String::new(), &p.group, slots.holders);
        Ok(format!(
            "released the maintenance hold of group {}",
            p.group
        ))
    }
}
