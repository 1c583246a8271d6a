//! Cordon, drain and readiness of this node through the Kubernetes API (with the node's own
//! credentials): the Node is marked unschedulable, then every pod on it is evicted through the
//! Eviction API, which honours PodDisruptionBudgets (a refusal is `429 TooManyRequests`: that
//! pod stays and is asked again later). DaemonSet pods (they would come back at once), mirror
//! pods of static pods (the API cannot evict them) and finished pods are left alone. A pod no
//! controller manages would be lost for good: as `kubectl drain` without `--force`
//! (k8s.io/kubectl `pkg/drain/filters.go`, `unreplicatedFilter`), it is not evicted, and the
//! drain waits for it to be gone (`reboot.drain_force` evicts it).

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};

/// Set on the Node when nodectld cordoned it, so it uncordons only what it cordoned.
pub(crate) const CORDONED_BY: &str = "nodectl.io/cordoned-for-reboot";

/// Why a pod is not evicted, or `None` when it is.
pub(crate) fn skip_reason(p: &Pod) -> Option<&'static str> {
    let m = &p.metadata;
    if m.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
    {
        return Some("mirror pod of a static pod");
    }
    if m.owner_references.as_ref().is_some_and(|o| {
        o.iter()
            .any(|r| r.kind == "DaemonSet" && r.controller == Some(true))
    }) {
        return Some("DaemonSet pod");
    }
    match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") | Some("Failed") => Some("finished"),
        _ => None,
    }
}

/// A pod no controller manages (no owner reference with `controller: true`): evicting it
/// deletes it for good (`kubectl drain` refuses it without `--force`).
pub(crate) fn unmanaged(p: &Pod) -> bool {
    !p.metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.controller == Some(true)))
}

/// Which budget refused an eviction, and why, from the API server's 429 (upstream
/// `pkg/registry/core/pod/storage/eviction.go`: a cause of reason `DisruptionBudget`, "The
/// disruption budget NAME needs N healthy pods and has M currently"): "budget NAME needs N
/// healthy pods and has M currently". `None` for another 429 (the API server's rate limits).
pub(crate) fn budget(s: &kube::core::Status) -> Option<String> {
    let cause = s
        .details
        .as_ref()?
        .causes
        .iter()
        .find(|c| c.reason == "DisruptionBudget")?;
    let m = cause.message.trim();
    let m = m.strip_prefix("The disruption ").unwrap_or(m);
    Some(m.chars().take(200).collect())
}

/// The result of one drain round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    pub evicted: Vec<String>,
    /// Refused by a PodDisruptionBudget (`namespace/name`).
    pub blocked: Vec<String>,
    /// Evicted, still shutting down.
    pub terminating: Vec<String>,
    /// Not evicted: no controller manages them (`reboot.drain_force` off).
    pub unmanaged: Vec<String>,
    pub skipped: usize,
}

impl Progress {
    /// Nothing evictable is left on the node.
    pub fn done(&self) -> bool {
        self.blocked.is_empty()
            && self.terminating.is_empty()
            && self.evicted.is_empty()
            && self.unmanaged.is_empty()
    }

    /// The pods the drain waits for that only a budget or an operator frees: refused by a
    /// PodDisruptionBudget, or managed by no controller.
    pub fn stuck(&self) -> usize {
        self.blocked.len() + self.unmanaged.len()
    }
}

/// Its client must not retry 429s by itself (`kube::Config::default_retry = false`): the
/// Eviction API answers 429 for a PodDisruptionBudget, and the answer is what the drain needs.
pub(crate) struct Drainer {
    nodes: Api<Node>,
    client: kube::Client,
    pub node: String,
}

impl Drainer {
    pub fn new(client: kube::Client, node: &str) -> Self {
        Drainer {
            nodes: Api::all(client.clone()),
            client,
            node: node.into(),
        }
    }

