//! Tier 1: the real nodectld reports its `NodectlReady` condition to its own Node (the API
//! double standing in for the API server, NodeRestriction modelled): nothing before the node
//! has its own credentials and nothing with the bootstrap token; `True` once converged, `False`
//! with the failed step as reason while a step fails, back to `True`; heartbeats spaced as
//! configured, the annotations only on change, one SelfSubjectReview for the node's certificate;
//! `nodectl status` and the metrics show what was sent and when.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{start_daemon, Bus};

fn condition(api: &nodectl_apiserver_double::Double, node: &str) -> Option<serde_json::Value> {
    api.node(node)?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "NodectlReady")
        .cloned()
}

async fn until_condition(
    api: &nodectl_apiserver_double::Double,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        if let Some(c) = condition(api, "w1") {
            if pred(&c) {
                return c;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}; condition {:?}",
            condition(api, "w1")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn node_requests(api: &nodectl_apiserver_double::Double) -> Vec<(String, String, String)> {
    api.requests()
        .into_iter()
        .filter(|(_, _, p)| p.starts_with("/api/v1/nodes"))
        .collect()
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
        "[node]\nrole = \"worker\"\nname = \"w1\"\n[kubelet]\ncondition_heartbeat_secs = 1\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_condition_follows_the_steps_and_beats_as_configured() {
    let bus = Bus::start();
    let api = nodectl_apiserver_double::Double::start(Default::default())
        .await
        .unwrap();
    api.set_node("w1", true);
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    scratch_root(root);
    let _daemon = start_daemon(root, &bus);
    // Without credentials of its own, nothing is sent; then the bootstrap kubeconfig arrives.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        node_requests(&api),
        vec![],
        "before the node has credentials"
    );
    std::fs::write(
        root.join("etc/kubernetes/kubeconfig"),
        api.bootstrap_kubeconfig("abcdef.0123456789abcdef"),
    )
    .unwrap();
    let up = until_condition(&api, "True", |c| c["status"] == "True").await;
    assert_eq!(up["reason"], "Converged");
    // The annotations follow in the report's second request (the condition is patched on the
    // status subresource first): wait for that one too.
    let start = Instant::now();
    let annotations = loop {
        let a = api.node("w1").unwrap()["metadata"]["annotations"].clone();
        if !a["nodectl.io/reboot-state"].is_null() || start.elapsed() > Duration::from_secs(20) {
            break a;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for (user, method, path) in node_requests(&api) {
        assert_eq!(user, "system:node:w1", "{method} {path} sent as {user}");
    }
    assert_eq!(
        annotations["nodectl.io/reboot-state"], "idle",
        "{annotations}"
    );
    assert_eq!(
        annotations["nodectl.io/agent-version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(annotations["nodectl.io/certificate-not-after"]
        .as_str()
        .unwrap()
        .ends_with('Z'));

    // Heartbeats: one a second as configured (not one per pass, not a tight loop); the
    // transition time stays.
    let count = || {
        node_requests(&api)
            .iter()
            .filter(|(_, m, p)| m == "PATCH" && p == "/api/v1/nodes/w1/status")
            .count()
    };
    // The annotations are written only when they change, never as a heartbeat; the
    // SelfSubjectReview only for a new certificate (here: the first) or after a 401.
    let metas = || {
        node_requests(&api)
            .iter()
            .filter(|(_, m, p)| m == "PATCH" && p == "/api/v1/nodes/w1")
            .count()
    };
    let reviews = || {
        api.requests()
            .iter()
            .filter(|(_, _, p)| p == "/apis/authentication.k8s.io/v1/selfsubjectreviews")
            .count()
    };
    let start = Instant::now();
    while reviews() == 0 && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (n0, m0, t0) = (count(), metas(), Instant::now());
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let beats = count() - n0;
    assert!(
        (2..=5).contains(&beats),
        "{beats} heartbeats in {:?}",
        t0.elapsed()
    );
    assert_eq!(metas(), m0, "annotations written again with no change");
    assert_eq!(
        reviews(),
        1,
        "one SelfSubjectReview, for the node's first certificate"
    );
    let later = condition(&api, "w1").unwrap();
    assert_eq!(later["lastTransitionTime"], up["lastTransitionTime"]);
    assert_ne!(later["lastHeartbeatTime"], up["lastHeartbeatTime"]);

    // A bundle that escapes its directory fails the secrets step: False, with the step as reason.
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
    let down = until_condition(&api, "False", |c| c["status"] == "False").await;
    assert_eq!(down["reason"], "SecretsFailed", "{down}");
    assert!(
        down["message"].as_str().unwrap().starts_with("secrets: "),
        "{down}"
    );
    assert_ne!(down["lastTransitionTime"], up["lastTransitionTime"]);

    // nodectl status and the metrics say what was sent and when
    let nodectl = |args: &[&str]| {
        // no --root: the CLI asks the daemon over the (private) system bus
        let out = Command::new(env!("CARGO_BIN_EXE_nodectl"))
            .args(args)
            .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = nodectl(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(st["source"], "daemon", "{out}");
    assert_eq!(st["node_condition"]["status"], "False", "{out}");
    assert!(st["node_condition"]["sent_at"].as_u64().unwrap() > 0);
    let text = nodectl(&["status"]);
    assert!(
        text.contains("Condition: NodectlReady=False (SecretsFailed), sent "),
        "{text}"
    );
    let metrics = std::fs::read_to_string(root.join("run/nodectl/metrics/nodectl.prom")).unwrap();
    assert!(
        metrics.contains("nodectl_node_condition{status=\"False\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodectl_node_condition_sent_timestamp_seconds "),
        "{metrics}"
    );

    // The bundle removed: True again (a second later, so the transition time shows it).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::remove_file(&bad).unwrap();
    let again = until_condition(&api, "True again", |c| c["status"] == "True").await;
    assert_ne!(again["lastTransitionTime"], down["lastTransitionTime"]);
    assert_eq!(
        reviews(),
        1,
        "no SelfSubjectReview without a new certificate or a 401"
    );
    // Events on its Node, from the journal lines an operator alerts on (MESSAGE_IDs), sent by
    // the node itself: the flips, the second True counted on the first Event, not a new one.
    let start = Instant::now();
    let events = loop {
        let events: Vec<serde_json::Value> = api
            .stored_events()
            .into_iter()
            .filter(|e| e["source"]["component"] == "nodectld")
            .collect();
        let ready = events.iter().find(|e| e["reason"] == "NodectlReady");
        if ready.is_some_and(|e| e["count"] == 2)
            && events.iter().any(|e| e["reason"] == "NodectlNotReady")
        {
            break events;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "events: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for e in &events {
        assert_eq!(e["metadata"]["namespace"], "default", "{e}");
        assert_eq!(e["involvedObject"]["kind"], "Node", "{e}");
        assert_eq!(e["involvedObject"]["name"], "w1", "{e}");
    }
    let ready: Vec<_> = events
        .iter()
        .filter(|e| e["reason"] == "NodectlReady")
        .collect();
    assert_eq!(ready.len(), 1, "one Event, counted: {events:#?}");
    assert_eq!(ready[0]["type"], "Normal");
    assert_ne!(ready[0]["firstTimestamp"], serde_json::Value::Null);
    let down_ev = events
        .iter()
        .find(|e| e["reason"] == "NodectlNotReady")
        .unwrap();
    assert_eq!(down_ev["type"], "Warning");
    assert!(
        down_ev["message"]
            .as_str()
            .unwrap()
            .starts_with("NodectlReady condition is now False (SecretsFailed): secrets: "),
        "{down_ev}"
    );
    let event_requests: Vec<(String, String, String)> = api
        .requests()
        .into_iter()
        .filter(|(_, _, p)| p.starts_with("/api/v1/namespaces/default/events"))
        .collect();
    assert!(
        event_requests.iter().any(|(_, m, _)| m == "PATCH"),
        "the repeat is a PATCH: {event_requests:?}"
    );
    for (user, method, path) in &event_requests {
        assert_eq!(user, "system:node:w1", "{method} {path}");
    }
    // Nothing ever went out with the bootstrap token to the Node, nor for another node.
    for (user, method, path) in node_requests(&api) {
        assert_eq!(user, "system:node:w1", "{method} {path}");
        assert!(path.starts_with("/api/v1/nodes/w1"), "{method} {path}");
    }
}
