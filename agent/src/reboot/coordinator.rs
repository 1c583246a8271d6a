//! FleetLock decisions for this node, with the group's slots in a Lease ([`super::lease`]) and
//! the drain through the API ([`super::drain`]):
//!
//! - pre-reboot: reclaim slots of stale holders (logged), take a slot, cordon, evict;
//!   grant (200) only once the node is drained, or once the drain timeout since the slot was
//!   taken has passed (the answer and the status say which); otherwise 423 `draining` and
//!   Zincati asks again;
//! - steady-state: release only when kubelet is active and the Node is Ready (else 423
//!   `not_ready`, slot kept), and not in the boot the slot was granted in unless the grant is
//!   older than `abandon_after` (else 423 `reboot_pending`); uncordon first (only a cordon
//!   nodectld made).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};

use super::drain::Drainer;
use super::fleetlock::{ClientParams, Coordinator, Refusal};
use super::lease::LeaseLock;
use super::slots::{Acquire, Holder, Sightings, Slots};
pub(crate) use super::zincati::zincati_id;
use crate::kubeconfig::KubeconfigError;

mod checks;
use checks::PRE_LOCK_WAIT;
mod draining;
mod release;
mod verbs;
pub use verbs::Ask;

/// How this node's reboots are coordinated with the rest of its group.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The namespace of the reboot Leases.
    pub namespace: String,
    /// Concurrent reboots per group.
    pub slots: usize,
    /// A holder that has not renewed its slot for this long is reclaimed.
    pub stale_after: Duration,
    /// Grant the reboot anyway this long after the slot was taken, drained or not (zero:
    /// never).
    pub drain_timeout: Duration,
    /// Evict pods no controller manages (`kubectl drain --force`).
    pub drain_force: bool,
    /// How long one pre-reboot request waits for evicted pods to go.
    pub drain_wait: Duration,
    /// New slots are taken only inside these (none: any time), in `time_zone`.
    pub windows: Vec<crate::util::window::Window>,
    /// The time zone the windows are read in (default UTC).
    pub time_zone: crate::util::window::Zone,
    /// The only group served (`reboot.group`): a client cannot create Leases at will.
    pub group: String,
    /// A slot granted in this boot is given back by a steady-state of the same boot only this
    /// long after the grant (the reboot counts as abandoned then).
    pub abandon_after: Duration,
    /// What must hold before a new slot is taken (`reboot.block_on_pods`, the alerts).
    pub gates: super::gates::Gates,
    /// How long the group settles after a release before its next slot is granted; this
    /// node's release carries it in the Lease.
    pub settle: Duration,
    /// The operator's commands before the drain and after the reboot.
    pub checks: super::commands::Checks,
    /// After failed pre-reboot checks, no new try for this long (doubling, at most an hour).
    pub check_backoff: Duration,
    /// `reboot.wait_for_inhibitors`: an operator's reboot (not forced) waits for logind's
    /// shutdown inhibitors as an update's does.
    pub wait_for_inhibitors: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            namespace: "nodectl-reboot".into(),
            slots: 1,
            stale_after: Duration::from_secs(3600),
            drain_timeout: Duration::ZERO,
            drain_force: false,
            drain_wait: Duration::from_secs(30),
            windows: Vec::new(),
            time_zone: crate::util::window::Zone::utc(),
            group: "default".into(),
            abandon_after: Duration::from_secs(1800),
            gates: super::gates::Gates::default(),
            settle: Duration::ZERO,
            checks: super::commands::Checks::default(),
            check_backoff: Duration::from_secs(60),
            wait_for_inhibitors: false,
        }
    }
}

/// What `nodectl status` shows about reboots.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootStatus {
    /// Where the FleetLock endpoint listens (the client id it answers to is not shown: every
    /// local user may read the status).
    pub endpoint: String,
    /// One of [`STATES`].
    pub state: String,
    /// What the state means now, e.g. who holds the slots or which pods are left to drain.
    pub detail: String,
    /// The FleetLock group of the last request (`None` before the first one).
    pub group: Option<String>,
    /// The group's holders as last seen.
    pub holders: Vec<Holder>,
    /// While draining: the pods the drain waits for that only a PodDisruptionBudget or an
    /// operator frees (refused evictions, pods no controller manages).
    #[serde(default)]
    pub drain_blocked: u32,
}

