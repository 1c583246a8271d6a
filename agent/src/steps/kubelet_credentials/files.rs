//! The files kubelet reads for its API credentials: the env file (`KUBELET_KUBECONFIG`,
//! `KUBELET_CONFIG`) and the node kubeconfig.

use std::path::Path;

use super::super::fileset::{managed_label, FileSet};
use super::super::kubelet::{KUBELET_ENV, KUBELET_STANDALONE_YAML, KUBELET_YAML, MANAGED_HEADER};
use crate::credentials;
use crate::engine::Cx;
use crate::fsio::FileSpec;

/// kubelet.service's environment: the node kubeconfig once the node has its own credentials;
/// before that (`standalone`, a controller whose static pods serve the API) no kubeconfig and
/// the standalone configuration, which a real kubelet accepts without an API client.
pub(super) fn env_file(with_kubeconfig: Option<&Path>, standalone: bool) -> FileSpec {
    let value = with_kubeconfig.map_or(String::new(), |p| format!("--kubeconfig={}", p.display()));
    let config = if with_kubeconfig.is_none() && standalone {
        KUBELET_STANDALONE_YAML
    } else {
        KUBELET_YAML
    };
    FileSpec::new(
        KUBELET_ENV,
        format!(
            "{MANAGED_HEADER}: kubelet's API credentials (empty: standalone, no node certificate yet).\nKUBELET_KUBECONFIG={value}\nKUBELET_CONFIG=--config={config}\n",
        ),
        0o644,
    )
}

/// The node kubeconfig the current certificate calls for: server and CA from the node
/// kubeconfig already written (pinned: a later bootstrap kubeconfig does not move the node), from
/// the bootstrap kubeconfig before there is one.
pub(super) fn kubeconfig_file(cx: &Cx) -> anyhow::Result<Option<FileSpec>> {
    let s = &cx.settings;
    let source = [&s.kubeconfig, &s.bootstrap_kubeconfig]
        .into_iter()
        .find(|p| std::fs::symlink_metadata(cx.root.path(p)).is_ok());
    let Some(source) = source else {
        return Ok(None);
    };
    let crate::kubeconfig::Loaded { server, ca, .. } = crate::kubeconfig::load(&cx.root, source)?;
    let current = Path::new(credentials::CERT_DIR).join(credentials::CURRENT);
    Ok(Some(credentials::private(
        &cx.writer(),
        FileSpec::new(
            &s.kubeconfig,
            crate::csr::node_kubeconfig(&server, &ca, &current.display().to_string()),
            0o600,
        ),
    )))
}

/// The files this pass should hold: with the node kubeconfig once the node holds a
/// certificate of its own (`own`), standalone before.
pub(super) fn files(cx: &Cx, own: bool) -> anyhow::Result<FileSet> {
    let mut files = Vec::new();
    let mut api = None;
    if own {
        if let Some(k) = kubeconfig_file(cx)? {
            files.push(k);
            api = Some(cx.settings.kubeconfig.as_path());
        }
    }
    // Inside a managed tree (`/etc/kubernetes` by default) it carries the tree's label, or
    // the relabel step and this one would undo each other.
    let env = env_file(api, cx.settings.role == crate::config::Role::Controller);
    let label = managed_label(cx, &env.path);
    files.push(FileSpec { label, ..env });
    Ok(FileSet {
        files,
        ..FileSet::default()
    })
}

/// The bootstrap kubeconfig as it is now (a new one lifts a refusal's hold).
pub(super) fn bootstrap_kubeconfig_bytes(cx: &Cx) -> Option<Vec<u8>> {
    crate::util::bounded::read(
        &cx.root.path(&cx.settings.bootstrap_kubeconfig),
        crate::util::bounded::MAX_INPUT_BYTES,
    )
    .ok()
}
