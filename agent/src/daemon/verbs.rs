//! An operator's reboot verbs on this node's coordinator (D-Bus `HoldReboots`,
//! `ReleaseRebootHold`, `RebootNow`), apart from the coordination's start and restart
//! (reboots.rs), which needs the daemon's shared state: this needs only the coordinator.

use std::sync::Arc;
use std::time::Duration;

use crate::reboot::coordinator::LeaseCoordinator;

/// An operator's verb (`nodectl reboot now|hold|release`) on this node's coordinator. `now`
/// starts the reboot (slot, drain, logind) in the background and returns; `nodectl status`
/// follows it. After the boot the slot goes back as after an update's reboot (the follower's
/// steady-state, or Zincati's).
pub(super) async fn operator_verb(
    c: Arc<LeaseCoordinator>,
    verb: crate::dbus::RebootVerb,
) -> Result<String, String> {
    use crate::dbus::RebootVerb;
    use crate::reboot::coordinator::Ask;
    match verb {
        RebootVerb::Hold(reason) => {
            // (a hold stops an operator's reboot that has not happened yet)
            if c.cancel_operator_reboot() {
                tracing::warn!(
                    "the reboot asked by an operator is cancelled by a maintenance hold"
                );
            }
            c.hold(&reason).await.map_err(|e| e.to_string())
        }
        RebootVerb::Release => c.release_hold().await.map_err(|e| e.to_string()),
        RebootVerb::Now { force } => {
            let conn = zbus::Connection::system()
                .await
                .map_err(|e| format!("connecting to the system bus for logind: {e}"))?;
            let follower = crate::reboot::update_engine::Follower {
                coordinator: c.clone(),
                params: c.params(),
                retry: crate::util::timers::scaled(Duration::from_secs(60)),
                reboot: crate::reboot::update_engine::logind_reboot(conn.clone()),
                inhibited: (c.waits_for_inhibitors() && !force)
                    .then(|| crate::reboot::update_engine::logind_inhibitors(conn)),
            };
            c.start_operator_reboot(force, async move {
                match follower.reboot_as(Ask::Operator { force }).await {
                    // logind took it: the machine goes down, and the reboot stays "under way"
                    // (a second one is refused) until it does
                    Ok(()) => std::future::pending::<()>().await,
                    Err(e) => tracing::error!("the reboot asked by an operator failed: {e:#}"),
                }
            })?;
            tracing::warn!(force, "a reboot asked by an operator (nodectl reboot now)");
            Ok(format!(
                "reboot requested{}: the slot, the drain, then logind (nodectl status follows it)",
                if force {
                    " (--force: no windows, gates, settle time or checks)"
                } else {
                    ""
                }
            ))
        }
    }
}
