//! The double's contract, exercised with kube's client (what nodectld uses): bootstrap-token auth,
//! CSR create/get/watch, AlreadyExists, NotFound, 401, auto-approval and signing, and the issued
//! certificate authenticating as the node.

mod common;

use std::time::Duration;

use common::{client_for, who_am_i};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use nodectl_apiserver_double::{Approval, Double, Options};

fn csr_object(key: &rcgen::KeyPair, node: &str) -> CertificateSigningRequest {
    let mut csr = CertificateSigningRequest::default();
    csr.metadata.name = Some(nodectl::csr::request_name(key, node));
    csr.spec = CertificateSigningRequestSpec {
        request: k8s_openapi::ByteString(
            nodectl::csr::request_pem(key, node).unwrap().into_bytes(),
        ),
        signer_name: nodectl::csr::SIGNER.into(),
        usages: Some(nodectl::csr::USAGES.iter().map(|u| u.to_string()).collect()),
        ..Default::default()
    };
    csr
}

#[tokio::test]
async fn bootstrap_token_csr_watch_approval_and_node_identity() {
    let double = Double::start(Options::default()).await.unwrap();
    let client = client_for(&double.bootstrap_kubeconfig("abcdef.0123456789abcdef")).await;
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let key = nodectl::csr::generate_key().unwrap();
    let csr = csr_object(&key, "worker-1");
    let name = csr.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &csr).await.unwrap();
    // A second create with the same name: 409 AlreadyExists, as a Status.
    match api.create(&PostParams::default(), &csr).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("{other:?}"),
    }
    match api.get("node-csr-nope").await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (404, "NotFound")),
        other => panic!("{other:?}"),
    }
    // Watch by name until the certificate is issued.
    let wp = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(30);
    let mut stream = api.watch(&wp, "0").await.unwrap().boxed();
    let cert = loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(WatchEvent::Added(c)) | Some(WatchEvent::Modified(c)) => {
                if let Some(cert) = c.status.and_then(|s| s.certificate) {
                    break String::from_utf8(cert.0).unwrap();
                }
            }
            Some(other) => panic!("{other:?}"),
            None => panic!("watch ended"),
        }
    };
    let stored = double
        .csrs()
        .into_iter()
        .find(|c| c["metadata"]["name"] == name.as_str())
        .unwrap();
    assert_eq!(stored["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(stored["status"]["conditions"][0]["reason"], "AutoApproved");
    // The issued certificate authenticates as the node, in system:nodes.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("kubelet-client-current.pem");
    std::fs::write(&p, format!("{cert}{}", key.serialize_pem())).unwrap();
    let kubeconfig = nodectl::csr::node_kubeconfig(
        &double.url(),
        double.ca_pem().as_bytes(),
        p.to_str().unwrap(),
    );
    let node = client_for(&kubeconfig).await;
    let review = who_am_i(&node).await;
    assert_eq!(
        review["status"]["userInfo"]["username"],
        "system:node:worker-1"
    );
    assert!(review["status"]["userInfo"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g == "system:nodes"));
}

#[tokio::test]
async fn wrong_token_is_401_and_denial_is_a_condition() {
    let double = Double::start(Options {
        approval: Approval::Deny("policy says no".into()),
        ..Options::default()
    })
    .await
    .unwrap();
    let bad = client_for(&double.bootstrap_kubeconfig("abcdef.wrongwrongwrong0")).await;
    let api: Api<CertificateSigningRequest> = Api::all(bad);
    match api.get("x").await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized")),
        other => panic!("{other:?}"),
    }
    let api: Api<CertificateSigningRequest> =
        Api::all(client_for(&double.bootstrap_kubeconfig("abcdef.0123456789abcdef")).await);
    let key = nodectl::csr::generate_key().unwrap();
    let csr = csr_object(&key, "worker-2");
    let name = csr.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &csr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = api.get(&name).await.unwrap();
    let cond = &got.status.unwrap().conditions.unwrap()[0];
    assert_eq!(
        (cond.type_.as_str(), cond.message.as_deref()),
        ("Denied", Some("policy says no"))
    );
}
