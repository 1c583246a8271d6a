//! A group's reboot slots stored in a coordination.k8s.io/v1 Lease, so the lock lives in the
//! cluster's own replicated store: `reboot-<group>` in one namespace, one annotation per holder
//! (`<node>.reboot-holders.nodectl.io/slot`, the holder as JSON: id, node, since, renewed, boot),
//! `spec.holderIdentity` the first holder's node (for `kubectl get lease`),
//! `spec.leaseTransitions` counting slots taken. Every change is a read-modify-write with the
//! object's `resourceVersion`: two nodes racing for the last slot cannot both win (the loser gets
//! 409 Conflict, reads again, and finds the group full).
//!
//! A node writes only its own entry: a reclaimed holder (stale) is no longer
//! counted but its entry stays until that node (or an administrator) removes it. So the
//! ValidatingAdmissionPolicy in `packaging/kubernetes/reboot-lease-policy.yaml` can let each node
//! add, change or remove only its own entry, whatever its credentials allow on the Lease.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, PostParams};

use super::slots::Slots;

/// The suffix of a holder's annotation key; the key is `<node>` followed by it (named where the
/// kubectl plugin, which reads the entries, takes it from).
pub use kubectl_nodectl::names::ENTRY_SUFFIX;

/// The annotation key of `node`'s entry.
pub fn entry_key(node: &str) -> String {
    format!("{node}{ENTRY_SUFFIX}")
}
/// Read-modify-write attempts before giving up on a contended Lease.
const ATTEMPTS: u32 = 20;

/// Why reading or writing the group's Lease failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused or failed the request, or writes kept conflicting.
    #[error("Lease {namespace}/{name}: {message}")]
    Api {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
        /// The error.
        message: String,
    },
}

/// A group's reboot slots kept in one Lease.
#[derive(Clone)]
pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

/// The group's Lease: `reboot-<group>` when that is a valid object name (a lowercase DNS-1123
/// subdomain, as `default` or `workers-1` give). FleetLock groups may hold what names may not
/// (`Workers`, `a..b`); those map to their lowercase, cleaned form plus a hash of the group, so
/// two groups never share a Lease and the name is always accepted.
pub(crate) fn lease_name(group: &str) -> String {
    let plain = format!("reboot-{group}");
    if crate::util::names::is_dns_subdomain(&plain) && plain.len() <= 253 {
        return plain;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, group.as_bytes());
    let hash: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let clean: Vec<String> = group
        .to_ascii_lowercase()
        .split('.')
        .map(|l| {
            l.chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .take(40)
                .collect::<String>()
                .trim_matches('-')
                .to_string()
        })
        .filter(|l| !l.is_empty())
        .take(4)
        .collect();
    if clean.is_empty() {
        format!("reboot-{hash}")
    } else {
        format!("reboot-{}-{hash}", clean.join("."))
    }
}

/// The holders stored in the Lease: every entry that parses and names the node of its key, in
/// the order they took their slots; the others, by key.
pub(crate) fn slots_of(l: &Lease) -> (Slots, Vec<String>) {
    let mut slots = Slots::default();
    let mut bad = Vec::new();
    for (k, v) in l.metadata.annotations.iter().flatten() {
        let Some(node) = k.strip_suffix(ENTRY_SUFFIX) else {
            continue;
        };
        match serde_json::from_str::<super::slots::Holder>(v) {
            Ok(h) if h.node == node => slots.holders.push(h),
            Ok(_) => bad.push(k.clone()),
            // A node's entry after its release, while its group settles.
            Err(_) => match serde_json::from_str::<super::slots::Released>(v) {
                Ok(r) if r.node == node => slots.released.push(r),
                _ => bad.push(k.clone()),
            },
        }
    }
    slots
        .holders
        .sort_by(|a, b| (a.since, &a.node).cmp(&(b.since, &b.node)));
    (slots, bad)
}

