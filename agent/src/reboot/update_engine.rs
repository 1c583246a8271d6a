//! Flatcar: follow update_engine over D-Bus (`com.coreos.update1`, signal `StatusUpdate`); when
//! an update waits for a reboot (`UPDATE_STATUS_UPDATED_NEED_REBOOT`), take a slot of the group
//! and drain exactly as for FleetLock ([`super::coordinator`]), then reboot through logind over
//! D-Bus. After the boot, release the slot once kubelet is active and the Node Ready. No etcd
//! credentials anywhere (locksmith's etcd lock needed them on every node).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::coordinator::{Ask, LeaseCoordinator};
use super::fleetlock::{ClientParams, Coordinator};
use super::lease::WaitEnd;

/// How often held shutdown inhibitors are looked at again (logind signals no release).
const INHIBITOR_RECHECK: Duration = Duration::from_secs(10);

/// update_engine's current operation when an update is installed and waits for a reboot.
pub const NEED_REBOOT: &str = "UPDATE_STATUS_UPDATED_NEED_REBOOT";

/// update_engine's D-Bus API (Flatcar's `update_engine`, as FLUO uses it).
#[zbus::proxy(
    interface = "com.coreos.update1.Manager",
    default_service = "com.coreos.update1",
    default_path = "/com/coreos/update1"
)]
pub(crate) trait UpdateEngine {
    /// (last_checked_time, progress, current_operation, new_version, new_size)
    fn get_status(&self) -> zbus::Result<(i64, f64, String, String, i64)>;

    #[zbus(signal)]
    fn status_update(
        &self,
        last_checked_time: i64,
        progress: f64,
        current_operation: String,
        new_version: String,
        new_size: i64,
    ) -> zbus::Result<()>;
}

/// What reboots the node (logind over D-Bus in production; recorded in tests).
pub(crate) type Reboot =
    Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

/// Who holds a logind block inhibitor on shutdown now (`None`: nobody), when
/// `reboot.wait_for_inhibitors` asks to wait for them.
pub(crate) type Inhibited =
    Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, Option<String>> + Send + Sync>;

/// logind's block inhibitors on shutdown (`ListInhibitors`), as "who (why)".
pub fn logind_inhibitors(conn: zbus::Connection) -> Inhibited {
    Arc::new(move || {
        let conn = conn.clone();
        Box::pin(async move {
            let m = zbus_systemd::login1::ManagerProxy::new(&conn).await.ok()?;
            let list = m.list_inhibitors().await.ok()?;
            let held: Vec<String> = list
                .into_iter()
                .filter(|(what, _, _, mode, _, _)| {
                    mode == "block" && what.split(':').any(|w| w == "shutdown")
                })
                .map(|(_, who, why, _, _, _)| format!("{who} ({why})"))
                .collect();
            (!held.is_empty()).then(|| held.join(", "))
        })
    })
}

/// logind's `Reboot(false)` on `conn`.
pub fn logind_reboot(conn: zbus::Connection) -> Reboot {
    Arc::new(move || {
        let conn = conn.clone();
        Box::pin(async move {
            let m = zbus_systemd::login1::ManagerProxy::new(&conn).await?;
            m.reboot(false).await?;
            Ok(())
        })
    })
}

/// A node waiting for a slot asks again at a random time up to this long after it saw one
/// freed (the fleet waiting with it does not ask at once; issue 40).
pub const SLOT_JITTER: Duration = Duration::from_secs(20);
/// The longest wait before logind is asked again after it refused a reboot.
pub const REFUSED_MAX: Duration = Duration::from_secs(3600);
/// How long one watch of the reboot Lease lasts (less up to a fifth) before the slot is asked
/// for again (when stale holders are reclaimed: a reclaim comes up to this long after
/// `reboot.stale_after_secs`, an hour by default).
pub const SLOT_WATCH: Duration = Duration::from_secs(900);

/// Follows update_engine on Flatcar and reboots for updates through the coordinator's slots.
pub struct Follower {
    /// Takes and gives back the slot and drains, as for FleetLock.
    pub coordinator: Arc<LeaseCoordinator>,
    /// The id the coordinator answers to (on Flatcar: the node name) and the group.
    pub params: ClientParams,
    /// Between attempts while the slot is busy, the drain runs or the node is not Ready yet.
    pub retry: Duration,
    /// Reboots the node once the slot is held and the node drained.
    pub reboot: Reboot,
    /// With `reboot.wait_for_inhibitors`: the reboot waits while this names a holder.
    pub inhibited: Option<Inhibited>,
}

