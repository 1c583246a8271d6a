//! Reboot coordination for auto-updates: the FleetLock protocol Zincati speaks, Flatcar's
//! update_engine, `/run/reboot-required`, and the group's reboot slots as a counting semaphore.

pub mod commands;
pub mod coordinator;
pub mod drain;
pub mod fleetlock;
pub mod gates;
pub mod lease;
pub mod peer;
pub mod reboot_required;
pub mod slots;
pub mod update_engine;
pub mod zincati;

/// The drain for a reboot began (this node holds its group's slot): a line with its
/// `MESSAGE_ID`, which is also an Event on the Node.
pub(crate) fn log_draining(group: &str, detail: &str) {
    tracing::info!(
        message_id = crate::logging::ids::DRAINING,
        group = %group,
        "draining for a reboot (slot of group {group} held): {detail}"
    );
}
