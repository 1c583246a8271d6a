//! Whether the API server still accepts the node's certificate: a SelfSubjectReview with the
//! node kubeconfig (every authenticated user may create one). The daemon asks when there is a
//! cause (a new certificate, a 401) and feeds the answer to the next pass ([`Facts`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::root::Root;

/// What the node learnt about its certificate outside a pass, read by the next one.
#[derive(Debug, Default)]
pub struct Facts {
    revoked: AtomicBool,
}

impl Facts {
    /// The API server answered 401 to the node's certificate: request one with the token.
    pub fn revoked(&self) -> bool {
        self.revoked.load(Ordering::SeqCst)
    }

    /// Records a 401 (or, `false`, a certificate issued since).
    pub fn set_revoked(&self, revoked: bool) {
        self.revoked.store(revoked, Ordering::SeqCst);
    }
}

/// Why the check could not tell (the server unreachable or failing); holds no credential.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CheckError(String);

/// Whether the API server accepts the node kubeconfig's certificate: `Some(username)`, or
/// `None` for a 401.
pub(crate) async fn accepted(root: &Root, kubeconfig: &Path) -> Result<Option<String>, CheckError> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let conn = crate::kubeconfig::connect(root, kubeconfig, true)
        .await
        .map_err(|e| CheckError(e.to_string()))?;
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(conn.client);
    match api
        .create(
            &kube::api::PostParams::default(),
            &SelfSubjectReview::default(),
        )
        .await
    {
        Ok(r) => Ok(Some(
            r.status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username)
                .unwrap_or_default(),
        )),
        Err(kube::Error::Api(s)) if s.code == 401 => Ok(None),
        Err(e) => Err(CheckError(format!("{}: {e}", conn.server))),
    }
}

/// How long one check may take.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// Asks the API server whether it still accepts the node kubeconfig's certificate each time
/// `recheck` is told (the daemon tells it when a pass found another certificate, and when a
/// request with the node's certificate was refused with 401), and every `every` if given, for as
/// long as the task runs. A SelfSubjectReview is a request the API server answers for every
/// node: only on such a cause, never on a fixed timer by default (issue 40). A 401 (the
/// certificate revoked, its CA rotated away) is recorded in `facts` and `wake` is called, so the
/// next pass requests a certificate with the bootstrap token; an unreachable server changes
/// nothing.
pub fn spawn_checks(
    root: Root,
    kubeconfig: PathBuf,
    every: Option<Duration>,
    recheck: Arc<tokio::sync::Notify>,
    facts: Arc<Facts>,
    wake: Arc<dyn Fn() + Send + Sync>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match every {
                Some(every) => tokio::select! {
                    _ = recheck.notified() => {}
                    _ = tokio::time::sleep(every) => {}
                },
                None => recheck.notified().await,
            }
            if root.path(&kubeconfig).is_file() {
                let verdict = tokio::time::timeout(CHECK_TIMEOUT, accepted(&root, &kubeconfig))
                    .await
                    .unwrap_or_else(|_| Err(CheckError("no answer within 30 s".into())));
                crate::memory::release_freed();
                match verdict {
                    Ok(Some(user)) => {
                        tracing::debug!(%user, "the API server accepts the node's certificate")
                    }
                    Ok(None) => {
                        tracing::warn!(
                            "the API server refused the node's certificate (401); requesting one with the bootstrap token"
                        );
                        facts.set_revoked(true);
                        wake();
                    }
                    Err(e) => tracing::info!(
                        "could not check the node's certificate with the API server ({e}); checked again at the next refusal or new certificate"
                    ),
                }
            }
        }
    })
}
