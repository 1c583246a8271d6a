//! Tier 1: the API server misbehaving while the node bootstraps (the API double's injected
//! faults, src/faults.rs). For each kind, nodectld keeps running, says in its status what it
//! waits for, retries with a capped, jittered backoff (kube's client: a few quick retries of
//! 429/503/504, after Retry-After when given; then nodectld's: credentials 2 s doubling to 64 s,
//! +-20%) rather than a tight loop, and gets its certificate once the server answers again.
//! Watches cut mid-event or answered `410 Gone` are watched again (the same request, no new
//! one); a bootstrap kubeconfig naming another CA fails every attempt with a verification error
//! in status until the right one is written, which is used at once; a signer whose clock runs
//! ahead (notBefore in the node's future) issues a certificate the node keeps. On a controller,
//! kubelet starting the API server's static pod ends the backoff at once.

use std::time::{Duration, Instant};

use nodectl_apiserver_double::{Double, Fault, Options};

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

/// A worker node on a scratch root with its bootstrap kubeconfig, nodectld running on a private
/// bus.
struct Node {
    bus: Bus,
    daemon: common::Daemon,
    root: tempfile::TempDir,
    said: Vec<String>,
}

impl Node {
    fn start(kubeconfig: &str) -> Node {
        Self::start_as("[node]\nrole = \"worker\"\nname = \"w1\"\n", kubeconfig)
    }

