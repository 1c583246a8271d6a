//! Reboot coordination for auto-updates (issue 6, in progress): the FleetLock protocol Zincati
//! speaks, and the group's reboot slots as a counting semaphore.

pub mod coordinator;
pub mod drain;
pub mod fleetlock;
pub mod lease;
pub(crate) mod peer;
pub mod slots;
pub mod update_engine;
