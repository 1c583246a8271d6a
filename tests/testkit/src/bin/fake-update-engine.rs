//! fake-update-engine: owns `com.coreos.update1` on the system bus in place of Flatcar's
//! update_engine (none runs outside Flatcar), so nodectld's follower meets the service it meets
//! there: the same name, path, interface, method and signal, the same status strings, in the
//! order update_engine goes through them. Modelled on flatcar/update_engine:
//! - `com.coreos.update1.Manager` at `/com/coreos/update1` (src/update_engine/dbus_constants.h
//!   and the introspection XML `com.coreos.update1.Manager.xml`): `GetStatus` answers
//!   `(last_checked_time x, progress d, current_operation s, new_version s, new_size x)`,
//!   `AttemptUpdate` starts a check, and the `StatusUpdate` signal carries the same five values;
//! - the status strings of `UpdateStatusToString` (update_attempter.cc), and the signal sent at
//!   every change of status (`UpdateAttempter::BroadcastStatus`), through an update:
//!   CHECKING_FOR_UPDATE, UPDATE_AVAILABLE, DOWNLOADING (its progress), VERIFYING, FINALIZING,
//!   UPDATED_NEED_REBOOT;
//! - an update installed and not yet booted survives a restart of the daemon, not a reboot
//!   (update_engine's marker `/var/run/update_engine_autoupdate_completed`, in /run): started
//!   with the marker present, the status is UPDATED_NEED_REBOOT at once, with no signal, and
//!   with what the `UpdateAttempter` constructor knows then (last checked 0, progress 0, version
//!   "0.0.0"); a boot (the test removes the marker) starts it IDLE;
//! - while an update waits for a reboot, each of update_engine's periodic update checks
//!   broadcasts the status again (`PingOmaha`, about every 45 minutes): here every PING_MS.
//!
//! Usage: `fake-update-engine [VERSION [PING_MS]]` (the version an update installs, 9999.0.0
//! unset; PING_MS 2700000, 45 minutes, unset).
//!
//! `fake-update-engine forge PID` plays a local attacker instead (issue 64): as whoever runs it,
//! it tells each system-bus connection of process PID (nodectld's) that `com.coreos.update1`
//! is now its own (a `NameOwnerChanged` addressed to that connection), then signals
//! UPDATED_NEED_REBOOT from its own name, to everyone and to each connection; it prints what it
//! sent and exits.
//! Not modelled: the Omaha protocol, the download, the partitions, `ResetStatus`, `SetChannel`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PATH: &str = "/com/coreos/update1";
const IFACE: &str = "com.coreos.update1.Manager";
/// update_engine's marker of an installed update waiting for a reboot.
const MARKER: &str = "/var/run/update_engine_autoupdate_completed";
const NEED_REBOOT: &str = "UPDATE_STATUS_UPDATED_NEED_REBOOT";

type Status = (i64, f64, String, String, i64);

struct Manager {
    status: Arc<Mutex<Status>>,
    version: String,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[zbus::interface(name = "com.coreos.update1.Manager")]
impl Manager {
    fn get_status(&self) -> Status {
        self.status.lock().expect("status").clone()
    }

