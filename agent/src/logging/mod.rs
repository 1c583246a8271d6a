//! Logs go to journald with structured fields when stderr is the journal (systemd sets
//! `JOURNAL_STREAM`), to stderr otherwise. `NODECTL_LOG` takes a tracing filter (default info).
//!
//! A field is the journal field of its name in capitals (`step` -> `STEP`; tracing-journald's
//! default `F_` prefix is dropped, so the names docs/troubleshooting.md gives are what is
//! there); an event an operator alerts on carries a `MESSAGE_ID` of [`ids`]. The identifier is
//! the binary's (`nodectld`, `nodectl`).

pub mod noted;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer as _;
use tracing_subscriber::{fmt, EnvFilter};

/// `MESSAGE_ID`s (journalctl MESSAGE_ID=...) of the events an operator alerts on: set as the
/// `message_id` field of the event.
pub mod ids {
    /// The node's NodectlReady condition changed (true/false).
    pub const CONDITION_CHANGED: &str = "4f1c2a7e9b3d4c5e8a6f0b1c2d3e4f50";
    /// A reboot slot was granted to this node (the Lease, FleetLock's lock).
    pub const REBOOT_GRANTED: &str = "7a2b3c4d5e6f40718293a4b5c6d7e8f1";
    /// This node's reboot slot was released.
    pub const REBOOT_RELEASED: &str = "8b3c4d5e6f7041829304b5c6d7e8f9a2";
    /// The node's certificate request was denied (or failed) by the cluster.
    pub const CSR_DENIED: &str = "9c4d5e6f708142939415c6d7e8f90ab3";
    /// This node began draining for a reboot (it holds a slot).
    pub const DRAINING: &str = "ad5e6f708192435a8b26d7e8f90a1bc4";
    /// A gate (a pod, an alert) keeps this node from taking a reboot slot, or a pre- or
    /// post-reboot check failed.
    pub const REBOOT_BLOCKED: &str = "be6f708192a3446b9c37e8f90a1b2cd5";
    /// Reboot coordination failed to start, or ended (it is started again after a backoff).
    pub const REBOOT_COORDINATION_FAILED: &str = "c0718293a4b5461c9d8e0f1a2b3c4d5e";
    /// Zincati's configuration has it reboot without asking nodectld (or it cannot read it).
    pub const REBOOT_UNCOORDINATED: &str = "d18293a4b5c6472dae9f0a1b2c3d4e5f";

    /// Every id above (what `noted` keeps for Kubernetes Events).
    pub const ALL: &[&str] = &[
        CONDITION_CHANGED,
        REBOOT_GRANTED,
        REBOOT_RELEASED,
        CSR_DENIED,
        DRAINING,
        REBOOT_BLOCKED,
        REBOOT_COORDINATION_FAILED,
        REBOOT_UNCOORDINATED,
    ];
}

/// Sets up logging for the binary `identifier`: journald when stderr is the journal, stderr
/// otherwise; the filter comes from `NODECTL_LOG`, else `default_level`. Lines with a
/// `MESSAGE_ID` are also noted ([`noted`]) whatever the filter.
pub fn init(identifier: &str, default_level: &str) {
    let filter =
        || EnvFilter::try_from_env("NODECTL_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    // (a per-layer filter: only the call sites with a `message_id` reach it, so it enables no
    // other; the output layers' filter decides the rest)
    let registry = tracing_subscriber::registry().with(noted::Capture.with_filter(
        tracing_subscriber::filter::filter_fn(|m| m.fields().field("message_id").is_some()),
    ));
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            registry
                .with(
                    journald
                        .with_syslog_identifier(identifier.into())
                        .with_field_prefix(None)
                        .with_filter(filter()),
                )
                .init();
            return;
        }
    }
    registry
        .with(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false)
                .with_filter(filter()),
        )
        .init();
}
