//! Approval -> credentials written, measured: the watch delivers the issued certificate in one
//! round trip (target <= 50 ms), not after a poll interval. Alone in its test binary so that no
//! parallel test skews the measurement.

use std::path::Path;
use std::time::{Duration, Instant};

use nodectl::bootstrap::Bootstrap;
use nodectl::fsio::Writer;
use nodectl::root::Root;
use nodectl_apiserver_double::{Approval, Double, Options};
use nodectl_selinux::{HostSelinux, Labeler, Mode};

#[tokio::test]
async fn approval_to_credentials_within_50ms() {
    let double = Double::start(Options {
        approval: Approval::After(Duration::from_millis(700)),
        ..Options::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = Root::new(dir.path());
    std::fs::create_dir_all(root.path("/etc/kubernetes")).unwrap();
    std::fs::write(
        root.path("/etc/kubernetes/kubeconfig"),
        double.bootstrap_kubeconfig("abcdef.0123456789abcdef"),
    )
    .unwrap();
    let labeler = Labeler::new(
        root.dir(),
        &HostSelinux {
            mode: Mode::Absent,
            mls: false,
            policy: None,
        },
    );
    let w = Writer::new(&root, &labeler);
    let issued = Bootstrap {
        writer: &w,
        node_name: "worker-1",
        bootstrap_kubeconfig: Path::new("/etc/kubernetes/kubeconfig"),
        kubeconfig: Path::new("/var/lib/kubelet/kubeconfig"),
        wait: Duration::from_secs(20),
    }
    .run()
    .await
    .unwrap();
    let written = Instant::now();
    let signed = double.signed_at(&issued.request).unwrap();
    let latency = written.duration_since(signed);
    println!("approval -> credentials written: {:.1} ms (target <= 50 ms; approval came 700 ms after the request)", latency.as_secs_f64() * 1000.0);
    assert!(latency <= Duration::from_millis(50), "{latency:?}");
}
