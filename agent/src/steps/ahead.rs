//! What a controller prepares while it waits for its bundle, so the bundle's pass (on the way
//! to kubelet's start, issue 18) does only what depends on the bundle: the default labels it
//! will ask for, looked up ([`warm_labels`]), and the directories every Typhoon bundle fills,
//! made with their final owner, mode and label ([`ahead_dirs`]).

use std::path::{Path, PathBuf};

use libc::{S_IFDIR, S_IFREG};

use super::bundle::CONTROL_PLANE_CA;
use super::inbox::bundle_names;
use crate::config::{Role, Settings};

/// A controller's bundle as terraform-render-bootstrap writes it: the names of its `assets_dist`
/// output (outputs.tf at e834a08, July 2026: auth.tf, tls-etcd.tf, tls-k8s.tf,
/// tls-aggregation.tf; manifests.tf's `static-manifests/*` and `manifests/**` from
/// resources/manifests, resources/coredns and resources/kube-proxy; conditional.tf's
/// `manifests/network/*` from resources/flannel or resources/cilium), and Typhoon's
/// `kubelet/kubeconfig`. Only what [`warm_labels`] looks up ahead: a bundle holding other names
/// is placed the same, its labels looked up when it comes.
const TYPHOON_RECORDS: &[&str] = &[
    "auth/admin.conf",
    "auth/controller-manager.conf",
    "auth/scheduler.conf",
    "tls/etcd/etcd-client-ca.crt",
    "tls/etcd/etcd-client.crt",
    "tls/etcd/etcd-client.key",
    "tls/etcd/server-ca.crt",
    "tls/etcd/server.crt",
    "tls/etcd/server.key",
    "tls/etcd/peer-ca.crt",
    "tls/etcd/peer.crt",
    "tls/etcd/peer.key",
    "tls/k8s/ca.crt",
    "tls/k8s/ca.key",
    "tls/k8s/apiserver.crt",
    "tls/k8s/apiserver.key",
    "tls/k8s/service-account.pub",
    "tls/k8s/service-account.key",
    "tls/k8s/aggregation-ca.crt",
    "tls/k8s/aggregation-client.crt",
    "tls/k8s/aggregation-client.key",
    "static-manifests/kube-apiserver.yaml",
    "static-manifests/kube-controller-manager.yaml",
    "static-manifests/kube-scheduler.yaml",
    "manifests/bootstrap-cluster-role-binding.yaml",
    "manifests/bootstrap-new-approve-cluster-role-binding.yaml",
    "manifests/bootstrap-renew-approve-cluster-role-binding.yaml",
    "manifests/bootstrap-token.yaml",
    "manifests/in-cluster.yaml",
    "manifests/kubeconfig-in-cluster.yaml",
    "manifests/kubelet-delete-cluster-role-binding.yaml",
    "manifests/kubelet-delete-cluster-role.yaml",
    "manifests/coredns/cluster-role-binding.yaml",
    "manifests/coredns/cluster-role.yaml",
    "manifests/coredns/config.yaml",
    "manifests/coredns/deployment.yaml",
    "manifests/coredns/service-account.yaml",
    "manifests/coredns/service.yaml",
    "manifests/kube-proxy/kube-proxy-role-binding.yaml",
    "manifests/kube-proxy/kube-proxy-sa.yaml",
    "manifests/kube-proxy/kube-proxy.yaml",
    "manifests/network/cluster-role-binding.yaml",
    "manifests/network/cluster-role.yaml",
    "manifests/network/config.yaml",
    "manifests/network/daemonset.yaml",
    "manifests/network/deployment.yaml",
    "manifests/network/service-account.yaml",
    "kubelet/kubeconfig",
];

/// [`TYPHOON_RECORDS`] as (empty) bundle records.
pub(super) fn typhoon_records() -> Vec<super::bundle::Record> {
    TYPHOON_RECORDS
        .iter()
        .enumerate()
        .map(|(i, r)| super::bundle::Record {
            path: (*r).to_string(),
            content: Vec::new(),
            line: i + 1,
        })
        .collect()
}

