//! The coordinator's releases (FleetLock's steady-state, an operator's release) and what the
//! gates found, apart from taking the slot and draining (`super`).

use std::time::Duration;

use hyper::StatusCode;

use super::super::fleetlock::{ClientParams, Refusal};
use super::super::lease::LeaseLock;
use super::super::slots::Release;
use super::{internal, now, LeaseCoordinator, ReleaseError};

impl LeaseCoordinator {
    /// logind refused the reboot this node was granted: it stays `rebooting` (the slot held,
    /// the node drained and cordoned) with why in its detail, until logind takes it.
    pub fn note_reboot_refused(&self, why: &str) {
        let mut st = self.status.lock().expect("status");
        if st.state == "rebooting" {
            st.detail = why.to_string();
        }
    }

    /// Logs what the gates found when it changed (with its MESSAGE_ID: an Event on the Node),
    /// and when they open again.
    pub(super) fn note_blocked(
        &self,
        group: &str,
        found: &[super::super::gates::Blocked],
        detail: &str,
    ) {
        let mut last = self.blocked.lock().expect("blocked");
        if *last == detail {
            return;
        }
        *last = detail.to_string();
        drop(last);
        match found.first() {
            Some(b) => tracing::warn!(
                message_id = crate::logging::ids::REBOOT_BLOCKED,
                gate = b.gate,
                group = %group,
                "reboot of group {group} blocked: {detail}"
            ),
            None => tracing::info!(group = %group, "the reboot gates are open again"),
        }
    }

    /// An operator frees a slot of `group` held by `holder` (a client id or a node name).
    pub async fn release_slot(&self, group: &str, holder: &str) -> Result<String, ReleaseError> {
        if !crate::util::names::valid_group(group) {
            return Err(ReleaseError(format!(
                "group {group:?} must match ^[a-zA-Z0-9.-]+$"
            )));
        }
        let (client, _) = self.client().await.map_err(|r| ReleaseError(r.value))?;
        let lock = LeaseLock::new(client, &self.policy.namespace, group);
        let (freed, slots) = lock
            .modify(|s| {
                // By node name; by client id only when one node holds it (cloned images share
                // a machine-id, and with it the id: never free several nodes' slots at once).
                let by_node = s.holders.iter().position(|h| h.node == holder);
                let by_id: Vec<usize> = (0..s.holders.len())
                    .filter(|&i| s.holders[i].id == holder)
                    .collect();
                match (by_node, by_id.as_slice()) {
                    (Some(i), _) | (None, &[i]) => vec![s.holders.remove(i)],
                    _ => Vec::new(),
                }
            })
            .await
            .map_err(|e| {
                ReleaseError(format!(
                    "{e} (with the reboot-lease-policy a node frees only its own slot: an administrator removes another's entry with kubectl -n {} annotate lease <lease> {holder}{}-)",
                    self.policy.namespace,
                    super::super::lease::ENTRY_SUFFIX
                ))
            })?;
        let mut st = self.status.lock().expect("status");
        if st.group.as_deref() == Some(group) {
            st.holders = slots.holders;
        }
        match freed.first() {
            Some(h) => {
                tracing::warn!(group, holder = %h.id, node = %h.node, "reboot slot released by an operator");
                Ok(format!(
                    "released the slot of {} ({}) in group {group}",
                    h.id, h.node
                ))
            }
            None => Err(ReleaseError(format!(
                "no slot of group {group} is held by {holder:?} (a client id that several nodes share frees nothing: name the node)"
            ))),
        }
    }

