//! Paged lists (`limit`, `continue`), as kube-apiserver pages a list from etcd:
//! - kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/storage/continue.go`
//!   `EncodeContinue`/`DecodeContinue`: the token is `base64.RawURLEncoding` of
//!   `{"v":"meta.k8s.io/v1","rv":<list's resourceVersion>,"start":"<last key>\u0000"}`; one that
//!   does not decode is a 400 `invalid continue token: continue key is not valid: ...`
//!   (`etcd3/store.go` `GetList`);
//! - `etcd3/store.go` `GetList`: items in key order from `start`, at most `limit`;
//!   `metadata.continue` while more remain, and `remainingItemCount` (no selector here);
//!   a `resourceVersion` beside `continue` is a 400.
//!
//! Not modelled: a continued list is served from the present, not at the token's
//! resourceVersion (etcd's MVCC snapshot), and a token is never too old (410 Expired after
//! compaction).

use std::collections::BTreeMap;

use base64::Engine as _;
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use super::{fail, Body};

/// One page of a list.
pub(super) struct Page {
    pub items: Vec<Value>,
    /// The list's `metadata`: `resourceVersion`, and `continue`, `remainingItemCount` when more
    /// remain.
    pub metadata: Value,
}

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

fn bad(why: &str) -> Box<Response<Body>> {
    Box::new(fail(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        &format!("invalid continue token: continue key is not valid: {why}"),
    ))
}

/// The page `query` asks of `items` (in key order), listed at resourceVersion `rv`.
pub(super) fn page(
    items: Vec<(String, Value)>,
    query: &BTreeMap<String, String>,
    rv: u64,
) -> Result<Page, Box<Response<Body>>> {
    let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let (start, rv) = match query.get("continue").filter(|c| !c.is_empty()) {
        None => (String::new(), rv),
        Some(c) => {
            if query.get("resourceVersion").is_some_and(|v| !v.is_empty()) {
                return Err(Box::new(fail(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "specifying resource version is not allowed when using continue",
                )));
            }
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .map_err(|e| bad(&e.to_string()))?;
            let t: Value = serde_json::from_slice(&raw).map_err(|e| bad(&e.to_string()))?;
            if t["v"] != TOKEN_VERSION {
                return Err(bad(&format!(
                    "server does not recognize this encoded version {}",
                    t["v"]
                )));
            }
            let (Some(start), Some(trv)) = (t["start"].as_str(), t["rv"].as_u64()) else {
                return Err(bad("incorrect encoded start resourceVersion"));
            };
            if start.is_empty() || trv == 0 {
                return Err(bad("incorrect encoded start resourceVersion"));
            }
            (start.to_string(), trv)
        }
    };
    let rest: Vec<(String, Value)> = items.into_iter().filter(|(k, _)| *k >= start).collect();
    let total = rest.len();
    let take = if limit == 0 { total } else { limit.min(total) };
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if take < total {
        let last = &rest[take - 1].0;
        let token = json!({"v": TOKEN_VERSION, "rv": rv, "start": format!("{last}\u{0}")});
        metadata["continue"] =
            json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string()));
        metadata["remainingItemCount"] = json!(total - take);
    }
    Ok(Page {
        items: rest.into_iter().take(take).map(|(_, v)| v).collect(),
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pages_follow_their_continue_token_to_the_end() {
        let items: Vec<(String, Value)> = ["a", "b", "c"]
            .iter()
            .map(|k| (k.to_string(), json!(k)))
            .collect();
        let p = page(items.clone(), &q(&[("limit", "2")]), 7).unwrap();
        assert_eq!(p.items, [json!("a"), json!("b")]);
        assert_eq!(p.metadata["remainingItemCount"], 1);
        let c = p.metadata["continue"].as_str().unwrap().to_string();
        let p = page(items.clone(), &q(&[("limit", "2"), ("continue", &c)]), 9).unwrap();
        assert_eq!(p.items, [json!("c")]);
        assert_eq!(p.metadata["resourceVersion"], "7", "the token's version");
        assert!(p.metadata.get("continue").is_none());
        assert_eq!(page(items.clone(), &q(&[]), 9).unwrap().items.len(), 3);
        let e = page(items, &q(&[("continue", "!!")]), 9).err().unwrap();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }
}