    fn start_as(config: &str, kubeconfig: &str) -> Node {
        let bus = Bus::start();
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("etc/nodectl/config.d")).unwrap();
        std::fs::write(root.join("etc/os-release"), "ID=debian\n").unwrap();
        std::fs::write(root.join("etc/resolv.conf"), "nameserver 10.0.0.2\n").unwrap();
        std::fs::write(root.join("etc/nodectl/config.d/10-node.toml"), config).unwrap();
        // A controller's control-plane certificates (placed by a bundle on a real node).
        std::fs::create_dir_all(root.join("etc/kubernetes/pki")).unwrap();
        std::fs::write(root.join("etc/kubernetes/pki/ca.crt"), "x").unwrap();
        std::fs::write(root.join("etc/kubernetes/kubeconfig"), kubeconfig).unwrap();
        let daemon = start_daemon(root, &bus);
        Node {
            bus,
            daemon,
            root: d,
            said: Vec::new(),
        }
    }

    /// Polls the status until `done` says so (60 s at most), recording each new line the
    /// credentials step shows; returns the last status.
    async fn until(&mut self, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let start = Instant::now();
        loop {
            assert!(
                self.daemon.0.try_wait().unwrap().is_none(),
                "nodectld exited"
            );
            if let Some(v) = status(&self.bus).await {
                let s = step(&v, "kubelet-credentials");
                let line = format!("{} {} {}", s["state"], s["waiting_for"], s["error"]);
                if self.said.last() != Some(&line) {
                    self.said.push(line);
                }
                if done(&v) {
                    return v;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "not there after 60 s; said {:#?}",
                self.said
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The status once the credentials step says its first attempt failed (the later ones are
    /// the request's own, without a pass: the line stays).
    async fn first_attempt_failed(&mut self) -> serde_json::Value {
        self.until(|v| {
            step(v, "kubelet-credentials")["waiting_for"]
                .as_str()
                .is_some_and(|w| w.contains("attempt 1 failed"))
        })
        .await
    }

    async fn certified(&mut self) -> serde_json::Value {
        self.certified_as("system:node:w1").await
    }

    async fn certified_as(&mut self, subject: &str) -> serde_json::Value {
        self.until(|v| v["credentials"]["subject"] == subject).await
    }
}

/// The requests to `path` with `method` (their instants since the double started).
fn requests(api: &Double, method: &str, path: &str) -> Vec<Duration> {
    api.request_times()
        .into_iter()
        .filter(|(m, p, _)| m == method && p == path)
        .map(|(_, _, t)| t)
        .collect()
}

/// A worker bootstraps while the CSR endpoint answers `fault` `times` times: returns what the
/// status said meanwhile and the instants of the requests to it.
async fn bootstrap_through(fault: Fault, times: usize) -> (Vec<String>, Vec<Duration>) {
    let api = Double::start(Default::default()).await.unwrap();
    api.inject(CSRS, fault, times);
    let mut node = Node::start(&api.bootstrap_kubeconfig("abcdef.0123456789abcdef"));
    node.certified().await;
    (node.said, requests(&api, "POST", CSRS))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_watch_cut_mid_event() {
    // the connection drops inside the first event of two watches: the same request is watched
    // again (after 1 s, then 2 s), never made again
    let api = Double::start(Default::default()).await.unwrap();
    api.inject(CSRS, Fault::CutWatch, 2);
    let mut node = Node::start(&api.bootstrap_kubeconfig("abcdef.0123456789abcdef"));
    node.certified().await;
    assert_eq!(requests(&api, "POST", CSRS).len(), 1, "{:#?}", node.said);
    let watches = requests(&api, "GET", CSRS);
    assert!(watches.len() >= 3, "{watches:?}");
    assert!(
        spaced(&watches[..3]).iter().all(|ms| *ms >= 900),
        "watched again without a pause: {:?}",
        spaced(&watches)
    );
    assert!(
        node.said.iter().all(|l| !l.contains("failed")),
        "{:#?}",
        node.said
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_410_gone() {
    // three watches answered 410 Expired: watched again at once from the current state
    let api = Double::start(Default::default()).await.unwrap();
    api.inject(CSRS, Fault::Gone, 3);
    let start = Instant::now();
    let mut node = Node::start(&api.bootstrap_kubeconfig("abcdef.0123456789abcdef"));
    node.certified().await;
    assert_eq!(requests(&api, "POST", CSRS).len(), 1, "{:#?}", node.said);
    assert!(requests(&api, "GET", CSRS).len() >= 4);
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_rotated_cluster_ca() {
    // The bootstrap kubeconfig trusts a CA the server no longer uses (the cluster CA rotated):
    // every attempt fails verification and says so, backing off; the new bootstrap kubeconfig
    // is used as soon as it is written, whatever the backoff had left.
    let api = Double::start(Default::default()).await.unwrap();
    let old = Double::start(Default::default()).await.unwrap();
    let server = |kc: &str| {
        kc.lines()
            .find(|l| l.trim_start().starts_with("server:"))
            .unwrap()
            .to_string()
    };
    let right = api.bootstrap_kubeconfig("abcdef.0123456789abcdef");
    let stale = old
        .bootstrap_kubeconfig("abcdef.0123456789abcdef")
        .replace(&server(&old.bootstrap_kubeconfig("x.y")), &server(&right));
    drop(old);
    let mut node = Node::start(&stale);
    let v = node.first_attempt_failed().await;
    // Attempts 2 and 3 (retried by the request itself, no pass) come 1.6-2.4 s and 3.2-4.8 s
    // after the first; the fourth not before 11.2 s.
    tokio::time::sleep(Duration::from_millis(7600)).await;
    let waiting = step(&v, "kubelet-credentials")["waiting_for"].to_string();
    // (the same CA name, another key: rustls says BadSignature; another name: UnknownIssuer)
    assert!(waiting.contains("invalid peer certificate"), "{waiting}");
    assert_eq!(requests(&api, "POST", CSRS).len(), 0);
    let swapped = Instant::now();
    let kc = node.root.path().join("etc/kubernetes/kubeconfig");
    std::fs::write(kc.with_extension("new"), &right).unwrap();
    std::fs::rename(kc.with_extension("new"), &kc).unwrap();
    node.certified().await;
    assert!(
        swapped.elapsed() < Duration::from_secs(3),
        "the new bootstrap kubeconfig waited for the backoff: {:?}",
        swapped.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_not_before_skew() {
    // The signer's clock runs 10 minutes ahead: the certificate is valid from the node's
    // future. The node keeps it (the API server checks it on its own clock), converges and
    // does not ask again.
    let api = Double::start(Options {
        clock_ahead: Duration::from_secs(600),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut node = Node::start(&api.bootstrap_kubeconfig("abcdef.0123456789abcdef"));
    node.certified().await;
    let v = node
        .until(|v| step(v, "kubelet-credentials")["state"] == "converged")
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let v2 = status(&node.bus).await.unwrap();
    assert_eq!(requests(&api, "POST", CSRS).len(), 1, "{:#?}", node.said);
    assert_eq!(
        step(&v2, "kubelet-credentials")["state"],
        "converged",
        "{v2:#}"
    );
    assert_eq!(v["credentials"], v2["credentials"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_api_server_pod_ends_a_controllers_backoff() {
    // A controller's API server is one of its own static pods: until kubelet runs it, every
    // attempt is refused and backs off. kubelet creating that pod's sandbox (its log directory
    // in /var/log/pods, as kuberuntime's createPodSandbox does) ends the backoff at once,
    // whatever it had left, and the next failure waits 2 s again.
    let key = rcgen::KeyPair::generate().unwrap().serialize_pem();
    let opts = || Options {
        ca_key_pem: Some(key.clone()),
        ..Default::default()
    };
    // The kubeconfig of a server that is not up yet: the double is taken down at once and
    // comes up later on the port it holds meanwhile (no port dropped and bound again).
    let mut api = Double::start(opts()).await.unwrap();
    api.down();
    let kubeconfig = api.bootstrap_kubeconfig("abcdef.0123456789abcdef");
    let mut node = Node::start_as(
        "[node]\nrole = \"controller\"\nname = \"c0\"\n",
        &kubeconfig,
    );
    let pods = node.root.path().join("var/log/pods");
    std::fs::create_dir_all(&pods).unwrap();
    // Another pod's sandbox changes nothing.
    std::fs::create_dir(pods.join("kube-system_kube-scheduler-c0_5e6f")).unwrap();
    // (A controller's step converges while it waits: kubelet runs standalone; its summary
    // says what the request waits for.)
    let v = node
        .until(|v| {
            step(v, "kubelet-credentials")
                .to_string()
                .contains("attempt 1 failed")
        })
        .await;
    let waiting = step(&v, "kubelet-credentials").to_string();
    assert!(waiting.contains("Connect"), "{waiting}");
    // Attempts 2 and 3 (retried by the request itself, no pass) come 1.6-2.4 s and 3.2-4.8 s
    // after the first; the fourth not before 11.2 s: the pod below must end the backoff
    // before then (7.6 + 0.5 + 2.5 s).
    tokio::time::sleep(Duration::from_millis(7600)).await;
    api.up().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        requests(&api, "POST", CSRS).len(),
        0,
        "asked before the backoff ended: {:#?}",
        node.said
    );
    let started = Instant::now();
    std::fs::create_dir(pods.join("kube-system_kube-apiserver-c0_0f1e2d3c")).unwrap();
    node.certified_as("system:node:c0").await;
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "the API server's pod did not end the backoff: {:?}; said {:#?}",
        started.elapsed(),
        node.said
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_away_costs_connections_not_passes() {
    // Issue 38: with the API server away for minutes the daemon stays quiet. Each attempt
    // costs a connection, not a pass of every step: the request retries by itself (2 s
    // doubling to 64 s, with jitter) and wakes no pass while the failure stays the same.
    // The "server" takes each connection, reads the client's hello and closes: the same
    // failure every time, and every attempt counted.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let attempts = attempts.clone();
        std::thread::spawn(move || {
            for mut c in listener.incoming().flatten() {
                attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = std::io::Read::read(&mut c, &mut [0u8; 16384]);
            }
        });
    }
    let api = Double::start(Default::default()).await.unwrap();
    let kubeconfig = api
        .bootstrap_kubeconfig("abcdef.0123456789abcdef")
        .replace(&api.url(), &format!("https://{addr}"));
    drop(api);
    let mut node = Node::start(&kubeconfig);
    let v = node.first_attempt_failed().await;
    let passes = v["daemon"]["passes"].as_u64().unwrap();
    let before = attempts.load(std::sync::atomic::Ordering::SeqCst);
    // The next two attempts come 1.6-2.4 s and 3.2-4.8 s later.
    tokio::time::sleep(Duration::from_millis(7600)).await;
    let v = status(&node.bus).await.unwrap();
    let after = attempts.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        after >= before + 2,
        "{before} attempts, then {after}: not retried by itself"
    );
    assert_eq!(
        v["daemon"]["passes"].as_u64().unwrap(),
        passes,
        "passes while the request retried: {:#?} {v:#}",
        node.said
    );
}
