//! `nodectl fleet`: with an operator's kubeconfig (`--kubeconfig`, `KUBECONFIG`, or
//! `~/.kube/config`), every Node's nodectld state, unhealthy first. Exit 0: every node's
//! `NodectlReady` is `True`; 2: some node's is not (for scripts); 1: error.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use crate::status::fleet;

/// A kubeconfig larger than this is refused (they are a few KiB).
const MAX_KUBECONFIG: u64 = 1 << 20;
const TIMEOUT: Duration = Duration::from_secs(20);

fn kubeconfig_path(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p);
    }
    if let Some(k) = std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty()) {
        // the first of a list, as kubectl reads the first for its current context
        let first = std::env::split_paths(&k)
            .next()
            .context("KUBECONFIG is empty")?;
        return Ok(first);
    }
    let home = std::env::var_os("HOME").context("no --kubeconfig, KUBECONFIG or HOME")?;
    Ok(PathBuf::from(home).join(".kube/config"))
}

pub async fn run(kubeconfig: Option<PathBuf>, json: bool) -> anyhow::Result<i32> {
    let path = kubeconfig_path(kubeconfig)?;
    let file =
        std::fs::File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_KUBECONFIG + 1),
        &mut text,
    )
    .with_context(|| format!("{}: cannot read", path.display()))?;
    anyhow::ensure!(
        text.len() as u64 <= MAX_KUBECONFIG,
        "{}: larger than {} KiB",
        path.display(),
        MAX_KUBECONFIG / 1024
    );
    let kc = crate::kubeconfig::parse(&text, &path)?;
    let client = crate::kubeconfig::client(kc, false)
        .await
        .with_context(|| format!("{}: no client", path.display()))?;
    let nodes: Api<Node> = Api::all(client);
    let list = tokio::time::timeout(TIMEOUT, nodes.list(&ListParams::default()))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the API server did not answer within {} s",
                TIMEOUT.as_secs()
            )
        })?
        .context("listing nodes")?;
    let rows = fleet::rows(&list.items);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        crate::util::locale::print(&fleet::render(&rows));
    }
    Ok(if rows.iter().all(|r| r.ready) { 0 } else { 2 })
}