/// Every reboot state, in the order a reboot goes through them.
pub(crate) const STATES: &[&str] = &[
    "idle",
    "waiting-for-window",
    "blocked",
    "waiting-for-slot",
    "settling",
    "held",
    "checking",
    "draining",
    "rebooting",
    "waiting-for-ready",
];

/// The states in which this node holds no slot (the coordination may restart on new settings).
pub(crate) const HOLDING_NOTHING: &[&str] = &[
    "idle",
    "waiting-for-window",
    "blocked",
    "waiting-for-slot",
    "settling",
];

/// Why an operator's release was refused (the group, the holder or the API).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReleaseError(String);

/// Told the new reboot state after each change.
pub(crate) type OnChange = Arc<dyn Fn(&str) + Send + Sync>;

/// Is kubelet.service active (asked of systemd).
pub(crate) type KubeletActive = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;
/// A client with the node's current credentials (made per request: they rotate).
pub(crate) type Connector =
    Arc<dyn Fn() -> BoxFuture<'static, Result<kube::Client, KubeconfigError>> + Send + Sync>;

/// The FleetLock [`Coordinator`] of this node: slots in a Lease, drain through the API.
pub struct LeaseCoordinator {
    connect: Connector,
    node: String,
    /// The FleetLock id this node answers to (Zincati's app-specific machine id).
    node_id: String,
    policy: Policy,
    kubelet_active: KubeletActive,
    /// This boot (`/proc/sys/kernel/random/boot_id`), recorded with a grant.
    boot_id: String,
    status: Mutex<RebootStatus>,
    /// Called after the state changed (the daemon rewrites its metrics).
    on_change: Mutex<Option<OnChange>>,
    /// When this node saw each holder's entry of its group change, by `clock` (staleness).
    seen: Mutex<Sightings>,
    clock: std::time::Instant,
    /// What the gates last found (logged, with its MESSAGE_ID, when it changes).
    blocked: Mutex<String>,
    /// The pre- and post-reboot checks' runner and what they know.
    checks: checks::CheckState,
    /// One pre-reboot at a time.
    pre_lock: tokio::sync::Mutex<()>,
    /// An operator's reboot (`nodectl reboot now`) under way, and whether it is forced.
    pub(crate) operator_reboot: Mutex<Option<(tokio::task::JoinHandle<()>, bool)>>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

fn internal(e: impl std::fmt::Display) -> Refusal {
    Refusal::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        e.to_string(),
    )
}

impl LeaseCoordinator {
    /// A coordinator for `node`, answering to the FleetLock id `node_id`; idle until asked.
    pub fn new(
        connect: Connector,
        node: &str,
        node_id: &str,
        policy: Policy,
        kubelet_active: KubeletActive,
    ) -> Self {
        LeaseCoordinator {
            connect,
            node: node.into(),
            node_id: node_id.into(),
            policy,
            kubelet_active,
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            status: Mutex::new(RebootStatus {
                state: "idle".into(),
                ..Default::default()
            }),
            on_change: Mutex::new(None),
            seen: Mutex::default(),
            clock: std::time::Instant::now(),
            blocked: Mutex::default(),
            checks: checks::CheckState::default(),
            pre_lock: Default::default(),
            operator_reboot: Default::default(),
        }
    }

    /// As if running in boot `boot_id` (tests: a reboot without rebooting).
    pub fn with_boot_id(mut self, boot_id: &str) -> Self {
        self.boot_id = boot_id.into();
        self
    }

    /// Calls `f` with the new state after every change of state.
    pub fn set_on_change(&self, f: OnChange) {
        *self.on_change.lock().expect("on_change") = Some(f);
    }

