//! Tier 1: the API server misbehaving while the node bootstraps (the API double's injected
//! faults, src/faults.rs). For each kind, nodectld keeps running, says in its status what it
//! waits for, retries with a capped, jittered backoff (kube's client: a few quick retries of
//! 429/503/504, after Retry-After when given; then nodectld's: credentials 2 s doubling to 64 s,
//! +-20%) rather than a tight loop, and gets its certificate once the server answers again.
//! Not yet covered: watch streams cut mid-event, 410 Gone, CA rotation, notBefore skew.

use std::time::{Duration, Instant};

use nodectl_apiserver_double::{Double, Fault};

mod common;
use common::{start_daemon, status, Bus};

fn step(v: &serde_json::Value, id: &str) -> serde_json::Value {
    v["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["id"] == id)
        .cloned()
        .unwrap_or_default()
}

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// A worker bootstraps while the CSR endpoint answers `fault` `times` times: returns what the
/// status said meanwhile and the instants of the requests to it.
async fn bootstrap_through(fault: Fault, times: usize) -> (Vec<String>, Vec<Duration>) {
    let bus = Bus::start();
    let api = Double::start(Default::default()).await.unwrap();
    api.inject(CSRS, fault, times);
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::create_dir_all(root.join("etc/nodectl/config.d")).unwrap();
    std::fs::write(root.join("etc/os-release"), "ID=debian\n").unwrap();
    std::fs::write(root.join("etc/resolv.conf"), "nameserver 10.0.0.2\n").unwrap();
    std::fs::write(
        root.join("etc/nodectl/config.d/10-node.toml"),
        "[node]\nrole = \"worker\"\nname = \"w1\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("etc/kubernetes")).unwrap();
    std::fs::write(
        root.join("etc/kubernetes/kubeconfig"),
        api.bootstrap_kubeconfig("abcdef.0123456789abcdef"),
    )
    .unwrap();
    let mut daemon = start_daemon(root, &bus);
    let start = Instant::now();
    let mut said = Vec::new();
    loop {
        assert!(daemon.0.try_wait().unwrap().is_none(), "nodectld exited");
        if let Some(v) = status(&bus).await {
            let s = step(&v, "kubelet-credentials");
            let line = format!("{} {} {}", s["state"], s["waiting_for"], s["error"]);
            if said.last() != Some(&line) {
                said.push(line);
            }
            if v["credentials"]["subject"] == "system:node:w1" {
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no certificate after 60 s; said {said:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let posts: Vec<Duration> = api
        .request_times()
        .into_iter()
        .filter(|(m, p, _)| m == "POST" && p == CSRS)
        .map(|(_, _, t)| t)
        .collect();
    (said, posts)
}

fn spaced(posts: &[Duration]) -> Vec<u64> {
    posts
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis() as u64)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_429_with_retry_after() {
    // kube's client retries a 429 itself, after the Retry-After the server gave
    let (_, posts) = bootstrap_through(
        Fault::Status {
            code: 429,
            retry_after: Some(1),
        },
        3,
    )
    .await;
    assert_eq!(posts.len(), 4, "{posts:?}");
    assert!(
        spaced(&posts).iter().all(|ms| *ms >= 900),
        "retries closer than Retry-After: {:?}",
        spaced(&posts)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_503_unavailable() {
    // a server restarting: eight 503s in a row, answered by retries (no tight loop of new
    // requests: one POST per attempt), and the node gets its certificate
    let (_, posts) = bootstrap_through(
        Fault::Status {
            code: 503,
            retry_after: None,
        },
        8,
    )
    .await;
    assert_eq!(posts.len(), 9, "{posts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_connection_reset() {
    let (said, posts) = bootstrap_through(Fault::Reset, 2).await;
    assert!(said.len() > 1, "{said:#?}");
    assert!(posts.len() >= 3, "{posts:?}");
    assert!(
        spaced(&posts).iter().all(|ms| *ms >= 1500),
        "not backing off: {:?}",
        spaced(&posts)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_stalled_server() {
    // an answer 3 s late is waited for (one request, no duplicate), and the node gets its
    // certificate
    let (_, posts) = bootstrap_through(Fault::Stall(Duration::from_secs(3)), 1).await;
    assert_eq!(posts.len(), 1, "{posts:?}");
}