/// Every entry, counted, reclaimed or released, by node, as stored (a holder's wins over a
/// released entry of the same node).
fn entries(s: &Slots) -> std::collections::BTreeMap<&str, String> {
    let mut out: std::collections::BTreeMap<&str, String> = s
        .released
        .iter()
        .map(|r| {
            let v = serde_json::to_string(r).expect("released entry serializes");
            (r.node.as_str(), v)
        })
        .collect();
    for h in s.holders.iter().chain(&s.reclaimed) {
        let v = serde_json::to_string(h).expect("holder serializes");
        out.insert(h.node.as_str(), v);
    }
    out
}

/// `spec.leaseTransitions` after `taken` more slots were taken: saturating, since the stored
/// count is whatever the Lease holds (a value near `i32::MAX` must not wrap to a negative count,
/// as a plain `+` does in a release build, nor panic in a debug one).
fn transitions(stored: Option<i32>, taken: usize) -> i32 {
    stored
        .unwrap_or(0)
        .saturating_add(i32::try_from(taken).unwrap_or(i32::MAX))
}

impl LeaseLock {
    /// The lock for `group`'s Lease in `namespace` (nothing is read or created yet).
    pub fn new(client: kube::Client, namespace: &str, group: &str) -> Self {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: lease_name(group),
        }
    }

    /// The stored slots; an entry that does not parse (every node may write the Lease) is left
    /// out, so its slot is free, and logged: a permanent error would stop every reboot of the
    /// group.
    fn slots_or_reclaim(&self, l: &Lease) -> Slots {
        let (slots, bad) = slots_of(l);
        for k in bad {
            tracing::warn!(
                lease = %self.name,
                namespace = %self.namespace,
                "the Lease's entry {k} is unreadable; its slot is not counted"
            );
        }
        slots
    }

    fn err(&self, e: impl std::fmt::Display) -> LeaseError {
        LeaseError::Api {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            message: e.to_string(),
        }
    }

    /// The group's slots as stored now (empty when the Lease does not exist yet).
    pub async fn read(&self) -> Result<Slots, LeaseError> {
        match self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.err(e))?
        {
            None => Ok(Slots::default()),
            Some(l) => Ok(self.slots_or_reclaim(&l)),
        }
    }

    /// Applies `f` to the stored slots and writes the result (only when it changed), retrying
    /// on conflicts. Returns `f`'s result from the attempt that was written.
    pub async fn modify<R>(
        &self,
        mut f: impl FnMut(&mut Slots) -> R,
    ) -> Result<(R, Slots), LeaseError> {
        for attempt in 0..ATTEMPTS {
            let current = self
                .api
                .get_opt(&self.name)
                .await
                .map_err(|e| self.err(e))?;
            let mut slots = match &current {
                None => Slots::default(),
                Some(l) => self.slots_or_reclaim(l),
            };
            let before = slots.clone();
            let r = f(&mut slots);
            if slots == before && current.is_some() {
                return Ok((r, slots));
            }
            let taken = slots
                .holders
                .iter()
                .filter(|h| !before.holds(&h.node))
                .count();
            let mut lease = current.clone().unwrap_or_default();
            lease.metadata.name = Some(self.name.clone());
            let (was, now) = (entries(&before), entries(&slots));
            let annotations = lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            for node in was.keys().chain(now.keys()) {
                match (was.get(node), now.get(node)) {
                    (a, Some(b)) if a != Some(b) => {
                        annotations.insert(entry_key(node), b.clone());
                    }
                    (Some(_), None) => {
                        annotations.remove(&entry_key(node));
                    }
                    _ => {}
                }
            }
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = slots.holders.first().map(|h| h.node.clone());
            spec.lease_transitions = Some(transitions(spec.lease_transitions, taken));
            let written = match &current {
                None => self.api.create(&PostParams::default(), &lease).await,
                Some(_) => {
                    self.api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await
                }
            };
            match written {
                Ok(_) => return Ok((r, slots)),
                // Someone else wrote first: read again and decide again.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let pause = 5.0 + (crate::util::jitter() * 20.0 * f64::from(attempt + 1));
                    tokio::time::sleep(Duration::from_millis(pause as u64)).await;
                }
                Err(e) => return Err(self.err(e)),
            }
        }
        Err(self.err(format!(
            "still conflicting after {ATTEMPTS} read-modify-write attempts"
        )))
    }
}

