//! Tier 1, Flatcar: a test service on a private bus stands in for update_engine
//! (`com.coreos.update1`: GetStatus, the StatusUpdate signal) and logind (`Reboot`). Until it
//! signals `UPDATE_STATUS_UPDATED_NEED_REBOOT` nothing happens, with the group's slot free (no
//! slot taken, no cordon, no reboot: a follower that reacted to another status would take it);
//! then nodectl waits for a slot of the group's Lease (held by another node by then), drains
//! through the API double, and reboots through logind; after the boot it releases the slot once
//! the Node is Ready. When logind refuses the reboot, the node keeps its slot and its cordon and
//! asks logind again (the follower used to end for good). Under the shipped Lease policy (the
//! double's default).

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use nodectl::reboot::coordinator::{LeaseCoordinator, Policy};
use nodectl::reboot::fleetlock::{ClientParams, Coordinator as _};
use nodectl::reboot::lease::LeaseLock;
use nodectl::reboot::update_engine::{logind_reboot, Follower, NEED_REBOOT};
use nodectl_apiserver_double::{Double, Options, PodKind};

/// update_engine answering `GetStatus` with this current operation ([`set_status`] changes it).
struct FakeUpdateEngine(&'static str);

#[zbus::interface(name = "com.coreos.update1.Manager")]
impl FakeUpdateEngine {
    fn get_status(&self) -> (i64, f64, String, String, i64) {
        (0, 0.0, self.0.into(), String::new(), 0)
    }
}

/// What update_engine's `GetStatus` answers from now on.
async fn set_status(service: &zbus::Connection, op: &'static str) {
    service
        .object_server()
        .interface::<_, FakeUpdateEngine>("/com/coreos/update1")
        .await
        .unwrap()
        .get_mut()
        .await
        .0 = op;
}

/// logind: counts the `Reboot` calls it took in `.0`, and refuses the first `.1` calls (as
/// logind refuses one it may not do: `AccessDenied`), counting them down.
struct FakeLogind(Arc<AtomicU32>, Arc<AtomicU32>);

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl FakeLogind {
    fn reboot(&self, interactive: bool) -> zbus::fdo::Result<()> {
        assert!(!interactive, "nodectl reboots non-interactively");
        let refuse = self.1.load(Ordering::SeqCst);
        if refuse > 0 {
            self.1.store(refuse - 1, Ordering::SeqCst);
            return Err(zbus::fdo::Error::AccessDenied(
                "Operation not permitted (the test's logind refuses)".into(),
            ));
        }
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn client(api: &Double, user: &str) -> kube::Client {
    let kc = api.client_kubeconfig(user, &["system:nodes"]).unwrap();
    let kc = nodectl::kubeconfig::parse(&kc, std::path::Path::new("kc")).unwrap();
    nodectl::kubeconfig::client(kc, false).await.unwrap()
}

/// flatcar-1's coordinator (kubelet active), in boot `boot` (`None`: this machine's).
async fn flatcar_1(api: &Double, boot: Option<&str>) -> Arc<LeaseCoordinator> {
    let c = client(api, "system:node:flatcar-1").await;
    let mut coordinator = LeaseCoordinator::new(
        Arc::new(move || {
            let c = c.clone();
            async move { Ok(c) }.boxed()
        }),
        "flatcar-1",
        "flatcar-1",
        Policy::default(),
        Arc::new(|| async { true }.boxed()),
    );
    if let Some(b) = boot {
        coordinator = coordinator.with_boot_id(b);
    }
    Arc::new(coordinator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_waiting_for_reboot_takes_a_slot_drains_and_reboots_through_logind() {
    let bus = common::Bus::start();
    let reboots = Arc::new(AtomicU32::new(0));
    let _logind = fake_logind(&bus.address, &reboots).await;
    let service = fake_update_engine(&bus.address, "UPDATE_STATUS_IDLE")
        .await
        .unwrap();

    let api = Double::start(Options::default()).await.unwrap();
    api.set_node("flatcar-1", true);
    api.set_node("flatcar-2", true);
    api.add_pod("apps", "web-1", "flatcar-1", PodKind::Plain);
    let other = LeaseLock::new(
        client(&api, "system:node:flatcar-2").await,
        "nodectl-reboot",
        "default",
    );

    let coordinator = flatcar_1(&api, None).await;
    let (follower, agent_conn) = flatcar_1_follower(&bus.address, &coordinator).await;
    let follower = Arc::new(follower);
    let f = follower.clone();
    let conn = agent_conn.clone();
    let run = tokio::spawn(async move { f.run(&conn).await });

    // Idle, the group's slot free: nothing happens until update_engine says a reboot is needed,
    // whatever else it says on the way (update_engine's statuses before NEED_REBOOT).
    tokio::time::sleep(Duration::from_millis(300)).await;
    for op in [
        "UPDATE_STATUS_CHECKING_FOR_UPDATE",
        "UPDATE_STATUS_UPDATE_AVAILABLE",
        "UPDATE_STATUS_DOWNLOADING",
        "UPDATE_STATUS_VERIFYING",
        "UPDATE_STATUS_FINALIZING",
        "UPDATE_STATUS_REPORTING_ERROR_EVENT",
    ] {
        status_update(&service, &(1i64, 0.5f64, op, "4152.2.0", 123i64)).await;
    }
    // Signals that do not decode, or carry a huge version, are skipped: the follower goes on.
    status_update(&service, &("not", "the", "signature")).await;
    let huge = "9".repeat(1 << 20);
    status_update(
        &service,
        &(
            1i64,
            0.5f64,
            "UPDATE_STATUS_DOWNLOADING",
            huge.as_str(),
            123i64,
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!run.is_finished(), "a bad signal ended the follower");
    assert_eq!(reboots.load(Ordering::SeqCst), 0);
    assert!(
        !other.read().await.unwrap().holds("flatcar-1"),
        "a slot taken before update_engine said a reboot is needed"
    );
    assert!(
        api.node("flatcar-1").unwrap()["spec"]["unschedulable"].is_null(),
        "cordoned before update_engine said a reboot is needed"
    );
    assert_eq!(
        api.pods_on("flatcar-1"),
        ["web-1"],
        "drained before it was needed"
    );
    assert_eq!(coordinator.status().state, "idle");
    // Another node reboots first: it holds the group's only slot.
    other
        .modify(|s| s.acquire("flatcar-2", "flatcar-2", "boot-2", now(), 1))
        .await
        .unwrap();
    set_status(&service, NEED_REBOOT).await;
    status_update(&service, &(1i64, 1.0f64, NEED_REBOOT, "4152.2.0", 123i64)).await;
    // The slot is busy: it waits, without rebooting (polled for: a fixed sleep is a race on
    // a loaded machine).
    let t = std::time::Instant::now();
    while coordinator.status().state != "waiting-for-slot" {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "never waited for the slot: {}",
            coordinator.status().state
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(reboots.load(Ordering::SeqCst), 0);
    // While every slot is held it watches the Lease: no reads, however short its retry.
    let reads = || {
        api.requests()
            .iter()
            .filter(|(u, m, p)| {
                u == "system:node:flatcar-1" && m == "GET" && p.ends_with("/leases/reboot-default")
            })
            .count()
    };
    let before = reads();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(reads(), before, "the Lease read again while waiting");
    // update_engine says it again at each of its update checks while the update waits
    // (update_attempter.cc: a check in UPDATED_NEED_REBOOT broadcasts its status): more signals
    // than a signal stream queues (64) must not stop the connection logind is called on.
    for _ in 0..100 {
        status_update(&service, &(2i64, 1.0f64, NEED_REBOOT, "4152.2.0", 123i64)).await;
    }
    // The other node is back: the slot frees, nodectl takes it, drains, reboots.
    other.modify(|s| s.release("flatcar-2")).await.unwrap();
    rebooted_once(run, &reboots, &coordinator).await;
    assert!(api.pods_on("flatcar-1").is_empty(), "drained");
    assert_eq!(
        api.node("flatcar-1").unwrap()["spec"]["unschedulable"],
        true
    );
    let held = other.read().await.unwrap();
    assert!(held.holds("flatcar-1"));

    // A steady-state in the same boot (nodectld restarted before logind rebooted) keeps it.
    let r = coordinator
        .steady_state(&follower.params)
        .await
        .unwrap_err();
    assert_eq!(r.kind, "reboot_pending", "{r:?}");
    assert!(other.read().await.unwrap().holds("flatcar-1"));

    // After the boot (another boot id): not Ready yet keeps the slot; Ready releases it and
    // uncordons.
    let coordinator = flatcar_1(&api, Some("after-the-reboot")).await;
    let follower = Arc::new(Follower {
        coordinator: coordinator.clone(),
        params: follower.params.clone(),
        retry: Duration::from_millis(100),
        reboot: logind_reboot(agent_conn.clone()),
        inhibited: None,
    });
    api.set_node("flatcar-1", false);
    let f = follower.clone();
    let steady = tokio::spawn(async move { f.steady_state().await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(coordinator.status().state, "waiting-for-ready");
    assert!(other.read().await.unwrap().holds("flatcar-1"));
    api.set_node("flatcar-1", true);
    tokio::time::timeout(Duration::from_secs(5), steady)
        .await
        .expect("released once Ready")
        .unwrap();
    assert!(!other.read().await.unwrap().holds("flatcar-1"));
    assert!(api.node("flatcar-1").unwrap()["spec"]["unschedulable"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_waiting_for_a_slot_watches_it_and_one_node_takes_it_when_freed() {
    const WAITING: usize = 6;
    let api = Double::start(Options::default()).await.unwrap();
    api.set_node("holder", true);
    let holder = LeaseLock::new(
        client(&api, "system:node:holder").await,
        "nodectl-reboot",
        "default",
    );
    holder
        .modify(|s| s.acquire("holder", "holder", "boot-1", now(), 1))
        .await
        .unwrap();
    let rebooted = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut runs = Vec::new();
    for i in 0..WAITING {
        let name = format!("w{i}");
        api.set_node(&name, true);
        let c = client(&api, &format!("system:node:{name}")).await;
        let coordinator = Arc::new(LeaseCoordinator::new(
            Arc::new(move || {
                let c = c.clone();
                async move { Ok(c) }.boxed()
            }),
            &name,
            &name,
            Policy::default(),
            Arc::new(|| async { true }.boxed()),
        ));
        let (r, n) = (rebooted.clone(), name.clone());
        let follower = Follower {
            coordinator,
            params: ClientParams {
                id: name.clone(),
                group: "default".into(),
            },
            retry: Duration::from_millis(300),
            reboot: Arc::new(move || {
                r.lock().unwrap().push(n.clone());
                async { Ok(()) }.boxed()
            }),
            inhibited: None,
        };
        runs.push(tokio::spawn(
            async move { follower.reboot_for_update().await },
        ));
    }
    let by_waiting = |method: &str, suffix: &str| {
        api.requests()
            .iter()
            .filter(|(u, m, p)| {
                u.starts_with("system:node:w") && m == method && p.ends_with(suffix)
            })
            .count()
    };
    // Each asked once, found the slot held, and watches the Lease.
    let t = std::time::Instant::now();
    while by_waiting("GET", "/leases") < WAITING {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "not every node watches"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reads = by_waiting("GET", "/leases/reboot-default");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        by_waiting("GET", "/leases/reboot-default"),
        reads,
        "read again while the slot was held (5 retries' time)"
    );
    assert!(rebooted.lock().unwrap().is_empty());
    // Released: one node takes the slot within its jitter; the others see it taken and go on
    // watching (their jitter is up to the retry here: 300 ms; 20 s in production).
    let writes_before = by_waiting("PUT", "/leases/reboot-default");
    holder.modify(|s| s.release("holder")).await.unwrap();
    let t = std::time::Instant::now();
    while rebooted.lock().unwrap().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "nobody took the freed slot"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let winners = rebooted.lock().unwrap().clone();
    assert_eq!(winners.len(), 1, "{winners:?}");
    let slots = holder.read().await.unwrap();
    assert!(slots.holds(&winners[0]), "{slots:?}");
    // The winner's write (taking the slot, then its drain's renewal), and a loser's write only
    // where two jitters ended within one request of each other (a 409, then full).
    let writes = by_waiting("PUT", "/leases/reboot-default") - writes_before;
    assert!((1..=WAITING).contains(&writes), "{writes} Lease writes");
    for r in runs {
        r.abort();
    }
}

/// update_engine may start after nodectld, and a restarted update_engine with an update installed
/// says so by its status only (flatcar/update_engine update_attempter.cc: `UpdateAttempter`
/// starts in UPDATED_NEED_REBOOT when its completed-update marker exists, with no signal): the
/// follower asks its status whenever it comes on the bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_engine_coming_on_the_bus_with_an_update_installed_is_asked_and_the_node_reboots() {
    let bus = common::Bus::start();
    let reboots = Arc::new(AtomicU32::new(0));
    let _logind = fake_logind(&bus.address, &reboots).await;
    let api = Double::start(Options::default()).await.unwrap();
    api.set_node("flatcar-1", true);
    let coordinator = flatcar_1(&api, None).await;
    let run = tokio::spawn(follow(bus.address.clone(), coordinator.clone()));
    // Not on the bus: the follower waits for it (it used to end at the unanswered GetStatus).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !run.is_finished(),
        "the follower ended without update_engine"
    );
    // update_engine comes up idle, goes away, and comes back with an update installed.
    let service = |op| fake_update_engine(&bus.address, op);
    let idle = service("UPDATE_STATUS_IDLE").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        reboots.load(Ordering::SeqCst),
        0,
        "rebooted for an idle update_engine"
    );
    idle.close().await.unwrap();
    let _installed = service(NEED_REBOOT).await.unwrap();
    rebooted_once(run, &reboots, &coordinator).await;
}

/// logind refuses the reboot (twice): the follower does not end; the node keeps its slot and
/// its cordon (it is drained: giving the slot back would let another node reboot while this
/// one cannot), says why in its status, and asks logind again, which then reboots it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logind_refusing_the_reboot_keeps_the_slot_and_the_cordon_and_is_asked_again() {
    let bus = common::Bus::start();
    let reboots = Arc::new(AtomicU32::new(0));
    let _logind = refusing_logind(&bus.address, &reboots, 2).await;
    let _installed = fake_update_engine(&bus.address, NEED_REBOOT).await.unwrap();
    let api = Double::start(Options::default()).await.unwrap();
    api.set_node("flatcar-1", true);
    let coordinator = flatcar_1(&api, None).await;
    let lease = LeaseLock::new(
        client(&api, "system:node:flatcar-2").await,
        "nodectl-reboot",
        "default",
    );
    let run = tokio::spawn(follow(bus.address.clone(), coordinator.clone()));
    // the first refusal: still running, slot held, cordoned, the reason in its status
    let t = std::time::Instant::now();
    while !coordinator
        .status()
        .detail
        .contains("logind refused the reboot")
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no refusal seen: {:?}",
            coordinator.status()
        );
        assert!(!run.is_finished(), "the follower ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!run.is_finished(), "the follower ended at logind's refusal");
    assert_eq!(reboots.load(Ordering::SeqCst), 0);
    assert_eq!(coordinator.status().state, "rebooting");
    assert!(
        lease.read().await.unwrap().holds("flatcar-1"),
        "the slot given back"
    );
    assert_eq!(
        api.node("flatcar-1").unwrap()["spec"]["unschedulable"],
        true
    );
    // asked again (100 ms, then 200 ms): the third call reboots, once
    rebooted_once(run, &reboots, &coordinator).await;
    assert!(lease.read().await.unwrap().holds("flatcar-1"));
}

/// logind on the bus at `address`, counting its Reboot calls in `reboots`.
/// A signal is a wake-up, never the word (issue 64, item 2): only update_engine's answer to
/// `GetStatus` reboots. update_engine's own connection signalling NEED_REBOOT while its status
/// says otherwise reboots nothing (before issue 64 the signal's contents rebooted the node); nor
/// does a third connection that forges update_engine's change of owner, addressed to nodectld's
/// connection (the class of GLib's CVE-2024-34397; zbus checks that NameOwnerChanged comes from
/// the bus, kept here so a zbus that stops doing so is caught), then signals NEED_REBOOT itself,
/// to everyone and to nodectld alone. Once update_engine's status says NEED_REBOOT, its signal
/// wakes the follower, which asks, and the node reboots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_only_wake_the_follower_and_forged_ones_reboot_nothing() {
    let bus = common::Bus::start();
    let reboots = Arc::new(AtomicU32::new(0));
    let _logind = fake_logind(&bus.address, &reboots).await;
    let service = fake_update_engine(&bus.address, "UPDATE_STATUS_IDLE")
        .await
        .unwrap();
    let api = Double::start(Options::default()).await.unwrap();
    api.set_node("flatcar-1", true);
    let coordinator = flatcar_1(&api, None).await;
    let (follower, conn) = flatcar_1_follower(&bus.address, &coordinator).await;
    let nodectld = conn.unique_name().unwrap().to_owned();
    let run = tokio::spawn(async move { follower.run(&conn).await });
    // (the follower's matches in place: it asked update_engine's status first)
    tokio::time::sleep(Duration::from_millis(300)).await;
    let need = (1i64, 1.0f64, NEED_REBOOT, "6666.6.6", 123i64);
    status_update(&service, &need).await;
    let attacker = zbus::connection::Builder::address(bus.address.as_str())
        .build()
        .await
        .unwrap();
    let (ue, me) = (
        service.unique_name().unwrap().to_string(),
        attacker.unique_name().unwrap().to_string(),
    );
    attacker
        .emit_signal(
            Some(nodectld.clone()),
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "NameOwnerChanged",
            &("com.coreos.update1", ue.as_str(), me.as_str()),
        )
        .await
        .unwrap();
    for to in [None, Some(nodectld.clone())] {
        attacker
            .emit_signal(
                to,
                "/com/coreos/update1",
                "com.coreos.update1.Manager",
                "StatusUpdate",
                &need,
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        reboots.load(Ordering::SeqCst),
        0,
        "a signal rebooted the node"
    );
    assert!(!run.is_finished(), "the follower ended");
    assert_eq!(coordinator.status().state, "idle");
    assert!(
        api.node("flatcar-1").unwrap()["spec"]["unschedulable"].is_null(),
        "cordoned on a signal"
    );
    set_status(&service, NEED_REBOOT).await;
    status_update(&service, &need).await;
    rebooted_once(run, &reboots, &coordinator).await;
}

async fn fake_logind(address: &str, reboots: &Arc<AtomicU32>) -> zbus::Connection {
    refusing_logind(address, reboots, 0).await
}

/// As [`fake_logind`], refusing the first `refuse` Reboot calls.
async fn refusing_logind(address: &str, reboots: &Arc<AtomicU32>, refuse: u32) -> zbus::Connection {
    zbus::connection::Builder::address(address)
        .name("org.freedesktop.login1")
        .serve_at(
            "/org/freedesktop/login1",
            FakeLogind(reboots.clone(), Arc::new(AtomicU32::new(refuse))),
        )
        .build()
        .await
        .unwrap()
}

/// update_engine on the bus at `address`, its status `op`.
async fn fake_update_engine(address: &str, op: &'static str) -> zbus::Result<zbus::Connection> {
    zbus::connection::Builder::address(address)
        .name("com.coreos.update1")
        .serve_at("/com/coreos/update1", FakeUpdateEngine(op))
        .build()
        .await
}

/// flatcar-1's follower of update_engine (group `default`, retry 100 ms) on the bus at `address`,
/// and its connection.
async fn flatcar_1_follower(
    address: &str,
    coordinator: &Arc<LeaseCoordinator>,
) -> (Follower, zbus::Connection) {
    let conn = zbus::connection::Builder::address(address)
        .build()
        .await
        .unwrap();
    let follower = Follower {
        coordinator: coordinator.clone(),
        params: ClientParams {
            id: "flatcar-1".into(),
            group: "default".into(),
        },
        retry: Duration::from_millis(100),
        reboot: logind_reboot(conn.clone()),
        inhibited: None,
    };
    (follower, conn)
}

/// [`flatcar_1_follower`] run until it rebooted (or failed).
async fn follow(address: String, coordinator: Arc<LeaseCoordinator>) -> anyhow::Result<()> {
    let (follower, conn) = flatcar_1_follower(&address, &coordinator).await;
    follower.run(&conn).await
}

/// The follower's task ends within 10 s having asked logind to reboot once, in state `rebooting`.
async fn rebooted_once(
    run: tokio::task::JoinHandle<anyhow::Result<()>>,
    reboots: &AtomicU32,
    coordinator: &LeaseCoordinator,
) {
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("rebooted within 10 s")
        .unwrap()
        .unwrap();
    assert_eq!(
        reboots.load(Ordering::SeqCst),
        1,
        "logind's Reboot called once"
    );
    assert_eq!(coordinator.status().state, "rebooting");
}

/// update_engine's `StatusUpdate` signal (path, interface and member as the real service sends
/// it) with `body`: the real signature `(xdssx)` or, to test the follower, another.
async fn status_update<B>(service: &zbus::Connection, body: &B)
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    service
        .emit_signal(
            None::<()>,
            "/com/coreos/update1",
            "com.coreos.update1.Manager",
            "StatusUpdate",
            body,
        )
        .await
        .unwrap();
}
