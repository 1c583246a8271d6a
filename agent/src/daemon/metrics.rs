//! The metrics file for node_exporter's textfile collector, rewritten after every pass and on
//! each reboot state change.

use super::shared::Shared;
use crate::root::Root;

/// Prometheus text metrics (node_exporter: `--collector.textfile.directory=/run/nodectl/metrics`).
pub(crate) const METRICS: &str = "/run/nodectl/metrics/nodectl.prom";

/// Writes the metrics atomically (a temp file renamed over the old one).
pub(super) async fn write(root: &Root, shared: &Shared) {
    let text = crate::status::metrics::render(&shared.snapshot().await, crate::memory::resident());
    let path = root.path(METRICS);
    let tmp = path.with_extension("prom.tmp");
    if let Err(e) = std::fs::create_dir_all(path.parent().expect("a parent"))
        .and_then(|_| std::fs::write(&tmp, text))
        .and_then(|_| std::fs::rename(&tmp, &path))
    {
        tracing::warn!("writing {}: {e}", path.display());
    }
}
