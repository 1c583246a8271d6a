//! What the daemon's parts share: the published status, the wake-up channel, the reboot
//! coordination, what was learnt about the node's certificate; why a pass runs; the daemon's
//! state.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio::sync::{mpsc, Mutex};

use crate::credentials::check::Facts;
use crate::reboot::coordinator::LeaseCoordinator;
use crate::status::Status;

/// Why the daemon runs a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// nodectld started.
    Startup,
    /// `systemctl reload nodectld`.
    Sighup,
    /// A config fragment changed.
    ConfigChange,
    /// An input a pass waits for appeared or changed (a bundle, the bootstrap kubeconfig).
    InputChange,
    /// A root caller's `Converge`.
    Dbus,
    /// The hourly resync.
    Resync,
    /// A recheck a step asked for (a backoff ending, something settling, a wait).
    Recheck,
    /// A certificate request running in the background ended, or the API server refused the
    /// node's certificate.
    Credentials,
    /// A reboot ended while changed `reboot.*` settings waited for it.
    Reboot,
    /// One of the node's credential files changed (a label, a mode, an entry): someone else's
    /// `chcon` or `:z` mount is undone at once, not at the next resync.
    CredentialChange,
}

impl Trigger {
    /// The name logs, status and metrics use.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Startup => "startup",
            Trigger::Sighup => "sighup",
            Trigger::ConfigChange => "config-change",
            Trigger::InputChange => "input-change",
            Trigger::Dbus => "dbus",
            Trigger::Resync => "resync",
            Trigger::Recheck => "recheck",
            Trigger::Credentials => "credentials",
            Trigger::Reboot => "reboot",
            Trigger::CredentialChange => "credential-change",
        }
    }

    /// An operator asked for this pass: steps retry now what they left to a backoff.
    pub(super) fn forced(self) -> bool {
        matches!(self, Trigger::Sighup | Trigger::Dbus)
    }

    /// What the audit reads may have changed (or it is time to look again): the daemon
    /// re-audits after such a pass, and keeps the last audit after the others.
    pub(super) fn reaudits(self) -> bool {
        !matches!(
            self,
            Trigger::Credentials | Trigger::Reboot | Trigger::Recheck
        )
    }
}

/// The daemon's state (the bus property `State`, `daemon.state` in the status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Starting,
    Converging,
    Ready,
    Stopping,
}

impl State {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Converging => "converging",
            State::Ready => "ready",
            State::Stopping => "stopping",
        }
    }
}

/// The settings a reboot coordination ran or failed with (a change starts it again at once).
pub(super) type CoordinationKey = (
    crate::config::RebootStrategy,
    crate::config::RebootPolicy,
    String,
);

/// What the daemon keeps about reboot coordination's health (`coordination.rs` keeps it).
#[derive(Default)]
pub(super) struct Health {
    /// Published in the status.
    pub(super) status: Option<crate::status::Coordination>,
    /// The settings of the last failure, and when to start again.
    pub(super) failed_for: Option<CoordinationKey>,
    pub(super) retry_at: Option<tokio::time::Instant>,
    /// Wakes the loop at `retry_at` (`Trigger::Reboot`).
    pub(super) timer: Option<tokio::task::JoinHandle<()>>,
}

