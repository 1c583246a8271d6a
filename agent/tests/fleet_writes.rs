//! Tier 1: what a fleet of 1000 nodes' nodectld writes to the API server, simulated.
//!
//! Each node's reporter is nodectld's own ([`Heartbeat`]: the daemon's reporter makes the same
//! calls, daemon/node_status.rs), stepped in virtual time as the daemon steps it (at the time
//! its last step asked for); its writes go to the API double in-process
//! ([`Double::call_as`]: the double's authorization, NodeRestriction, strategic merge and
//! storage, as the node's own user `system:node:<name>`; no TLS: a thousand TLS clients would
//! measure this machine, not the protocol). The writes are counted where the API server would
//! count them, in the double's request log. The fleet starts together (a fleet-wide nodectld
//! update restarts every node within minutes), the worst case for a heartbeat aligned in
//! time.
//!
//! Printed: writes/s at idle over four hours after the first, and the busiest minute. Guarded:
//! at most 1 write/s on average for 1000 nodes (issue 40), annotations never written at idle.
//! Not simulated here: the SelfSubjectReview (asked once per certificate and after a 401, by
//! the daemon's pass; tests/node_condition.rs counts it).
//!
//! The rolling reboot: 1000 nodes' update_engine followers (nodectld's own `Follower` and
//! `LeaseCoordinator`, each with an in-process `kube::Client` as its node) in virtual time
//! (tokio's paused clock): the writes/s from the first grant to the eighth release, and how often
//! the waiting nodes read the group's Lease (they watch it).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use hyper::{Method, Request};
use nodectl::engine::{StepReport, StepState};
use nodectl::reboot::coordinator::{LeaseCoordinator, Policy};
use nodectl::reboot::fleetlock::ClientParams;
use nodectl::reboot::update_engine::Follower;
use nodectl::status::heartbeat::Heartbeat;
use nodectl::status::report::NodeWrites;
use nodectl::status::report::ReportError;
use nodectl::status::{Credentials, Status};
use nodectl_apiserver_double::{Double, Options, PodKind, User};
use serde_json::Value;

const NODES: usize = 1000;
/// `kubelet.condition_heartbeat_secs`'s default.
const HEARTBEAT: u64 = 1200;
const T0: u64 = 1_800_000_000;

/// One node's writes, to the double as that node.
struct AsNode<'a> {
    api: &'a Double,
    user: User,
    node: String,
}

impl AsNode<'_> {
    async fn patch(
        &self,
        path: String,
        content_type: &str,
        body: Value,
    ) -> Result<(), ReportError> {
        let req = Request::builder()
            .method(Method::PATCH)
            .uri(path)
            .header("content-type", content_type)
            .body(Bytes::from(body.to_string()))
            .expect("request");
        let (code, answer) = self.api.call_as(&self.user, req).await;
        match code.as_u16() {
            200..=299 => Ok(()),
            404 => Err(ReportError::NotRegistered(self.node.clone())),
            401 => Err(ReportError::Unauthorized("401".into())),
            c => Err(ReportError::Api(format!("{c}: {}", answer["message"]))),
        }
    }
}

impl NodeWrites for AsNode<'_> {
    fn patch_status(&mut self, body: Value) -> BoxFuture<'_, Result<(), ReportError>> {
        let path = format!("/api/v1/nodes/{}/status", self.node);
        Box::pin(self.patch(path, "application/strategic-merge-patch+json", body))
    }

    fn patch_meta(&mut self, body: Value) -> BoxFuture<'_, Result<(), ReportError>> {
        let path = format!("/api/v1/nodes/{}", self.node);
        Box::pin(self.patch(path, "application/merge-patch+json", body))
    }
}

/// A converged node's status, as the daemon publishes it.
fn converged(node: &str) -> Status {
    Status {
        steps: [
            "node-files",
            "secrets",
            "kubelet-credentials",
            "kubelet-running",
        ]
        .iter()
        .map(|id| StepReport {
            id: (*id).into(),
            description: String::new(),
            deps: vec![],
            state: StepState::Converged {
                detail: "ok".into(),
            },
        })
        .collect(),
        credentials: Some(Credentials {
            subject: format!("system:node:{node}"),
            not_before: "2027-01-15T08:00:00Z".into(),
            not_after: "2027-01-18T08:00:00Z".into(),
            rotate_at: "2027-01-18T04:00:00Z".into(),
            expires_in_s: 259_200,
        }),
        ..Status::default()
    }
}

/// A small deterministic generator (xorshift), for the jitter each step draws.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The writes in the double's log (every request that is not a read).
fn writes(api: &Double) -> Vec<(String, String, String)> {
    api.requests()
        .into_iter()
        .filter(|(_, m, _)| m != "GET")
        .collect()
}

