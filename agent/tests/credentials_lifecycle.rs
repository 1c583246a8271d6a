//! Tier 1: the `kubelet-credentials` step over several passes of one engine (as nodectld runs
//! it), against the kube-apiserver double: the API server down then up (backoff, a controller's
//! kubelet standalone meanwhile), an expired certificate (re-bootstrap), rotation with a fresh
//! key, a certificate the server refuses (401 -> bootstrap token), a denied request (no retry
//! until an operator acts).

mod common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use nodectl::engine::Cx;
use nodectl::engine::{Engine, Report, StepState};
use nodectl::root::Root;
use nodectl_apiserver_double::{Approval, Double, Options};
use nodectl_units::systemd::{Offline, Systemd};

const FCOS: &str = "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=42\nVARIANT_ID=coreos\n";
const TOKEN: &str = "abcdef.0123456789abcdef";

struct Node {
    _dir: tempfile::TempDir,
    root: Root,
    engine: Engine,
    /// What the daemon's credentials check learnt, shared by every pass (as in nodectld).
    facts: std::sync::Arc<nodectl::credentials::check::Facts>,
}

impl Node {
    fn new(config: &str, bootstrap_kubeconfig: &str) -> Node {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("etc/nodectl/config.d")).unwrap();
        std::fs::create_dir_all(r.join("etc/kubernetes/pki")).unwrap();
        std::fs::write(r.join("etc/os-release"), FCOS).unwrap();
        std::fs::write(r.join("etc/resolv.conf"), "nameserver 10.0.0.2\n").unwrap();
        std::fs::write(r.join("etc/nodectl/config.d/10-node.toml"), config).unwrap();
        std::fs::write(r.join("etc/kubernetes/kubeconfig"), bootstrap_kubeconfig).unwrap();
        // A controller's control-plane certificates (the golden tests' shortcut).
        std::fs::write(r.join("etc/kubernetes/pki/ca.crt"), "x").unwrap();
        Node {
            root: Root::new(r),
            _dir: d,
            engine: nodectl::steps::engine(),
            facts: Default::default(),
        }
    }

    fn worker(api: &Double) -> Node {
        Self::new(
            "[node]\nrole = \"worker\"\nname = \"worker-1\"\n",
            &api.bootstrap_kubeconfig(TOKEN),
        )
    }

    /// One pass, as the daemon runs it (`forced`: an operator's `nodectl converge`).
    async fn pass(&self, forced: bool) -> Report {
        self.pass_waking(forced, None).await
    }

    /// One pass whose background work may wake the "daemon" (as nodectld's passes can).
    async fn pass_waking(&self, forced: bool, waker: Option<nodectl::engine::Waker>) -> Report {
        self.pass_rechecking(forced, waker).await.0
    }

    /// One pass, and the soonest next pass it asked for (as nodectld schedules it).
    async fn pass_rechecking(
        &self,
        forced: bool,
        waker: Option<nodectl::engine::Waker>,
    ) -> (Report, Option<Duration>) {
        let host = nodectl::load::host(&self.root).unwrap();
        let settings = nodectl::load::settings(&self.root, &host).unwrap();
        let mut cx = Cx::new(
            self.root.clone(),
            host,
            settings,
            Systemd::Offline(Offline::new(self.root.dir())),
        );
        cx.forced = forced;
        cx.inline_wait = Duration::from_secs(10);
        cx.waker = waker;
        cx.facts = self.facts.clone();
        let r = self.engine.apply(&cx).await;
        (r, cx.take_recheck())
    }

    fn calls(&self) -> serde_json::Value {
        let p = self.root.path("/run/nodectl/offline-systemd.json");
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(p).unwrap()).unwrap()
            ["calls"]
            .clone()
    }

    fn held(&self) -> nodectl::credentials::Held {
        nodectl::credentials::read(&self.root).expect("a node certificate")
    }

    fn env(&self) -> String {
        std::fs::read_to_string(self.root.path(nodectl::steps::KUBELET_ENV)).unwrap()
    }
}

