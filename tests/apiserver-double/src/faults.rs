//! Faults a test injects: the next requests under a path prefix get an error status (with
//! `Retry-After`, as the API server's priority and fairness or a restarting server answers),
//! a reset connection (no answer at all), or a stall (the answer after a delay); the next watches
//! a stream cut mid-event (the connection dropped inside a JSON line) or a `410 Gone` error event.
//!
//! Modelled from the API server's answers: 429 `TooManyRequests` with `Retry-After`
//! (staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go `tooManyRequests`:
//! "Too many requests, please try again later.", Retry-After 1), 500 `InternalError`, 503
//! `ServiceUnavailable` (apiserver/pkg/endpoints/handlers/responsewriters/status.go).

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};

use super::{status, Body, Inner};

/// What the matching requests get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// This status code with a `Status` body, and `Retry-After: <secs>` when given.
    Status { code: u16, retry_after: Option<u64> },
    /// The connection is closed without an answer.
    Reset,
    /// The answer comes after this long.
    Stall(Duration),
    /// Watches only: the stream starts, sends half an event line and the connection is dropped
    /// (a load balancer or a restarting server cutting a long watch).
    CutWatch,
    /// Watches only: an `ERROR` event with a 410 `Expired` Status, then the end of the stream,
    /// as the watch cache answers a resourceVersion older than its window
    /// (apiserver/pkg/storage/cacher/watch_cache.go `getAllEventsSinceLocked` ->
    /// `errors.NewResourceExpired`; sent as an ERROR event by
    /// apiserver/pkg/endpoints/handlers/watch.go `serveWatch`).
    Gone,
}

impl Fault {
    fn watch_only(&self) -> bool {
        matches!(self, Fault::CutWatch | Fault::Gone)
    }
}

/// An injected fault: for requests whose path starts with `prefix`, `times` times.
#[derive(Clone, Debug)]
pub(super) struct Injected {
    pub(super) prefix: String,
    pub(super) fault: Fault,
    pub(super) left: usize,
}

/// Takes the first fault that matches `path` (one use of it); watch faults only for watches.
pub(super) fn take(inner: &Inner, path: &str, is_watch: bool) -> Option<Fault> {
    let mut faults = inner.faults.lock().expect("faults");
    let i = faults.iter().position(|f| {
        f.left > 0 && path.starts_with(&f.prefix) && (is_watch || !f.fault.watch_only())
    })?;
    faults[i].left -= 1;
    let fault = faults[i].fault.clone();
    if faults[i].left == 0 {
        faults.remove(i);
    }
    Some(fault)
}

/// The answer for a `Status` fault.
pub(super) fn answer(code: u16, retry_after: Option<u64>) -> Response<Body> {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (reason, message) = match code.as_u16() {
        429 => (
            "TooManyRequests",
            "Too many requests, please try again later.",
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        _ => (
            "InternalError",
            "an error on the server has prevented the request from succeeding",
        ),
    };
    let mut b = Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if let Some(s) = retry_after {
        b = b.header("retry-after", s.to_string());
    }
    b.body(Full::new(Bytes::from(status(code, reason, message).to_string())).boxed())
        .expect("response")
}

/// A watch that sends half an event and then loses its connection (`cut` drops it).
pub(super) fn cut_watch(cut: &std::sync::Arc<tokio::sync::Notify>) -> Response<Body> {
    let half = Bytes::from_static(
        b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"CertificateSigningRequest\",\"apiVersion\":\"certificates.k8s.io/v1\",\"metadata\":{\"na",
    );
    let frames = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(
        hyper::body::Frame::data(half),
    )])
    .chain(futures_util::stream::pending());
    let cut = cut.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cut.notify_one();
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(http_body_util::StreamBody::new(frames)))
        .expect("response")
}

/// A watch answered with a 410 `Expired` error event, then ended.
pub(super) fn gone() -> Response<Body> {
    let ev = serde_json::json!({
        "type": "ERROR",
        "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 1 (42)", "reason": "Expired", "code": 410
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(format!("{ev}\n"))).boxed())
        .expect("response")
}
