//! core/v1 Events: create, patch (a repeated event's `count` and `lastTimestamp`), get, list
//! (`fieldSelector` on `involvedObject.kind`/`involvedObject.name`, paged), as the API server
//! answers a node and an administrator.
//!
//! Modelled from kubernetes/kubernetes:
//! - `plugin/pkg/auth/authorizer/node/node_authorizer.go` `Authorize`: a request outside the
//!   node graph is allowed by `bootstrappolicy.NodeRules()`
//!   (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`), which give nodes `create`,
//!   `update`, `patch` on `events` and nothing else on them (no get, no list);
//! - `pkg/apis/core/validation/events.go` `legacyValidateEvent`: an event about a cluster-scoped
//!   object (no `involvedObject.namespace`) lives in the namespace `default` (or none); else its
//!   namespace must be the object's ("does not match event.namespace"); `metadata.name` is
//!   required; `type` is `Normal` or `Warning` when set (`validateEventType`... upstream checks
//!   it for new-style events; the double checks it always);
//! - a strategic merge patch of an Event replaces its scalar fields (no list is patched).
//!
//! Not modelled: the event TTL (`--event-ttl`, 1 h) except by [`crate::Double::expire_events`],
//! events.k8s.io/v1, new-style events (`eventTime`, `series`), NodeRestriction has no rule for
//! events (as upstream).

use hyper::{Method, Response, StatusCode};
use serde_json::{json, Value};

use super::{body_of, fail, json_of, merge_patch, query_of, reply, Body, Inner, Req, User};

fn invalid(name: &str, why: &str) -> Response<Body> {
    fail(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &format!("Event \"{name}\" is invalid: {why}"),
    )
}

pub(super) async fn route(
    inner: &Inner,
    user: &User,
    req: Req,
    ns: &str,
    name: Option<&str>,
) -> Response<Body> {
    let admin = user.groups.iter().any(|g| g == "system:masters");
    let node = user.groups.iter().any(|g| g == "system:nodes");
    let verb = match (req.method().clone(), name) {
        (Method::POST, None) => "create",
        (Method::PATCH, Some(_)) => "patch",
        (Method::PUT, Some(_)) => "update",
        (Method::GET, Some(_)) => "get",
        (Method::GET, None) => "list",
        _ => "",
    };
    if !(admin || (node && ["create", "patch", "update"].contains(&verb))) {
        return fail(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!("events is forbidden: User \"{}\" cannot {verb} resource \"events\" in API group \"\" in the namespace \"{ns}\"", user.name),
        );
    }
    let query = query_of(&req);
    let method = req.method().clone();
    let body = body_of(req).await;
    let mut st = inner.state.lock().expect("state");
    match (method, name) {
        (Method::POST, None) => {
            let mut ev = match json_of(&body, "the event") {
                Ok(e) => e,
                Err(r) => return *r,
            };
            let Some(n) = ev["metadata"]["name"].as_str().map(String::from) else {
                return invalid(
                    "",
                    "metadata.name: Required value: name or generateName is required",
                );
            };
            let obj_ns = ev["involvedObject"]["namespace"].as_str().unwrap_or("");
            let ok = if obj_ns.is_empty() {
                ns.is_empty() || ns == "default"
            } else {
                obj_ns == ns
            };
            if !ok {
                return invalid(&n, &format!("involvedObject.namespace: Invalid value: \"{obj_ns}\": does not match event.namespace"));
            }
            if let Some(t) = ev["type"].as_str() {
                if t != "Normal" && t != "Warning" {
                    return invalid(&n, &format!("type: Unsupported value: \"{t}\": supported values: \"Normal\", \"Warning\""));
                }
            }
            let key = (ns.to_string(), n.clone());
            if st.events.contains_key(&key) {
                return fail(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("events \"{n}\" already exists"),
                );
            }
            st.rv += 1;
            ev["metadata"]["namespace"] = json!(ns);
            ev["metadata"]["resourceVersion"] = json!(st.rv.to_string());
            ev["kind"] = json!("Event");
            ev["apiVersion"] = json!("v1");
            st.events.insert(key, ev.clone());
            reply(StatusCode::CREATED, &ev)
        }
        (Method::PATCH, Some(n)) => {
            let patch = match json_of(&body, "the patch") {
                Ok(p) => p,
                Err(r) => return *r,
            };
            st.rv += 1;
            let rv = st.rv;
            match st.events.get_mut(&(ns.to_string(), n.to_string())) {
                None => fail(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("events \"{n}\" not found"),
                ),
                Some(ev) => {
                    merge_patch(ev, &patch);
                    ev["metadata"]["resourceVersion"] = json!(rv.to_string());
                    reply(StatusCode::OK, ev)
                }
            }
        }
        (Method::GET, Some(n)) => match st.events.get(&(ns.to_string(), n.to_string())) {
            Some(ev) => reply(StatusCode::OK, ev),
            None => fail(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("events \"{n}\" not found"),
            ),
        },
        (Method::GET, None) => {
            let selector = query.get("fieldSelector").cloned().unwrap_or_default();
            let wanted: Vec<(String, String)> = selector
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            for (k, _) in &wanted {
                if ![
                    "involvedObject.kind",
                    "involvedObject.name",
                    "involvedObject.namespace",
                    "reason",
                    "type",
                    "source",
                ]
                .contains(&k.as_str())
                {
                    return fail(StatusCode::BAD_REQUEST, "BadRequest", &format!("\"{k}\" is not a known field selector: only \"involvedObject.kind\", \"involvedObject.name\", \"involvedObject.namespace\", \"reason\", \"type\", \"source\""));
                }
            }
            let field = |ev: &Value, k: &str| -> String {
                match k {
                    "source" => ev["source"]["component"].as_str().unwrap_or("").into(),
                    k => {
                        let mut v = ev;
                        for part in k.split('.') {
                            v = &v[part];
                        }
                        v.as_str().unwrap_or("").into()
                    }
                }
            };
            let items: Vec<(String, Value)> = st
                .events
                .iter()
                .filter(|((n, _), _)| ns.is_empty() || n == ns)
                .filter(|(_, ev)| wanted.iter().all(|(k, v)| field(ev, k) == *v))
                .map(|((n, k), v)| (format!("{n}/{k}"), v.clone()))
                .collect();
            match super::paging::page(items, &query, st.rv) {
                Ok(p) => reply(
                    StatusCode::OK,
                    &json!({"kind": "EventList", "apiVersion": "v1", "metadata": p.metadata, "items": p.items}),
                ),
                Err(r) => *r,
            }
        }
        _ => fail(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}
