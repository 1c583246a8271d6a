//! The reboot slots in a Lease on the double: contention, N slots, a node reading only its own Node,
//! and 200 nodes rebooting through one group with N=3 (the Lease history never shows more than
//! 3 holders; requests per node printed).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nodectl::reboot::lease::{entry_key, LeaseLock, ENTRY_SUFFIX};
use nodectl::reboot::slots::{Acquire, Holder, Release, Sightings, Slots};
use nodectl_apiserver_double::{Double, Options};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn lock(api: &Double, group: &str) -> LeaseLock {
    let kc = api
        .client_kubeconfig("system:node:sim", &["system:nodes"])
        .unwrap();
    LeaseLock::new(common::client_for(&kc).await, "nodectl-reboot", group)
}

/// A double with `packaging/kubernetes/reboot-lease-policy.yaml`'s admission, as a cluster
/// that applied nodectl's manifests has it (the double's default).
async fn with_lease_policy() -> Double {
    Double::start(Options::default()).await.unwrap()
}

/// A double without the Lease policy, for the tests where one client plays every node
/// (`system:node:sim` writes the entries of n1, n2, ... node-199): what they check is the slot
/// arithmetic under contention, and the policy would refuse a node writing another's entry. The
/// policy itself is checked by `lease_policy_cel.rs` and `refusals.rs`, and the reboot tests of
/// several nodes (`fleetlock.rs`, `reboot_gates.rs`, `fleet_writes.rs`,
/// `update_engine_private_bus.rs`, the plugin's) run under it, each node with its own
/// credentials.
async fn one_client_plays_every_node() -> Double {
    Double::start(Options {
        reboot_lease_policy: false,
        ..Options::default()
    })
    .await
    .unwrap()
}

