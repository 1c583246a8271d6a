//! Helpers shared by the double's test files. (Each test file uses some of them.)
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use nodectl::credentials::bootstrap::{Bootstrap, BootstrapError, Issued};
use nodectl::fsio::Writer;
use nodectl::root::Root;
use nodectl_selinux::{HostSelinux, Labeler, Mode};

pub const TOKEN: &str = "abcdef.0123456789abcdef";

/// A scratch node root holding a bootstrap kubeconfig.
pub struct Node {
    _dir: tempfile::TempDir,
    pub root: Root,
    pub labeler: Labeler,
}

pub fn node(bootstrap_kubeconfig: &str) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let root = Root::new(dir.path());
    std::fs::create_dir_all(root.path("/etc/kubernetes")).unwrap();
    std::fs::write(
        root.path("/etc/kubernetes/kubeconfig"),
        bootstrap_kubeconfig,
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
    Node {
        _dir: dir,
        root,
        labeler,
    }
}

/// nodectld's bootstrap for `worker-1` on that node.
pub async fn bootstrap(n: &Node, wait: Duration) -> Result<Issued, BootstrapError> {
    let w = Writer::new(&n.root, &n.labeler);
    Bootstrap {
        writer: &w,
        via: nodectl::credentials::bootstrap::Via::BootstrapToken,
        node_name: "worker-1",
        bootstrap_kubeconfig: Path::new("/etc/kubernetes/kubeconfig"),
        kubeconfig: Path::new("/var/lib/kubelet/kubeconfig"),
        wait,
        on_request: None,
        on_issued: None,
    }
    .run()
    .await
}

/// A kube client from a kubeconfig's text (Typhoon's nameless context included).
pub async fn client_for(kubeconfig: &str) -> kube::Client {
    client_with(kubeconfig, true).await
}

/// As [`client_for`]; `retry: false` turns off kube's retries of 429/503/504 (the Eviction API's
/// 429 is an answer, not a transient failure).
pub async fn client_with(kubeconfig: &str, retry: bool) -> kube::Client {
    let kc = nodectl::kubeconfig::parse(kubeconfig, Path::new("kubeconfig")).unwrap();
    nodectl::kubeconfig::client(kc, retry).await.unwrap()
}

/// Who the server says this client is (a SelfSubjectReview).
pub async fn who_am_i(client: &kube::Client) -> serde_json::Value {
    client
        .request(
            http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
                .header("content-type", "application/json")
                .body(
                    b"{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"SelfSubjectReview\"}"
                        .to_vec(),
                )
                .unwrap(),
        )
        .await
        .unwrap()
}