impl LeaseLock {
    /// Waits, by watching the Lease (one long request, no reads in between), until it shows a
    /// free slot (fewer than `max` holders, or one held by `node` itself) and stays free for a
    /// random `0..jitter` after that, so a fleet that saw the same
    /// release does not rush the API server at once: the first node whose wait ends takes the
    /// slot, and the others see it taken before theirs ends and go on waiting. Ends too when the
    /// watch does (after `timeout`, jittered: the caller then asks again, which is when stale
    /// holders are reclaimed). `rand` draws the jitter (0..1).
    pub async fn wait_free(
        &self,
        node: &str,
        max: usize,
        jitter: Duration,
        timeout: Duration,
        mut rand: impl FnMut() -> f64,
    ) -> Result<WaitEnd, LeaseError> {
        use futures_util::{StreamExt, TryStreamExt};
        use kube::api::{WatchEvent, WatchParams};
        let secs = (timeout.as_secs_f64() * (0.8 + 0.2 * rand())).max(1.0) as u32;
        // (with bookmarks, kube's default: the server sends something now and then on a quiet
        // Lease)
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(secs);
        let wait = async {
            let mut events = self
                .api
                .watch(&wp, "0")
                .await
                .map_err(|e| self.err(e))?
                .boxed();
            let mut ends: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
            // Nothing is known before the first event: the Lease as it is now, sent as ADDED
            // (one deleted meanwhile sends nothing, and is found free when the watch ends).
            let mut free = false;
            loop {
                if free && ends.is_none() {
                    ends = Some(Box::pin(tokio::time::sleep(jitter.mul_f64(rand()))));
                } else if !free {
                    ends = None;
                }
                let ev = match ends.as_mut() {
                    Some(e) => tokio::select! {
                        _ = e => return Ok(WaitEnd::Free),
                        ev = events.try_next() => ev,
                    },
                    None => events.try_next().await,
                };
                match ev.map_err(|e| self.err(e))? {
                    Some(WatchEvent::Added(l)) | Some(WatchEvent::Modified(l)) => {
                        let (slots, _) = slots_of(&l);
                        free = slots.holds(node) || slots.holders.len() < max;
                    }
                    Some(WatchEvent::Deleted(_)) => free = true,
                    Some(WatchEvent::Bookmark(_)) => {}
                    Some(WatchEvent::Error(e)) => return Err(self.err(e.message)),
                    None => return Ok(WaitEnd::Timeout),
                }
            }
        };
        // A connection dropped without a word (a load balancer's idle timeout, a host gone)
        // would leave the watch waiting for good: it ends here whatever the server does.
        let deadline = Duration::from_secs(u64::from(secs) + 30) + jitter;
        tokio::time::timeout(deadline, wait)
            .await
            .unwrap_or(Ok(WaitEnd::Timeout))
    }
}

