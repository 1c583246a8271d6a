//! nodectld's D-Bus interface on the system bus: `org.nodectl.Agent1` at `/org/nodectl/Agent1`.
//! Read-only methods are open to every local user; `Converge` is root-only, checked here (the
//! caller's uid, asked of the bus) as well as in the bus policy shipped in packaging/.

use std::sync::Arc;

use tokio::sync::{mpsc, Mutex};
use zbus::message::Header;

use crate::status::Status;

pub const BUS_NAME: &str = "org.nodectl.Agent1";
pub const OBJECT_PATH: &str = "/org/nodectl/Agent1";
pub const INTERFACE: &str = "org.nodectl.Agent1";

/// Why the daemon runs a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Startup,
    Sighup,
    ConfigChange,
    InputChange,
    Dbus,
    Resync,
    /// A certificate request running in the background ended.
    Credentials,
    /// A reboot ended while changed `reboot.*` settings waited for it.
    Reboot,
    /// One of the node's credential files changed (a label, a mode, an entry): someone else's
    /// `chcon` or `:z` mount is undone at once, not at the next resync.
    CredentialChange,
}

impl Trigger {
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Startup => "startup",
            Trigger::Sighup => "sighup",
            Trigger::ConfigChange => "config-change",
            Trigger::InputChange => "input-change",
            Trigger::Dbus => "dbus",
            Trigger::Resync => "resync",
            Trigger::Credentials => "credentials",
            Trigger::Reboot => "reboot",
            Trigger::CredentialChange => "credential-change",
        }
    }
}

/// State shared between the convergence loop and the bus.
pub struct Shared {
    pub status: Mutex<Status>,
    pub wake: mpsc::UnboundedSender<Trigger>,
    /// The FleetLock coordinator, once serving (its state is read at each GetStatus).
    pub reboot: std::sync::Mutex<Option<Arc<crate::reboot::coordinator::LeaseCoordinator>>>,
    /// Changed `reboot.*` settings wait for the reboot under way to end.
    pub reboot_deferred: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// The status as of now: the last pass's, with the reboot coordination's current state.
    pub async fn snapshot(&self) -> Status {
        let mut st = self.status.lock().await.clone();
        if let Some(c) = self.reboot.lock().expect("reboot").as_ref() {
            st.reboot = Some(c.status());
        }
        st
    }
}

pub struct Agent {
    pub shared: Arc<Shared>,
}

#[zbus::interface(name = "org.nodectl.Agent1")]
impl Agent {
    /// The whole status as JSON (schema in docs/status.md).
    async fn get_status(&self) -> String {
        let st = self.shared.snapshot().await;
        let json = serde_json::to_string(&st).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        drop(st);
        // A status call runs between passes: give back what it freed.
        crate::memory::release_freed();
        json
    }

    /// Runs a convergence pass now. Root only.
    async fn converge(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> zbus::fdo::Result<()> {
        let uid = caller_uid(&hdr, conn).await?;
        if uid != 0 {
            return Err(zbus::fdo::Error::AccessDenied(format!(
                "Converge changes the node: root only (caller uid {uid})"
            )));
        }
        self.shared
            .wake
            .send(Trigger::Dbus)
            .map_err(|_| zbus::fdo::Error::Failed("nodectld is stopping".into()))
    }

    /// Frees a reboot slot of `group` held by `holder` (client id or node name). Root only.
    async fn release_reboot_slot(
        &self,
        group: String,
        holder: String,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> zbus::fdo::Result<String> {
        let uid = caller_uid(&hdr, conn).await?;
        if uid != 0 {
            return Err(zbus::fdo::Error::AccessDenied(format!(
                "ReleaseRebootSlot changes the cluster's reboot lock: root only (caller uid {uid})"
            )));
        }
        let c = self.shared.reboot.lock().expect("reboot").clone();
        let Some(c) = c else {
            return Err(zbus::fdo::Error::Failed(
                "nodectld does not serve FleetLock (reboot.strategy is not fleet-lock, or the node has no credentials yet)".into(),
            ));
        };
        c.release_slot(&group, &holder)
            .await
            .map_err(zbus::fdo::Error::Failed)
    }

    /// `starting`, `converging`, `ready` or `stopping`.
    #[zbus(property)]
    async fn state(&self) -> String {
        self.shared.status.lock().await.daemon.state.clone()
    }
}

async fn caller_uid(hdr: &Header<'_>, conn: &zbus::Connection) -> zbus::fdo::Result<u32> {
    let sender = hdr
        .sender()
        .ok_or_else(|| zbus::fdo::Error::AccessDenied("caller without a bus name".into()))?;
    let dbus = zbus::fdo::DBusProxy::new(conn).await?;
    dbus.get_connection_unix_user(sender.clone().into()).await
}

#[zbus::proxy(
    interface = "org.nodectl.Agent1",
    default_service = "org.nodectl.Agent1",
    default_path = "/org/nodectl/Agent1"
)]
pub trait Agent1 {
    fn get_status(&self) -> zbus::Result<String>;
    fn converge(&self) -> zbus::Result<()>;
    fn release_reboot_slot(&self, group: &str, holder: &str) -> zbus::Result<String>;
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
}