    /// Records where the endpoint listens (for status).
    pub fn set_endpoint(&self, endpoint: &str) {
        self.status.lock().expect("status").endpoint = endpoint.into();
    }

    async fn client(&self) -> Result<(kube::Client, Drainer), Refusal> {
        let c = (self.connect)().await.map_err(internal)?;
        Ok((c.clone(), Drainer::new(c, &self.node)))
    }

    /// The reboot state as `nodectl status` shows it.
    pub fn status(&self) -> RebootStatus {
        let mut st = self.status.lock().expect("status").clone();
        // Client ids stay out of what every local user may read.
        for h in &mut st.holders {
            h.id.clear();
        }
        st
    }

    fn set(&self, state: &str, detail: String, group: &str, holders: Vec<Holder>) {
        debug_assert!(STATES.contains(&state), "{state}");
        let mut st = self.status.lock().expect("status");
        let changed = st.state != state;
        let drained_from = (changed && state == "draining").then(|| detail.clone());
        st.state = state.into();
        st.detail = detail;
        st.drain_blocked = 0;
        st.group = Some(group.into());
        st.holders = holders;
        drop(st);
        if let Some(detail) = drained_from {
            super::log_draining(group, &detail);
        }
        if changed {
            if let Some(f) = self.on_change.lock().expect("on_change").clone() {
                f(state);
            }
        }
    }

