//! nodectl: the on-node agent (`nodectld`) and its CLI (`nodectl`).
//!
//! Pure logic (config, host classification, planning, rendering) is kept apart from effects
//! (files: [`fsio`], systemd: `nodectl_units::systemd`, the bus: [`dbus`]). Every path goes
//! through a [`root::Root`]. See docs/architecture.md.

#![deny(missing_docs)]

mod accounts;
mod audit;
pub mod cli;
pub mod config;
pub mod credentials;
pub mod csr;
pub mod daemon;
pub mod dbus;
pub mod engine;
pub mod fsio;
pub mod host;
pub mod kubeconfig;
pub mod load;
pub mod logging;
mod memory;
pub mod reboot;
pub mod root;
// Public for the fleet simulation only (agent/tests/fleet_writes.rs drives the reporter's
// `status::heartbeat`); not an API.
#[doc(hidden)]
pub mod status;
pub mod steps;
pub mod util;

// The malformed-input corpus and the property-based runs (kept outside src/: test data).
#[cfg(test)]
#[path = "../tests/corpus/malformed.rs"]
mod malformed_corpus;
