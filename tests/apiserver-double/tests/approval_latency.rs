//! Approval -> credentials written, measured: the watch delivers the issued certificate in one
//! round trip (target <= 50 ms), not after a poll interval. Alone in its test binary so that no
//! parallel test skews the measurement.

mod common;

use std::time::{Duration, Instant};

use common::{bootstrap, node, TOKEN};
use nodectl_apiserver_double::{Approval, Double, Options};

#[tokio::test]
async fn approval_to_credentials_within_50ms() {
    let double = Double::start(Options {
        approval: Approval::After(Duration::from_millis(700)),
        ..Options::default()
    })
    .await
    .unwrap();
    let n = node(&double.bootstrap_kubeconfig(TOKEN));
    let issued = bootstrap(&n, Duration::from_secs(20)).await.unwrap();
    let written = Instant::now();
    let signed = double.signed_at(&issued.request).unwrap();
    let latency = written.duration_since(signed);
    println!("approval -> credentials written: {:.1} ms (target <= 50 ms; approval came 700 ms after the request)", latency.as_secs_f64() * 1000.0);
    assert!(latency <= Duration::from_millis(50), "{latency:?}");
}