#[tokio::test]
async fn a_thousand_idle_nodes_write_their_nodes_less_than_once_a_second() {
    let api = Double::start(Options::default()).await.unwrap();
    let names: Vec<String> = (0..NODES).map(|i| format!("node-{i:04}")).collect();
    for n in &names {
        api.set_node(n, true);
    }
    let statuses: Vec<Status> = names.iter().map(|n| converged(n)).collect();
    let mut reporters: Vec<Heartbeat> = (0..NODES)
        .map(|_| Heartbeat::new(HEARTBEAT, None))
        .collect();
    let mut writers: Vec<AsNode> = names
        .iter()
        .map(|n| AsNode {
            api: &api,
            user: User {
                name: format!("system:node:{n}"),
                groups: vec!["system:nodes".into(), "system:authenticated".into()],
            },
            node: n.clone(),
        })
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Every nodectld starts within the first 5 minutes.
    let mut queue: BinaryHeap<Reverse<(u64, usize)>> = (0..NODES)
        .map(|i| Reverse((T0 + (rng.unit() * 300.0) as u64, i)))
        .collect();
    let (idle_from, idle_to) = (T0 + 3600, T0 + 5 * 3600);
    let mut at_idle_from = None;
    // writes per minute at idle, for the busiest one
    let mut per_minute = vec![0u32; ((idle_to - idle_from) / 60) as usize];
    while let Some(Reverse((t, i))) = queue.pop() {
        if t >= idle_to {
            break;
        }
        if t >= idle_from && at_idle_from.is_none() {
            at_idle_from = Some(writes(&api).len());
        }
        let o = reporters[i]
            .step(&statuses[i], t, rng.unit(), &names[i], &mut writers[i])
            .await;
        assert!(
            o.report.as_ref().is_none_or(|r| r.error.is_none()),
            "{}: {:?}",
            names[i],
            o.report
        );
        if t >= idle_from {
            per_minute[((t - idle_from) / 60) as usize] += o.writes;
        }
        queue.push(Reverse((o.next_at.max(t + 1), i)));
    }
    let all = writes(&api);
    let idle = &all[at_idle_from.expect("the simulation reached idle")..];
    let secs = (idle_to - idle_from) as f64;
    let rate = idle.len() as f64 / secs;
    let busiest = *per_minute.iter().max().unwrap() as f64 / 60.0;
    // The schedule before (issue 40): the condition and the annotations, every 300 s.
    let before = NODES as f64 * 2.0 / 300.0;
    println!(
        "fleet simulation: {NODES} nodes, heartbeat {HEARTBEAT} s: {rate:.3} writes/s at idle \
         ({} writes in {secs} s), busiest minute {busiest:.2} writes/s; the schedule before \
         (both writes every 300 s) {before:.2} writes/s: {}x; target <= 1 write/s at idle: {}",
        idle.len(),
        rate / before,
        if rate <= 1.0 { "met" } else { "NOT met" }
    );
    // Only the condition's heartbeat, as each node's own user, on its own Node.
    for (user, method, path) in idle {
        assert_eq!(method, "PATCH");
        let node = user.strip_prefix("system:node:").unwrap();
        assert_eq!(path, &format!("/api/v1/nodes/{node}/status"), "{user}");
    }
    assert!(rate <= 1.0, "{rate} writes/s at idle for {NODES} nodes");
    // and no node falls silent: every one beat in every heartbeat's time
    assert!(idle.len() as f64 >= NODES as f64 * secs / HEARTBEAT as f64);
    // At the start: the annotations once per node (then never at idle).
    let before = &all[..all.len() - idle.len()];
    let metas = before
        .iter()
        .filter(|(_, _, p)| !p.ends_with("/status"))
        .count();
    assert_eq!(
        metas, NODES,
        "the annotations written once per node, at its start"
    );
    let node = api.node("node-0042").unwrap();
    assert_eq!(
        node["metadata"]["annotations"]["nodectl.io/reboot-state"],
        "idle"
    );
}

/// A client for `node` that talks to the double in-process (its own user, no TLS): nodectl's
/// own API code (watches included) against the double's answers, in virtual time.
fn in_process(api: &Arc<Double>, node: &str) -> kube::Client {
    let user = node_user(node);
    let api = api.clone();
    let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
        let (api, user) = (api.clone(), user.clone());
        async move {
            let (parts, body) = req.into_parts();
            let bytes = http_body_util::BodyExt::collect(body)
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok::<_, std::convert::Infallible>(
                api.respond_as(&user, Request::from_parts(parts, bytes))
                    .await,
            )
        }
    });
    kube::Client::new(svc, "default")
}

