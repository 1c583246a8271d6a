//! Tier 1: `kubectl nodectl` (the plugin binary) against the API double with three nodes as
//! their nodectlds left them (one converged, one failed with terminal escapes in its message,
//! one rebooting in a reboot slot), the admin kubeconfig split over two `KUBECONFIG` files.

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nodectl::status::condition::{Condition, ANNOTATION_REBOOT, ANNOTATION_VERSION};
use nodectl::status::report::{annotations_patch, condition_patch};

const ESCAPES: &str = "\x1b]0;owned\x07\x1b[2J\x1b[Hall nodes healthy\r";

/// A client as node `n` (its own certificate: NodeRestriction holds it to its own Node).
async fn node_client(api: &nodectl_apiserver_double::Double, n: &str) -> kube::Client {
    let kc = api
        .client_kubeconfig(&format!("system:node:{n}"), &["system:nodes"])
        .unwrap();
    let kc = nodectl::kubeconfig::parse(&kc, Path::new("node")).unwrap();
    nodectl::kubeconfig::client(kc, false).await.unwrap()
}

/// What node `n`'s nodectld writes: its condition and annotations, by nodectld's own patches.
async fn report(
    client: kube::Client,
    n: &str,
    status: &str,
    reason: &str,
    msg: &str,
    reboot: &str,
) {
    let nodes: Api<Node> = Api::all(client);
    let pp = PatchParams::default();
    let c = Condition {
        status: status.into(),
        reason: reason.into(),
        message: msg.into(),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let cond = condition_patch(&c, now, now - 600);
    nodes
        .patch_status(n, &pp, &Patch::Strategic(&cond))
        .await
        .unwrap();
    let ann = annotations_patch(&[
        (ANNOTATION_REBOOT, reboot.to_string()),
        (ANNOTATION_VERSION, "0.1.0".to_string()),
    ]);
    nodes.patch(n, &pp, &Patch::Merge(&ann)).await.unwrap();
}

struct Run {
    rc: i32,
    out: String,
    err: String,
}

fn plugin(home: &Path, kubeconfig_env: &str, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-nodectl"))
        .args(args)
        .env("HOME", home)
        .env("KUBECONFIG", kubeconfig_env)
        .output()
        .unwrap();
    Run {
        rc: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn plugin_async(home: &Path, env: String, args: &[&str]) -> Run {
    let (home, args): (std::path::PathBuf, Vec<String>) =
        (home.into(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        plugin(&home, &env, &args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_shows_a_fleet_its_reboots_and_one_node_from_two_kubeconfig_files() {
    let api = nodectl_apiserver_double::Double::start(Default::default())
        .await
        .unwrap();
    for n in ["ok-1", "failed-1", "rebooting-1"] {
        api.set_node(n, true);
    }
    report(
        node_client(&api, "ok-1").await,
        "ok-1",
        "True",
        "Converged",
        "",
        "idle",
    )
    .await;
    report(
        node_client(&api, "failed-1").await,
        "failed-1",
        "False",
        "SecretsFailed",
        ESCAPES,
        "idle",
    )
    .await;
    let reb = node_client(&api, "rebooting-1").await;
    let reb_events = reb.clone();
    report(
        reb.clone(),
        "rebooting-1",
        "True",
        "Converged",
        "",
        "draining",
    )
    .await;
    // its slot, taken by nodectld's own Lease code under the shipped Lease policy
    let lock = nodectl::reboot::lease::LeaseLock::new(reb, "nodectl-reboot", "workers");
    lock.modify(|s| s.acquire("id-r1", "rebooting-1", "boot-1", 1_000, 1))
        .await
        .unwrap();
    // two Events about it, written with its own credentials (the Node authorizer's rules): one
    // from nodectld, which describe shows, one from kubelet, which it leaves to kubectl
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(reb_events, "default");
    for (name, component, reason) in [
        ("rebooting-1.1", "nodectld", "Draining"),
        ("rebooting-1.2", "kubelet", "NodeNotSchedulable"),
    ] {
        let ev = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "rebooting-1", "uid": "rebooting-1"},
            "type": "Normal", "reason": reason, "message": "draining: 2 pods left\u{1b}[2J",
            "count": 3, "lastTimestamp": "2026-12-06T10:00:00Z",
            "source": {"component": component, "host": "rebooting-1"}}))
        .unwrap();
        events.create(&Default::default(), &ev).await.unwrap();
    }

    // The admin kubeconfig in two files: the first has the current-context (a dead cluster)
    // and a context naming the double's cluster and user, which only the second file has.
    let d = tempfile::tempdir().unwrap();
    let first = d.path().join("contexts.yaml");
    std::fs::write(
        &first,
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\nclusters:\n- name: dead\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: dead\n  context:\n    cluster: dead\n    user: u\n- name: live\n  context:\n    cluster: double\n    user: u\n",
    )
    .unwrap();
    let second = d.path().join("admin.yaml");
    std::fs::write(
        &second,
        api.client_kubeconfig("kubernetes-admin", &["system:masters"])
            .unwrap(),
    )
    .unwrap();
    let missing = d.path().join("missing.yaml");
    let env = format!(
        "{}:{}:{}",
        first.display(),
        missing.display(),
        second.display()
    );
    let home = d.path();

    // the first file's current-context wins: the dead cluster
    let r = plugin_async(home, env.clone(), &["fleet", "--request-timeout", "5"]).await;
    assert_eq!(r.rc, 1, "{}{}", r.out, r.err);
    assert!(r.err.contains("listing nodes"), "{}", r.err);

    // --context: the second file's cluster and user; listed two at a time
    let r = plugin_async(
        home,
        env.clone(),
        &["fleet", "--context", "live", "--chunk-size", "2"],
    )
    .await;
    assert_eq!(r.rc, 2, "a node is not ready: {}{}", r.out, r.err);
    let names: Vec<&str> = r
        .out
        .lines()
        .skip(1)
        .take(3)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(names, ["failed-1", "rebooting-1", "ok-1"], "{}", r.out);
    assert!(
        r.out
            .lines()
            .nth(1)
            .unwrap()
            .contains("False (SecretsFailed)"),
        "{}",
        r.out
    );
    assert!(
        r.out.lines().nth(2).unwrap().contains("draining"),
        "{}",
        r.out
    );
    // the message's escapes are shown, not obeyed
    assert!(
        !r.out.contains(['\x1b', '\x07', '\r']),
        "a control character reached the terminal: {:?}",
        r.out
    );
    assert!(
        r.out.contains("failed-1: \\u{1b}]0;owned\\u{7}\\u{1b}[2J"),
        "{}",
        r.out
    );
    let node_lists: Vec<String> = api
        .queries()
        .into_iter()
        .filter(|(p, _)| p == "/api/v1/nodes")
        .map(|(_, q)| q)
        .collect();
    assert!(
        node_lists.len() == 2
            && node_lists.iter().all(|q| q.contains("limit=2"))
            && node_lists[1].contains("continue="),
        "two pages: {node_lists:?}"
    );

    // --kubeconfig alone: its own current-context, KUBECONFIG ignored
    let second_s = second.display().to_string();
    let r = plugin_async(
        home,
        env.clone(),
        &["--kubeconfig", &second_s, "fleet", "-o", "json"],
    )
    .await;
    assert_eq!(r.rc, 2, "{}", r.err);
    let rows: serde_json::Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(rows[0]["name"], "failed-1");
    assert_eq!(
        rows[0]["message"],
        "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{1b}[Hall nodes healthy\\u{d}"
    );

    // reboots: the group's Lease, its holder and what the holder is doing
    let r = plugin_async(home, env.clone(), &["reboots", "--context", "live"]).await;
    assert_eq!(r.rc, 0, "{}{}", r.out, r.err);
    let row = r.out.lines().nth(1).unwrap_or_default().to_string();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (cells[0], cells[1], cells[4]),
        ("reboot-workers", "rebooting-1", "draining"),
        "{}",
        r.out
    );
    assert_eq!(r.out.lines().count(), 2, "{}", r.out);

    // describe: the node with its slot; a node that does not exist is an error naming it
    let r = plugin_async(
        home,
        env.clone(),
        &["describe", "rebooting-1", "--context", "live", "--json"],
    )
    .await;
    assert_eq!(r.rc, 0, "{}", r.err);
    let d: serde_json::Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(d["reboot_slot"]["lease"], "reboot-workers");
    assert_eq!(d["annotations"]["nodectl.io/reboot-state"], "draining");
    assert_eq!(d["kubelet_ready"], "True");
    let evs = d["events"].as_array().unwrap();
    assert_eq!(evs.len(), 1, "nodectld's only: {evs:?}");
    assert_eq!(
        (evs[0]["reason"].as_str(), evs[0]["count"].as_i64()),
        (Some("Draining"), Some(3))
    );
    let r = plugin_async(
        home,
        env.clone(),
        &["describe", "rebooting-1", "--context", "live"],
    )
    .await;
    assert!(
        r.out.contains("Events:\n  TYPE    REASON    AGE"),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("Normal  Draining") && r.out.contains("x3"),
        "{}",
        r.out
    );
    assert!(!r.out.contains('\x1b'), "{:?}", r.out);
    let r = plugin_async(
        home,
        env.clone(),
        &["describe", "failed-1", "--context", "live"],
    )
    .await;
    assert_eq!(r.rc, 0, "{}", r.err);
    assert!(
        r.out.contains("NodectlReady:    False (SecretsFailed)"),
        "{}",
        r.out
    );
    assert!(!r.out.contains('\x1b'), "{:?}", r.out);
    let r = plugin_async(
        home,
        env.clone(),
        &["describe", "gone-1", "--context", "live"],
    )
    .await;
    assert_eq!(r.rc, 1);
    assert!(r.err.contains("node gone-1"), "{}", r.err);

    // a wrong command line is a usage error (64), told apart from "a node is not ready" (2)
    let r = plugin_async(home, env.clone(), &["fleet", "--no-such-flag"]).await;
    assert_eq!(r.rc, 64, "{}", r.err);
    let r = plugin_async(home, env.clone(), &["--help"]).await;
    assert_eq!(r.rc, 0);

    // an unknown context is named, with the files
    let r = plugin_async(home, env, &["fleet", "--context", "nope"]).await;
    assert_eq!(r.rc, 1);
    assert!(
        r.err.contains("no context \"nope\"") && r.err.contains("contexts.yaml"),
        "{}",
        r.err
    );

    assert!(
        api.user_agents()
            .contains(&format!("kubectl-nodectl/{}", env!("CARGO_PKG_VERSION"))),
        "{:?}",
        api.user_agents()
    );
}