    /// Checks for an update, finds one and installs it, each step broadcast as update_engine
    /// does; ends in UPDATED_NEED_REBOOT with the marker written. Ignored while one runs or when
    /// an update already waits for a reboot.
    fn attempt_update(&self, #[zbus(connection)] conn: &zbus::Connection) {
        {
            // (the check starts now: a second AttemptUpdate meanwhile is ignored)
            let mut s = self.status.lock().expect("status");
            if s.2 != "UPDATE_STATUS_IDLE" {
                println!("fake-update-engine: AttemptUpdate in {}: ignored", s.2);
                return;
            }
            s.2 = "UPDATE_STATUS_CHECKING_FOR_UPDATE".into();
        }
        let (conn, status, version) = (conn.clone(), self.status.clone(), self.version.clone());
        tokio::spawn(async move {
            let size = 300 << 20;
            let steps: [(&str, f64, &str, i64); 7] = [
                ("UPDATE_STATUS_CHECKING_FOR_UPDATE", 0.0, "", 0),
                ("UPDATE_STATUS_UPDATE_AVAILABLE", 0.0, &version, size),
                ("UPDATE_STATUS_DOWNLOADING", 0.5, &version, size),
                ("UPDATE_STATUS_DOWNLOADING", 1.0, &version, size),
                ("UPDATE_STATUS_VERIFYING", 0.0, &version, size),
                ("UPDATE_STATUS_FINALIZING", 0.0, &version, size),
                (NEED_REBOOT, 0.0, &version, size),
            ];
            let checked = now();
            for (op, progress, v, n) in steps {
                if op == NEED_REBOOT {
                    std::fs::write(MARKER, b"").expect("the marker");
                }
                let s: Status = (checked, progress, op.into(), v.into(), n);
                *status.lock().expect("status") = s.clone();
                println!("fake-update-engine: {op} {progress}");
                conn.emit_signal(None::<()>, PATH, IFACE, "StatusUpdate", &s)
                    .await
                    .expect("StatusUpdate");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
}

/// `forge PID`: see the module's text.
async fn forge(pid: u32) -> zbus::Result<()> {
    let conn = zbus::Connection::system().await?;
    let me = conn.unique_name().expect("a unique name").to_string();
    let bus = zbus::fdo::DBusProxy::new(&conn).await?;
    let owner = bus
        .get_name_owner("com.coreos.update1".try_into()?)
        .await
        .map_or_else(|_| String::new(), |o| o.to_string());
    let mut targets = Vec::new();
    for name in bus.list_names().await? {
        if name.starts_with(':') {
            let n = zbus::names::BusName::try_from(name.to_string())?;
            if bus.get_connection_unix_process_id(n).await.ok() == Some(pid) {
                targets.push(name.to_string());
            }
        }
    }
    println!("forge: as {me}, update_engine is {owner:?}; connections of pid {pid}: {targets:?}");
    let need: Status = (now(), 1.0, NEED_REBOOT.into(), "6666.6.6".into(), 1);
    for t in &targets {
        conn.emit_signal(
            Some(t.as_str()),
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "NameOwnerChanged",
            &("com.coreos.update1", owner.as_str(), me.as_str()),
        )
        .await?;
        println!("forge: NameOwnerChanged to {t}");
    }
    for t in std::iter::once(None).chain(targets.iter().map(|t| Some(t.as_str()))) {
        conn.emit_signal(t, PATH, IFACE, "StatusUpdate", &need)
            .await?;
        println!(
            "forge: StatusUpdate {NEED_REBOOT} to {}",
            t.unwrap_or("everyone")
        );
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> zbus::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("forge") {
        let pid = std::env::args()
            .nth(2)
            .and_then(|p| p.parse().ok())
            .expect("forge PID");
        return forge(pid).await;
    }
    let version = std::env::args().nth(1).unwrap_or_else(|| "9999.0.0".into());
    let ping: u64 = std::env::args()
        .nth(2)
        .map_or(2_700_000, |p| p.parse().expect("PING_MS: milliseconds"));
    let status: Status = if std::path::Path::new(MARKER).exists() {
        (0, 0.0, NEED_REBOOT.into(), "0.0.0".into(), 0)
    } else {
        (0, 0.0, "UPDATE_STATUS_IDLE".into(), String::new(), 0)
    };
    println!("fake-update-engine: starting in {}", status.2);
    let status = Arc::new(Mutex::new(status));
    let manager = Manager {
        status: status.clone(),
        version,
    };
    let conn = zbus::connection::Builder::system()
        .name("com.coreos.update1")
        .serve_at(PATH, manager)
        .build()
        .await?;
    println!("fake-update-engine: serving com.coreos.update1");
    loop {
        tokio::time::sleep(Duration::from_millis(ping)).await;
        let s = status.lock().expect("status").clone();
        if s.2 == NEED_REBOOT {
            // the periodic check: the same status, broadcast again
            conn.emit_signal(None::<()>, PATH, IFACE, "StatusUpdate", &s)
                .await?;
        }
    }
}
