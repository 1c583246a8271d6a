//! The `kubelet-ca` step: `/etc/kubernetes/ca.crt` from the kubeconfig's cluster.

use std::path::Path;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use super::fileset::{managed_label, FileSet};
use super::kubelet::*;
use crate::engine::{Cx, Observation, Step};
use crate::fsio::FileSpec;

/// `/etc/kubernetes/ca.crt` (kubelet.yaml's `clientCAFile`), taken from the bootstrap
/// kubeconfig's cluster by parsing it, not by a grep/awk/base64 pipeline.
pub(crate) struct KubeletCa;

impl KubeletCa {
    /// The kubeconfig the CA comes from: the node kubeconfig once the node has one (its CA is
    /// pinned there: a bootstrap kubeconfig placed later never changes whom kubelet trusts),
    /// the bootstrap kubeconfig before.
    fn source(cx: &Cx) -> &Path {
        let s = &cx.settings;
        if std::fs::symlink_metadata(cx.root.path(&s.kubeconfig)).is_ok() {
            &s.kubeconfig
        } else {
            &s.bootstrap_kubeconfig
        }
    }

    fn spec(cx: &Cx) -> anyhow::Result<FileSpec> {
        let pem = crate::kubeconfig::load(&cx.root, Self::source(cx))?.ca;
        Ok(FileSpec {
            label: managed_label(cx, Path::new(KUBELET_CA)),
            ..FileSpec::new(KUBELET_CA, pem, 0o644)
        })
    }
}

impl Step for KubeletCa {
    fn id(&self) -> &'static str {
        "kubelet-ca"
    }
    fn description(&self) -> &'static str {
        "the cluster CA for kubelet, from the node kubeconfig (the bootstrap kubeconfig before)"
    }
    fn deps(&self) -> &'static [&'static str] {
        &["bootstrap-kubeconfig"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let set = FileSet {
                files: vec![Self::spec(cx)?],
                ..FileSet::default()
            };
            let changes = set.changes(cx)?;
            Ok(if changes.is_empty() {
                Observation::Converged(format!(
                    "{KUBELET_CA} matches {}",
                    Self::source(cx).display()
                ))
            } else {
                Observation::Changes(changes)
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            cx.writer().write(&Self::spec(cx)?)?;
            Ok(())
        }
        .boxed()
    }
}
