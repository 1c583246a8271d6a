//! Tier 1, issue 41: the reboot gates against the API double and the real Prometheus.
//!
//! - a pod matching `reboot.block_on_pods` on the node keeps it from taking a slot (it holds
//!   none while it waits: another node takes and gives back the group's only slot meanwhile),
//!   and it reboots once the pod is gone;
//! - Debian's real Prometheus, scraping Debian's real node_exporter, fires an alert on a
//!   textfile metric: the node waits, then reboots once the alert resolves; an always-firing
//!   alert in `reboot.ignore_alerts` never blocks; a Prometheus that does not answer blocks
//!   (`alerts_unreachable = "block"`) or not (`"allow"`);
//! - two nodes with `settle_secs = 20` reboot at least 20 s after the first one's release.
//!
//! Reboots are recorded, not made (logind is the nspawn tier's).

mod prom;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use nodectl::config::{AlertGate, RebootGates, Unreachable};
use nodectl::reboot::coordinator::{LeaseCoordinator, Policy};
use nodectl::reboot::fleetlock::{ClientParams, Coordinator as _};
use nodectl::reboot::gates::Gates;
use nodectl::reboot::lease::LeaseLock;
use nodectl::reboot::update_engine::Follower;
use nodectl_apiserver_double::{Double, Options, PodKind};

const GROUP: &str = "workers";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn client(api: &Double, node: &str) -> kube::Client {
    let kc = api
        .client_kubeconfig(&format!("system:node:{node}"), &["system:nodes"])
        .unwrap();
    let kc = nodectl::kubeconfig::parse(&kc, std::path::Path::new("kc")).unwrap();
    nodectl::kubeconfig::client(kc, false).await.unwrap()
}

/// `node`'s coordinator (kubelet active) in boot `boot`, with `gates` and `settle`.
async fn coordinator(
    api: &Double,
    node: &str,
    boot: &str,
    gates: &RebootGates,
) -> Arc<LeaseCoordinator> {
    let c = client(api, node).await;
    let policy = Policy {
        group: GROUP.into(),
        gates: Gates::new(gates).unwrap(),
        settle: Duration::from_secs(gates.settle_secs),
        ..Policy::default()
    };
    Arc::new(
        LeaseCoordinator::new(
            Arc::new(move || {
                let c = c.clone();
                async move { Ok(c) }.boxed()
            }),
            node,
            node,
            policy,
            Arc::new(|| async { true }.boxed()),
        )
        .with_boot_id(boot),
    )
}

/// A follower of `c` whose reboots are counted (and timed) instead of made.
fn follower(c: &Arc<LeaseCoordinator>, node: &str, rebooted: Arc<Mutex<Vec<Instant>>>) -> Follower {
    Follower {
        coordinator: c.clone(),
        params: ClientParams {
            id: node.into(),
            group: GROUP.into(),
        },
        retry: Duration::from_millis(100),
        reboot: Arc::new(move || {
            rebooted.lock().unwrap().push(Instant::now());
            async { Ok(()) }.boxed()
        }),
        inhibited: None,
    }
}

