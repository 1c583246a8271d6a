//! Reboot coordination for auto-updates: the FleetLock protocol Zincati speaks, Flatcar's
//! update_engine, `/run/reboot-required`, and the group's reboot slots as a counting semaphore.

pub mod coordinator;
pub mod drain;
pub mod fleetlock;
pub mod lease;
pub mod peer;
pub mod reboot_required;
pub mod slots;
pub mod update_engine;
