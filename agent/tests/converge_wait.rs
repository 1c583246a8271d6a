//! Tier 1: `nodectl converge` and `status` against the real nodectld on a private bus: without
//! nodectld both say so by their exit code (4); `converge --wait` returns once the pass it asked
//! for ran (following nodectld's State signal), 0 when no step failed and 3 when one did, with
//! `--json`; a non-root caller is refused (1); nodectld's pass waits while another holds the
//! pass lock (`nodectl apply`'s).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{start_daemon, Bus};

fn nodectl(bus: &Bus, args: &[&str]) -> (i32, String, String) {
    // no --root: the CLI asks nodectld over the (private) system bus
    let out = Command::new(env!("CARGO_BIN_EXE_nodectl"))
        .args(args)
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch_root(root: &Path) {
    std::fs::create_dir_all(root.join("etc/nodectl/config.d")).unwrap();
    std::fs::write(
        root.join("etc/os-release"),
        "ID=debian\nPRETTY_NAME=\"Debian 12\"\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/resolv.conf"), "nameserver 10.0.0.2\n").unwrap();
    std::fs::write(
        root.join("etc/nodectl/config.d/10-node.toml"),
        "[node]\nrole = \"worker\"\nname = \"w1\"\n",
    )
    .unwrap();
}

#[test]
fn converge_waits_for_the_pass_it_asked_for_and_says_how_it_ended() {
    let bus = Bus::start();
    // nobody owns org.nodectl.Agent1 yet
    let (rc, _, err) = nodectl(&bus, &["converge"]);
    assert_eq!(rc, 4, "{err}");
    assert!(err.contains("nodectld is not running"), "{err}");
    let (rc, out, _) = nodectl(&bus, &["converge", "--wait", "--json"]);
    assert_eq!(rc, 4);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["error"], "nodectld is not running");
    let (rc, out, _) = nodectl(&bus, &["status", "--json"]);
    assert_eq!(
        rc, 4,
        "status without nodectld: what the disk shows, exit 4"
    );
    let st: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(st["daemon"]["running"], false);

    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    scratch_root(root);
    // another pass under way (`nodectl apply`'s lock): nodectld's first waits for it
    let held = nodectl::fsio::lock::try_pass_lock(&nodectl::root::Root::new(root))
        .unwrap()
        .unwrap();
    let _daemon = start_daemon(root, &bus);
    let daemon_status = || -> serde_json::Value {
        let (_, out, _) = nodectl(&bus, &["status", "--json"]);
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .filter(|v| v["source"] == "daemon")
            .unwrap_or_default()
    };
    let passes = || daemon_status()["daemon"]["passes"].as_u64().unwrap_or(0);
    let start = Instant::now();
    while daemon_status().is_null() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "nodectld on the bus"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(passes(), 0, "a pass ran while another held the pass lock");
    assert!(!root.join("etc/systemd/system/kubelet.service").exists());
    drop(held);
    let start = Instant::now();
    while passes() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "nodectld's first pass"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // `wait` through nodectld (no --root): its status, followed by its State signal
    let (rc, out, err) = nodectl(
        &bus,
        &["wait", "node-identity", "--timeout", "30", "--json"],
    );
    assert_eq!(rc, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["converged"], true, "{v}");
    if !nix::unistd::getuid().is_root() {
        let (rc, _, err) = nodectl(&bus, &["converge", "--wait"]);
        assert!(rc == 1 && err.contains("root only"), "{rc} {err}");
        return;
    }
    let before = passes();
    let (rc, out, err) = nodectl(&bus, &["converge", "--wait", "--json", "--timeout", "60"]);
    assert_eq!(rc, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["passes"].as_u64().unwrap() > before, "{v} after {before}");

    // a bundle that escapes its directory fails the secrets step: the pass asked for says so
    let inbox = root.join("var/lib/nodectl/inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let bad = inbox.join("assets");
    std::fs::write(&bad, "##### ../../etc/escape\nx\n").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&bad)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let start = Instant::now();
    loop {
        let (rc, out, err) = nodectl(&bus, &["converge", "--wait", "--json", "--timeout", "60"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        if rc == 3 {
            assert_eq!(v["ok"], false, "{v}");
            assert!(
                v["failed_steps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s == "secrets"),
                "{v}"
            );
            break;
        }
        // (the watcher may have run the failing pass first: then this pass is the second)
        assert_eq!(rc, 0, "{out}{err}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the failing pass: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // text: what failed, where to look
    let (rc, _, err) = nodectl(&bus, &["converge", "--wait"]);
    assert_eq!(rc, 3);
    assert!(err.contains("failed steps secrets"), "{err}");
}

/// A stop signal ends nodectld while its pass waits for the pass lock (held by `nodectl apply`,
/// whose own pass may wait for a job ordered after nodectld): the wait is cancelled with the
/// pass, not left on a thread that would keep the process from exiting.
#[test]
fn nodectld_stops_at_sigterm_while_its_pass_waits_for_the_lock() {
    let bus = Bus::start();
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    scratch_root(root);
    let held = nodectl::fsio::lock::try_pass_lock(&nodectl::root::Root::new(root))
        .unwrap()
        .unwrap();
    let mut daemon = start_daemon(root, &bus);
    let start = Instant::now();
    loop {
        let (_, out, _) = nodectl(&bus, &["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        // (on the bus it is `starting` for a moment, then `converging` while it waits)
        if v["source"] == "daemon" && v["daemon"]["state"] != "starting" {
            assert_eq!(v["daemon"]["passes"], 0);
            assert_eq!(v["daemon"]["state"], "converging", "{v}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "nodectld on the bus"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = daemon.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nodectld did not stop while its pass waited for the lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    drop(held);
}