impl Follower {
    /// After boot: gives back the slot (if held) once kubelet is active and the Node Ready.
    pub async fn steady_state(&self) {
        // (what the reboots follow: update_engine, or /run/reboot-required)
        let via = self.coordinator.status().endpoint;
        loop {
            match self.coordinator.steady_state(&self.params).await {
                Ok(msg) => {
                    tracing::info!(
                        message_id = crate::logging::ids::REBOOT_RELEASED,
                        "after the boot ({via}): {msg}"
                    );
                    return;
                }
                Err(r) => {
                    tracing::info!(kind = r.kind, "after the boot ({via}): {}", r.value);
                    tokio::time::sleep(self.retry).await;
                }
            }
        }
    }

    /// Takes a slot and drains (retrying), then reboots.
    pub async fn reboot_for_update(&self) -> anyhow::Result<()> {
        self.reboot_as(Ask::Updater).await
    }

    /// As [`Follower::reboot_for_update`], for the updater or an operator
    /// (`nodectl reboot now`).
    /// When logind refuses the reboot, it is asked again (after the slot and the drain are
    /// confirmed again: both still this node's), `retry` later, doubling up to an hour.
    pub async fn reboot_as(&self, ask: Ask) -> anyhow::Result<()> {
        let mut refused = self.retry;
        loop {
            match self.coordinator.pre_reboot_as(&self.params, ask).await {
                Ok(msg) => {
                    if let Some(check) = &self.inhibited {
                        while let Some(who) = check().await {
                            tracing::info!("{msg}; waiting for the shutdown inhibitors of {who} (reboot.wait_for_inhibitors)");
                            tokio::time::sleep(self.retry.min(INHIBITOR_RECHECK)).await;
                        }
                    }
                    tracing::info!(
                        message_id = crate::logging::ids::REBOOT_GRANTED,
                        "{msg}; rebooting through logind"
                    );
                    match (self.reboot)().await {
                        Ok(()) => return Ok(()),
                        Err(e) => {
                            // (the follower once ended here: the node stayed drained, cordoned
                            // and holding its group's slot, and nothing asked again until
                            // nodectld restarted)
                            let why = format!(
                                "logind refused the reboot ({}); the slot stays held and the node cordoned; asking again in {} s",
                                bounded(&format!("{e:#}")),
                                refused.as_secs()
                            );
                            tracing::error!("{why}");
                            self.coordinator.note_reboot_refused(&why);
                            tokio::time::sleep(refused).await;
                            refused = (refused * 2).min(REFUSED_MAX);
                        }
                    }
                }
                Err(r) if r.kind == "lock_held" => {
                    // every slot held: watch the Lease until one is free (no reads meanwhile),
                    // then a jitter, so the fleet waiting with this node does not ask at once
                    tracing::info!(kind = r.kind, "waiting to reboot: {}", r.value);
                    let group = &self.params.group;
                    let wait = self.retry.max(Duration::from_secs(1));
                    let started = tokio::time::Instant::now();
                    match self
                        .coordinator
                        .wait_for_slot(group, wait.min(SLOT_JITTER), SLOT_WATCH)
                        .await
                    {
                        Ok(WaitEnd::Timeout) if started.elapsed() < wait => {
                            // a watch that ends at once (a proxy, a server going away) is not
                            // asked again at once
                            tracing::info!(
                                "the reboot Lease's watch ended at once; asking again in {} s",
                                wait.as_secs()
                            );
                            tokio::time::sleep(wait).await;
                        }
                        Ok(end) => tracing::debug!(?end, "the reboot Lease's watch ended"),
                        Err(e) => {
                            tracing::info!(
                                "watching the reboot Lease: {}; asking again in {} s",
                                e.value,
                                wait.as_secs()
                            );
                            tokio::time::sleep(wait).await;
                        }
                    }
                }
                Err(r) => {
                    // (a gate's finding is logged by the coordinator when it changes)
                    if r.kind != "blocked" {
                        tracing::info!(kind = r.kind, "waiting to reboot: {}", r.value);
                    }
                    // settling: asked again when the group has settled
                    let wait = r
                        .retry_after
                        .map_or(self.retry, |w| w + Duration::from_secs(1));
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Runs until the connection ends: steady-state first, then a reboot once update_engine
    /// says one is needed: by its status now, by its signal later, or by its status when it
    /// (re)appears on the bus (update_engine may start after nodectld, or restart with an update
    /// installed: it says so by its status, with no signal). No polling.
    pub async fn run(&self, conn: &zbus::Connection) -> anyhow::Result<()> {
        self.steady_state().await;
        self.until_needed(conn).await?;
        // (update_engine's signal and owner streams are gone by now: while the reboot waits for a
        // slot, a drain or logind, update_engine's signals, one at each of its update checks,
        // would fill their queue, and a full queue stops the connection's reader, logind's
        // answers included)
        self.reboot_for_update().await
    }

    /// Returns once update_engine says an update waits for a reboot.
    async fn until_needed(&self, conn: &zbus::Connection) -> anyhow::Result<()> {
        let ue = UpdateEngineProxy::new(conn).await?;
        let mut updates = ue.receive_status_update().await?;
        let mut owners = ue.inner().receive_owner_changed().await?;
        // a status that could not be asked (update_engine on the bus) is asked again after this
        let mut ask_again: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        let mut asked = ask(&ue).await;
        loop {
            match asked {
                Asked::NeedReboot => return Ok(()),
                Asked::Failed => ask_again = Some(Box::pin(tokio::time::sleep(self.retry))),
                Asked::Other | Asked::Absent => {}
            }
            asked = tokio::select! {
                sig = updates.next() => {
                    let Some(sig) = sig else { anyhow::bail!("update_engine's signal stream ended") };
                    on_signal(&ue, &sig).await
                }
                owner = owners.next() => match owner {
                    None => anyhow::bail!("the system bus's stream of update_engine's owners ended"),
                    Some(None) => {
                        tracing::info!("update_engine left the system bus");
                        Asked::Absent
                    }
                    Some(Some(_)) => {
                        tracing::info!("update_engine is on the system bus");
                        ask(&ue).await
                    }
                },
                () = async { ask_again.as_mut().expect("armed").await }, if ask_again.is_some() => {
                    ask_again = None;
                    ask(&ue).await
                }
            };
        }
    }
}

/// What a `StatusUpdate` signal leads to. A signal is a wake-up, never the word (issue 64): only
/// update_engine's answer to `GetStatus`, asked of its well-known name, reboots. Which unique
/// name a signal must come from is what zbus believes of the name's owner, learnt from signals
/// too (the class of GLib's CVE-2024-34397); a call to the well-known name reaches its owner by
/// the bus's own routing. A signal addressed to this connection alone is dropped:
/// update_engine broadcasts its own. One that does not decode (another signature) is skipped,
/// not the end of the follower; what is logged of its strings is bounded.
async fn on_signal(ue: &UpdateEngineProxy<'_>, sig: &StatusUpdate) -> Asked {
    if sig.message().header().destination().is_some() {
        tracing::debug!(
            "update_engine: a StatusUpdate signal addressed to this connection alone; dropped"
        );
        return Asked::Other;
    }
    match sig.args() {
        Ok(a) if a.current_operation == NEED_REBOOT => {
            tracing::debug!("update_engine signalled NEED_REBOOT: asking its status");
            ask(ue).await
        }
        Ok(a) => {
            tracing::debug!(operation = %bounded(&a.current_operation), "update_engine status");
            Asked::Other
        }
        Err(e) => {
            tracing::warn!(
                "update_engine: a StatusUpdate signal that does not decode ({}); ignored",
                bounded(&e.to_string())
            );
            Asked::Other
        }
    }
}

/// What update_engine's `GetStatus` said.
enum Asked {
    /// An update waits for a reboot.
    NeedReboot,
    /// Any other status.
    Other,
    /// update_engine is not on the bus (yet): its start says more.
    Absent,
    /// No answer (or none that decodes) from an update_engine on the bus: asked again later.
    Failed,
}

async fn ask(ue: &UpdateEngineProxy<'_>) -> Asked {
    match ue.get_status().await {
        Ok((_, _, op, version, _)) if op == NEED_REBOOT => {
            tracing::info!(version = %bounded(&version), "update_engine: an update waits for a reboot");
            Asked::NeedReboot
        }
        Ok((_, _, op, _, _)) => {
            tracing::info!(operation = %bounded(&op), "update_engine's status: {}", bounded(&op));
            Asked::Other
        }
        Err(e) if not_on_the_bus(&e) => {
            tracing::info!("update_engine's status: not answered, it is not on the system bus; following its signals and its start");
            Asked::Absent
        }
        Err(e) => {
            tracing::warn!(
                "update_engine's status: not answered ({}); asked again later",
                bounded(&e.to_string())
            );
            Asked::Failed
        }
    }
}

/// Whether a call failed because nobody owns update_engine's name.
fn not_on_the_bus(e: &zbus::Error) -> bool {
    use zbus::fdo::Error as Fdo;
    match e {
        zbus::Error::FDO(f) => matches!(**f, Fdo::ServiceUnknown(_) | Fdo::NameHasNoOwner(_)),
        zbus::Error::MethodError(name, _, _) => matches!(
            name.as_str(),
            "org.freedesktop.DBus.Error.ServiceUnknown"
                | "org.freedesktop.DBus.Error.NameHasNoOwner"
        ),
        _ => false,
    }
}

/// At most 120 characters of a string update_engine (or the bus) sent, for the journal.
fn bounded(s: &str) -> String {
    let mut out: String = s.chars().take(120).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}