/// Waits (up to `limit`, a hang guard) until `what` holds.
async fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_pod_keeps_the_node_from_taking_a_slot_until_it_is_gone() {
    let api = Double::start(Options::default()).await.unwrap();
    for n in ["w1", "w2"] {
        api.set_node(n, true);
    }
    api.add_pod("ops", "backup-1", "w1", PodKind::Plain);
    api.label_pod("ops", "backup-1", &[("app", "backup")]);
    // The same workload on another node, and another workload here: neither blocks w1.
    api.add_pod("ops", "backup-9", "w2", PodKind::Plain);
    api.label_pod("ops", "backup-9", &[("app", "backup")]);
    api.add_pod("web", "front", "w1", PodKind::Plain);
    api.label_pod("web", "front", &[("app", "web")]);
    let gates = RebootGates {
        block_on_pods: vec!["app=backup".into(), "tier in (db)".into()],
        ..Default::default()
    };
    let c = coordinator(&api, "w1", "boot-1", &gates).await;
    let rebooted = Arc::new(Mutex::new(Vec::new()));
    let f = follower(&c, "w1", rebooted.clone());
    let run = tokio::spawn(async move { f.reboot_for_update().await });

    until(Duration::from_secs(10), "blocked by the pod", || {
        c.status().state == "blocked"
    })
    .await;
    let st = c.status();
    assert!(
        st.detail.contains("ops/backup-1 (app=backup)") && !st.detail.contains("backup-9"),
        "{}",
        st.detail
    );
    // It holds no slot while it waits: w2 takes the group's only slot and gives it back.
    let w2 = LeaseLock::new(client(&api, "w2").await, "nodectl-reboot", GROUP);
    let (got, _) = w2
        .modify(|s| s.acquire("w2", "w2", "b", now(), 1))
        .await
        .unwrap();
    assert_eq!(got, nodectl::reboot::slots::Acquire::Obtained);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!w2.read().await.unwrap().holds("w1"));
    assert_eq!(c.status().state, "blocked");
    w2.modify(|s| s.release("w2")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        rebooted.lock().unwrap().is_empty(),
        "rebooted with the pod running"
    );

    // The backup ends: the slot is taken, the node drained and rebooted.
    api.delete_pod("ops", "backup-1");
    tokio::time::timeout(Duration::from_secs(15), run)
        .await
        .expect("rebooted once the pod was gone")
        .unwrap()
        .unwrap();
    assert_eq!(rebooted.lock().unwrap().len(), 1);
    assert!(w2.read().await.unwrap().holds("w1"));
    assert!(!api.pods_on("w1").contains(&"front".to_string()), "drained");
}

const RULES: &str = "groups:
  - name: maintenance
    interval: 1s
    rules:
      - alert: MaintenanceHold
        expr: nodectl_test_hold > 0
      - alert: Watchdog
        expr: vector(1)
";

fn hold(dir: &std::path::Path, v: u32) {
    // (renamed in: node_exporter never reads half a file)
    std::fs::write(dir.join("hold.tmp"), format!("nodectl_test_hold {v}\n")).unwrap();
    std::fs::rename(dir.join("hold.tmp"), dir.join("hold.prom")).unwrap();
}

