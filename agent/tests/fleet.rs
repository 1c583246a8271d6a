//! Tier 1: `nodectl fleet` against the API double with three nodes as their nodectlds left them
//! (one converged, one failed, one rebooting): unhealthy first, exit 2; all converged: exit 0.

use std::process::Command;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

async fn report(nodes: &Api<Node>, name: &str, status: &str, reason: &str, reboot: &str) {
    let pp = PatchParams::default();
    let cond = json!({"status": {"conditions": [{"type": "NodectlReady", "status": status,
        "reason": reason, "message": format!("{name}: {reason}"),
        "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-12-01T09:00:00Z"}]}});
    nodes
        .patch_status(name, &pp, &Patch::Strategic(&cond))
        .await
        .unwrap();
    let ann = json!({"metadata": {"annotations": {"nodectl.io/reboot-state": reboot,
        "nodectl.io/agent-version": "0.1.0", "nodectl.io/audit": "high=0,medium=1,low=0",
        "nodectl.io/certificate-not-after": "2027-01-01T00:00:00Z"}}});
    nodes.patch(name, &pp, &Patch::Merge(&ann)).await.unwrap();
}

fn fleet(kubeconfig: &std::path::Path, json: bool) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nodectl"));
    c.args(["fleet", "--kubeconfig"]).arg(kubeconfig);
    if json {
        c.arg("--json");
    }
    let out = c.env_remove("KUBECONFIG").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_lists_the_unhealthy_first_and_fails_while_a_node_is_not_ready() {
    let api = nodectl_apiserver_double::Double::start(Default::default())
        .await
        .unwrap();
    for n in ["ok-1", "failed-1", "rebooting-1"] {
        api.set_node(n, true);
    }
    // each node reports for itself, with its own credentials (NodeRestriction)
    for (n, status, reason, reboot) in [
        ("ok-1", "True", "Converged", "idle"),
        ("failed-1", "False", "KubeletCredentialsFailed", "idle"),
        ("rebooting-1", "True", "Converged", "draining"),
    ] {
        let kc = api
            .client_kubeconfig(&format!("system:node:{n}"), &["system:nodes"])
            .unwrap();
        let kc = nodectl::kubeconfig::parse(&kc, std::path::Path::new("node")).unwrap();
        let nodes: Api<Node> = Api::all(nodectl::kubeconfig::client(kc, false).await.unwrap());
        report(&nodes, n, status, reason, reboot).await;
    }
    let d = tempfile::tempdir().unwrap();
    let admin = d.path().join("admin.conf");
    std::fs::write(
        &admin,
        api.client_kubeconfig("kubernetes-admin", &["system:masters"])
            .unwrap(),
    )
    .unwrap();

    let (rc, out, err) = tokio::task::spawn_blocking({
        let admin = admin.clone();
        move || fleet(&admin, false)
    })
    .await
    .unwrap();
    assert_eq!(rc, 2, "{out}{err}");
    let names: Vec<&str> = out
        .lines()
        .skip(1)
        .take(3)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(names, ["failed-1", "rebooting-1", "ok-1"], "{out}");
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .contains("False (KubeletCredentialsFailed)"),
        "{out}"
    );
    assert!(out.lines().nth(2).unwrap().contains("draining"), "{out}");
    assert!(
        out.contains("failed-1: failed-1: KubeletCredentialsFailed"),
        "{out}"
    );

    let (rc, out, _) = tokio::task::spawn_blocking({
        let admin = admin.clone();
        move || fleet(&admin, true)
    })
    .await
    .unwrap();
    assert_eq!(rc, 2);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["name"], "failed-1");
    assert_eq!(rows[0]["ready"], false);
    assert_eq!(rows[2]["certificate_not_after"], "2027-01-01T00:00:00Z");

    // all converged and idle: exit 0
    let kc = nodectl::kubeconfig::parse(
        &api.client_kubeconfig("system:node:failed-1", &["system:nodes"])
            .unwrap(),
        std::path::Path::new("n"),
    )
    .unwrap();
    let nodes: Api<Node> = Api::all(nodectl::kubeconfig::client(kc, false).await.unwrap());
    report(&nodes, "failed-1", "True", "Converged", "idle").await;
    let (rc, out, _) = tokio::task::spawn_blocking(move || fleet(&admin, false))
        .await
        .unwrap();
    assert_eq!(rc, 0, "{out}");
}
