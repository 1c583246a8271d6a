//! The `NodectlReady` condition and nodectld's annotations on its Node, when
//! [`crate::status::heartbeat`] says they are due (a change, the condition's heartbeat, the end
//! of a backoff), over one long-lived client ([`KubeNode`]). Never before the node has its own
//! credentials (status/report.rs checks what it sends with). A 401 asks the credentials check
//! for a SelfSubjectReview.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::shared::Shared;
use crate::config::Settings;
use crate::root::Root;
use crate::status::heartbeat::Heartbeat;
use crate::status::report::KubeNode;
use crate::util::time::now_secs;

/// The reporting task and the settings it runs with.
#[derive(Default)]
pub(super) struct Reporter {
    task: Option<(tokio::task::JoinHandle<()>, Params)>,
    /// The Node the last reporter wrote to.
    last_node: Option<String>,
}

#[derive(Clone, PartialEq, Eq)]
struct Params {
    kubeconfig: PathBuf,
    node: String,
    heartbeat: u64,
}

impl Reporter {
    /// Runs the reporting while the settings ask for it (restarted when they change).
    /// Invalid settings keep it running as it was, so the condition says why (`ConfigInvalid`).
    pub(super) fn follow(&mut self, root: &Root, s: Option<&Settings>, shared: &Arc<Shared>) {
        let Some(s) = s else { return };
        let want = Some(s)
            .filter(|s| s.condition_heartbeat_secs > 0)
            .map(|s| Params {
                kubeconfig: s.kubeconfig.clone(),
                node: s.node_name.clone(),
                heartbeat: s.condition_heartbeat_secs,
            });
        if let (Some((task, p)), Some(w)) = (&self.task, &want) {
            if p == w && !task.is_finished() {
                return;
            }
        }
        self.stop();
        if let Some(p) = want {
            // What was written to the same Node goes on (not written again before its
            // heartbeat); another Node (renamed) starts from nothing.
            let same_node = self.last_node.as_ref().is_none_or(|n| *n == p.node);
            self.last_node = Some(p.node.clone());
            // the Events about the Node go with its condition (the same credentials, settings)
            let events = super::events::run(
                root.clone(),
                p.kubeconfig.clone(),
                p.node.clone(),
                shared.clone(),
            );
            let report = run(root.clone(), p.clone(), shared.clone(), same_node);
            let task = tokio::spawn(async move {
                tokio::join!(report, events);
            });
            self.task = Some((task, p));
        }
    }

    pub(super) fn stop(&mut self) {
        if let Some((task, _)) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(root: Root, p: Params, shared: Arc<Shared>, same_node: bool) {
    let last = if same_node {
        shared.status.lock().await.node_condition.clone()
    } else {
        None
    };
    let mut hb = Heartbeat::new(p.heartbeat, last);
    let mut api = KubeNode::new(root.clone(), p.kubeconfig.clone(), p.node.clone());
    loop {
        let st = shared.snapshot().await;
        api.set_credentials(st.credentials.as_ref());
        let o = hb
            .step(&st, now_secs(), crate::util::jitter(), &p.node, &mut api)
            .await;
        if o.unauthorized {
            // the API server refused the certificate: ask it (a SelfSubjectReview) whether
            // the node needs a new one
            shared.recheck_credentials.notify_one();
        }
        if let Some(r) = o.report {
            shared.status.lock().await.node_condition = Some(r);
            super::metrics::write(&root, &shared).await;
        }
        let wait = o.next_at.saturating_sub(now_secs()).max(1);
        tokio::select! {
            _ = shared.changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(wait)) => {}
        }
    }
}
