//! Tier 1: the real nodectld against a scratch root, serving org.nodectl.Agent1 on a private
//! dbus-daemon (standing in for the system bus). It wakes on inotify events and SIGHUP, never by
//! polling, and exits cleanly on SIGTERM.

use std::time::{Duration, Instant};

mod common;
mod prom;
use common::{start_daemon, status, Bus};

/// Waits (up to 10 s) until the daemon's status satisfies `pred`.
async fn until(
    bus: &Bus,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        if let Some(v) = status(bus).await {
            if pred(&v) {
                return v;
            }
            if start.elapsed() > Duration::from_secs(10) {
                panic!("timed out waiting for {what}; last status: {v:#}");
            }
        } else if start.elapsed() > Duration::from_secs(10) {
            panic!("timed out waiting for {what}: no status on the bus");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn step_state(v: &serde_json::Value, id: &str) -> String {
    v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .map(|s| s["state"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

fn step_detail(v: &serde_json::Value, id: &str) -> String {
    let s = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .cloned()
        .unwrap_or_default();
    format!("{} {}", s["detail"], s["waiting_for"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_serves_status_and_wakes_on_events() {
    let bus = Bus::start();
    // Approval by hand, as `kubectl certificate approve` would.
    let api = nodectl_apiserver_double::Double::start(nodectl_apiserver_double::Options {
        approval: nodectl_apiserver_double::Approval::Manual,
        ..Default::default()
    })
    .await
    .unwrap();
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
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
    let mut daemon = start_daemon(root, &bus);

    // First pass: ready, waiting for the bootstrap kubeconfig, kubelet not started.
    let v = until(&bus, "ready", |v| v["daemon"]["ready"] == true).await;
    assert_eq!(v["source"], "daemon");
    assert_eq!(v["daemon"]["running"], true);
    assert_eq!(step_state(&v, "bootstrap-kubeconfig"), "waiting");
    assert_eq!(step_state(&v, "kubelet-running"), "blocked");
    assert!(
        v["daemon"]["status_line"]
            .as_str()
            .unwrap()
            .starts_with("waiting for bootstrap-kubeconfig"),
        "{v:#}"
    );
    assert_eq!(v["waiting_for"].as_array().unwrap().len(), 1);

    // The daemon idles: after the first pass (and at most one more, woken by the creation of
    // /etc/kubernetes, the directory it watches for the kubeconfig), no pass runs without an
    // event: no polling, and its own writes do not wake it in a loop.
    // Settled: no pass for 1 s (within 10 s; not a fixed sleep a loaded machine outlasts), then
    // a 3 s window with none (a poller of any period under 3 s shows in it).
    let passes_now = || async {
        status(&bus).await.unwrap()["daemon"]["passes"]
            .as_u64()
            .unwrap()
    };
    let start = std::time::Instant::now();
    let (mut passes, mut since) = (passes_now().await, std::time::Instant::now());
    while since.elapsed() < Duration::from_secs(1) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never quiet for 1 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let p = passes_now().await;
        if p != passes {
            (passes, since) = (p, std::time::Instant::now());
        }
    }
    assert!(passes <= 2, "{passes} passes at start");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = status(&bus).await.unwrap();
    assert_eq!(
        idle["daemon"]["passes"].as_u64().unwrap(),
        passes,
        "passes without events: {idle:#}"
    );

    // Provisioning drops the bootstrap kubeconfig: inotify wakes the daemon, which requests the
    // node's certificate and says it waits for approval; kubelet is not started meanwhile.
    std::fs::write(
        root.join("etc/kubernetes/kubeconfig"),
        api.bootstrap_kubeconfig("abcdef.0123456789abcdef"),
    )
    .unwrap();
    let v = until(&bus, "certificate request pending", |v| {
        step_detail(v, "kubelet-credentials").contains("pending approval")
    })
    .await;
    assert_eq!(step_state(&v, "kubelet-running"), "blocked", "{v:#}");
    assert!(v["credentials"].is_null(), "{v:#}");
    let name = api.csrs()[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        step_detail(&v, "kubelet-credentials").contains(&name),
        "{v:#}"
    );
    // Waiting on the watch is not polling: no passes while the request is pending.
    let waiting = v["daemon"]["passes"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        status(&bus).await.unwrap()["daemon"]["passes"].as_u64(),
        Some(waiting),
        "passes while waiting for approval"
    );
    // Approval: the request's end wakes a pass, which starts kubelet on the new credentials.
    api.approve(&name).unwrap();
    let v = until(&bus, "kubelet started", |v| {
        step_state(v, "kubelet-running") == "applied"
            || step_state(v, "kubelet-running") == "converged"
    })
    .await;
    assert_eq!(v["daemon"]["status_line"], "node converged");
    // Woken by the request's end, or by the certificate appearing in the watched key directory
    // (whichever comes first; the debounce folds the other into the same pass).
    let trigger = v["daemon"]["last_pass"]["trigger"]
        .as_str()
        .unwrap_or_default();
    assert!(
        trigger == "credentials" || trigger == "credential-change",
        "{v:#}"
    );
    assert_eq!(v["systemd_calls"]["start"], 1);
    assert_eq!(v["credentials"]["subject"], "system:node:w1", "{v:#}");
    let left = v["credentials"]["expires_in_s"].as_i64().unwrap();
    assert!((72 * 3600 - 60..=72 * 3600).contains(&left), "{v:#}");
    // The audit, summarised: the bootstrap token is still on disk, and this test wrote it
    // readable by others (0644).
    assert_eq!(
        v["audit"]["ids"],
        serde_json::json!(["bootstrap-token-on-disk", "key-mode"]),
        "{v:#}"
    );
    // Metrics for node_exporter's textfile collector, rewritten after each pass.
    let m = std::fs::read_to_string(root.join("run/nodectl/metrics/nodectl.prom")).unwrap();
    for want in [
        "# TYPE nodectl_credentials_expiry_timestamp_seconds gauge\n",
        "nodectl_kubelet_active 1\n",
        "nodectl_audit_findings{severity=\"high\"} 1\n",
        "nodectl_audit_findings{severity=\"medium\"} 1\n",
        "nodectl_failed_steps 0\n",
    ] {
        assert!(m.contains(want), "{want:?} not in:\n{m}");
    }
    let expiry: i64 = v["credentials"]["not_after"]
        .as_str()
        .unwrap()
        .parse::<jiff::Timestamp>()
        .unwrap()
        .as_second();
    assert!(
        m.contains(&format!(
            "\nnodectl_credentials_expiry_timestamp_seconds {expiry}\n"
        )),
        "{expiry} not in:\n{m}"
    );
    // The real tools take it: promtool's lint, and node_exporter's textfile collector serves it
    // (a file it cannot parse shows as node_textfile_scrape_error 1, its samples dropped).
    let metrics_dir = root.join("run/nodectl/metrics");
    let (ok, said) = prom::promtool_check(&metrics_dir.join("nodectl.prom"));
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics: {said}\n{m}"
    );
    // The shipped alert rules parse, and name only metrics nodectld writes.
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging/prometheus/nodectl-alerts.yaml");
    let (ok, said) = prom::promtool_check_rules(&rules);
    assert!(ok, "promtool check rules: {said}");
    let text = std::fs::read_to_string(&rules).unwrap();
    for name in text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("nodectl_"))
    {
        assert!(
            // (the reboot metrics need a reboot strategy: reboot_coordination_health.rs)
            m.contains(&format!("# TYPE {name} "))
                || [
                    "nodectl_reboot_state",
                    "nodectl_reboot_coordination_up",
                    "nodectl_reboot_zincati_coordinated",
                    "nodectl_reboot_drain_blocked_pods",
                ]
                .contains(&name),
            "the alert rules use {name}, which nodectld does not write:\n{m}"
        );
    }
    let scraped = prom::node_exporter_scrape(&metrics_dir);
    for want in [
        "\nnode_textfile_scrape_error 0\n",
        "\n# TYPE nodectl_passes_total counter\n",
        "\nnodectl_kubelet_active 1\n",
        "\nnodectl_step_state{state=\"converged\",step=\"secrets\"} 1\n",
    ] {
        assert!(
            scraped.contains(want),
            "{want:?} not in node_exporter's:\n{scraped}"
        );
    }
    assert!(
        scraped.contains("\nnodectl_build_info{version=\""),
        "{scraped}"
    );
    // Every request nodectld made carried its own User-Agent.
    assert_eq!(
        api.user_agents(),
        [nodectl::kubeconfig::USER_AGENT],
        "{:?}",
        api.user_agents()
    );

    // Someone changes a credential (a chmod here; a chcon or a `:z` mount on SELinux hosts):
    // a pass runs at once, not at the next resync.
    use std::os::unix::fs::PermissionsExt;
    // (the link names a node path; in this scratch root it lies under `root`)
    let link =
        std::fs::read_link(root.join("var/lib/kubelet/pki/kubelet-client-current.pem")).unwrap();
    let key = root.join(link.strip_prefix("/").unwrap());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    until(&bus, "a pass on the credential change", |v| {
        v["daemon"]["last_pass"]["trigger"] == "credential-change"
    })
    .await;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

    // kubelet rotates the certificate itself (rotateCertificates: true) in the store nodectld
    // seeded, as client-go's fileStore.Update does: a new timestamped file, then a
    // `kubelet-client-updated.pem` link renamed over `kubelet-client-current.pem`. The daemon
    // notices the new link at once (status shows the new certificate) and asks for nothing.
    let passes = status(&bus).await.unwrap()["daemon"]["passes"]
        .as_u64()
        .unwrap();
    let kc = api
        .client_kubeconfig("system:node:w1", &["system:nodes"])
        .unwrap();
    common::kubelet_rotates(root, &kc);
    let v = until(
        &bus,
        "status shows the certificate kubelet rotated to",
        |v| {
            v["credentials"]["expires_in_s"]
                .as_i64()
                .is_some_and(|s| s <= 24 * 3600)
        },
    )
    .await;
    assert_eq!(
        v["daemon"]["last_pass"]["trigger"], "credential-change",
        "{v:#}"
    );
    assert!(v["daemon"]["passes"].as_u64().unwrap() > passes);
    assert_eq!(api.csrs().len(), 1, "nodectld requested nothing");

    // A broken config fragment: the daemon reports it (file and key) and keeps running.
    std::fs::write(
        root.join("etc/nodectl/config.d/20-bad.toml"),
        "[kubelet]\nimgae = \"x\"\n",
    )
    .unwrap();
    let v = until(&bus, "config error", |v| !v["config_error"].is_null()).await;
    let e = v["config_error"].as_str().unwrap();
    assert!(
        e.contains("20-bad.toml")
            && e.contains("kubelet.imgae")
            && e.contains("did you mean `image`"),
        "{e}"
    );
    std::fs::remove_file(root.join("etc/nodectl/config.d/20-bad.toml")).unwrap();
    until(&bus, "config fixed", |v| {
        v["config_error"].is_null() && v["daemon"]["status_line"] == "node converged"
    })
    .await;

    // SIGHUP runs a pass.
    let before = status(&bus).await.unwrap()["daemon"]["passes"]
        .as_u64()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.0.id() as i32),
        nix::sys::signal::SIGHUP,
    )
    .unwrap();
    let v = until(&bus, "sighup pass", |v| {
        v["daemon"]["passes"].as_u64().unwrap() > before
    })
    .await;
    assert_eq!(v["daemon"]["last_pass"]["trigger"], "sighup");

    // SIGTERM: clean exit.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.0.id() as i32),
        nix::sys::signal::SIGTERM,
    )
    .unwrap();
    let start = Instant::now();
    loop {
        if let Some(st) = daemon.0.try_wait().unwrap() {
            assert!(st.success(), "nodectld exit: {st:?}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "nodectld did not exit on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