/// The holders each stored version shows (one annotation per holder).
fn holders_in(history: &[serde_json::Value]) -> Vec<Slots> {
    history
        .iter()
        .map(|l| Slots {
            holders: l["metadata"]["annotations"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| k.ends_with(ENTRY_SUFFIX))
                .map(|(_, v)| serde_json::from_str(v.as_str().unwrap()).unwrap())
                .collect(),
            ..Slots::default()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_contend_for_one_slot_and_n_2_lets_both_go() {
    let api = one_client_plays_every_node().await;
    let l = lock(&api, "default").await;
    let (a, _) = l
        .modify(|s| s.acquire("a", "n1", "boot-1", now(), 1))
        .await
        .unwrap();
    assert_eq!(a, Acquire::Obtained);
    let (b, _) = l
        .modify(|s| s.acquire("b", "n2", "boot-1", now(), 1))
        .await
        .unwrap();
    assert_eq!(
        b,
        Acquire::Full {
            holders: vec!["n1".into()]
        }
    );
    // Asking again is idempotent for the holder.
    let (a2, _) = l
        .modify(|s| s.acquire("a", "n1", "boot-1", now(), 1))
        .await
        .unwrap();
    assert_eq!(a2, Acquire::Retained);
    let (r, _) = l.modify(|s| s.release("n1")).await.unwrap();
    assert_eq!(r, Release::Released);
    let (b, _) = l
        .modify(|s| s.acquire("b", "n2", "boot-1", now(), 1))
        .await
        .unwrap();
    assert_eq!(b, Acquire::Obtained);

    // Another group with two slots: both go.
    let w = lock(&api, "workers").await;
    assert_eq!(
        w.modify(|s| s.acquire("c", "n3", "boot-1", now(), 2))
            .await
            .unwrap()
            .0,
        Acquire::Obtained
    );
    assert_eq!(
        w.modify(|s| s.acquire("d", "n4", "boot-1", now(), 2))
            .await
            .unwrap()
            .0,
        Acquire::Obtained
    );
    let stored = w.read().await.unwrap();
    assert_eq!(stored.holders.len(), 2);
    let history = api.lease_history();
    let last = history.last().unwrap();
    assert_eq!(last["metadata"]["name"], "reboot-workers");
    assert_eq!(last["spec"]["holderIdentity"], "n3");
    assert_eq!(last["spec"]["leaseTransitions"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleetlock_group_that_is_no_object_name_still_gets_a_lease_of_its_own() {
    let api = one_client_plays_every_node().await;
    // The protocol allows `Workers`; the API server refuses it in a name (422, as upstream).
    let kc = api
        .client_kubeconfig("system:node:sim", &["system:nodes"])
        .unwrap();
    let raw: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(common::client_for(&kc).await, "nodectl-reboot");
    let mut bad = k8s_openapi::api::coordination::v1::Lease::default();
    bad.metadata.name = Some("reboot-Workers".into());
    match raw.create(&Default::default(), &bad).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (422, "Invalid")),
        other => panic!("{other:?}"),
    }
    let upper = lock(&api, "Workers").await;
    let lower = lock(&api, "workers").await;
    let (a, _) = upper
        .modify(|s| s.acquire("a", "n1", "boot-1", now(), 1))
        .await
        .unwrap();
    assert_eq!(a, Acquire::Obtained);
    // A different group: its own slot.
    let (b, _) = lower
        .modify(|s| s.acquire("b", "n2", "boot-1", now(), 1))
        .await
        .unwrap();
    assert_eq!(b, Acquire::Obtained);
    assert!(upper.read().await.unwrap().holds("n1"));
    let names: std::collections::BTreeSet<String> = api
        .lease_history()
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains("reboot-workers"), "{names:?}");
}

/// Issue 37, 10: a node may read no Node but its own (the double answers as the Node
/// authorizer does, and the shipped RBAC grants no more): another node's is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reads_its_own_node_only() {
    let api = Double::start(Options::default()).await.unwrap();
    api.set_node("n1", true);
    api.set_node("n2", true);
    let kc = api
        .client_kubeconfig("system:node:n1", &["system:nodes"])
        .unwrap();
    let client = common::client_for(&kc).await;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    nodes.get("n1").await.unwrap();
    let e = nodes.get("n2").await.unwrap_err().to_string();
    assert!(
        e.contains("node 'n1' cannot read 'n2', only its own Node object"),
        "{e}"
    );
    let e = nodes
        .list(&Default::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read all nodes"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_nodes_reboot_through_one_group_never_more_than_three_at_once() {
    const NODES: usize = 200;
    const SLOTS: usize = 3;
    let api = one_client_plays_every_node().await;
    let l = Arc::new(lock(&api, "default").await);
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..NODES {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            let (id, node) = (format!("id-{i:03}"), format!("node-{i:03}"));
            let mut requests = 0u32;
            loop {
                requests += 1;
                let (got, _) = l
                    .modify(|s| s.acquire(&id, &node, "boot-1", now(), SLOTS))
                    .await
                    .unwrap();
                if got == Acquire::Obtained {
                    break;
                }
                // Zincati asks again later (every 5 minutes; scaled down here).
                let pause = 20 + (nodectl::util::jitter() * 30.0) as u64;
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await; // the reboot
            requests += 1;
            let (r, _) = l.modify(|s| s.release(&node)).await.unwrap();
            assert_eq!(r, Release::Released);
            requests
        }));
    }
    let mut per_node = Vec::new();
    for t in tasks {
        per_node.push(t.await.unwrap());
    }
    let history = api.lease_history();
    let versions = holders_in(&history);
    let max = versions.iter().map(|s| s.holders.len()).max().unwrap();
    assert!(max <= SLOTS, "{max} holders at once");
    assert_eq!(max, SLOTS, "the slots were never all used");
    let mut ever: BTreeMap<String, usize> = BTreeMap::new();
    for v in &versions {
        for h in &v.holders {
            *ever.entry(h.id.clone()).or_default() += 1;
        }
    }
    assert_eq!(ever.len(), NODES, "every node held a slot once");
    assert!(versions.last().unwrap().holders.is_empty());
    per_node.sort_unstable();
    let total: u32 = per_node.iter().sum();
    println!(
        "{NODES} nodes, {SLOTS} slots: {} Lease versions, {:.1} s; FleetLock requests per node: min {}, median {}, p95 {}, max {}, mean {:.1}",
        history.len(),
        start.elapsed().as_secs_f64(),
        per_node[0],
        per_node[NODES / 2],
        per_node[NODES * 95 / 100],
        per_node[NODES - 1],
        f64::from(total) / NODES as f64
    );
}

/// Every node may update the group's Lease: a holder list that does not parse is treated as
/// empty (its slots reclaimed, logged), not a permanent error that stops every reboot of the
/// group (issue 14, item 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_holder_list_is_reclaimed_not_a_permanent_error() {
    use k8s_openapi::api::coordination::v1::Lease;
    let api = one_client_plays_every_node().await;
    let l = lock(&api, "default").await;
    l.modify(|s| s.acquire("a", "n1", "boot-1", now(), 1))
        .await
        .unwrap();
    let kc = api
        .client_kubeconfig("system:node:sim", &["system:nodes"])
        .unwrap();
    let leases: kube::Api<Lease> =
        kube::Api::namespaced(common::client_for(&kc).await, "nodectl-reboot");
    let mut lease = leases.get("reboot-default").await.unwrap();
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(entry_key("n1"), "{not json".into());
    leases
        .replace("reboot-default", &Default::default(), &lease)
        .await
        .unwrap();
    assert_eq!(l.read().await.unwrap(), Slots::default());
    let (got, slots) = l
        .modify(|s| s.acquire("b", "n2", "boot-1", now(), 1))
        .await
        .unwrap();
    assert_eq!(got, Acquire::Obtained);
    assert!(slots.holds("n2"));
}

