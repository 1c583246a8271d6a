//! Tier 1 (issue 65, 1 and 2): the real nodectld, its reboot coordination failing to start, ending
//! and started again after a backoff, and Zincati's configuration pointing elsewhere: each said
//! in the status, the Node's condition and annotation, and the metrics; and cleared once fixed.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
mod prom;
use common::{status, Bus};

/// The backoff's timers a tenth of the real ones (10 s -> 1 s).
const TIMERS: &str = "scale=1/10";

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_daemon(root: &Path, system_bus: &str, serve_bus: bool) -> Daemon {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nodectld"));
    c.arg("--root")
        .arg(root)
        .args(["--debounce-ms", "50"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", system_bus)
        .env("NODECTL_TEST_TIMERS", TIMERS)
        .env_remove("JOURNAL_STREAM")
        .env_remove("NOTIFY_SOCKET");
    if !serve_bus {
        c.arg("--no-bus");
    }
    Daemon(c.spawn().unwrap())
}

/// Waits (up to 20 s) until `pred` holds of what `get` returns.
async fn until<T: std::fmt::Debug>(
    what: &str,
    mut get: impl AsyncFnMut() -> Option<T>,
    pred: impl Fn(&T) -> bool,
) -> T {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(v) = get().await {
            if pred(&v) {
                return v;
            }
            last = Some(v);
        }
        if start.elapsed() > Duration::from_secs(20) {
            panic!("timed out waiting for {what}; last: {last:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the Node's `nodectl.io/reboot-state` annotation is `state` and a Warning Event
/// with `reason` was sent.
async fn told(api: &nodectl_apiserver_double::Double, state: &str, reason: &str) {
    until("the annotation", async || annotation(api), |a| a == state).await;
    until(
        "an Event",
        async || Some(api.stored_events()),
        |e| {
            e.iter()
                .any(|e| e["reason"] == reason && e["type"] == "Warning")
        },
    )
    .await;
}

/// Waits until coordination is up again in the metrics and the Node's condition is True.
async fn back_up(root: &Path, api: &nodectl_apiserver_double::Double) {
    until(
        "metric up 1",
        async || metrics(root),
        |m| m.contains("\nnodectl_reboot_coordination_up 1\n"),
    )
    .await;
    until(
        "the condition clears",
        async || node_condition(api),
        |c| c.0 == "True",
    )
    .await;
}

/// `nodectl status`'s text for a status nodectld sent.
fn text(v: &serde_json::Value) -> String {
    serde_json::from_value::<nodectl::status::Status>(v.clone())
        .unwrap()
        .render()
}

fn metrics(root: &Path) -> Option<String> {
    std::fs::read_to_string(root.join("run/nodectl/metrics/nodectl.prom")).ok()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A worker's scratch root with `reboot` settings and a bootstrap kubeconfig for `api`.
fn worker_root(api: &nodectl_apiserver_double::Double, reboot: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    for dir in ["etc/nodectl/config.d", "etc/kubernetes", "run"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("etc/os-release"), "ID=debian\n").unwrap();
    std::fs::write(root.join("etc/resolv.conf"), "nameserver 10.0.0.2\n").unwrap();
    std::fs::write(
        root.join("etc/nodectl/config.d/10-node.toml"),
        format!("[node]\nrole = \"worker\"\nname = \"w1\"\n\n[reboot]\n{reboot}"),
    )
    .unwrap();
    std::fs::write(
        root.join("etc/kubernetes/kubeconfig"),
        api.bootstrap_kubeconfig("abcdef.0123456789abcdef"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let private = std::fs::Permissions::from_mode(0o600);
    std::fs::set_permissions(root.join("etc/kubernetes/kubeconfig"), private).unwrap();
    d
}

/// The NodectlReady condition on the Node as the API server has it: (status, reason, message).
fn node_condition(api: &nodectl_apiserver_double::Double) -> Option<(String, String, String)> {
    let n = api.node("w1")?;
    let c = n["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "NodectlReady")?
        .clone();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn annotation(api: &nodectl_apiserver_double::Double) -> Option<String> {
    api.node("w1")?["metadata"]["annotations"]["nodectl.io/reboot-state"]
        .as_str()
        .map(str::to_string)
}

/// FleetLock: a machine-id Zincati's id cannot be made from stops coordination from starting:
/// state `failed` with the file named, metric 0, condition False, annotation
/// `coordination-failed`, an Event; the machine-id fixed, the backoff's restart starts it (no
/// pass asked for). Then Typhoon's fleetlock fragment beside nodectl's: `uncoordinated`, named,
/// metric 0, condition False; removed: all clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleetlock_failing_to_start_restarts_and_zincati_pointed_elsewhere_is_said() {
    let bus = Bus::start();
    let api = nodectl_apiserver_double::Double::start(Default::default())
        .await
        .unwrap();
    api.set_node("w1", true);
    let port = free_port();
    let d = worker_root(
        &api,
        &format!("strategy = \"fleet-lock\"\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let root = d.path();
    std::fs::write(root.join("etc/machine-id"), "not-a-machine-id\n").unwrap();
    std::fs::create_dir_all(root.join("etc/zincati/config.d")).unwrap();
    let nodectl_fragment = root.join("etc/zincati/config.d/55-nodectl-fleetlock.toml");
    std::fs::write(
        &nodectl_fragment,
        include_str!("../../packaging/zincati/55-nodectl-fleetlock.toml")
            .replace("127.0.0.1:9455", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let _daemon = start_daemon(root, &bus.address, true);

    let v = until(
        "coordination failed",
        async || status(&bus).await,
        |v| v["coordination"]["state"] == "failed",
    )
    .await;
    let c = &v["coordination"];
    assert_eq!(c["strategy"], "fleet-lock", "{v:#}");
    assert!(
        c["error"].as_str().unwrap().contains("/etc/machine-id"),
        "{v:#}"
    );
    assert!(c["failures"].as_u64().unwrap() >= 1, "{v:#}");
    assert!(c["retry_at"].as_u64().is_some(), "{v:#}");
    assert!(v["reboot"].is_null(), "{v:#}");
    assert_eq!(c["zincati"]["state"], "coordinated", "{v:#}");
    let m = until(
        "metric up 0",
        async || metrics(root),
        |m| m.contains("\nnodectl_reboot_coordination_up 0\n"),
    )
    .await;
    assert!(
        m.contains("\nnodectl_reboot_zincati_coordinated 1\n"),
        "{m}"
    );
    let (st, _, msg) = until(
        "the condition says it",
        async || node_condition(&api),
        |c| c.1 == "RebootCoordinationFailed",
    )
    .await;
    assert_eq!(st, "False");
    assert!(
        msg.contains("reboot coordination (fleet-lock) failed: ")
            && msg.contains("/etc/machine-id"),
        "{msg}"
    );
    assert!(
        !msg.contains("not-a-machine-id"),
        "the file's content is not quoted: {msg}"
    );
    told(&api, "coordination-failed", "RebootCoordinationFailed").await;
    // nodectl status, for people (the daemon's status, as the CLI renders it)
    let out = text(&v);
    assert!(
        out.contains("Reboots: coordination failed (fleet-lock): "),
        "{out}"
    );

    // Fixed: the restart after the backoff starts it, with no pass asked for.
    std::fs::write(
        root.join("etc/machine-id"),
        "0123456789abcdef0123456789abcdef\n",
    )
    .unwrap();
    let v = until(
        "coordination up",
        async || status(&bus).await,
        |v| v["coordination"]["state"] == "up",
    )
    .await;
    assert_eq!(v["coordination"]["failures"], 0, "{v:#}");
    assert_eq!(v["daemon"]["last_pass"]["trigger"], "reboot", "{v:#}");
    assert_eq!(v["reboot"]["state"], "idle", "{v:#}");
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("FleetLock served");
    back_up(root, &api).await;

    // Typhoon's fleetlock addon's fragment sorts after nodectl's and wins.
    let typhoon = root.join("etc/zincati/config.d/55-update-strategy.toml");
    std::fs::write(
        &typhoon,
        "[updates]\nstrategy = \"fleet_lock\"\n[updates.fleet_lock]\nbase_url = \"http://10.3.0.15/\"\n",
    )
    .unwrap();
    until(
        "uncoordinated",
        async || status(&bus).await,
        |v| v["coordination"]["zincati"]["state"] == "uncoordinated",
    )
    .await;
    let v = until(
        "the audit flags it",
        async || status(&bus).await,
        |v| {
            v["audit"]["ids"]
                .as_array()
                .is_some_and(|ids| ids.iter().any(|i| i == "zincati-uncoordinated"))
        },
    )
    .await;
    let z = &v["coordination"]["zincati"];
    assert_eq!(
        z["base_url"]["from"],
        "/etc/zincati/config.d/55-update-strategy.toml"
    );
    assert_eq!(
        v["daemon"]["last_pass"]["trigger"], "config-change",
        "{v:#}"
    );
    let (st, reason, msg) = until(
        "the condition says it",
        async || node_condition(&api),
        |c| c.1 == "RebootUncoordinated",
    )
    .await;
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "RebootUncoordinated")
    );
    assert!(
        msg.contains("Zincati asks the FleetLock server at http://10.3.0.15/ (from /etc/zincati/config.d/55-update-strategy.toml)"),
        "{msg}"
    );
    told(&api, "uncoordinated", "RebootUncoordinated").await;
    until(
        "metric",
        async || metrics(root),
        |m| m.contains("\nnodectl_reboot_zincati_coordinated 0\n"),
    )
    .await;
    let out = text(&v);
    assert!(
        out.contains("Zincati: UNCOORDINATED: Zincati asks"),
        "{out}"
    );
    // The shipped alerts fire on these metrics: promtool's rule tests
    let m = metrics(root).unwrap();
    for name in [
        "nodectl_reboot_coordination_up",
        "nodectl_reboot_zincati_coordinated",
        "nodectl_reboot_drain_blocked_pods",
    ] {
        assert!(m.contains(&format!("# TYPE {name} gauge\n")), "{m}");
    }
    let (ok, said) = prom::promtool_check(&root.join("run/nodectl/metrics/nodectl.prom"));
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics: {said}\n{m}"
    );

    // `nodectl audit` names the fragment and the field
    let (rc, out, _) = common::nodectl(root, &["audit"]);
    assert_eq!(rc, 2, "{out}");
    assert!(
        out.contains("MEDIUM zincati-uncoordinated  /etc/zincati/config.d/55-update-strategy.toml (updates.fleet_lock.base_url)"),
        "{out}"
    );

    std::fs::remove_file(&typhoon).unwrap();
    let v = until(
        "coordinated again",
        async || status(&bus).await,
        |v| v["coordination"]["zincati"]["state"] == "coordinated",
    )
    .await;
    let v = if v["audit"]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i == "zincati-uncoordinated")
    {
        until(
            "the audit clears",
            async || status(&bus).await,
            |v| {
                !v["audit"]["ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|i| i == "zincati-uncoordinated")
            },
        )
        .await
    } else {
        v
    };
    assert!(
        text(&v).contains("Zincati: asks nodectld (http://127.0.0.1:"),
        "{}",
        text(&v)
    );
    until(
        "the condition clears",
        async || node_condition(&api),
        |c| c.0 == "True",
    )
    .await;
    until(
        "metric",
        async || metrics(root),
        |m| m.contains("\nnodectl_reboot_zincati_coordinated 1\n"),
    )
    .await;
    until("the annotation", async || annotation(&api), |a| a == "idle").await;
}

/// A dbus-daemon at a fixed address, to stop and start again (the system bus going away under
/// the update_engine follower, and coming back).
fn system_bus(dir: &Path) -> (Child, String) {
    let sock = dir.join("system_bus_socket");
    let _ = std::fs::remove_file(&sock);
    let address = format!("unix:path={}", sock.display());
    let child = Command::new("dbus-daemon")
        .args(["--session", "--nofork"])
        .arg(format!("--address={address}"))
        .stdout(Stdio::null())
        .spawn()
        .expect("dbus-daemon (Debian package dbus)");
    let start = Instant::now();
    while !sock.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no bus socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, address)
}

/// update_engine's follower ends when the system bus's streams end: state `ended`, metric 0; it
/// is started again after the backoff (failing while the bus is away: `failed`), and is up once
/// the bus is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_update_engine_follower_ending_is_said_and_restarted() {
    let api = nodectl_apiserver_double::Double::start(Default::default())
        .await
        .unwrap();
    api.set_node("w1", true);
    let d = worker_root(&api, "strategy = \"update-engine\"\n");
    let root = d.path();
    let busdir = tempfile::tempdir().unwrap();
    let (mut bus, address) = system_bus(busdir.path());
    // (nodectld's own interface is not served: the bus goes away under it)
    let _daemon = start_daemon(root, &address, false);
    until(
        "follower up",
        async || metrics(root),
        |m| m.contains("\nnodectl_reboot_coordination_up 1\n"),
    )
    .await;

    let _ = bus.kill();
    let _ = bus.wait();
    let m = until(
        "follower down",
        async || metrics(root),
        |m| m.contains("\nnodectl_reboot_coordination_up 0\n"),
    )
    .await;
    assert!(!m.contains("nodectl_reboot_zincati_coordinated"), "{m}");
    let (st, _, msg) = until(
        "the condition says it",
        async || node_condition(&api),
        |c| c.1 == "RebootCoordinationFailed",
    )
    .await;
    assert_eq!(st, "False");
    assert!(
        msg.contains("reboot coordination (update-engine) ended: following update_engine stopped")
            || msg.contains(
                "reboot coordination (update-engine) failed: connecting to the system bus"
            ),
        "{msg}"
    );

    let (mut bus, _) = system_bus(busdir.path());
    back_up(root, &api).await;
    let _ = bus.kill();
    let _ = bus.wait();
}
