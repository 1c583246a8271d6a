//! Faults a test injects: the next requests under a path prefix get an error status (with
//! `Retry-After`, as the API server's priority and fairness or a restarting server answers),
//! a reset connection (no answer at all), or a stall (the answer after a delay).
//!
//! Modelled from the API server's answers: 429 `TooManyRequests` with `Retry-After`
//! (staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go `tooManyRequests`:
//! "Too many requests, please try again later.", Retry-After 1), 500 `InternalError`, 503
//! `ServiceUnavailable` (apiserver/pkg/endpoints/handlers/responsewriters/status.go).

use std::time::Duration;

use bytes::Bytes;
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
}

/// An injected fault: for requests whose path starts with `prefix`, `times` times.
#[derive(Clone, Debug)]
pub(super) struct Injected {
    pub(super) prefix: String,
    pub(super) fault: Fault,
    pub(super) left: usize,
}

/// Takes the first fault that matches `path` (one use of it).
pub(super) fn take(inner: &Inner, path: &str) -> Option<Fault> {
    let mut faults = inner.faults.lock().expect("faults");
    let i = faults
        .iter()
        .position(|f| f.left > 0 && path.starts_with(&f.prefix))?;
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
