//! Waiting on nodectld without polling it (`nodectl wait`, `nodectl import`): each change of
//! its state is signalled on the bus (PropertiesChanged of `State`, at the start and the end of
//! every pass), so the waiter reads the status once per change. Without nodectld on the bus
//! (not started yet, or `--root`), nothing signals: the disk is read every half second.

use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::time::Instant;

use super::status_cmd::{status_from_daemon, status_from_disk};
use crate::dbus::Agent1Proxy;
use crate::root::Root;
use crate::status::Status;

/// Without nodectld, how often the disk is read.
const WITHOUT_DAEMON: Duration = Duration::from_millis(500);
/// With it, the status is read again at least this often all the same (a signal lost to a
/// restart of nodectld or of the bus).
const AT_LEAST: Duration = Duration::from_secs(30);

/// What a wait follows.
pub(super) struct Follow {
    root: Root,
    states: Option<zbus::proxy::PropertyStream<'static, String>>,
    /// The last status came from nodectld.
    from_daemon: bool,
}

impl Follow {
    /// Subscribed before the first status is read: no change is missed in between.
    pub(super) async fn new(root: &Root) -> Follow {
        let states = if root.is_host() {
            match zbus::Connection::system().await {
                Ok(conn) => match Agent1Proxy::new(&conn).await {
                    Ok(agent) => Some(agent.receive_state_changed().await),
                    Err(_) => None,
                },
                Err(_) => None,
            }
        } else {
            None
        };
        Follow {
            root: root.clone(),
            states,
            from_daemon: false,
        }
    }

    /// The status now: nodectld's, or what the disk shows without it.
    pub(super) async fn status(&mut self) -> Status {
        match status_from_daemon(&self.root).await {
            Ok(st) => {
                self.from_daemon = true;
                st
            }
            Err(why) => {
                self.from_daemon = false;
                status_from_disk(&self.root, why.to_string()).await
            }
        }
    }

    /// Returns when the status may have changed (nodectld's next state change; without it,
    /// half a second), or at `deadline`.
    pub(super) async fn changed(&mut self, deadline: Instant) {
        let (states, every) = match (&mut self.states, self.from_daemon) {
            (Some(s), true) => (Some(s), AT_LEAST),
            _ => (None, WITHOUT_DAEMON),
        };
        let until = deadline.min(Instant::now() + every);
        match states {
            Some(s) => {
                tokio::select! {
                    _ = s.next() => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
            }
            None => tokio::time::sleep_until(until).await,
        }
    }
}