fn node_user(node: &str) -> User {
    User {
        name: format!("system:node:{node}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
    }
}

/// How long a simulated reboot takes, from logind's Reboot to the Node Ready again.
const REBOOT_TAKES: Duration = Duration::from_secs(180);

/// Virtual times (and the double's write count then) of the rolling reboot's milestones.
#[derive(Default)]
struct Milestones {
    granted: Vec<(tokio::time::Instant, usize, usize)>,
    released: Vec<(tokio::time::Instant, usize, usize)>,
}

/// Now, with the double's write and request counts.
fn milestone(api: &Double) -> (tokio::time::Instant, usize, usize) {
    (
        tokio::time::Instant::now(),
        writes(api).len(),
        api.requests().len(),
    )
}

/// `node`'s update_engine follower in boot `boot`, as nodectld runs it (production retry), whose
/// reboot takes [`REBOOT_TAKES`] and is followed by the next boot's steady-state.
fn follower(api: &Arc<Double>, node: &str, boot: &str, m: &Arc<Mutex<Milestones>>) -> Follower {
    let c = in_process(api, node);
    let coordinator = Arc::new(
        LeaseCoordinator::new(
            Arc::new(move || {
                let c = c.clone();
                async move { Ok(c) }.boxed()
            }),
            node,
            node,
            Policy::default(),
            Arc::new(|| async { true }.boxed()),
        )
        .with_boot_id(boot),
    );
    let (api, name, milestones) = (api.clone(), node.to_string(), m.clone());
    Follower {
        coordinator,
        params: ClientParams {
            id: node.into(),
            group: "default".into(),
        },
        retry: Duration::from_secs(60),
        reboot: Arc::new(move || {
            let (api, name, m) = (api.clone(), name.clone(), milestones.clone());
            async move {
                let at = milestone(&api);
                m.lock().unwrap().granted.push(at);
                api.set_node(&name, false);
                tokio::spawn(async move {
                    tokio::time::sleep(REBOOT_TAKES).await;
                    api.set_node(&name, true);
                    follower(&api, &name, "boot-2", &m).steady_state().await;
                    let at = milestone(&api);
                    m.lock().unwrap().released.push(at);
                });
                Ok(())
            }
            .boxed()
        }),
        inhibited: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_rolling_reboot_of_a_thousand_nodes_waits_by_watch_not_by_reading() {
    // The first reboots of one group of 1000 nodes that got the same update within a minute
    // (one slot): every node but the holder waits.
    const REBOOTS: usize = 8;
    let api = Arc::new(Double::start(Options::default()).await.unwrap());
    let m = Arc::new(Mutex::new(Milestones::default()));
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut runs = Vec::new();
    for i in 0..NODES {
        let name = format!("node-{i:04}");
        api.set_node(&name, true);
        api.add_pod("apps", &format!("web-{i:04}"), &name, PodKind::Plain);
        let f = follower(&api, &name, "boot-1", &m);
        let after = Duration::from_millis((rng.unit() * 60_000.0) as u64);
        runs.push(tokio::spawn(async move {
            tokio::time::sleep(after).await;
            f.reboot_for_update().await
        }));
    }
    let start = tokio::time::Instant::now();
    while m.lock().unwrap().released.len() < REBOOTS {
        assert!(
            start.elapsed() < Duration::from_secs(6 * 3600),
            "{} reboots released in 6 virtual hours",
            m.lock().unwrap().released.len()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for r in &runs {
        r.abort();
    }
    let m = m.lock().unwrap();
    let (from, w_from, r_from) = m.granted[0];
    let (to, w_to, r_to) = m.released[REBOOTS - 1];
    let secs = (to - from).as_secs_f64();
    let window = &writes(&api)[w_from..w_to];
    let rate = window.len() as f64 / secs;
    let lease_writes = window
        .iter()
        .filter(|(_, m, p)| m == "PUT" && p.contains("/leases/"))
        .count();
    let requests = &api.requests()[r_from..r_to];
    let reads = requests
        .iter()
        .filter(|(_, m, p)| m == "GET" && p.ends_with("/leases/reboot-default"))
        .count();
    let watches = requests
        .iter()
        .filter(|(_, m, p)| m == "GET" && p.ends_with("/leases"))
        .count();
    println!(
        "fleet simulation: {NODES} nodes in a rolling reboot (one slot; {REBOOTS} reboots in \
         {secs:.0} virtual s, from the first grant to the last release): {rate:.3} writes/s \
         ({} writes: {lease_writes} to the Lease, the rest cordons, evictions, uncordons); the \
         waiting nodes read the Lease {:.2} times/s ({reads} reads) and opened {watches} watches",
        window.len(),
        reads as f64 / secs
    );
    assert!(m.granted.len() >= REBOOTS);
    // one holder at a time: each grant after the previous release
    for k in 1..REBOOTS {
        assert!(m.granted[k].0 >= m.released[k - 1].0);
    }
    assert!(rate <= 1.0, "{rate} writes/s in the rolling reboot");
    // Without the watch, every waiting node read the Lease twice a minute: 33 reads/s.
    assert!(
        (reads as f64 / secs) < 5.0,
        "{reads} Lease reads in {secs} s"
    );
    // A write to the Lease is a take or a release (or the odd 409 where two jitters ended
    // within one request): not one per waiting node.
    assert!(lease_writes <= 4 * REBOOTS, "{lease_writes} Lease writes");
}
