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
    /// Held for maintenance (`nodectl reboot hold`), with the operator's reason: no reboot
    /// goes ahead on it but an operator's, steady-state keeps it, and it is never reclaimed as
    /// stale (only `nodectl reboot release` or an administrator frees it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hold: String,
    /// This slot's pre-reboot checks passed (written by the holder once they did; a new slot
    /// starts without it). A slot held without it, whatever left it so (a request given up
    /// mid-check, nodectld restarted, a release after failed checks that failed), runs the
    /// checks before any drain (issue 64).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checked: bool,
}

/// A node's entry after it gave its slot back, kept while the group settles
/// (`reboot.settle_secs`): the next slot of the group is granted only once every node asking
/// has seen it for that long (by its own clock), so the settle time holds across nodes and
/// across a nodectld restart. The node removes its own entry once its group has settled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The node that gave its slot back.
    pub node: String,
    /// Unix seconds, by the releasing node's clock (shown; never compared with another clock).
    pub released: u64,
    /// Seconds the group settles after this release (the releasing node's `settle_secs`).
    pub settle: u64,
}

/// A group's reboot slots as stored in its Lease.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slots {
    /// The current holders, in the order they took their slots.
    pub holders: Vec<Holder>,
    /// Recent releases the group settles after (at most one per node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<Released>,
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
    /// A slot is free, but the group settles after a release: no slot before `left` seconds.
    Settling {
        /// The node whose release the group settles after.
        after: String,
        /// Seconds left, by this node's clock.
        left: u64,
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
        self.released.retain(|r| r.node != node);
        self.holders.push(Holder {
            id: id.to_string(),
            node: node.to_string(),
            since: now,
            renewed: now,
            boot: boot.to_string(),
            hold: String::new(),
            checked: false,
        });
        Acquire::Obtained
    }

    /// The maintenance hold of `node`'s slot (`None`: it holds none, or not for maintenance).
    pub fn hold_of(&self, node: &str) -> Option<&str> {
        self.holders
            .iter()
            .find(|h| h.node == node && !h.hold.is_empty())
            .map(|h| h.hold.as_str())
    }

    /// Sets (a reason) or clears (`""`) the maintenance hold of `node`'s slot; false when it
    /// holds none.
    pub fn set_hold(&mut self, node: &str, reason: &str) -> bool {
        self.holder_mut(node)
            .map(|h| h.hold = reason.to_string())
            .is_some()
    }

    /// `node`'s entry among the holders.
    fn holder_mut(&mut self, node: &str) -> Option<&mut Holder> {
        self.holders.iter_mut().find(|h| h.node == node)
    }

    /// Marks the pre-reboot checks of `node`'s slot passed; false when it holds none.
    pub fn set_checked(&mut self, node: &str) -> bool {
        self.holder_mut(node).map(|h| h.checked = true).is_some()
    }

    /// Whether `node` holds a slot whose pre-reboot checks have not passed.
    pub fn unchecked(&self, node: &str) -> bool {
        self.holders.iter().any(|h| h.node == node && !h.checked)
    }

    /// Whether the group still settles after a release: the longest wait left, by this node's
    /// sightings of the released entries (`mono`, monotonic seconds). Each release waits the
    /// smaller of the settle time it carries and this node's own (`own_settle`,
    /// `reboot.settle_secs`: set it alike across a group), at most a day, from when this node
    /// first saw it: a future-dated or skewed entry cannot make the wait longer, and a rewrite
    /// of the entry does not start it again (issue 64: a node that rewrote its entry every
    /// minute kept its group waiting for good); a node's later release, once its entry was gone
    /// and came back, counts anew. An entry older than its wait by this node's wall clock
    /// (`wall`, give or take [`CLOCK_SKEW`]) has settled, e.g. one a deleted node left behind,
    /// which would otherwise delay the group at each nodectld start. Whole seconds of a
    /// monotonic clock undercount by up to one: a release counts as settled only once more
    /// than its wait was seen.
    pub fn settling(
        &self,
        seen: &mut Sightings,
        (mono, wall): (u64, u64),
        own_settle: u64,
    ) -> Option<(String, u64)> {
        seen.keep_released(&self.released);
        self.released
            .iter()
            .filter_map(|r| {
                let wait = r.settle.min(own_settle).min(MAX_SETTLE);
                if wait == 0 || r.released.saturating_add(wait + CLOCK_SKEW) < wall {
                    return None;
                }
                let age = seen.released_age(&r.node, mono);
                (age <= wait).then(|| (r.node.clone(), wait + 1 - age))
            })
            .max_by_key(|(_, left)| *left)
    }

    /// Takes or renews the slot of `node` as [`Slots::acquire`] does, unless the group still
    /// settles ([`Slots::settling`]): then nothing changes. A holder keeps its slot either way.
    pub fn acquire_settled(
        &mut self,
        (id, node, boot): (&str, &str, &str),
        now: u64,
        max: usize,
        seen: &mut Sightings,
        mono: u64,
        own_settle: u64,
    ) -> Acquire {
        if !self.holds(node) && self.holders.len() < max.max(1) {
            if let Some((after, left)) = self.settling(seen, (mono, now), own_settle) {
                return Acquire::Settling { after, left };
            }
        }
        self.acquire(id, node, boot, now, max)
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

    /// Frees the slot held by `node`, if any (no settle time after it).
    pub fn release(&mut self, node: &str) -> Release {
        self.release_settling(node, 0, 0)
    }

    /// Frees the slot held by `node`, if any; with `settle` > 0 its entry becomes a
    /// [`Released`] one (at `now`, its clock) the group settles after.
    pub fn release_settling(&mut self, node: &str, now: u64, settle: u64) -> Release {
        let before = self.holders.len();
        self.holders.retain(|h| h.node != node);
        if self.holders.len() == before {
            return Release::NotHeld;
        }
        if settle > 0 {
            self.released.retain(|r| r.node != node);
            self.released.push(Released {
                node: node.into(),
                released: now,
                settle,
            });
        }
        Release::Released
    }

    /// Removes `node`'s own released entry (its group has settled); true when there was one.
    pub fn forget_release(&mut self, node: &str) -> bool {
        let before = self.released.len();
        self.released.retain(|r| r.node != node);
        self.released.len() < before
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
            if age > stale_after && h.hold.is_empty() {
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
    released: std::collections::BTreeMap<String, u64>,
}

/// The longest settle time honoured (a day: what `reboot.settle_secs` takes), whatever an entry
/// says.
const MAX_SETTLE: u64 = 86_400;

/// How far apart two nodes' clocks may be for a released entry's own time to count: an entry
/// older than its wait and this by this node's clock has settled.
pub const CLOCK_SKEW: u64 = 300;

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

    /// Seconds since `node`'s released entry was first seen, whatever it says now (a rewrite
    /// does not start the count again).
    fn released_age(&mut self, node: &str, now: u64) -> u64 {
        match self.released.get(node) {
            Some(at) => now.saturating_sub(*at),
            None => {
                self.released.insert(node.to_string(), now);
                0
            }
        }
    }

    fn keep_released(&mut self, released: &[Released]) {
        self.released
            .retain(|node, _| released.iter().any(|r| &r.node == node));
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

    /// Issue 41: a slot held for maintenance is never reclaimed as stale, keeps its hold when
    /// renewed, and its hold is cleared without freeing it.
    #[test]
    fn a_maintenance_hold_is_never_reclaimed() {
        let mut s = Slots::default();
        s.acquire("a", "n1", "b1", 0, 2);
        assert!(s.set_hold("n1", "disk swap"));
        assert!(!s.set_hold("n2", "x"));
        s.acquire("b", "n2", "b1", 0, 2);
        let mut seen = Sightings::default();
        s.reclaim(&mut seen, 0, 60);
        let out = s.reclaim(&mut seen, 61, 60);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.node, "n2");
        assert_eq!(s.acquire("a", "n1", "b2", 70, 2), Acquire::Retained);
        assert_eq!(s.hold_of("n1"), Some("disk swap"));
        assert!(s.set_hold("n1", ""));
        assert_eq!(s.hold_of("n1"), None);
        assert!(s.holds("n1"));
    }

    /// Issue 41: after a release with a settle time no slot is granted until this node has
    /// seen the released entry for more than that long (the smaller of the entry's settle time
    /// and this node's, at most a day); a node taking a slot again replaces its own released
    /// entry, which it may remove.
    #[test]
    fn the_group_settles_after_a_release_by_this_nodes_clock() {
        let mut s = Slots::default();
        s.acquire("a", "n1", "b1", 1000, 1);
        assert_eq!(s.release_settling("n1", 2000, 20), Release::Released);
        assert_eq!(s.released.len(), 1);
        let mut seen = Sightings::default();
        let me = ("b", "n2", "b1");
        let settling = |left| Acquire::Settling {
            after: "n1".into(),
            left,
        };
        // First seen at 100 (whole seconds): settled only once more than 20 s were seen.
        assert_eq!(
            s.acquire_settled(me, 2001, 1, &mut seen, 100, 20),
            settling(21)
        );
        assert_eq!(
            s.acquire_settled(me, 2016, 1, &mut seen, 115, 20),
            settling(6)
        );
        assert_eq!(
            s.acquire_settled(me, 2021, 1, &mut seen, 120, 20),
            settling(1)
        );
        assert_eq!(
            s.acquire_settled(me, 2022, 1, &mut seen, 121, 20),
            Acquire::Obtained
        );
        // A node retaking its slot after its own release replaces its released entry.
        let mut t = Slots::default();
        t.acquire("a", "n1", "b1", 1000, 1);
        t.release_settling("n1", 2000, 20);
        let mut seen = Sightings::default();
        t.settling(&mut seen, (0, 2000), 20);
        assert_eq!(
            t.acquire_settled(("a", "n1", "b1"), 2100, 1, &mut seen, 30, 20),
            Acquire::Obtained
        );
        assert!(t.released.is_empty());
        // Without a settle time a release leaves nothing; an entry is forgotten once settled.
        let mut u = Slots::default();
        u.acquire("a", "n1", "b1", 1000, 1);
        u.release("n1");
        assert!(u.released.is_empty());
        s.release_settling("n2", 3000, 20);
        assert!(s.forget_release("n2"));
        assert!(!s.forget_release("n2"));
        // An entry claiming a week's settle waits a day at most, and no longer than this
        // node's own settle time; a node without one does not wait.
        s.released = vec![Released {
            node: "x".into(),
            released: 10_000,
            settle: u64::MAX,
        }];
        let mut seen = Sightings::default();
        assert_eq!(
            s.settling(&mut seen, (7, 10_000), u64::MAX),
            Some(("x".into(), 86_401))
        );
        let mut seen = Sightings::default();
        assert_eq!(
            s.settling(&mut seen, (7, 10_000), 60),
            Some(("x".into(), 61))
        );
        assert_eq!(s.settling(&mut Sightings::default(), (7, 10_000), 0), None);
    }

    /// Issue 64: a node cannot keep its group settling by rewriting its released entry (its
    /// Lease entry is its own to write): the wait counts from this node's first sight of the
    /// entry, whatever it says later. An entry that goes away and comes back is a new release.
    /// One older than its wait by this node's clock (a deleted node's) has settled, also at a
    /// new nodectld's first sight.
    #[test]
    fn rewritten_or_leftover_settle_entries_do_not_hold_a_group() {
        let mut s = Slots::default();
        let mut seen = Sightings::default();
        let entry = |released, settle| Released {
            node: "bad".into(),
            released,
            settle,
        };
        s.released = vec![entry(1_000, 600)];
        assert_eq!(
            s.settling(&mut seen, (0, 1_000), 600),
            Some(("bad".into(), 601))
        );
        // Rewritten every minute with a fresh time and a day's settle: the count goes on.
        for minute in 1..=10u64 {
            s.released = vec![entry(1_000 + minute * 60, 86_400 + minute)];
            assert_eq!(
                s.settling(&mut seen, (minute * 60, 1_000 + minute * 60), 600),
                Some(("bad".into(), 601 - minute * 60))
            );
        }
        s.released = vec![entry(1_660, 86_400)];
        assert_eq!(s.settling(&mut seen, (601, 1_601), 600), None);
        let me = ("a", "good", "b1");
        assert_eq!(
            s.acquire_settled(me, 1_601, 1, &mut seen, 601, 600),
            Acquire::Obtained
        );
        // Gone (the node took a slot again, or removed it), then back: a new release.
        let mut t = Slots {
            released: vec![entry(5_000, 600)],
            ..Slots::default()
        };
        let mut seen = Sightings::default();
        assert!(t.settling(&mut seen, (0, 5_000), 600).is_some());
        t.released.clear();
        assert_eq!(t.settling(&mut seen, (700, 5_700), 600), None);
        t.released = vec![entry(5_700, 600)];
        assert_eq!(
            t.settling(&mut seen, (701, 5_701), 600),
            Some(("bad".into(), 601))
        );
        // Left by a node long gone: settled at first sight, by this node's wall clock (an
        // entry within the clocks' skew still counts).
        let old = |released| Slots {
            released: vec![entry(released, 600)],
            ..Slots::default()
        };
        let now = 1_000_000;
        assert_eq!(
            old(now - 600 - CLOCK_SKEW - 1).settling(&mut Sightings::default(), (5, now), 600),
            None
        );
        assert!(old(now - 600 - CLOCK_SKEW + 1)
            .settling(&mut Sightings::default(), (5, now), 600)
            .is_some());
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
                hold: String::new(),
                checked: false,
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
