//! The reboot lock of a group as a counting semaphore (pure): up to `max` holders, each recorded
//! with the node it reboots and when it took the slot. Slots are held by node name, unique in
//! the cluster: the client id (derived from the machine-id, which cloned images share) only
//! authenticates a local request, so two nodes with one machine-id never share a slot. Recursive (a holder asking again keeps its
//! slot, as FleetLock requires: Zincati holds no state across crashes), owned (only the holder
//! releases), and self-healing: a slot whose holder stopped renewing it for longer than a limit
//! is reclaimed (whether the holder's Node still exists is not asked: a node may read only its
//! own Node object, and nodectl grants no more).
//!
//! Stored in a coordination.k8s.io/v1 Lease (see [`super::lease`]); this module only decides.

use serde::{Deserialize, Serialize};

/// One node holding a reboot slot of its group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The FleetLock client id (Zincati's app-specific machine id) or, on Flatcar, the node name.
    /// Left out of `nodectl status` (empty there), which every local user may read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The Kubernetes Node being rebooted.
    pub node: String,
    /// Unix seconds: when the slot was taken.
    pub since: u64,
    /// Unix seconds: when the holder last showed it is alive (pre-reboot again, nodectld start).
    pub renewed: u64,
    /// The holder's boot (`/proc/sys/kernel/random/boot_id`) when the slot was granted: a
    /// steady-state from that same boot does not release it (the reboot has not happened).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot: String,
}

/// A group's reboot slots as stored in its Lease.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slots {
    /// The current holders, in the order they took their slots.
    pub holders: Vec<Holder>,
    /// Holders reclaimed by this request: no longer counted, but their entries stay in the
    /// Lease (a node writes only its own entry there; see `lease`).
    #[serde(skip)]
    pub reclaimed: Vec<Holder>,
}

/// What asking for a slot gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// A new slot was taken.
    Obtained,
    /// The caller already held one (renewed).
    Retained,
    /// Every slot is held; by these nodes.
    Full {
        /// The nodes holding the slots.
        holders: Vec<String>,
    },
}

/// What giving a slot back did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// The node's slot was freed.
    Released,
    /// Nothing held by that node (idempotent success for FleetLock's steady-state).
    NotHeld,
}

impl Slots {
    /// True when `node` holds a slot.
    pub fn holds(&self, node: &str) -> bool {
        self.holders.iter().any(|h| h.node == node)
    }

    /// Takes (or renews) a slot for `node`, asked for by client `id` in boot `boot`.
    pub fn acquire(&mut self, id: &str, node: &str, boot: &str, now: u64, max: usize) -> Acquire {
        if let Some(h) = self.holders.iter_mut().find(|h| h.node == node) {
            h.renewed = now;
            h.id = id.to_string();
            h.boot = boot.to_string();
            return Acquire::Retained;
        }
        if self.holders.len() >= max.max(1) {
            return Acquire::Full {
                holders: self.holders.iter().map(|h| h.node.clone()).collect(),
            };
        }
        self.holders.push(Holder {
            id: id.to_string(),
            node: node.to_string(),
            since: now,
            renewed: now,
            boot: boot.to_string(),
        });
        Acquire::Obtained
    }

