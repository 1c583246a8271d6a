//! The Kubernetes manifests nodectl ships (packaging/kubernetes/*.yaml: the reboot RBAC and the
//! Lease policy), which the controller configs hand to Typhoon's bootstrap.service to apply:
//! each document parses as the API's own type for its kind (k8s-openapi), and nothing in it is
//! lost on the way (a misspelled or misplaced field would be dropped by the API server's
//! decoder too, silently: here it fails, naming the document).

use std::path::Path;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};

/// The FlowSchema is matched before the suggested `system-node-high` (400, which takes every
/// Lease request of a node), for the reboot Leases only: kubelet's node Leases
/// (kube-node-lease) and its Node status stay on `node-high`; its flows are told apart by user;
/// the level exists and is Limited. (The suggested schemas: kubernetes/kubernetes
/// `staging/src/k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go`.)
#[test]
fn the_flowschema_takes_the_reboot_leases_before_system_node_high_and_nothing_of_kubelets() {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&shipped("flowcontrol.yaml")).unwrap();
    let level: PriorityLevelConfiguration = serde_json::from_value(docs[0].clone()).unwrap();
    let fs: FlowSchema = serde_json::from_value(docs[1].clone()).unwrap();
    let spec = fs.spec;
    assert!(spec.matching_precedence.unwrap() < 400);
    assert_eq!(
        spec.priority_level_configuration.name,
        level.metadata.name.unwrap()
    );
    let limited = level.spec.limited.unwrap();
    assert!(limited.nominal_concurrency_shares.unwrap() > 0);
    assert_eq!(spec.distinguisher_method.unwrap().type_, "ByUser");
    let rules = spec.rules.unwrap();
    assert_eq!(rules.len(), 1);
    let subjects = &rules[0].subjects;
    assert_eq!(subjects[0].group.as_ref().unwrap().name, "system:nodes");
    let resource_rules = rules[0].resource_rules.as_ref().unwrap();
    for r in resource_rules {
        assert!(
            !r.resources
                .iter()
                .any(|x| x == "nodes" || x == "nodes/status"),
            "kubelet's Node writes stay on node-high: {r:?}"
        );
        if r.resources.iter().any(|x| x == "leases") {
            assert_eq!(
                r.namespaces.as_deref(),
                Some(&["nodectl-reboot".to_string()][..])
            );
        }
    }
}

/// `doc` (a YAML document as JSON) through the API type `T` and back: what came back must be
/// what went in.
fn round_trip<T>(doc: &serde_json::Value) -> Result<(), String>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).unwrap();
    if &back != doc {
        return Err(format!(
            "fields the API type does not have were dropped:\nshipped: {doc}\nparsed:  {back}"
        ));
    }
    Ok(())
}

/// Every document of a manifest file checked against its kind's type; the kinds found.
fn check(text: &str, name: &str) -> Result<Vec<String>, String> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("{name}: {e}"))?;
    let mut kinds = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let kind = doc["kind"].as_str().unwrap_or("").to_string();
        let api = doc["apiVersion"].as_str().unwrap_or("");
        let r = match (api, kind.as_str()) {
            ("v1", "Namespace") => round_trip::<Namespace>(&doc),
            ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(&doc),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(&doc),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(&doc),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                round_trip::<ClusterRoleBinding>(&doc)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
                round_trip::<ValidatingAdmissionPolicy>(&doc)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
                round_trip::<ValidatingAdmissionPolicyBinding>(&doc)
            }
            ("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration") => {
                round_trip::<PriorityLevelConfiguration>(&doc)
            }
            ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema") => round_trip::<FlowSchema>(&doc),
            _ => Err(format!("unexpected {api} {kind}")),
        };
        r.map_err(|e| format!("{name}, document {}: {e}", i + 1))?;
        kinds.push(kind);
    }
    Ok(kinds)
}

fn shipped(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../packaging/kubernetes")
            .join(name),
    )
    .unwrap()
}

#[test]
fn the_shipped_manifests_parse_as_the_api_types_with_nothing_dropped() {
    assert_eq!(
        check(&shipped("rbac.yaml"), "rbac.yaml").unwrap(),
        [
            "Namespace",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding"
        ]
    );
    assert_eq!(
        check(
            &shipped("reboot-lease-policy.yaml"),
            "reboot-lease-policy.yaml"
        )
        .unwrap(),
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    assert_eq!(
        check(&shipped("flowcontrol.yaml"), "flowcontrol.yaml").unwrap(),
        ["PriorityLevelConfiguration", "FlowSchema"]
    );
    // Issue 37, 10: no Node beyond its own is readable to a node (the Node authorizer's own
    // rule); the drain's cordon (patch, NodeRestriction keeps it to its own) and evictions only.
    let rbac = shipped("rbac.yaml");
    let role: serde_json::Value = serde_saphyr::from_multiple::<serde_json::Value>(&rbac)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .unwrap();
    for rule in role["rules"].as_array().unwrap() {
        let resources: Vec<&str> = rule["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let verbs: Vec<&str> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        if resources.contains(&"nodes") {
            assert_eq!(verbs, ["patch"], "{rule}");
        }
    }
    // The Lease verbs nodes get are the ones the API double answers them (and no more).
    let lease_role = serde_saphyr::from_multiple::<serde_json::Value>(&rbac)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "nodectl-reboot-lease")
        .unwrap();
    let verbs: Vec<&str> = lease_role["rules"][0]["verbs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(verbs, nodectl_apiserver_double::LEASE_VERBS);
    // and a field in the wrong place is caught
    let bad = shipped("rbac.yaml").replacen("  name: ", "  nmae: ", 1);
    let e = check(&bad, "bad.yaml").unwrap_err();
    assert!(
        e.contains("bad.yaml, document 1") && e.contains("dropped"),
        "{e}"
    );
}
