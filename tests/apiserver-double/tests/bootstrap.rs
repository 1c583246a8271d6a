//! nodectld's TLS bootstrap (agent/src/bootstrap.rs) against the double, on a scratch root.

mod common;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use common::{bootstrap, client_for, node, who_am_i, Node, TOKEN};
use nodectl::credentials::bootstrap::BootstrapError;
use nodectl_apiserver_double::{Approval, Double, Options};

/// Who the double says the written node kubeconfig authenticates as.
async fn whoami(n: &Node) -> serde_json::Value {
    let text = std::fs::read_to_string(n.root.path("/var/lib/kubelet/kubeconfig")).unwrap();
    // The kubeconfig names node paths (and `-current.pem` links to a node path): point it at
    // the real file below the scratch root.
    let current = "/var/lib/kubelet/pki/kubelet-client-current.pem";
    let target = std::fs::read_link(n.root.path(current)).unwrap();
    let text = text.replace(current, &n.root.path(&target).display().to_string());
    who_am_i(&client_for(&text).await).await
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn happy_path_token_csr_approval_credentials_and_node_identity() {
    let double = Double::start(Options::default()).await.unwrap();
    let n = node(&double.bootstrap_kubeconfig(TOKEN));
    let issued = bootstrap(&n, Duration::from_secs(20)).await.unwrap();
    // The request as the double received it: kubelet's fields exactly.
    let received = double.received();
    assert_eq!(received.len(), 1);
    let r = &received[0];
    assert_eq!(
        r["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        r["spec"]["usages"],
        serde_json::json!(["digital signature", "key encipherment", "client auth"])
    );
    assert_eq!(r["metadata"]["name"], issued.request.as_str());
    let pem = base64::engine::general_purpose::STANDARD
        .decode(r["spec"]["request"].as_str().unwrap())
        .unwrap();
    let params =
        rcgen::CertificateSigningRequestParams::from_pem(std::str::from_utf8(&pem).unwrap())
            .unwrap();
    let dn = format!("{:?}", params.params.distinguished_name);
    assert!(
        dn.contains("system:node:worker-1") && dn.contains("system:nodes"),
        "{dn}"
    );
    assert!(params.params.subject_alt_names.is_empty());
    assert_eq!(
        nodectl_apiserver_double::recognize(&double.csrs()[0]),
        Ok("nodeclient")
    );
    // Credentials 0600, the pending key gone, a kubeconfig the double accepts as the node.
    // The link names a node path (as kubelet's store does): resolve it through the root.
    let target = std::fs::read_link(
        n.root
            .path("/var/lib/kubelet/pki/kubelet-client-current.pem"),
    )
    .unwrap();
    assert!(
        target
            .to_string_lossy()
            .starts_with("/var/lib/kubelet/pki/kubelet-client-"),
        "{target:?}"
    );
    assert_eq!(mode(&n.root.path(&target)), 0o600);
    assert!(!n
        .root
        .path("/var/lib/kubelet/pki/kubelet-client.key.tmp")
        .exists());
    assert_eq!(mode(&n.root.path("/var/lib/kubelet/kubeconfig")), 0o600);
    let who = whoami(&n).await;
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "system:node:worker-1"
    );
    assert!(who["status"]["userInfo"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g == "system:nodes"));
    let lifetime = issued
        .validity
        .not_after
        .duration_since(issued.validity.not_before)
        .unwrap();
    assert!(lifetime >= Duration::from_secs(72 * 3600), "{lifetime:?}");
}

#[tokio::test]
async fn a_restart_reuses_the_key_and_the_request() {
    let double = Double::start(Options {
        approval: Approval::Manual,
        ..Options::default()
    })
    .await
    .unwrap();
    let n = node(&double.bootstrap_kubeconfig(TOKEN));
    // First run: the request is made, nobody approves; it gives up (a crash would do the same).
    match bootstrap(&n, Duration::from_secs(1)).await {
        Err(BootstrapError::Timeout { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(
        n.root
            .path("/var/lib/kubelet/pki/kubelet-client.key.tmp")
            .exists(),
        "the pending key is kept"
    );
    let name = double.csrs()[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    double.approve(&name).unwrap();
    // Second run: same key, same name: AlreadyExists, reused, and the certificate picked up.
    let issued = bootstrap(&n, Duration::from_secs(10)).await.unwrap();
    assert_eq!(issued.request, name);
    assert_eq!(double.csrs().len(), 1, "no second request");
    assert_eq!(
        double.received().len(),
        2,
        "the retry's create met AlreadyExists"
    );
}

#[tokio::test]
async fn denied_and_failed_stop_with_the_reason_and_write_nothing() {
    for (approval, want) in [
        (
            Approval::Deny("not on the list".into()),
            "denied: not on the list",
        ),
        (
            Approval::Fail("signer unavailable".into()),
            "failed: signer unavailable",
        ),
    ] {
        let double = Double::start(Options {
            approval,
            ..Options::default()
        })
        .await
        .unwrap();
        let n = node(&double.bootstrap_kubeconfig(TOKEN));
        let e = bootstrap(&n, Duration::from_secs(10))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
        assert!(!n.root.path("/var/lib/kubelet/kubeconfig").exists());
        assert!(!n
            .root
            .path("/var/lib/kubelet/pki/kubelet-client-current.pem")
            .exists());
    }
}

#[tokio::test]
async fn a_wrong_ca_in_the_kubeconfig_fails_and_sends_nothing() {
    let real = Double::start(Options::default()).await.unwrap();
    let other = Double::start(Options::default()).await.unwrap();
    // The real server's address with another cluster's CA.
    let kubeconfig = other
        .bootstrap_kubeconfig(TOKEN)
        .replace(&other.url(), &real.url());
    let n = node(&kubeconfig);
    let e = bootstrap(&n, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, BootstrapError::Api { .. }), "{e}");
    assert!(
        real.received().is_empty(),
        "nothing reaches a server we cannot verify"
    );
}

#[tokio::test]
async fn a_dropped_watch_is_resumed() {
    let double = Double::start(Options {
        approval: Approval::Manual,
        ..Options::default()
    })
    .await
    .unwrap();
    let n = node(&double.bootstrap_kubeconfig(TOKEN));
    let run = bootstrap(&n, Duration::from_secs(20));
    let poke = async {
        while double.csrs().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        double.drop_watches();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let name = double.csrs()[0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        double.approve(&name).unwrap();
    };
    let (issued, ()) = tokio::join!(run, poke);
    issued.unwrap();
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_that_names_it() {
    let double = Double::start(Options::default()).await.unwrap();
    let kubeconfig = double.bootstrap_kubeconfig(TOKEN);
    let url = double.url();
    drop(double);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let n = node(&kubeconfig);
    let e = bootstrap(&n, Duration::from_secs(5))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&url), "{e}");
}