    /// Whether a steady-state from `node` in boot `boot` may give its slot back now: not while
    /// the slot was granted in this same boot less than `abandon_after` seconds ago (the reboot
    /// it was granted for has not happened; Zincati restarted, or someone else asks). After that
    /// the reboot counts as abandoned. `Err(seconds left)` when not.
    pub fn may_release(
        &self,
        node: &str,
        boot: &str,
        now: u64,
        abandon_after: u64,
    ) -> Result<(), u64> {
        match self.holders.iter().find(|h| h.node == node) {
            Some(h) if !h.boot.is_empty() && h.boot == boot => {
                let age = now.saturating_sub(h.since);
                if age < abandon_after {
                    Err(abandon_after - age)
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// Frees the slot held by `node`, if any.
    pub fn release(&mut self, node: &str) -> Release {
        let before = self.holders.len();
        self.holders.retain(|h| h.node != node);
        if self.holders.len() < before {
            Release::Released
        } else {
            Release::NotHeld
        }
    }

    /// Removes (from the count; the entries stay, see `lease`) and returns the slots whose
    /// holder's entry this node has seen unchanged for more than `stale_after` seconds of its
    /// own clock (`now`, monotonic, as `seen` counts it). The entries themselves are left as
    /// they were read: a node's write changes its own entry and nothing else.
    pub fn reclaim(
        &mut self,
        seen: &mut Sightings,
        now: u64,
        stale_after: u64,
    ) -> Vec<(Holder, String)> {
        seen.keep_only(&self.holders);
        let mut gone = Vec::new();
        self.holders.retain(|h| {
            let age = seen.age(h, now);
            if age > stale_after {
                gone.push((
                    h.clone(),
                    format!("its entry seen unchanged for {age} s (limit {stale_after} s)"),
                ));
                false
            } else {
                true
            }
        });
        self.reclaimed.extend(gone.iter().map(|(h, _)| h.clone()));
        gone
    }
}

/// When this node saw each holder's entry take its present value, by this node's own clock
/// (monotonic seconds), as client-go's leader election judges a leader (`observedTime`, set
/// when the record changes): the times in an entry are the holder's to write (the Lease policy
/// lets a node put any values in its own entry, and clocks differ), so they are never compared
/// with this clock. A future-dated or frozen entry ages like any other; a holder alive renews,
/// which changes its entry. A new nodectld starts counting at its first sight.
#[derive(Debug, Default)]
pub struct Sightings {
    seen: std::collections::BTreeMap<String, (Holder, u64)>,
}

impl Sightings {
    /// Seconds since `h` was first seen as it is now (0 at its first sight, and again after
    /// any change to it).
    pub fn age(&mut self, h: &Holder, now: u64) -> u64 {
        match self.seen.get(&h.node) {
            Some((was, at)) if was == h => now.saturating_sub(*at),
            _ => {
                self.seen.insert(h.node.clone(), (h.clone(), now));
                0
            }
        }
    }

    /// Forgets the holders no longer in the Lease (what is kept is bounded by one Lease).
    fn keep_only(&mut self, holders: &[Holder]) {
        self.seen
            .retain(|node, _| holders.iter().any(|h| &h.node == node));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semaphore_of_n_recursive_and_owned() {
        let mut s = Slots::default();
        assert_eq!(s.acquire("a", "n1", "boot-1", 10, 2), Acquire::Obtained);
        assert_eq!(s.acquire("a", "n1", "boot-1", 20, 2), Acquire::Retained);
        assert_eq!(s.holders[0].since, 10);
        assert_eq!(s.holders[0].renewed, 20);
        assert_eq!(s.acquire("b", "n2", "boot-1", 21, 2), Acquire::Obtained);
        assert_eq!(
            s.acquire("c", "n3", "boot-1", 22, 2),
            Acquire::Full {
                holders: vec!["n1".into(), "n2".into()]
            }
        );
        assert_eq!(s.release("n3"), Release::NotHeld);
        assert_eq!(s.release("n1"), Release::Released);
        assert_eq!(s.release("n1"), Release::NotHeld);
        assert_eq!(s.acquire("c", "n3", "boot-1", 23, 2), Acquire::Obtained);
        // max 0 is treated as 1: a group can always reboot someone.
        let mut one = Slots::default();
        assert_eq!(one.acquire("x", "n", "boot-1", 0, 0), Acquire::Obtained);
        assert!(matches!(
            one.acquire("y", "m", "boot-1", 0, 0),
            Acquire::Full { .. }
        ));
    }

    /// Cloned images share a machine-id, so two nodes ask with one client id: slots are held by
    /// node name, and the second node is refused (issue 14, item 4).
    #[test]
    fn two_nodes_with_one_machine_id_do_not_share_a_slot() {
        let mut s = Slots::default();
        assert_eq!(
            s.acquire("same-id", "node-a", "boot-1", 10, 1),
            Acquire::Obtained
        );
        assert_eq!(
            s.acquire("same-id", "node-b", "boot-1", 11, 1),
            Acquire::Full {
                holders: vec!["node-a".into()]
            }
        );
        assert!(s.holds("node-a") && !s.holds("node-b"));
        // Releasing as node-b frees nothing of node-a's.
        assert_eq!(s.release("node-b"), Release::NotHeld);
        assert!(s.holds("node-a"));
    }

    /// A holder is stale once this node has seen its entry unchanged for the limit, by this
    /// node's clock: not by the times the entry carries.
    #[test]
    fn stale_holders_are_reclaimed() {
        let mut s = Slots::default();
        s.acquire("a", "n1", "boot-1", 0, 3);
        s.acquire("b", "n2", "boot-1", 100, 3);
        s.acquire("c", "n3", "boot-1", 3000, 3);
        let mut seen = Sightings::default();
        // First sight at 10 (of this node's clock): however old the entries say they are,
        // none is stale yet.
        assert!(s.reclaim(&mut seen, 10, 3600).is_empty());
        // n2 renews (its entry changes) at 2000; n1 and n3 stay as they were.
        let mut later = s.clone();
        later.acquire("b", "n2", "boot-1", 99_999, 3);
        let out = later.reclaim(&mut seen, 2000, 3600);
        assert!(out.is_empty(), "{out:?}");
        let out = later.reclaim(&mut seen, 3611, 3600);
        let ids: Vec<&str> = out.iter().map(|(h, _)| h.id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        assert!(
            out[0].1.contains("seen unchanged for 3601 s"),
            "{}",
            out[0].1
        );
        assert_eq!(later.holders.len(), 1);
        assert!(later.holds("n2"));
        // The entries are left as they were read: only the count changed.
        assert_eq!(later.reclaimed[0], s.holders[0]);
    }

    /// A steady-state in the boot the slot was granted in keeps it until the reboot counts as
    /// abandoned; after the reboot (another boot) it releases at once (issue 14, item 3).
    #[test]
    fn a_slot_granted_in_this_boot_is_kept_until_the_reboot_or_its_abandonment() {
        let mut s = Slots::default();
        s.acquire("id", "n1", "boot-1", 100, 1);
        assert_eq!(s.may_release("n1", "boot-1", 100, 1800), Err(1800));
        assert_eq!(s.may_release("n1", "boot-1", 1000, 1800), Err(900));
        assert_eq!(s.may_release("n1", "boot-1", 1900, 1800), Ok(()));
        assert_eq!(s.may_release("n1", "boot-2", 101, 1800), Ok(()));
        assert_eq!(s.may_release("other", "boot-1", 101, 1800), Ok(()));
        // A record from before boots were kept releases as before.
        s.holders[0].boot.clear();
        assert_eq!(s.may_release("n1", "boot-1", 101, 1800), Ok(()));
    }

    /// Issue 51, 1: an entry dated in the future (a node writing what it likes in its own
    /// entry, or a clock ahead) or frozen ages as any other, and a holder's clock behind or
    /// ahead of this one's neither holds nor frees a slot: only this node's sightings count.
    /// (The clamp this replaces rewrote the other's entry, which the Lease policy refuses, so
    /// the slot never aged.)
    #[test]
    fn future_dated_frozen_or_skewed_entries_age_by_this_nodes_clock() {
        for (since, renewed) in [(u64::MAX, u64::MAX), (0, 0), (5_000_000_000, 5_000_000_000)] {
            let mut s = Slots::default();
            s.holders.push(Holder {
                id: "x".into(),
                node: "squatter".into(),
                since,
                renewed,
                boot: "b".into(),
            });
            let mut seen = Sightings::default();
            assert!(s.clone().reclaim(&mut seen, 50, 3600).is_empty());
            assert!(s.clone().reclaim(&mut seen, 3650, 3600).is_empty());
            let read = s.clone();
            let out = s.reclaim(&mut seen, 3651, 3600);
            assert_eq!(out.len(), 1, "since {since}: {out:?}");
            assert_eq!(s.reclaimed, read.holders, "the entry itself unchanged");
            assert_eq!(
                s.acquire("me", "me", "boot-1", 1, 1),
                Acquire::Obtained,
                "since {since}"
            );
        }
    }
}
