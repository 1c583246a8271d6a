//! What a real API server refuses a node, refused by the double too (issue 63, item 3), each
//! checked against the upstream code the double models:
//! - a Lease update without `metadata.resourceVersion` (the Lease strategy's
//!   `AllowUnconditionalUpdate() == false`: 422 from the generic store's `Update`);
//! - an eviction of a pod bound to another node (NodeRestriction's `admitPodEviction`);
//! - a pod list without `fieldSelector=spec.nodeName=<itself>` (the Node authorizer with
//!   AuthorizeNodeWithSelectors; RBAC grants nodes no pod list);
//! - a Lease in a namespace the shipped RBAC does not name (its Role and RoleBinding are in the
//!   reboot namespace alone), and the Lease policy binding in the reboot namespace the double
//!   is given (`reboot.namespace` is configurable), on by default.
//!
//! Each also shows what stays allowed, so a double that refused everything would fail.

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use nodectl_apiserver_double::{Double, Options, PodKind, User};
use serde_json::{json, Value};

fn node(name: &str) -> User {
    User {
        name: format!("system:node:{name}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
    }
}

fn admin() -> User {
    User {
        name: "kubernetes-admin".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
    }
}

fn req(method: Method, uri: &str, body: Option<&Value>) -> Request<Bytes> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string())))
        .unwrap()
}

fn lease(ns: &str, name: &str, entry_of: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": ns, "annotations": {
            format!("{entry_of}.reboot-holders.nodectl.io/slot"):
                format!(r#"{{"node":"{entry_of}","id":"m","boot_id":"b","since":1}}"#)
        }},
        "spec": {"holderIdentity": entry_of, "leaseTransitions": 1}
    })
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces";

#[tokio::test]
async fn a_lease_update_without_resource_version_is_refused_as_upstream_does() {
    let api = Double::start(Options::default()).await.unwrap();
    let uri = format!("{LEASES}/nodectl-reboot/leases");
    let (code, created) = api
        .call_as(
            &node("a"),
            req(
                Method::POST,
                &uri,
                Some(&lease("nodectl-reboot", "reboot-default", "a")),
            ),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    // the same object again, its resourceVersion dropped: 422, not a last-writer-wins update
    let mut next = created.clone();
    next["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    next["spec"]["leaseTransitions"] = json!(1);
    let put = format!("{uri}/reboot-default");
    for who in [node("a"), admin()] {
        let (code, body) = api.call_as(&who, req(Method::PUT, &put, Some(&next))).await;
        assert_eq!(
            code,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{} {body}",
            who.name
        );
        assert_eq!(body["reason"], "Invalid");
        assert!(
            body["message"].as_str().unwrap().contains(
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
            ),
            "{body}"
        );
    }
    // with the version it was read at: accepted; that version again: 409
    let (code, body) = api
        .call_as(&node("a"), req(Method::PUT, &put, Some(&created)))
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let (code, _) = api
        .call_as(&node("a"), req(Method::PUT, &put, Some(&created)))
        .await;
    assert_eq!(code, StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_node_evicts_only_the_pods_bound_to_itself() {
    let api = Double::start(Options::default()).await.unwrap();
    api.add_pod("default", "theirs", "b", PodKind::Plain);
    api.add_pod("default", "mine", "a", PodKind::Plain);
    let eviction = |name: &str| {
        json!({"apiVersion": "policy/v1", "kind": "Eviction",
               "metadata": {"name": name, "namespace": "default"}})
    };
    let uri = |name: &str| format!("/api/v1/namespaces/default/pods/{name}/eviction");
    let (code, body) = api
        .call_as(
            &node("a"),
            req(Method::POST, &uri("theirs"), Some(&eviction("theirs"))),
        )
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("node \"a\" can only evict pods with spec.nodeName set to itself"),
        "{body}"
    );
    assert_eq!(api.pods_on("b"), ["theirs"], "the other node's pod stays");
    // a member of system:nodes that is no node (another user name) evicts nothing
    let odd = User {
        name: "kubelet-bootstrap".into(),
        groups: vec!["system:nodes".into()],
    };
    let (code, _) = api
        .call_as(
            &odd,
            req(Method::POST, &uri("mine"), Some(&eviction("mine"))),
        )
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    // its own pod: evicted; an administrator evicts any
    let (code, body) = api
        .call_as(
            &node("a"),
            req(Method::POST, &uri("mine"), Some(&eviction("mine"))),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let (code, _) = api
        .call_as(
            &admin(),
            req(Method::POST, &uri("theirs"), Some(&eviction("theirs"))),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
}

#[tokio::test]
async fn a_node_lists_pods_only_with_its_own_node_name_as_field_selector() {
    let api = Double::start(Options::default()).await.unwrap();
    api.add_pod("default", "theirs", "b", PodKind::Plain);
    api.add_pod("default", "mine", "a", PodKind::Plain);
    for q in [
        "",
        "?fieldSelector=spec.nodeName%3Db",
        "?labelSelector=app%3Dx",
    ] {
        let (code, body) = api
            .call_as(
                &node("a"),
                req(Method::GET, &format!("/api/v1/pods{q}"), None),
            )
            .await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{q}: {body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("spec.nodeName field selector"),
            "{body}"
        );
    }
    let (code, body) = api
        .call_as(
            &node("a"),
            req(
                Method::GET,
                "/api/v1/pods?fieldSelector=spec.nodeName%3Da",
                None,
            ),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let names: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mine"]);
    let (code, body) = api
        .call_as(&admin(), req(Method::GET, "/api/v1/pods", None))
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["items"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn leases_only_in_the_namespace_the_rbac_names_and_the_policy_binds_there() {
    // the default: the shipped manifests' namespace
    let api = Double::start(Options::default()).await.unwrap();
    let post = |ns: &str| {
        req(
            Method::POST,
            &format!("{LEASES}/{ns}/leases"),
            Some(&lease(ns, "reboot-default", "a")),
        )
    };
    let (code, body) = api.call_as(&node("a"), post("kube-system")).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("in the namespace \"kube-system\""),
        "{body}"
    );
    let (code, _) = api
        .call_as(
            &node("a"),
            req(Method::GET, &format!("{LEASES}/kube-system/leases/x"), None),
        )
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    // the policy is on by default: node b may not write node a's entry
    let other = lease("nodectl-reboot", "reboot-default", "a");
    let (code, body) = api
        .call_as(
            &node("b"),
            req(
                Method::POST,
                &format!("{LEASES}/nodectl-reboot/leases"),
                Some(&other),
            ),
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("ValidatingAdmissionPolicy"),
        "{body}"
    );
    let (code, body) = api.call_as(&node("a"), post("nodectl-reboot")).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");

    // an operator's own reboot.namespace, with the manifests applied there: the RBAC and the
    // policy follow it, and the shipped namespace is no longer a node's
    let api = Double::start(Options {
        reboot_namespace: "ops-reboots".into(),
        ..Options::default()
    })
    .await
    .unwrap();
    let (code, _) = api.call_as(&node("a"), post("nodectl-reboot")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let theirs = lease("ops-reboots", "reboot-default", "a");
    let (code, body) = api
        .call_as(
            &node("b"),
            req(
                Method::POST,
                &format!("{LEASES}/ops-reboots/leases"),
                Some(&theirs),
            ),
        )
        .await;
    assert_eq!(
        code,
        StatusCode::UNPROCESSABLE_ENTITY,
        "the policy binds in ops-reboots: {body}"
    );
    let (code, body) = api.call_as(&node("a"), post("ops-reboots")).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
}
