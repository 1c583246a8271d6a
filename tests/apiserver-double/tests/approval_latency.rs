//! Approval -> credentials written, measured and reported: the watch delivers the issued
//! certificate in one round trip, not after a poll interval. What fails is structural, so a
//! loaded 2-core machine does not make it flaky (issue 39): the CSR is read by a watch, not
//! polled (over the 3 s before approval at most 2 plain GETs of it: a 1 s poller makes 3 or
//! more), and a bound of 250 ms that any poll interval worth the name exceeds (the README's
//! 5 ms target is for the shipped build on a node; this figure is printed). Alone in its test
//! binary so that no parallel test skews the measurement.

mod common;

use std::time::{Duration, Instant};

use common::{bootstrap, node, TOKEN};
use nodectl_apiserver_double::{Approval, Double, Options};

#[tokio::test]
async fn approval_to_credentials_by_watch_not_by_poll() {
    let double = Double::start(Options {
        approval: Approval::After(Duration::from_secs(3)),
        ..Options::default()
    })
    .await
    .unwrap();
    let n = node(&double.bootstrap_kubeconfig(TOKEN));
    let issued = bootstrap(&n, Duration::from_secs(20)).await.unwrap();
    let written = Instant::now();
    let signed = double.signed_at(&issued.request).unwrap();
    let latency = written.duration_since(signed);
    let gets: Vec<_> = double
        .request_times()
        .into_iter()
        .filter(|(m, p, _)| {
            m == "GET" && p.contains("certificatesigningrequests") && !p.contains("watch")
        })
        .collect();
    println!(
        "approval -> credentials written: {:.1} ms (approval came 3 s after the request; {} plain GETs of CSRs)",
        latency.as_secs_f64() * 1000.0,
        gets.len()
    );
    assert!(gets.len() <= 2, "the CSR was polled: {gets:?}");
    assert!(latency <= Duration::from_millis(250), "{latency:?}");
}
