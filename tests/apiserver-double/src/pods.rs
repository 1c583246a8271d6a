//! Pods an administrator creates and deletes (the nspawn tier's blocking pod for the reboot
//! gates): `POST /api/v1/namespaces/{ns}/pods` and `DELETE .../pods/{name}`, for
//! `system:masters` only. What the double does not model: no scheduler (the pod must name its
//! node in `spec.nodeName`), no kubelet (a pod is `Running` as soon as it is created unless it
//! says otherwise), and a deletion is immediate (no grace period, no `deletionTimestamp`).

use hyper::{Method, Response, StatusCode};
use serde_json::json;

use super::{body_of, fail, json_of, reply, Body, Inner, Req, User};

/// Answers the request when it is one of these (`None`: not a pod write).
pub(super) async fn route(inner: &Inner, user: &User, req: Req) -> Result<Response<Body>, Req> {
    let path = req.uri().path().to_string();
    let parts: Vec<&str> = path.split('/').collect();
    let (method, ns, name) = match (req.method(), parts.as_slice()) {
        (&Method::POST, [_, "api", "v1", "namespaces", ns, "pods"]) => (Method::POST, *ns, None),
        (&Method::DELETE, [_, "api", "v1", "namespaces", ns, "pods", name]) => {
            (Method::DELETE, *ns, Some(name.to_string()))
        }
        _ => return Err(req),
    };
    let ns = ns.to_string();
    if !user.groups.iter().any(|g| g == "system:masters") {
        let verb = if method == Method::POST {
            "create"
        } else {
            "delete"
        };
        return Ok(fail(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!(
                "pods is forbidden: User \"{}\" cannot {verb} resource \"pods\" in namespace \"{ns}\"",
                user.name
            ),
        ));
    }
    if let Some(name) = name {
        let gone = inner
            .state
            .lock()
            .expect("state")
            .pods
            .remove(&(ns.clone(), name.clone()));
        return Ok(match gone {
            Some(p) => reply(StatusCode::OK, &p),
            None => fail(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("pods \"{name}\" not found"),
            ),
        });
    }
    let mut pod = match json_of(&body_of(req).await, "pod") {
        Ok(p) => p,
        Err(r) => return Ok(*r),
    };
    let Some(name) = pod["metadata"]["name"].as_str().map(String::from) else {
        return Ok(fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Required value",
        ));
    };
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return Ok(fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "spec.nodeName: the double has no scheduler: name the node",
        ));
    }
    pod["kind"] = json!("Pod");
    pod["apiVersion"] = json!("v1");
    pod["metadata"]["namespace"] = json!(ns);
    if pod["status"]["phase"].is_null() {
        pod["status"] = json!({"phase": "Running"});
    }
    let mut st = inner.state.lock().expect("state");
    let key = (ns, name.clone());
    if st.pods.contains_key(&key) {
        return Ok(fail(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("pods \"{name}\" already exists"),
        ));
    }
    st.pods.insert(key, pod.clone());
    Ok(reply(StatusCode::CREATED, &pod))
}