fn alert_gate(url: &str, unreachable: Unreachable) -> RebootGates {
    RebootGates {
        alerts: Some(AlertGate {
            url: url.into(),
            block: ".*".into(),
            ignore: vec!["Watchdog".into()],
            pending: false,
            unreachable,
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_alert_of_the_real_prometheus_holds_the_reboot_until_it_resolves() {
    let d = tempfile::tempdir().unwrap();
    let textfiles = d.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    hold(&textfiles, 1);
    let ne = prom::node_exporter(&textfiles);
    let prometheus = prom::prometheus(d.path(), ne.addr, RULES);
    // (the named alert's own state, from Prometheus's JSON)
    let firing = |name: &str| {
        let Ok((_, body)) = prom::get(prometheus.addr, "/api/v1/alerts") else {
            return false;
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["labels"]["alertname"] == name && a["state"] == "firing")
    };
    until(Duration::from_secs(60), "MaintenanceHold firing", || {
        firing("MaintenanceHold")
    })
    .await;

    let api = Double::start(Options::default()).await.unwrap();
    api.set_node("w1", true);
    let url = format!("http://{}", prometheus.addr);
    let c = coordinator(&api, "w1", "boot-1", &alert_gate(&url, Unreachable::Block)).await;
    let rebooted = Arc::new(Mutex::new(Vec::new()));
    let f = follower(&c, "w1", rebooted.clone());
    let run = tokio::spawn(async move { f.reboot_for_update().await });
    until(Duration::from_secs(15), "blocked by the alert", || {
        c.status().state == "blocked"
    })
    .await;
    let st = c.status();
    assert!(
        st.detail.contains("MaintenanceHold") && !st.detail.contains("Watchdog"),
        "{}",
        st.detail
    );
    let lease = LeaseLock::new(client(&api, "w1").await, "nodectl-reboot", GROUP);
    assert!(
        !lease.read().await.unwrap().holds("w1"),
        "a slot held while blocked"
    );
    assert!(rebooted.lock().unwrap().is_empty());

    // The maintenance is over: the metric drops, the alert resolves, the node reboots.
    hold(&textfiles, 0);
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("rebooted once the alert resolved")
        .unwrap()
        .unwrap();
    assert_eq!(rebooted.lock().unwrap().len(), 1);
    assert!(firing("Watchdog"), "the ignored alert fired throughout");
    assert!(lease.read().await.unwrap().holds("w1"));

    // A Prometheus that does not answer blocks by default, and says where it asked...
    let params = ClientParams {
        id: "w2".into(),
        group: GROUP.into(),
    };
    api.set_node("w2", true);
    let gone = "http://127.0.0.1:1";
    let c = coordinator(&api, "w2", "boot-1", &alert_gate(gone, Unreachable::Block)).await;
    let r = c.pre_reboot(&params).await.unwrap_err();
    assert_eq!(r.kind, "blocked", "{r:?}");
    assert!(r.value.contains("127.0.0.1:1/api/v1/alerts"), "{}", r.value);
    // ... and is let through with "allow" (the slot is then busy: w1 holds it).
    let c = coordinator(&api, "w2", "boot-1", &alert_gate(gone, Unreachable::Allow)).await;
    let r = c.pre_reboot(&params).await.unwrap_err();
    assert_eq!(r.kind, "lock_held", "{r:?}");
    drop(prometheus);
    drop(ne);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_with_a_settle_time_reboot_at_least_that_far_apart() {
    let api = Double::start(Options::default()).await.unwrap();
    for n in ["n1", "n2"] {
        api.set_node(n, true);
    }
    let gates = RebootGates {
        settle_secs: 20,
        ..Default::default()
    };
    let rebooted = Arc::new(Mutex::new(Vec::new()));
    let c1 = coordinator(&api, "n1", "n1-boot-1", &gates).await;
    follower(&c1, "n1", rebooted.clone())
        .reboot_for_update()
        .await
        .unwrap();
    // n2 wants its reboot while n1 holds the slot.
    let c2 = coordinator(&api, "n2", "n2-boot-1", &gates).await;
    let f2 = follower(&c2, "n2", rebooted.clone());
    let run = tokio::spawn(async move { f2.reboot_for_update().await });
    until(Duration::from_secs(10), "n2 waits for the slot", || {
        c2.status().state == "waiting-for-slot"
    })
    .await;
    // n1 is back (another boot) and Ready: it releases, and its release stays in the Lease.
    let c1 = coordinator(&api, "n1", "n1-boot-2", &gates).await;
    follower(&c1, "n1", rebooted.clone()).steady_state().await;
    let released = Instant::now();
    let lease = LeaseLock::new(client(&api, "n1").await, "nodectl-reboot", GROUP);
    let slots = lease.read().await.unwrap();
    assert!(slots.holders.is_empty());
    assert_eq!(slots.released.len(), 1, "{slots:?}");
    assert_eq!(slots.released[0].settle, 20);
    until(Duration::from_secs(10), "n2 settles", || {
        c2.status().state == "settling"
    })
    .await;
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("n2 rebooted after the settle time")
        .unwrap()
        .unwrap();
    let times = rebooted.lock().unwrap().clone();
    assert_eq!(times.len(), 2);
    let apart = times[1].duration_since(released);
    assert!(
        apart >= Duration::from_secs(20),
        "n2 rebooted {apart:?} after n1's release"
    );
    // n1's released entry goes once the group has settled.
    let t = Instant::now();
    while !lease.read().await.unwrap().released.is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "n1's released entry stayed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