fn step<'r>(r: &'r Report, id: &str) -> &'r StepState {
    &r.steps.iter().find(|s| s.id == id).unwrap().state
}

/// The step applied its changes in that pass.
fn assert_applied(r: &Report, id: &str) {
    assert_eq!(step(r, id).name(), "applied", "{:?}", step(r, id));
}

fn text(s: &StepState) -> String {
    format!("{s:?}")
}

/// Who asked for each certificate, in order.
fn requesters(api: &Double) -> Vec<String> {
    let mut csrs = api.csrs();
    csrs.sort_by_key(|c| {
        c["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    });
    csrs.iter()
        .map(|c| c["spec"]["username"].as_str().unwrap().to_string())
        .collect()
}

async fn sleep_until(t: SystemTime) {
    if let Ok(d) = t.duration_since(SystemTime::now()) {
        tokio::time::sleep(d + Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_down_then_up_backs_off_and_a_controller_runs_standalone_meanwhile() {
    let mut api = Double::start(Options::default()).await.unwrap();
    let node = Node::new(
        "[node]\nrole = \"controller\"\nname = \"controller-0\"\n",
        &api.bootstrap_kubeconfig(TOKEN),
    );
    api.down();

    let r = node.pass(false).await;
    let s = text(step(&r, "kubelet-credentials"));
    assert!(
        matches!(
            step(&r, "kubelet-credentials"),
            StepState::Applied { .. } | StepState::Converged { .. }
        ),
        "{s}"
    );
    assert_eq!(
        step(&r, "kubelet-running").name(),
        "applied",
        "a controller's kubelet starts standalone: {r:?}"
    );
    assert!(node.env().contains("KUBELET_KUBECONFIG=\n"));
    // Standalone, with the configuration a real kubelet accepts without an API client.
    assert!(node
        .env()
        .contains("KUBELET_CONFIG=--config=/etc/kubernetes/kubelet-standalone.yaml\n"));
    let c = node.calls();
    assert_eq!(c["start"], 1, "{c}");

    // While the backoff runs, a pass does not ask again, and says why and when.
    let r = node.pass(false).await;
    let s = text(step(&r, "kubelet-credentials"));
    assert!(
        s.contains("kubelet standalone until the node's certificate is issued")
            && s.contains(&format!("the API server at {}", api.url()))
            && s.contains("attempt 2 in"),
        "{s}"
    );

    // The server comes up; the next attempt (after the ~2 s backoff) gets the certificate and
    // kubelet is restarted with it.
    api.up().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let r = node.pass(false).await;
    assert_applied(&r, "kubelet-credentials");
    assert_eq!(node.held().subject, "system:node:controller-0");
    assert!(node
        .env()
        .contains("KUBELET_KUBECONFIG=--kubeconfig=/var/lib/kubelet/kubeconfig\n"));
    let c = node.calls();
    assert_eq!(
        (c["start"].as_u64(), c["restart"].as_u64()),
        (Some(1), Some(3)),
        "{c}"
    );
    assert!(!node
        .root
        .path("/run/nodectl/kubelet.restart-pending")
        .exists());
    // Converged now: another pass changes nothing.
    let r = node.pass(false).await;
    assert!(
        matches!(step(&r, "kubelet-credentials"), StepState::Converged { .. }),
        "{r:?}"
    );
    assert_eq!(node.calls(), c, "a converged pass made systemd calls");

    // A crash after a request stored its certificate and before kubelet's restart leaves the
    // request's marker: the next pass restarts kubelet once, without a reload, and removes it.
    let marker = node.root.path("/run/nodectl/kubelet.restart-pending");
    std::fs::write(&marker, "issued\n").unwrap();
    let r = node.pass(false).await;
    assert_applied(&r, "kubelet-credentials");
    let after = node.calls();
    assert_eq!(
        after["restart"],
        c["restart"].as_u64().unwrap() + 1,
        "{after}"
    );
    assert_eq!(after["reload"], c["reload"], "{after}");
    assert!(!marker.exists());
    // The same crash before the request switched the node's credentials (the marker names where
    // the link pointed then, and it still does: the daemon's crash campaign, store::stored and
    // store::link): nothing kubelet reads changed, so no restart, and the marker is gone.
    let link = node
        .root
        .path("/var/lib/kubelet/pki/kubelet-client-current.pem");
    let was = std::fs::read_link(&link).unwrap();
    std::fs::write(&marker, format!("issued {}\n", was.display())).unwrap();
    let r = node.pass(false).await;
    assert_applied(&r, "kubelet-credentials");
    assert_eq!(
        node.calls()["restart"],
        after["restart"],
        "restarted for credentials that did not change"
    );
    assert!(!marker.exists());
    // The same crash after the restart (the marker `ready` before it): no second restart.
    // (kubelet restarted a moment ago, after a `ready` a minute back)
    let ready = nodectl_units::systemd::monotonic()
        .as_micros()
        .saturating_sub(60_000_000);
    std::fs::write(&marker, format!("ready {ready}\n")).unwrap();
    let _ = node.pass(false).await;
    assert_eq!(node.calls()["restart"], after["restart"], "restarted twice");
    assert!(!marker.exists());
    // A marker of the credentials left while kubelet is stopped (it crashed meanwhile): kubelet
    // is started on the files as they are, not restarted, and the marker is gone.
    let state = node.root.path("/run/nodectl/offline-systemd.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    v["units"]["kubelet.service"]["active"] = "inactive".into();
    std::fs::write(&state, v.to_string()).unwrap();
    std::fs::write(&marker, "credentials\n").unwrap();
    let _ = node.pass(false).await;
    let last = node.calls();
    assert_eq!(last["restart"], after["restart"], "{last}");
    assert_eq!(
        last["start"],
        after["start"].as_u64().unwrap() + 1,
        "{last}"
    );
    assert!(!marker.exists());
    let _ = node.pass(false).await;
    assert_eq!(node.calls(), last, "a converged pass made systemd calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_replaced_through_the_bootstrap_token() {
    // Issued for 3 s (plus the signer's 5 s backdating): expired after 3 s.
    let mut api = Double::start(Options {
        signing_duration: Duration::from_secs(3),
        ..Default::default()
    })
    .await
    .unwrap();
    let node = Node::worker(&api);
    let r = node.pass(false).await;
    assert_eq!(step(&r, "kubelet-running").name(), "applied", "{r:?}");
    let first = node.held();
    let api_mode = "KUBELET_KUBECONFIG=--kubeconfig=/var/lib/kubelet/kubeconfig\n";
    assert!(node.env().contains(api_mode));
    sleep_until(first.validity.not_after).await;

    // Expired while the API server is unreachable: kubelet keeps its kubeconfig (standalone it
    // would stop every pod the API server gave it) and is not restarted until the new one.
    api.down();
    let restarts = node.calls()["restart"].clone();
    let r = node.pass(false).await;
    let s = text(step(&r, "kubelet-credentials"));
    assert!(s.contains("attempt 2 in"), "{s}");
    assert!(node.env().contains(api_mode), "{}", node.env());
    assert_eq!(node.calls()["restart"], restarts);
    api.up().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2600)).await;

    let r = node.pass(false).await;
    assert_applied(&r, "kubelet-credentials");
    let second = node.held();
    assert!(second.validity.not_after > first.validity.not_after);
    assert_eq!(
        requesters(&api),
        ["system:bootstrap:abcdef", "system:bootstrap:abcdef"],
        "an expired certificate cannot authenticate: the bootstrap token asks again"
    );
    assert_eq!(
        node.calls()["restart"].as_u64(),
        restarts.as_u64().map(|n| n + 1),
        "kubelet restarted once, on the new certificate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_the_server_stops_accepting_is_replaced_at_the_next_check() {
    // Typhoon's 72 h: no renewal for days; the server's refusal is found by the check (every
    // second here) and the node asks again with the bootstrap token.
    let api = Double::start(Options::default()).await.unwrap();
    let node = Node::new(
        "[node]\nrole = \"worker\"\nname = \"worker-1\"\n[kubelet]\ncredentials_check_secs = 1\n",
        &api.bootstrap_kubeconfig(TOKEN),
    );
    let woken = std::sync::Arc::new(tokio::sync::Notify::new());
    let waker: nodectl::engine::Waker = {
        let w = woken.clone();
        std::sync::Arc::new(move || w.notify_one())
    };
    let r = node.pass_waking(false, Some(waker.clone())).await;
    assert_eq!(step(&r, "kubelet-running").name(), "applied", "{r:?}");
    let first = node.held();
    let restarts = node.calls()["restart"].as_u64().unwrap();
    // (the request's own wake-up when it ended)
    let _ = tokio::time::timeout(Duration::from_millis(100), woken.notified()).await;
    // The daemon's check, every second (kubelet.credentials_check_secs).
    let checks = nodectl::credentials::check::spawn_checks(
        node.root.clone(),
        "/var/lib/kubelet/kubeconfig".into(),
        Some(Duration::from_secs(1)),
        Default::default(),
        node.facts.clone(),
        waker.clone(),
    );

    // Accepted: the checks (one now, one a second later) wake nobody and change nothing.
    for _ in 0..2 {
        let r = node.pass_waking(false, Some(waker.clone())).await;
        assert!(
            matches!(step(&r, "kubelet-credentials"), StepState::Converged { .. }),
            "{r:?}"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(1500), woken.notified())
                .await
                .is_err(),
            "an accepted certificate woke the daemon"
        );
    }

    // The server stops accepting it (401): the next check wakes the daemon, whose pass asks
    // with the bootstrap token; kubelet keeps its kubeconfig and restarts once, on the new one.
    // (no pass in between: on a loaded machine the check can find the refusal before it, and
    // that pass would then be the one replacing the certificate)
    api.revoke("system:node:worker-1");
    tokio::time::timeout(Duration::from_secs(10), woken.notified())
        .await
        .expect("the check found the refusal and woke the daemon");
    let r = node.pass_waking(false, Some(waker.clone())).await;
    let s = text(step(&r, "kubelet-credentials"));
    assert_eq!(step(&r, "kubelet-credentials").name(), "applied", "{s}");
    assert_eq!(
        requesters(&api),
        ["system:bootstrap:abcdef", "system:bootstrap:abcdef"]
    );
    assert_ne!(node.held(), first);
    assert!(node
        .env()
        .contains("KUBELET_KUBECONFIG=--kubeconfig=/var/lib/kubelet/kubeconfig\n"));
    assert_eq!(node.calls()["restart"].as_u64(), Some(restarts + 1));

    // Without a daemon (a CLI pass) nothing is checked in the background.
    checks.abort();
    api.revoke("system:node:worker-1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = node.pass(false).await;
    assert!(
        matches!(step(&r, "kubelet-credentials"), StepState::Converged { .. }),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_uses_a_fresh_key_and_a_refused_certificate_falls_back_to_bootstrap() {
    // 6 s (+5 s backdating): nodectld renews at 92-96% of 11 s, i.e. 5.1-5.6 s after issuance
    // (kubelet, which would rotate first at 70-90%, does not run here).
    let api = Double::start(Options {
        signing_duration: Duration::from_secs(6),
        ..Default::default()
    })
    .await
    .unwrap();
    let node = Node::worker(&api);
    node.pass(false).await;
    let first = node.held();
    let total = first
        .validity
        .not_after
        .duration_since(first.validity.not_before)
        .unwrap();
    let at = first
        .rotate_at
        .duration_since(first.validity.not_before)
        .unwrap();
    assert!(
        at >= total.mul_f64(0.92) && at < total.mul_f64(0.96),
        "{at:?} of {total:?}"
    );
    let before = node.calls();
    sleep_until(first.rotate_at).await;

    let r = node.pass(false).await;
    assert_applied(&r, "kubelet-credentials");
    let second = node.held();
    assert!(
        second.validity.not_after > first.validity.not_after,
        "{first:?} {second:?} {:?} {r:?}",
        requesters(&api)
    );
    // Renewed with the node's own certificate (selfnodeclient), not the bootstrap token...
    assert_eq!(
        requesters(&api),
        ["system:bootstrap:abcdef", "system:node:worker-1"]
    );
    // ...with a new key (so a new request name), and kubelet restarted once on it.
    let names: Vec<String> = api
        .csrs()
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2);
    assert_ne!(names[0], names[1]);
    let keys: Vec<String> = api
        .received()
        .iter()
        .map(|c| c["spec"]["request"].as_str().unwrap().to_string())
        .collect();
    assert_ne!(keys[0], keys[1]);
    let after = node.calls();
    assert_eq!(
        after["restart"].as_u64().unwrap(),
        before["restart"].as_u64().unwrap() + 1,
        "{after}"
    );

    // The server stops accepting the node's certificates (401): the next renewal falls back to
    // the bootstrap token.
    api.revoke("system:node:worker-1");
    sleep_until(second.rotate_at).await;
    let r = node.pass(false).await;
    assert_applied(&r, "kubelet-credentials");
    assert_eq!(
        requesters(&api),
        [
            "system:bootstrap:abcdef",
            "system:node:worker-1",
            "system:bootstrap:abcdef"
        ]
    );
    assert!(node.held().validity.not_after > second.validity.not_after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_is_not_repeated_until_an_operator_acts() {
    let api = Double::start(Options {
        approval: Approval::Deny("not on the list".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let node = Node::worker(&api);
    let r = node.pass(false).await;
    let s = text(step(&r, "kubelet-credentials"));
    assert_eq!(step(&r, "kubelet-credentials").name(), "failed", "{s}");
    assert!(
        s.contains("was denied: not on the list") && s.contains("nodectl converge"),
        "{s}"
    );
    assert_eq!(step(&r, "kubelet-running").name(), "blocked");
    // The denied key is gone: a later request is a new one.
    assert!(!node
        .root
        .path("/var/lib/kubelet/pki/kubelet-client.key.tmp")
        .exists());

    // Events and resyncs do not ask again.
    let r = node.pass(false).await;
    assert_eq!(step(&r, "kubelet-credentials").name(), "failed");
    assert_eq!(api.csrs().len(), 1);

    // The operator fixes the approval policy and runs `nodectl converge`.
    api.set_approval(Approval::Auto);
    let r = node.pass(true).await;
    assert_eq!(
        step(&r, "kubelet-running").name(),
        "applied",
        "{:?}",
        step(&r, "kubelet-credentials")
    );
    assert_eq!(api.csrs().len(), 2);
    assert!(Path::new(&node.root.path("/var/lib/kubelet/kubeconfig")).exists());
}

/// A refused bundle in the inbox does not hold back the node's credentials (bootstrap-kubeconfig
/// only runs after `secrets`) nor kubelet: the request is made, the node's kubeconfig written
/// and kubelet started. A refused bundle placed nothing (it is checked whole first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_bundle_does_not_hold_back_the_nodes_certificate() {
    let api = Double::start(Options::default()).await.unwrap();
    let node = Node::worker(&api);
    common::drop_bundle(
        node.root.dir(),
        "bad",
        &common::typhoon_bundle(&[("../../etc/cron.d/x", "x")]),
    );
    let r = node.pass(false).await;
    assert_eq!(step(&r, "secrets").name(), "failed", "{r:?}");
    assert_applied(&r, "kubelet-credentials");
    assert_eq!(
        requesters(&api),
        vec!["system:bootstrap:abcdef".to_string()]
    );
    assert!(node.root.path("/var/lib/kubelet/kubeconfig").exists());
    assert_applied(&r, "kubelet-running");
    assert_eq!(node.calls()["start"], 1);
    assert!(!node.root.path("/etc/cron.d/x").exists());
}

/// A controller waiting for its bundle, its bootstrap kubeconfig placed by provisioning (issue
/// 18): kubelet's CA and env file are written and kubelet started standalone while it waits
/// (issue 38: as Typhoon's kubelet runs before its bundle), so the bundle's pass is the
/// placement alone; no certificate is requested before the bundle (the API server runs from
/// it) and no pass is asked for meanwhile; the bundle's pass leaves the request to the next
/// pass, which makes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_waiting_for_its_bundle_writes_kubelets_files_and_asks_nobody() {
    let api = Double::start(Options::default()).await.unwrap();
    let node = Node::new(
        "[node]\nrole = \"controller\"\nname = \"controller-0\"\n",
        &api.bootstrap_kubeconfig(TOKEN),
    );
    std::fs::remove_file(node.root.path("/etc/kubernetes/pki/ca.crt")).unwrap();
    let woken = std::sync::Arc::new(tokio::sync::Notify::new());
    let waker: nodectl::engine::Waker = {
        let w = woken.clone();
        std::sync::Arc::new(move || w.notify_one())
    };
    for first in [true, false] {
        let (r, recheck) = node.pass_rechecking(false, Some(waker.clone())).await;
        assert_eq!(step(&r, "secrets").name(), "waiting", "{r:?}");
        assert_eq!(step(&r, "bootstrap-kubeconfig").name(), "converged");
        let done = if first { "applied" } else { "converged" };
        assert_eq!(step(&r, "kubelet-ca").name(), done, "{r:?}");
        assert_eq!(step(&r, "kubelet-credentials").name(), done, "{r:?}");
        assert_eq!(step(&r, "kubelet-running").name(), done, "{r:?}");
        assert_eq!(
            recheck, None,
            "a controller waiting for its bundle asked for a pass"
        );
        if !first {
            assert!(
                text(step(&r, "kubelet-credentials"))
                    .contains("once the control plane's bundle is placed"),
                "{r:?}"
            );
        }
    }
    assert!(node.env().contains("kubelet-standalone.yaml"));
    assert_eq!(
        std::fs::read_to_string(node.root.path("/etc/kubernetes/ca.crt")).unwrap(),
        api.ca_pem()
    );
    assert_eq!(
        api.csrs().len(),
        0,
        "a request before the control plane's bundle"
    );
    assert_eq!(node.calls()["start"], 1);

    common::drop_bundle(
        node.root.dir(),
        "assets",
        &common::typhoon_bundle(&[
            ("tls/k8s/ca.crt", common::CERT),
            ("tls/k8s/ca.key", common::KEY),
            (
                "static-manifests/kube-apiserver.yaml",
                "apiVersion: v1\nkind: Pod",
            ),
        ]),
    );
    let (r, recheck) = node.pass_rechecking(false, Some(waker.clone())).await;
    assert_applied(&r, "secrets");
    assert_eq!(step(&r, "kubelet-ca").name(), "converged", "{r:?}");
    assert_applied(&r, "kubelet-credentials");
    assert_eq!(step(&r, "kubelet-running").name(), "converged", "{r:?}");
    assert_eq!(
        node.calls()["start"],
        1,
        "kubelet started once, before the bundle"
    );
    assert_eq!(
        api.csrs().len(),
        0,
        "the request was made in the bundle's pass"
    );
    assert_eq!(
        recheck,
        Some(Duration::ZERO),
        "the request's pass is asked for at once"
    );
    let r = node.pass_waking(false, Some(waker.clone())).await;
    assert_ne!(step(&r, "kubelet-credentials").name(), "failed", "{r:?}");
    tokio::time::timeout(Duration::from_secs(10), woken.notified())
        .await
        .expect("the request's end wakes the daemon");
    assert_eq!(
        requesters(&api),
        vec!["system:bootstrap:abcdef".to_string()]
    );
}

/// Nothing on a controller's critical path waits for the API: in the daemon, a controller
/// without its certificate starts kubelet standalone in the same pass, without waiting for its
/// request (the API server it goes to is one of kubelet's static pods), which the next pass
/// starts; the request goes on in the background and wakes the daemon when the certificate is
/// issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_pass_never_waits_for_the_api() {
    let api = Double::start(Options {
        approval: Approval::After(Duration::from_secs(2)),
        ..Default::default()
    })
    .await
    .unwrap();
    let node = Node::new(
        "[node]\nrole = \"controller\"\nname = \"controller-0\"\n",
        &api.bootstrap_kubeconfig(TOKEN),
    );
    let woken = std::sync::Arc::new(tokio::sync::Notify::new());
    let waker: nodectl::engine::Waker = {
        let w = woken.clone();
        std::sync::Arc::new(move || w.notify_one())
    };
    let t = std::time::Instant::now();
    let r = node.pass_waking(false, Some(waker.clone())).await;
    let took = t.elapsed();
    assert_eq!(step(&r, "kubelet-running").name(), "applied", "{r:?}");
    assert!(
        took < Duration::from_millis(1500),
        "the pass waited {took:?} for the API"
    );
    println!(
        "controller pass with the API approving in 2 s: {} ms",
        took.as_millis()
    );
    assert!(node.env().contains("kubelet-standalone.yaml"));
    // The request itself was left for the next pass (the daemon runs it at once: the step asks
    // for a recheck in 0 s), so its work does not come before kubelet's start on this thread.
    assert_eq!(api.csrs().len(), 0);
    let r = node.pass_waking(false, Some(waker.clone())).await;
    assert_ne!(step(&r, "kubelet-credentials").name(), "failed", "{r:?}");
    tokio::time::timeout(Duration::from_secs(10), woken.notified())
        .await
        .expect("the request's end wakes the daemon");
    let r = node.pass_waking(false, Some(waker)).await;
    assert_eq!(step(&r, "kubelet-credentials").name(), "applied", "{r:?}");
    assert!(node
        .env()
        .contains("--kubeconfig=/var/lib/kubelet/kubeconfig"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_own_rotation_in_the_seeded_store_is_adopted_without_a_request_or_restart() {
    let api = Double::start(Options {
        signing_duration: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
    let node = Node::worker(&api);
    node.pass(false).await;
    let first = node.held();
    let restarts = node.calls()["restart"].as_u64().unwrap_or(0);
    // kubelet (rotateCertificates: true) rotates in the same store (common::kubelet_rotates).
    let kc = api
        .client_kubeconfig("system:node:worker-1", &["system:nodes"])
        .unwrap();
    let pki = node.root.path("/var/lib/kubelet/pki");
    let file = common::kubelet_rotates(node.root.dir(), &kc);

    let r = node.pass(false).await;
    let st = step(&r, "kubelet-credentials");
    assert_ne!(st.name(), "failed", "{st:?}");
    let second = node.held();
    assert!(
        second.validity.not_after > first.validity.not_after + Duration::from_secs(3600),
        "nodectld reads the certificate kubelet rotated to: {first:?} {second:?}"
    );
    // ...and neither requests one of its own nor restarts kubelet (kubelet loaded it itself).
    assert_eq!(requesters(&api), ["system:bootstrap:abcdef"]);
    assert_eq!(node.calls()["restart"].as_u64().unwrap_or(0), restarts);
    assert_eq!(
        std::fs::read_link(pki.join("kubelet-client-current.pem")).unwrap(),
        Path::new(file)
    );
    // The kubeconfig kubelet runs with still names the current link (nothing to rewrite).
    let kubeconfig =
        std::fs::read_to_string(node.root.path("/var/lib/kubelet/kubeconfig")).unwrap();
    assert!(
        kubeconfig.contains("client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem"),
        "{kubeconfig}"
    );
    // nodectld's own renewal comes only after kubelet's window (70-90%) has passed.
    let lifetime = second
        .validity
        .not_after
        .duration_since(second.validity.not_before)
        .unwrap();
    assert!(second.rotate_at >= second.validity.not_before + lifetime.mul_f64(0.92));
}