    fn ours(&self, p: &ClientParams) -> Result<(), Refusal> {
        if p.id != self.node_id {
            // (the id asked with is not quoted back: the answer is no oracle for this node's)
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "wrong_node",
                format!(
                    "the id is not this node's ({}); point each node's Zincati at its own nodectld",
                    self.node
                ),
            ));
        }
        if p.group != self.policy.group {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "group_not_served",
                format!(
                    "group {:?} is not served here: this node reboots in group {:?} (reboot.group; Zincati's [identity] group must match)",
                    p.group, self.policy.group
                ),
            ));
        }
        Ok(())
    }

    async fn pre(&self, p: &ClientParams) -> Result<String, Refusal> {
        self.pre_reboot_as(p, Ask::Updater).await
    }

    /// Takes a slot, runs the pre-reboot checks, drains: for the updater, or for an operator
    /// (`nodectl reboot now`: a maintenance hold of this node's becomes the reboot's slot;
    /// `force` passes by the windows, the gates, the settle time and the checks, never by the
    /// slot itself).
    pub async fn pre_reboot_as(&self, p: &ClientParams, ask: Ask) -> Result<String, Refusal> {
        self.ours(p)?;
        // One at a time (Zincati asking again, an operator's reboot beside an update's): a
        // second asker sees what the first did (a slot taken, checks failed and backing off),
        // or, when the first is still under way after PRE_LOCK_WAIT (its checks, its drain;
        // the FleetLock endpoint runs a request to its end when its client gave up), is told so.
        let Ok(_one) = tokio::time::timeout(PRE_LOCK_WAIT, self.pre_lock.lock()).await else {
            return Err(self.in_progress());
        };
        let force = ask == Ask::Operator { force: true };
        let (client, drainer) = self.client().await?;
        let lock = LeaseLock::new(client.clone(), &self.policy.namespace, &p.group);
        self.owed_release(p, &lock, force).await?;
        if let Some(r) = self.pre_backoff().filter(|_| !force) {
            return Err(r);
        }
        let slots = self.take_slot(p, &lock, &client, force).await?;
        let slots = self.held_for_maintenance(p, &lock, slots, ask).await?;
        let slots = self.pre_checks(p, &lock, slots, force).await?;
        self.drain(p, slots, &drainer).await
    }

    /// Waits until the group's Lease shows a free slot, by watch, then a random `0..jitter`
    /// more (see [`LeaseLock::wait_free`]); or until the watch ends (`timeout`, jittered).
    pub async fn wait_for_slot(
        &self,
        group: &str,
        jitter: Duration,
        timeout: Duration,
    ) -> Result<super::lease::WaitEnd, Refusal> {
        let (client, _) = self.client().await?;
        let lock = LeaseLock::new(client, &self.policy.namespace, group);
        lock.wait_free(
            &self.node,
            self.policy.slots,
            jitter,
            timeout,
            crate::util::jitter,
        )
        .await
        .map_err(internal)
    }

    /// Takes (or keeps) a slot of the group: reclaims the slots of stale holders,
    /// refuses outside the reboot windows and when every slot is held.
    async fn take_slot(
        &self,
        p: &ClientParams,
        lock: &LeaseLock,
        client: &kube::Client,
        force: bool,
    ) -> Result<Slots, Refusal> {
        let current = lock.read().await.map_err(internal)?;
        // Outside the reboot windows no new slot is taken (a holder keeps going: a node half
        // drained is not left cordoned until the next window).
        if !current.holds(&self.node)
            && !force
            && !crate::util::window::open_now(&self.policy.windows, &self.policy.time_zone)
        {
            let d = format!(
                "outside the reboot windows ({} windows, time zone {})",
                self.policy.windows.len(),
                self.policy.time_zone.name()
            );
            self.set("waiting-for-window", d.clone(), &p.group, current.holders);
            return Err(Refusal::new(StatusCode::LOCKED, "outside_window", d));
        }
        // The gates: asked before every new slot, never while one is held (a node waiting on
        // a pod or an alert holds nothing another node could use).
        if !current.holds(&self.node) && !force && !self.policy.gates.is_empty() {
            let found = self.policy.gates.check(client, &self.node).await;
            let d = super::gates::describe(&found);
            self.note_blocked(&p.group, &found, &d);
            if !found.is_empty() {
                self.set("blocked", d.clone(), &p.group, current.holders);
                return Err(Refusal::new(StatusCode::LOCKED, "blocked", d));
            }
        }
        let node = self.node.clone();
        let (stale, settle) = (
            self.policy.stale_after.as_secs(),
            self.policy.settle.as_secs(),
        );
        let ((reclaimed, got), slots) = lock
            .modify(|s| {
                let mono = self.clock.elapsed().as_secs();
                let seen = &mut self.seen.lock().expect("sightings");
                let r = s.reclaim(seen, mono, stale);
                let me = (p.id.as_str(), node.as_str(), self.boot_id.as_str());
                (
                    r,
                    if force {
                        s.acquire(me.0, me.1, me.2, now(), self.policy.slots)
                    } else {
                        s.acquire_settled(me, now(), self.policy.slots, seen, mono, settle)
                    },
                )
            })
            .await
            .map_err(internal)?;
        for (h, why) in &reclaimed {
            tracing::warn!(group = %p.group, holder = %h.id, node = %h.node, "reclaimed the reboot slot of {} ({}): {why}", h.id, h.node);
        }
        if let Acquire::Full { holders } = &got {
            let d = format!(
                "every slot of group {} is held, by {}",
                p.group,
                holders.join(", ")
            );
            self.set("waiting-for-slot", d.clone(), &p.group, slots.holders);
            return Err(Refusal::new(StatusCode::LOCKED, "lock_held", d));
        }
        if let Acquire::Settling { after, left } = &got {
            let d = format!(
                "group {} settles after the reboot of {after}: the next slot in {left} s",
                p.group
            );
            self.set("settling", d.clone(), &p.group, slots.holders);
            let mut r = Refusal::new(StatusCode::LOCKED, "settling", d);
            r.retry_after = Some(Duration::from_secs(*left));
            return Err(r);
        }
        Ok(slots)
    }
}

impl Coordinator for LeaseCoordinator {
    fn pre_reboot<'a>(&'a self, p: &'a ClientParams) -> BoxFuture<'a, Result<String, Refusal>> {
        self.pre(p).boxed()
    }
    fn steady_state<'a>(&'a self, p: &'a ClientParams) -> BoxFuture<'a, Result<String, Refusal>> {
        self.steady(p).boxed()
    }
}