    pub(super) async fn steady(&self, p: &ClientParams) -> Result<String, Refusal> {
        self.ours(p)?;
        let (client, drainer) = self.client().await?;
        let lock = LeaseLock::new(client, &self.policy.namespace, &p.group);
        let kubelet = (self.kubelet_active)().await;
        let ready = drainer.ready(&self.node).await.map_err(internal)? == Some(true);
        if !(kubelet && ready) {
            let d = format!(
                "waiting for kubelet active ({}) and Node {} Ready ({}) before releasing the slot",
                if kubelet { "yes" } else { "no" },
                self.node,
                if ready { "yes" } else { "no" }
            );
            let holders = lock.read().await.map(|s| s.holders).unwrap_or_default();
            self.set("waiting-for-ready", d.clone(), &p.group, holders);
            return Err(Refusal::new(StatusCode::LOCKED, "not_ready", d));
        }
        let held = lock.read().await.map_err(internal)?;
        if let Some(reason) = held.hold_of(&self.node) {
            // (a reboot during maintenance: the hold stays until `nodectl reboot release`; the
            // node back and Ready takes pods again, as after any reboot)
            drainer.cordon(false).await.map_err(internal)?;
            let d = format!("held for maintenance ({reason}): kept");
            self.set("held", d, &p.group, held.holders.clone());
            return Ok(format!(
                "this node holds its slot of group {} for maintenance: kept",
                p.group
            ));
        }
        let abandon = self.policy.abandon_after.as_secs();
        if let Err(left) = held.may_release(&self.node, &self.boot_id, now(), abandon) {
            let d = format!(
                "the slot was granted in this boot and the reboot has not happened: kept (it counts as abandoned in {left} s)"
            );
            return Err(Refusal::new(StatusCode::LOCKED, "reboot_pending", d));
        }
        if held.holds(&self.node) {
            self.post_checks(p, &held).await?;
        }
        drainer.cordon(false).await.map_err(internal)?;
        let settle = self.policy.settle.as_secs();
        let (r, slots) = match lock
            .modify(|s| s.release_settling(&self.node, now(), settle))
            .await
        {
            Ok(done) => done,
            // (the Lease's policy refuses a node outside a group's members anything but the
            // removal of its own entry: released without a settle entry, not kept held)
            Err(e) if settle > 0 => {
                tracing::warn!(
                    "the release with a settle entry was refused ({e}); released without it"
                );
                lock.modify(|s| s.release(&self.node))
                    .await
                    .map_err(internal)?
            }
            Err(e) => return Err(internal(e)),
        };
        if r == Release::Released && settle > 0 {
            self.tidy_release(&p.group);
        }
        self.set("idle", String::new(), &p.group, slots.holders);
        Ok(match r {
            Release::Released => format!("slot of group {} released; node uncordoned", p.group),
            Release::NotHeld => format!("no slot of group {} held", p.group),
        })
    }

    /// Removes this node's released entry from `group`'s Lease once the group has settled
    /// after it: in the time left by this node's wall clock, at most the entry's settle time (a
    /// clock stepped back cannot keep it), retrying a failed request every 30 s, 10 times.
    /// Started after a release and when the coordination starts (a nodectld restarted during
    /// the settle time lost its task).
    pub fn tidy_release(&self, group: &str) {
        let (connect, ns) = (self.connect.clone(), self.policy.namespace.clone());
        let (node, group) = (self.node.clone(), group.to_string());
        tokio::spawn(async move {
            for _ in 0..10 {
                let tidy = async {
                    let client = connect().await.map_err(|e| e.to_string())?;
                    let lock = LeaseLock::new(client, &ns, &group);
                    let slots = lock.read().await.map_err(|e| e.to_string())?;
                    let Some(r) = slots.released.iter().find(|r| r.node == node) else {
                        return Ok(());
                    };
                    let end = r.released.saturating_add(r.settle);
                    let left = end.saturating_sub(now()).min(r.settle).min(86_400);
                    tokio::time::sleep(Duration::from_secs(left)).await;
                    lock.modify(|s| s.forget_release(&node))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                };
                match tidy.await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::info!("removing this node's settled entry from the reboot Lease: {e}; again in 30 s");
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                }
            }
        });
    }
}
