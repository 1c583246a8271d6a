//! kubelet's state for `nodectl status`, followed by systemd's PropertiesChanged signals.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use nodectl_units::systemd::Client;

use super::shared::Shared;

/// Keeps `status.kubelet` current from systemd's PropertiesChanged signals (no polling). If the
/// subscription ends (systemd reloaded the unit away, the bus hiccuped), it subscribes again.
pub(super) async fn follow(client: Client, shared: Arc<Shared>) {
    loop {
        match client.follow(nodectl_units::kubelet::KUBELET_UNIT).await {
            Ok(stream) => {
                let mut stream = std::pin::pin!(stream);
                while let Some(st) = stream.next().await {
                    match st {
                        Ok(st) => {
                            if let Some(f) = st.failure() {
                                tracing::warn!(unit = "kubelet.service", "kubelet failed: {f}");
                            }
                            shared.status.lock().await.set_kubelet(st);
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "reading kubelet's state");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "following kubelet"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}
