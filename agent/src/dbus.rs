//! nodectld's D-Bus interface on the system bus: `org.nodectl.Agent1` at `/org/nodectl/Agent1`.
//! Read-only methods are open to every local user; `Converge` is root-only, checked here (the
//! caller's uid, asked of the bus) as well as in the bus policy shipped in packaging/.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use zbus::message::Header;

/// A status call gives back what it freed at most this often (callers are every local user).
const STATUS_TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// nodectld's well-known name on the system bus.
pub(crate) const BUS_NAME: &str = "org.nodectl.Agent1";
/// The agent's object.
pub(crate) const OBJECT_PATH: &str = "/org/nodectl/Agent1";

/// What the interface serves; the daemon implements it.
pub(crate) trait Backend: Send + Sync {
    /// The whole status as JSON.
    fn status_json(&self) -> BoxFuture<'_, String>;
    /// Runs a pass now.
    fn converge(&self) -> zbus::fdo::Result<()>;
    /// Frees a reboot slot of `group` held by `holder`.
    fn release_reboot_slot<'a>(
        &'a self,
        group: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, zbus::fdo::Result<String>>;
    /// `starting`, `converging`, `ready` or `stopping`.
    fn state(&self) -> BoxFuture<'_, String>;
    /// An operator's verb on this node's reboots.
    fn reboot_verb(&self, verb: RebootVerb) -> BoxFuture<'_, zbus::fdo::Result<String>>;
}

/// An operator's verb on this node's reboots (`nodectl reboot ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RebootVerb {
    /// Reboot now through the slot and the drain (`force`: without the gates and checks).
    Now {
        /// Pass by the windows, the gates, the settle time and the checks.
        force: bool,
    },
    /// Hold this node's slot for maintenance, with a reason.
    Hold(String),
    /// Give the maintenance hold back.
    Release,
}

/// The object at [`OBJECT_PATH`].
pub(crate) struct Agent {
    /// What it serves.
    pub backend: Arc<dyn Backend>,
}

#[zbus::interface(name = "org.nodectl.Agent1")]
impl Agent {
    /// The whole status as JSON (schema in docs/status.md).
    async fn get_status(&self) -> String {
        let json = self.backend.status_json().await;
        // A status call runs between passes: give back what it freed.
        crate::memory::release_freed_at_most_every(STATUS_TRIM_EVERY);
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
        self.backend.converge()
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
        self.backend.release_reboot_slot(&group, &holder).await
    }

    /// Reboots this node now through its group's slot and the drain (`force`: without the
    /// windows, gates, settle time and checks). Root only.
    async fn reboot_now(
        &self,
        force: bool,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> zbus::fdo::Result<String> {
        root_only(&hdr, conn, "RebootNow").await?;
        self.backend.reboot_verb(RebootVerb::Now { force }).await
    }

    /// Holds this node's slot of its group for maintenance. Root only.
    async fn hold_reboots(
        &self,
        reason: String,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> zbus::fdo::Result<String> {
        root_only(&hdr, conn, "HoldReboots").await?;
        self.backend.reboot_verb(RebootVerb::Hold(reason)).await
    }

    /// Gives this node's maintenance hold back. Root only.
    async fn release_reboot_hold(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> zbus::fdo::Result<String> {
        root_only(&hdr, conn, "ReleaseRebootHold").await?;
        self.backend.reboot_verb(RebootVerb::Release).await
    }

    /// `starting`, `converging`, `ready` or `stopping`.
    #[zbus(property)]
    async fn state(&self) -> String {
        self.backend.state().await
    }
}

/// Signals the agent's `State` (PropertiesChanged with its value) on `conn`, where the agent is
/// served; failures are logged at debug (nobody may be listening).
pub(crate) async fn emit_state_changed(conn: &zbus::Connection) {
    match conn
        .object_server()
        .interface::<_, Agent>(OBJECT_PATH)
        .await
    {
        Ok(iface) => {
            if let Err(e) = iface
                .get()
                .await
                .state_changed(iface.signal_emitter())
                .await
            {
                tracing::debug!("signalling the state: {e}");
            }
        }
        Err(e) => tracing::debug!("signalling the state: {e}"),
    }
}

/// Refuses `method` to every caller but root.
async fn root_only(
    hdr: &Header<'_>,
    conn: &zbus::Connection,
    method: &str,
) -> zbus::fdo::Result<()> {
    let uid = caller_uid(hdr, conn).await?;
    if uid != 0 {
        return Err(zbus::fdo::Error::AccessDenied(format!(
            "{method} changes this node's reboots: root only (caller uid {uid})"
        )));
    }
    Ok(())
}

async fn caller_uid(hdr: &Header<'_>, conn: &zbus::Connection) -> zbus::fdo::Result<u32> {
    let sender = hdr
        .sender()
        .ok_or_else(|| zbus::fdo::Error::AccessDenied("caller without a bus name".into()))?;
    let dbus = zbus::fdo::DBusProxy::new(conn).await?;
    dbus.get_connection_unix_user(sender.clone().into()).await
}

/// Client side of nodectld's `org.nodectl.Agent1` D-Bus interface on the system bus, as
/// `nodectl` uses it.
#[zbus::proxy(
    interface = "org.nodectl.Agent1",
    default_service = "org.nodectl.Agent1",
    default_path = "/org/nodectl/Agent1"
)]
pub trait Agent1 {
    /// The whole status as JSON.
    fn get_status(&self) -> zbus::Result<String>;
    /// Runs a pass now (root only).
    fn converge(&self) -> zbus::Result<()>;
    /// Frees a reboot slot (root only).
    fn release_reboot_slot(&self, group: &str, holder: &str) -> zbus::Result<String>;
    /// Reboots now (root only).
    fn reboot_now(&self, force: bool) -> zbus::Result<String>;
    /// Holds this node's slot for maintenance (root only).
    fn hold_reboots(&self, reason: &str) -> zbus::Result<String>;
    /// Gives the maintenance hold back (root only).
    fn release_reboot_hold(&self) -> zbus::Result<String>;
    /// The daemon's state.
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
}