/// State shared between the convergence loop, the bus and background tasks.
pub(super) struct Shared {
    pub(super) status: Mutex<Status>,
    pub(super) wake: mpsc::UnboundedSender<Trigger>,
    /// The reboot coordinator, once serving (its state is read at each GetStatus).
    pub(super) reboot: std::sync::Mutex<Option<Arc<LeaseCoordinator>>>,
    /// Changed `reboot.*` settings wait for the reboot under way to end.
    pub(super) reboot_deferred: AtomicBool,
    /// Whether reboot coordination runs, failed or ended, and what Zincati asks.
    pub(super) coordination: std::sync::Mutex<Health>,
    /// What the credentials check learnt, read by every pass.
    pub(super) facts: Arc<Facts>,
    /// Tells the credentials check to ask the API server (a pass found another certificate, a
    /// request was refused with 401).
    pub(super) recheck_credentials: Arc<tokio::sync::Notify>,
    /// Told after each pass and each reboot state change (the Node condition reporter waits
    /// on it).
    pub(super) changed: tokio::sync::Notify,
    /// Told after each pass, for the Events sender (which waits for the node's credentials):
    /// its own, since `Notify::notify_one` wakes one waiter and `changed` is the reporter's.
    pub(super) passed: tokio::sync::Notify,
    /// Inbox files the kernel said are complete (the watcher marks them, passes read them).
    pub(super) settled: Arc<crate::util::settled::Settled>,
    /// The FleetLock listening socket systemd holds for nodectld (`nodectld.socket`, named
    /// `fleetlock`), when it passed one: kept for the daemon's life, each start of reboot
    /// coordination serves a duplicate of it, so the port is never free while nodectld runs or
    /// restarts (issue 51, 2).
    pub(super) fleetlock_socket: Option<std::net::TcpListener>,
    /// The bus connection `org.nodectl.Agent1` is served on, once it is: each change of the
    /// daemon's state is signalled there (PropertiesChanged of `State`; `nodectl converge
    /// --wait` follows it).
    pub(super) bus: std::sync::OnceLock<zbus::Connection>,
}

impl Shared {
    /// The status as of now: the last pass's, with the reboot coordination's current state.
    pub(super) async fn snapshot(&self) -> Status {
        let mut st = self.status.lock().await.clone();
        if let Some(c) = self.reboot.lock().expect("reboot").as_ref() {
            st.reboot = Some(c.status());
        }
        st.coordination = self
            .coordination
            .lock()
            .expect("coordination")
            .status
            .clone();
        st
    }

    /// Records the daemon's state, and signals it.
    pub(super) async fn set_state(&self, state: State) {
        self.status.lock().await.daemon.state = state.as_str().into();
        self.state_changed().await;
    }

    /// Signals the state (the status lock must not be held: the property reads it).
    pub(super) async fn state_changed(&self) {
        if let Some(conn) = self.bus.get() {
            crate::dbus::emit_state_changed(conn).await;
        }
    }
}

impl Shared {
    /// The reboot coordinator, or why there is none.
    fn coordinator(&self) -> zbus::fdo::Result<Arc<LeaseCoordinator>> {
        self.reboot.lock().expect("reboot").clone().ok_or_else(|| {
            zbus::fdo::Error::Failed(
                "nothing coordinates reboots here (reboot.strategy is off, or the node has no credentials yet)".into(),
            )
        })
    }
}

impl crate::dbus::Backend for Shared {
    fn status_json(&self) -> BoxFuture<'_, String> {
        async move {
            let st = self.snapshot().await;
            serde_json::to_string(&st).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        }
        .boxed()
    }

    fn converge(&self) -> zbus::fdo::Result<()> {
        self.wake
            .send(Trigger::Dbus)
            .map_err(|_| zbus::fdo::Error::Failed("nodectld is stopping".into()))
    }

    fn release_reboot_slot<'a>(
        &'a self,
        group: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, zbus::fdo::Result<String>> {
        async move {
            self.coordinator()?
                .release_slot(group, holder)
                .await
                .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
        }
        .boxed()
    }

    fn state(&self) -> BoxFuture<'_, String> {
        async move { self.status.lock().await.daemon.state.clone() }.boxed()
    }

    fn reboot_verb(
        &self,
        verb: crate::dbus::RebootVerb,
    ) -> BoxFuture<'_, zbus::fdo::Result<String>> {
        async move {
            super::verbs::operator_verb(self.coordinator()?, verb)
                .await
                .map_err(zbus::fdo::Error::Failed)
        }
        .boxed()
    }
}