/// Why [`LeaseLock::wait_free`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// A slot is free (and stayed free for the jitter).
    Free,
    /// The watch ended with no free slot seen long enough.
    Timeout,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_one_annotation_per_node_and_bad_ones_are_not_counted() {
        let h = |node: &str, since| super::super::slots::Holder {
            id: format!("id-{node}"),
            node: node.into(),
            since,
            renewed: since,
            boot: String::new(),
            hold: String::new(),
            checked: false,
        };
        let mut l = Lease::default();
        let a = l.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(entry_key("n2"), serde_json::to_string(&h("n2", 5)).unwrap());
        a.insert(entry_key("n1"), serde_json::to_string(&h("n1", 9)).unwrap());
        // An entry naming another node than its key's, and one that does not parse.
        a.insert(entry_key("n3"), serde_json::to_string(&h("n4", 1)).unwrap());
        a.insert(entry_key("n5"), "{".into());
        a.insert("other.example.com/x".into(), "y".into());
        let (slots, bad) = slots_of(&l);
        let nodes: Vec<&str> = slots.holders.iter().map(|h| h.node.as_str()).collect();
        assert_eq!(nodes, ["n2", "n1"], "in the order they took their slots");
        assert_eq!(bad, [entry_key("n3"), entry_key("n5")]);
        // A reclaimed holder stays among the entries written.
        let mut s = slots.clone();
        let mut seen = crate::reboot::slots::Sightings::default();
        s.clone().reclaim(&mut seen, 0, 60);
        s.reclaim(&mut seen, 61, 60);
        assert!(s.holders.is_empty());
        assert_eq!(entries(&s).len(), 2);
        // A released entry (issue 41's settle time) is read back as one, not as a bad entry.
        let mut r = slots.clone();
        r.release_settling("n1", 100, 20);
        let v = entries(&r)["n1"].clone();
        assert_eq!(v, r#"{"node":"n1","released":100,"settle":20}"#);
        let a = l.metadata.annotations.as_mut().unwrap();
        a.insert(entry_key("n1"), v);
        let (back, bad) = slots_of(&l);
        assert_eq!(back.released, r.released);
        assert_eq!(back.holders.len(), 1);
        assert_eq!(bad.len(), 2);
    }

    /// A load balancer that dropped the quiet connection, a host gone: nothing ever answers.
    /// The wait still ends, at the watch's time plus its margin (virtual time).
    #[tokio::test(start_paused = true)]
    async fn a_watch_that_never_answers_ends_at_its_deadline() {
        let svc = tower::service_fn(|_req: hyper::Request<kube::client::Body>| async {
            std::future::pending::<
                Result<
                    hyper::Response<http_body_util::Empty<bytes::Bytes>>,
                    std::convert::Infallible,
                >,
            >()
            .await
        });
        let lock = LeaseLock::new(
            kube::Client::new(svc, "default"),
            "nodectl-reboot",
            "default",
        );
        let t = tokio::time::Instant::now();
        let wait = lock.wait_free(
            "n1",
            1,
            Duration::from_secs(1),
            Duration::from_secs(60),
            || 0.0,
        );
        let end = tokio::time::timeout(Duration::from_secs(3600), wait)
            .await
            .expect("the wait never ended")
            .unwrap();
        assert_eq!(end, WaitEnd::Timeout);
        // 60 s less a fifth at rand 0 (48 s), + 30 s margin + the jitter's bound (1 s)
        assert_eq!(t.elapsed().as_secs(), 79);
    }

    #[test]
    fn lease_transitions_saturate_instead_of_wrapping() {
        assert_eq!(transitions(None, 1), 1);
        assert_eq!(transitions(Some(41), 1), 42);
        assert_eq!(transitions(Some(7), 0), 7);
        assert_eq!(transitions(Some(i32::MAX), 1), i32::MAX);
        assert_eq!(transitions(Some(i32::MAX - 1), 5), i32::MAX);
        assert_eq!(transitions(Some(0), usize::MAX), i32::MAX);
    }

    #[test]
    fn every_fleetlock_group_has_a_valid_lease_name_of_its_own() {
        assert_eq!(lease_name("default"), "reboot-default");
        assert_eq!(lease_name("workers-1"), "reboot-workers-1");
        assert_eq!(lease_name("a.b"), "reboot-a.b");
        let mut seen = std::collections::BTreeSet::new();
        for g in [
            "Workers", "workers", "WORKERS", "a..b", "a.-b", "-x-", ".", "...", "A.B.", "0",
        ] {
            let n = lease_name(g);
            assert!(crate::util::names::is_dns_subdomain(&n), "{g:?} -> {n:?}");
            assert!(seen.insert(n.clone()), "{g:?} -> {n:?} shared");
            assert!(crate::util::names::valid_group(g), "{g}");
        }
        assert_eq!(lease_name("Workers"), lease_name("Workers"), "stable");
        let long = "x".repeat(300);
        assert!(crate::util::names::is_dns_subdomain(&lease_name(&long)));
    }
}
