//! The metrics file for node_exporter's textfile collector, rewritten after every pass and on
//! each reboot state change.

use super::shared::Shared;
use crate::root::Root;

/// Prometheus text metrics (node_exporter: `--collector.textfile.directory=/run/nodectl/metrics`).
pub(crate) const METRICS: &str = "/run/nodectl/metrics/nodectl.prom";

/// Writes the metrics atomically through the one writer (a temp file of a random name in the
/// directory held open, renamed over the old one; nothing followed). No SELinux label of its
/// own: the policy's default for `/run`.
pub(super) async fn write(root: &Root, shared: &Shared) {
    let text = crate::status::metrics::render(&shared.snapshot().await, crate::memory::resident());
    let no_labels = nodectl_selinux::HostSelinux {
        mode: nodectl_selinux::Mode::Absent,
        mls: false,
        policy: None,
    };
    let labeler = nodectl_selinux::Labeler::new(root.dir(), &no_labels);
    let w = crate::fsio::Writer::new(root, &labeler);
    let dir = std::path::Path::new(METRICS).parent().expect("a parent");
    if let Err(e) = w
        .ensure_dir(&crate::fsio::DirSpec::new(dir, 0o755))
        .and_then(|_| w.write(&crate::fsio::FileSpec::new(METRICS, text, 0o644)))
    {
        tracing::warn!("writing {}: {e}", root.path(METRICS).display());
    }
}