/// The default labels a controller's bundle pass asks for (node path, file type), when its
/// records carry Typhoon's names: every directory and file the layout leaves at the policy's
/// default (etcd's keys, the bootstrap manifests, the bootstrap kubeconfig) and the files the
/// steps after `secrets` write in that pass (kubelet's CA and environment file).
pub(crate) fn bundle_label_paths(settings: &Settings) -> Vec<(PathBuf, u32)> {
    let records = typhoon_records();
    let mut out: Vec<(PathBuf, u32)> = Vec::new();
    let mut add = |p: &Path, kind: u32| {
        if !out.iter().any(|(q, k)| q == p && *k == kind) {
            out.push((p.to_path_buf(), kind));
        }
    };
    if let Ok(plan) = super::bundle::plan(
        &records,
        super::bundle::TYPHOON_LAYOUT,
        Role::Controller,
        &settings.bootstrap_kubeconfig,
        Path::new("(labels looked up ahead)"),
    ) {
        for d in plan.dirs.iter().filter(|d| d.label.is_none()) {
            add(&d.dest, S_IFDIR);
        }
        for f in plan.files.iter().filter(|f| f.label.is_none()) {
            add(&f.dest, S_IFREG);
        }
    }
    for f in [super::kubelet::KUBELET_CA, super::kubelet::KUBELET_ENV] {
        add(Path::new(f), S_IFREG);
    }
    out
}

/// Whether to look up a bundle's labels ahead now: on a controller still waiting for its
/// bundle (no control-plane CA placed, no bundle in the inbox: with one, its pass is under
/// way), where labels apply and their answers stay cached (otherwise the lookups would be
/// thrown away and the bundle's pass would pay them again). An inbox that cannot be read: no.
pub(super) fn should_warm(
    role: Role,
    labels: bool,
    caches: bool,
    ca_placed: bool,
    inbox: &std::io::Result<Vec<String>>,
) -> bool {
    role == Role::Controller
        && labels
        && caches
        && !ca_placed
        && inbox.as_ref().is_ok_and(|b| b.is_empty())
}

/// While a controller waits for its bundle, looks up the default labels its pass will ask for
/// ([`bundle_label_paths`]), so that pass opens no file_contexts handle: opening one and the
/// first lookups cost 80-250 ms under QEMU TCG, on the way to kubelet's start (issue 18). The
/// answers stay in the labeler's process-wide cache (a few dozen short strings, dropped when
/// the policy's files change); the handles are closed with the labeler. Only when
/// [`should_warm`]; once done, the next calls find every answer cached and open nothing.
/// Returns the subsets opened.
pub(crate) fn warm_labels(
    root: &crate::root::Root,
    settings: &Settings,
    labeler: &nodectl_selinux::Labeler,
) -> Vec<PathBuf> {
    let warm = should_warm(
        settings.role,
        labeler.skipped().is_none(),
        labeler.caches(),
        root.path(CONTROL_PLANE_CA).exists(),
        &bundle_names(&root.path(&settings.secrets_inbox)),
    );
    if !warm {
        return Vec::new();
    }
    for (p, kind) in bundle_label_paths(settings) {
        labeler.default_for(&p, kind);
    }
    labeler.opened()
}

/// Records every Typhoon controller bundle holds, one per directory they land in: the
/// directories [`ahead_dirs`] makes. (The bootstrap manifests' subdirectories depend on the
/// bundle's network add-on: made when it comes.)
const AHEAD_RECORDS: &[&str] = &[
    "tls/k8s/ca.crt",
    "tls/etcd/server.crt",
    "manifests/bootstrap-token.yaml",
];

/// The directories a controller's bundle fills in any case (`/etc/kubernetes/pki`,
/// `/etc/ssl/etcd/etcd`, `/opt/bootstrap/assets/manifests` and those between), with the
/// layout's owner, mode and label: made while the controller waits for its bundle, so the
/// bundle's pass finds them in place (7 directories of ~4 ms each under QEMU TCG, on the way to
/// kubelet's start). Empty until the bundle comes: nothing reads them before it.
pub(super) fn ahead_dirs(settings: &Settings) -> Vec<super::bundle::DirPlacement> {
    let records: Vec<super::bundle::Record> = typhoon_records()
        .into_iter()
        .filter(|r| AHEAD_RECORDS.contains(&r.path.as_str()))
        .collect();
    super::bundle::plan(
        &records,
        super::bundle::TYPHOON_LAYOUT,
        Role::Controller,
        &settings.bootstrap_kubeconfig,
        Path::new("(directories made ahead)"),
    )
    .map(|p| p.dirs)
    .unwrap_or_default()
}