    /// Marks the node (un)schedulable. Uncordoning only undoes nodectld's own cordon.
    pub async fn cordon(&self, on: bool) -> Result<(), kube::Error> {
        let patch = if on {
            serde_json::json!({"spec": {"unschedulable": true},
                "metadata": {"annotations": {CORDONED_BY: "true"}}})
        } else {
            let n = self.nodes.get(&self.node).await?;
            let ours = n
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(CORDONED_BY));
            if !ours {
                return Ok(());
            }
            serde_json::json!({"spec": {"unschedulable": null},
                "metadata": {"annotations": {CORDONED_BY: null}}})
        };
        self.nodes
            .patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// One round: evicts every evictable pod on the node (`force`: those no controller manages
    /// too).
    pub async fn evict_round(&self, force: bool) -> Result<Progress, kube::Error> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let list = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={}", self.node)))
            .await?;
        let mut out = Progress::default();
        for p in list.items {
            if skip_reason(&p).is_some() {
                out.skipped += 1;
                continue;
            }
            let (Some(ns), Some(name)) = (p.metadata.namespace.clone(), p.metadata.name.clone())
            else {
                continue;
            };
            if p.metadata.deletion_timestamp.is_some() {
                out.terminating.push(format!("{ns}/{name}"));
                continue;
            }
            if !force && unmanaged(&p) {
                out.unmanaged.push(format!("{ns}/{name}"));
                continue;
            }
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            match api.evict(&name, &EvictParams::default()).await {
                Ok(_) => out.evicted.push(format!("{ns}/{name}")),
                Err(kube::Error::Api(s)) if s.code == 429 => out.blocked.push(match budget(&s) {
                    Some(b) => format!("{ns}/{name} ({b})"),
                    None => format!("{ns}/{name}"),
                }),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// `Some(ready)` for a node that exists, `None` for one that does not.
    pub async fn ready(&self, node: &str) -> Result<Option<bool>, kube::Error> {
        Ok(self.nodes.get_opt(node).await?.map(|n| {
            n.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_budget_is_named_from_the_refusals_cause() {
        let s: kube::core::Status = serde_json::from_value(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
            "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget db-pdb needs 2 healthy pods and has 2 currently"}]}
        }))
        .unwrap();
        assert_eq!(
            budget(&s).as_deref(),
            Some("budget db-pdb needs 2 healthy pods and has 2 currently")
        );
        let rate: kube::core::Status = serde_json::from_value(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
            "reason": "TooManyRequests", "message": "too many requests"}))
        .unwrap();
        assert_eq!(budget(&rate), None);
    }

    #[test]
    fn what_a_drain_leaves_alone() {
        let plain = pod(
            serde_json::json!({"metadata": {"name": "a", "namespace": "x",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "1", "controller": true}]}}),
        );
        assert_eq!(skip_reason(&plain), None);
        let ds = pod(serde_json::json!({"metadata": {"name": "a",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "1", "controller": true}]}}));
        assert_eq!(skip_reason(&ds), Some("DaemonSet pod"));
        let mirror = pod(serde_json::json!({"metadata": {"name": "a",
            "annotations": {"kubernetes.io/config.mirror": "h"}}}));
        assert_eq!(skip_reason(&mirror), Some("mirror pod of a static pod"));
        let done =
            pod(serde_json::json!({"metadata": {"name": "a"}, "status": {"phase": "Succeeded"}}));
        assert_eq!(skip_reason(&done), Some("finished"));
        let bare =
            pod(serde_json::json!({"metadata": {"name": "a"}, "status": {"phase": "Running"}}));
        assert_eq!(skip_reason(&bare), None);
        assert!(unmanaged(&bare), "kubectl drain refuses it without --force");
        assert!(!unmanaged(&plain));
        // an owner that is no controller does not manage it
        let owned = pod(serde_json::json!({"metadata": {"name": "a",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "1"}]}}));
        assert!(unmanaged(&owned));
    }
}
