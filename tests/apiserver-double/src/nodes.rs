//! Nodes: get, list, `PATCH nodes/<name>` and `PATCH nodes/<name>/status`, as the API server
//! answers them for a node's own credentials.
//!
//! Modelled from kubernetes/kubernetes:
//! - `plugin/pkg/auth/authorizer/node/node_authorizer.go` `authorizeNode`: a node identity reads
//!   only its own Node (the shipped RBAC grants nodes no more).
//! - `plugin/pkg/admission/noderestriction/admission.go` `admitNode`: a node (`system:node:<n>`
//!   in `system:nodes`) may change only its own Node ("node %q is not allowed to modify node
//!   %q"), never its taints ("node %q is not allowed to modify taints"), nor labels under
//!   `node-restriction.kubernetes.io/`; other users are not restricted by it (RBAC: the double
//!   lets `system:nodes` and `system:masters` patch Nodes).
//! - `pkg/registry/core/node/strategy.go`: an update of the Node keeps its status
//!   (`nodeStrategy.PrepareForUpdate`), an update of `nodes/status` keeps everything else
//!   (`nodeStatusStrategy.PrepareForUpdate`).
//! - Strategic merge (`application/strategic-merge-patch+json`): `status.conditions` is a list
//!   merged by `type` (k8s.io/api core/v1 `NodeStatus.Conditions`, patchMergeKey=type); a JSON
//!   merge patch (`application/merge-patch+json`) replaces the list.
//!
//! Not modelled: `resourceVersion` preconditions in the patch, JSON patch, server-side apply,
//! field managers.

use hyper::{Method, Response, StatusCode};
use serde_json::{json, Value};

use super::{body_of, fail, json_of, merge_patch, reply, Body, Inner, Req, User};

const PREFIX: &str = "/api/v1/nodes";

pub(super) async fn route(inner: &Inner, user: &User, req: Req, path: &str) -> Response<Body> {
    let rest = path[PREFIX.len()..].trim_start_matches('/');
    let (name, sub) = match rest.split_once('/') {
        Some((n, s)) => (n.to_string(), Some(s.to_string())),
        None => (rest.to_string(), None),
    };
    // plugin/pkg/auth/authorizer/node/node_authorizer.go `authorizeNode` (AuthorizeNodeWithSelectors,
    // on by default since 1.32): a node reads only its own Node ("node '%s' cannot read '%s',
    // only its own Node object"; a list: "cannot read all nodes"); beyond that only RBAC could
    // allow it, and the shipped rbac.yaml grants no `get nodes`.
    if req.method() == Method::GET && user.groups.iter().any(|g| g == "system:nodes") {
        let own = user.name.strip_prefix("system:node:").unwrap_or_default();
        if name.is_empty() {
            return forbidden(
                "",
                &format!("node '{own}' cannot read all nodes, only its own Node object"),
            );
        }
        if name != own {
            return forbidden(
                &name,
                &format!("node '{own}' cannot read '{name}', only its own Node object"),
            );
        }
    }
    match (req.method().clone(), name.is_empty(), sub.as_deref()) {
        (Method::GET, true, None) => {
            let st = inner.state.lock().expect("state");
            let items: Vec<(String, Value)> = st
                .nodes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            match super::paging::page(items, &super::query_of(&req), st.rv) {
                Ok(p) => reply(
                    StatusCode::OK,
                    &json!({"kind": "NodeList", "apiVersion": "v1",
                            "metadata": p.metadata, "items": p.items}),
                ),
                Err(r) => *r,
            }
        }
        (Method::GET, false, None | Some("status")) => {
            match inner.state.lock().expect("state").nodes.get(&name) {
                Some(n) => reply(StatusCode::OK, n),
                None => not_found(&name),
            }
        }
        (Method::PATCH, false, None | Some("status")) => {
            let status = sub.is_some();
            let strategic = req
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/strategic-merge-patch+json"));
            let body = body_of(req).await;
            let patch = match json_of(&body, "the patch") {
                Ok(p) => p,
                Err(r) => return *r,
            };
            patch_node(inner, user, &name, status, strategic, &patch)
        }
        _ => fail(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

fn not_found(name: &str) -> Response<Body> {
    fail(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("nodes \"{name}\" not found"),
    )
}

fn forbidden(name: &str, why: &str) -> Response<Body> {
    fail(
        StatusCode::FORBIDDEN,
        "Forbidden",
        &format!("nodes \"{name}\" is forbidden: {why}"),
    )
}

fn patch_node(
    inner: &Inner,
    user: &User,
    name: &str,
    status: bool,
    strategic: bool,
    patch: &Value,
) -> Response<Body> {
    if !user
        .groups
        .iter()
        .any(|g| g == "system:nodes" || g == "system:masters")
    {
        let what = if status { "nodes/status" } else { "nodes" };
        return forbidden(name, &format!("User \"{}\" cannot patch resource \"{what}\" in API group \"\" at the cluster scope", user.name));
    }
    let node_user = user.groups.iter().any(|g| g == "system:nodes");
    let own = user.name.strip_prefix("system:node:");
    if node_user {
        match own {
            Some(n) if n == name => {}
            Some(n) => {
                return forbidden(
                    name,
                    &format!("node {n:?} is not allowed to modify node {name:?}"),
                )
            }
            None => return forbidden(name, "not a node identity"),
        }
    }
    let mut st = inner.state.lock().expect("state");
    st.rv += 1;
    let rv = st.rv;
    let Some(node) = st.nodes.get_mut(name) else {
        return not_found(name);
    };
    let mut next = node.clone();
    if status {
        // nodes/status: only the status changes
        if let Some(s) = patch.get("status") {
            if strategic {
                strategic_status(&mut next["status"], s);
            } else {
                merge_patch(&mut next["status"], s);
            }
        }
    } else {
        let mut p = patch.clone();
        if let Some(o) = p.as_object_mut() {
            o.remove("status");
        }
        merge_patch(&mut next, &p);
    }
    if node_user {
        let n = own.unwrap_or_default();
        if next["spec"]["taints"] != node["spec"]["taints"] {
            return forbidden(name, &format!("node {n:?} is not allowed to modify taints"));
        }
        let restricted = |v: &Value| -> Vec<(String, Value)> {
            v["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| k.contains("node-restriction.kubernetes.io/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        if restricted(&next) != restricted(node) {
            return forbidden(name, &format!("node {n:?} is not allowed to modify labels with the node-restriction.kubernetes.io/ prefix"));
        }
    }
    next["metadata"]["resourceVersion"] = json!(rv.to_string());
    *node = next.clone();
    reply(StatusCode::OK, &next)
}

/// Strategic merge of a status patch: `conditions` merged by `type`, the rest as a JSON merge.
fn strategic_status(target: &mut Value, patch: &Value) {
    let mut rest = patch.clone();
    let conditions = rest.as_object_mut().and_then(|o| o.remove("conditions"));
    merge_patch(target, &rest);
    let Some(Value::Array(new)) = conditions else {
        return;
    };
    if !target["conditions"].is_array() {
        target["conditions"] = json!([]);
    }
    let list = target["conditions"].as_array_mut().expect("array");
    for c in new {
        match list.iter_mut().find(|e| e["type"] == c["type"]) {
            Some(e) => merge_patch(e, &c),
            None => list.push(c),
        }
    }
}