/// With the ValidatingAdmissionPolicy of packaging/kubernetes/reboot-lease-policy.yaml (modelled
/// by the double), a node adds, changes and removes only its own entry: it cannot free another's
/// slot nor take one in another's name, and a stale holder it reclaims is only left uncounted
/// (issue 14, item 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_lease_policy_a_node_writes_only_its_own_entry() {
    let api = with_lease_policy().await;
    let as_node = |n: &str| {
        api.client_kubeconfig(&format!("system:node:{n}"), &["system:nodes"])
            .unwrap()
    };
    let a = LeaseLock::new(
        common::client_for(&as_node("a")).await,
        "nodectl-reboot",
        "default",
    );
    let b = LeaseLock::new(
        common::client_for(&as_node("b")).await,
        "nodectl-reboot",
        "default",
    );
    let (got, _) = a
        .modify(|s| s.acquire("ida", "a", "boot-a", 100, 1))
        .await
        .unwrap();
    assert_eq!(got, Acquire::Obtained);
    // b can neither free a's slot...
    let e = b.modify(|s| s.release("a")).await.unwrap_err().to_string();
    assert!(
        e.contains("a node may remove only its own reboot slot entry"),
        "{e}"
    );
    // ...nor take one in another's name...
    let e = b
        .modify(|s| s.acquire("idc", "c", "boot-c", now(), 2))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("a node may add or change only its own"), "{e}");
    assert!(a.read().await.unwrap().holds("a"));
    // ...but takes the slot of a stale holder: a's entry stays, uncounted.
    let (got, slots) = b
        .modify(|s| {
            // (seen at 0 of b's clock, unchanged an hour and a second later: stale)
            let mut seen = Sightings::default();
            s.clone().reclaim(&mut seen, 0, 3600);
            s.reclaim(&mut seen, 3601, 3600);
            s.acquire("idb", "b", "boot-b", now(), 1)
        })
        .await
        .unwrap();
    assert_eq!(got, Acquire::Obtained);
    assert!(slots.holds("b") && !slots.holds("a"));
    let stored = b.read().await.unwrap();
    let nodes: Vec<&str> = stored.holders.iter().map(|h| h.node.as_str()).collect();
    assert_eq!(nodes, ["a", "b"], "a's entry is left to a");
    // a, back, releases its own.
    let (r, _) = a.modify(|s| s.release("a")).await.unwrap();
    assert_eq!(r, Release::Released);
    // An administrator (not matched by the policy) frees anyone's.
    let admin = LeaseLock::new(
        common::client_for(&api.client_kubeconfig("admin", &["system:masters"]).unwrap()).await,
        "nodectl-reboot",
        "default",
    );
    let (r, _) = admin.modify(|s| s.release("b")).await.unwrap();
    assert_eq!(r, Release::Released);
    assert!(admin.read().await.unwrap().holders.is_empty());
}

/// Issue 51, 1: with the Lease policy enforced (as `reboot-lease-policy.yaml` makes a real API
/// server), a node that puts in its own entry times far in the future, or leaves it frozen, or
/// writes it by a clock far off, does not stop its group: a waiting node sees the entry
/// unchanged for the limit by its own clock, counts the slot free and takes it writing only its
/// own entry, and every node of the group reboots in turn. (Before, the reclaim clamped the
/// other's times to now and wrote them back: the policy refused that write, so the slot never
/// aged and the group stayed blocked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_dated_frozen_or_skewed_holder_does_not_stop_the_groups_reboots() {
    let t = now();
    for (case, since, renewed) in [
        ("future-dated", u64::MAX, u64::MAX),
        ("frozen", t - 30, t - 30),
        ("a clock a year ahead", t + 365 * 86_400, t + 365 * 86_400),
    ] {
        let api = with_lease_policy().await;
        let as_node = |n: &str| {
            let kc = api
                .client_kubeconfig(&format!("system:node:{n}"), &["system:nodes"])
                .unwrap();
            async move { LeaseLock::new(common::client_for(&kc).await, "nodectl-reboot", "workers") }
        };
        let squatter = Holder {
            id: "x".into(),
            node: "squatter".into(),
            since,
            renewed,
            boot: "b".into(),
            hold: String::new(),
            checked: false,
        };
        let sq = squatter.clone();
        as_node("squatter")
            .await
            .modify(move |s| s.holders.push(sq.clone()))
            .await
            .unwrap_or_else(|e| panic!("{case}: the policy lets a node write its own entry: {e}"));
        for n in ["n1", "n2", "n3"] {
            let l = as_node(n).await;
            let mut seen = Sightings::default();
            let (got, _) = l
                .modify(|s| {
                    s.reclaim(&mut seen, 0, 60);
                    s.acquire(n, n, "boot-1", now(), 1)
                })
                .await
                .unwrap_or_else(|e| panic!("{case}: {n} asks: {e}"));
            assert_eq!(
                got,
                Acquire::Full {
                    holders: vec!["squatter".into()]
                },
                "{case}: {n} at its first sight"
            );
            let (got, _) = l
                .modify(|s| {
                    s.reclaim(&mut seen, 61, 60);
                    s.acquire(n, n, "boot-1", now(), 1)
                })
                .await
                .unwrap_or_else(|e| {
                    panic!("{case}: {n} reclaims (writing only its own entry): {e}")
                });
            assert_eq!(got, Acquire::Obtained, "{case}: {n} after the limit");
            let (r, _) = l.modify(|s| s.release(n)).await.unwrap();
            assert_eq!(r, Release::Released, "{case}: {n}");
        }
        let stored = as_node("n1").await.read().await.unwrap();
        assert_eq!(
            stored.holders,
            vec![squatter],
            "{case}: the squatter's entry as it wrote it"
        );
    }
}
