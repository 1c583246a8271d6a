//! The `kubelet-credentials` step: the node's own client certificate, requested with the
//! bootstrap token when the node has none (or it expired, or the server refuses it), renewed
//! with the node's certificate and a fresh key at a jittered 92-96% of its lifetime when kubelet
//! (which rotates at 70-90% in the same store) has not, and the node kubeconfig kubelet uses.
//!
//! Requests run in the background: a pass starts one, waits a moment for it (an auto-approved
//! request finishes within the pass), and otherwise reports what it waits for; the request
//! wakes the daemon when it ends. Failures back off: an unreachable or failing server with a
//! capped exponential backoff with jitter (2 s doubling to 64 s), in the daemon retried by the
//! request itself (a connection, not a pass of every step: a pass is woken when the certificate
//! comes, the cluster refuses, or the failure changes), ended at once on a controller
//! when kubelet starts a new API server pod there (its log directory appears in
//! `/var/log/pods`); a denied or failed request with a longer one (60 s doubling to an hour), or
//! until an operator acts (`nodectl converge`, SIGHUP, a new bootstrap kubeconfig).
//!
//! kubelet runs with `--kubeconfig` only (never the bootstrap kubeconfig) and without its own
//! rotation; the flag comes from [`KUBELET_ENV`], read by kubelet.service at each start, so
//! switching it needs no daemon-reload. On a controller, kubelet must run before the node has a
//! certificate (the API server it asks is one of kubelet's static pods): until then the file
//! leaves the flag out and kubelet runs standalone; once the certificate is issued, kubelet is
//! restarted with it. It never goes back to standalone: with an expired or refused certificate
//! kubelet keeps its kubeconfig until the new certificate comes (standalone, it would stop every
//! pod the API server gave it).
//!
//! The daemon asks the API server every `kubelet.credentials_check_secs` whether it still
//! accepts the node's certificate ([`crate::credentials::check`]) and records a refusal in the
//! pass's [`crate::credentials::check::Facts`]; this step only reads that fact (observe does no
//! I/O beyond reading), so a revoked certificate (or a rotated cluster CA) sends the node back to
//! the bootstrap token within that time, not at the next renewal.
//!
//! `files`: what kubelet reads (env file, node kubeconfig); `request`: the request running in the
//! background and its phase; this file: the step.

mod files;
mod request;

pub(crate) use request::{api_server_pod_prefix, POD_LOGS};

use std::path::Path;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use nodectl_units::kubelet::KUBELET_UNIT;

use super::kubelet::{
    finish_restart, issued_switched, kubelet_is_up, mark_restart, restart_pending, Pending, Why,
    RESTART_MARKER,
};
use crate::config::Role;
use crate::credentials::bootstrap::Via;
use crate::credentials::policy::{need, Need};
use crate::credentials::{self, Held};
use crate::engine::{Change, Cx, Observation, Step};
use crate::util::time::{left, rfc3339};
use request::Phase;

pub(crate) use crate::credentials::policy::APPROVAL_WAIT;

/// The step; its state lives across passes (the daemon keeps one engine).
#[derive(Default)]
pub(crate) struct KubeletCredentials {
    state: request::Shared,
}

/// The node holds a certificate of its own (expired or refused included): kubelet keeps its
/// kubeconfig. Standalone, kubelet would stop every pod the API server gave it; with the old
/// certificate it keeps them running (and static pods run either way) until the new one comes.
fn owns(held: Option<&Held>, cx: &Cx) -> bool {
    held.is_some_and(|h| h.subject == format!("system:node:{}", cx.settings.node_name))
}

/// A controller whose control plane's bundle is not placed yet: its API server (one of kubelet's
/// static pods) cannot run, so there is nobody to ask; the request waits for the bundle without
/// a wakeup (the bundle's pass asks), and kubelet's files are written meanwhile.
fn awaits_control_plane(cx: &Cx) -> bool {
    cx.settings.role == Role::Controller && !cx.root.path(super::bundle::CONTROL_PLANE_CA).exists()
}

/// The current certificate file was written at or after `t`.
fn issued_since(cx: &Cx, t: SystemTime) -> bool {
    let link = cx
        .root
        .path(Path::new(credentials::CERT_DIR).join(credentials::CURRENT));
    std::fs::read_link(&link)
        .ok()
        .and_then(|target| std::fs::metadata(cx.root.path(target)).ok())
        .and_then(|m| m.modified().ok())
        .is_some_and(|m| m >= t)
}

fn expiry(h: &Held) -> String {
    format!(
        "{} valid until {}, rotation at {}",
        h.subject,
        rfc3339(h.validity.not_after),
        rfc3339(h.rotate_at)
    )
}

impl KubeletCredentials {
    /// What to do about the certificate now, given the phase (the part of observe that decides).
    fn assess(&self, cx: &Cx) -> (Option<Held>, Need, Phase) {
        let held = match credentials::held(&cx.root) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("{e:#}; requesting a new certificate");
                None
            }
        };
        let phase = self.state.lock().expect("credentials state").phase.clone();
        let need = need(
            held.as_ref(),
            &cx.settings.node_name,
            cx.facts.revoked(),
            SystemTime::now(),
        );
        (held, need, phase)
    }

    fn running(&self) -> bool {
        matches!(
            self.state.lock().expect("credentials state").phase,
            Phase::Running { .. }
        )
    }
}

/// What a request under way (or a backoff) shows; asks for a pass when a backoff ends that the
/// request does not retry by itself.
fn activity(phase: &Phase, cx: &Cx) -> Option<String> {
    match phase {
        Phase::Running {
            via,
            request: Some(r),
            since,
        } => Some(format!(
            "certificate request {r} ({via}) pending approval since {}",
            rfc3339(*since)
        )),
        Phase::Running { via, .. } => Some(format!("requesting a certificate ({via})")),
        // In the pass that deferred it: waits for the next pass (asked for at once); in that
        // pass, the request is a change like any other.
        Phase::Deferred { pass } if *pass == cx.started => {
            cx.recheck_in(Duration::ZERO);
            Some("requesting a certificate once kubelet runs (standalone)".into())
        }
        // Retried by the request itself in the daemon (no pass at its end: the status says
        // when the last attempt failed, not a countdown only passes would refresh).
        Phase::Backoff {
            attempt,
            since,
            reason,
            by_itself: true,
            ..
        } if phase.holds_off(cx) => Some(format!(
            "{reason}; attempt {attempt} failed at {}, retried by itself 2 s doubling to {} s apart",
            rfc3339(*since),
            crate::credentials::policy::BACKOFF_CAP.as_secs()
        )),
        Phase::Backoff {
            attempt,
            until,
            reason,
            ..
        } if phase.holds_off(cx) => {
            cx.recheck_in(left(*until));
            Some(format!(
                "{reason}; attempt {} in {} s",
                attempt + 1,
                left(*until).as_secs().max(1)
            ))
        }
        _ => None,
    }
}

/// A refusal that stands fails the step (with when it is asked again).
fn refused(phase: &Phase, need: &Need, cx: &Cx) -> anyhow::Result<()> {
    if let Phase::Refused { until, reason, .. } = phase {
        if phase.holds_off(cx) && !matches!(need, Need::Nothing) {
            cx.recheck_in(left(*until));
            anyhow::bail!(
                "{reason} (next request at {}, or after `nodectl converge`, SIGHUP or a new {})",
                rfc3339(*until),
                cx.settings.bootstrap_kubeconfig.display()
            );
        }
    }
    Ok(())
}

/// The observation, from what the certificate needs and what runs (pure but for rechecks).
fn decide(
    cx: &Cx,
    held: Option<&Held>,
    need: &Need,
    activity: Option<String>,
    mut changes: Vec<Change>,
) -> Observation {
    let controller = cx.settings.role == Role::Controller;
    match (need, activity) {
        (Need::Nothing, _) => {
            if let Some(h) = held {
                cx.recheck_in(left(h.rotate_at).max(Duration::from_secs(1)));
            }
        }
        (Need::Rotate(_), Some(a)) if changes.is_empty() => {
            let h = held.expect("a rotation has a certificate");
            return Observation::Converged(format!("{}; renewing: {a}", expiry(h)));
        }
        (Need::Rotate(_), Some(_)) => {}
        (Need::Rotate(_), None) if issued_since(cx, cx.started) => {
            // Issued in this very pass (a short-lived certificate): renew in the next.
            cx.recheck_in(Duration::from_secs(1));
            let h = held.expect("a rotation has a certificate");
            return Observation::Converged(format!("{}; renewal due, in the next pass", expiry(h)));
        }
        (Need::Rotate(why), None) => changes.push(Change::new(
            "renew the node's certificate with a fresh key",
            why,
        )),
        // A controller's kubelet runs standalone meanwhile (its static pods serve the API
        // this request goes to).
        (Need::Bootstrap(_), Some(a)) if controller && changes.is_empty() => {
            return Observation::Converged(format!(
                "kubelet standalone until the node's certificate is issued; {a}"
            ));
        }
        (Need::Bootstrap(_), Some(a)) if changes.is_empty() => return Observation::Waiting(a),
        (Need::Bootstrap(_), Some(_)) => {}
        (Need::Bootstrap(_), None) if awaits_control_plane(cx) => {
            if changes.is_empty() {
                return Observation::Converged(
                    "kubelet's env file for standalone; the node's certificate is requested once the control plane's bundle is placed (its API server is one of kubelet's static pods)".into(),
                );
            }
        }
        (Need::Bootstrap(why), None) => changes.push(Change::new(
            "request the node's client certificate with the bootstrap token",
            why,
        )),
    }
    if changes.is_empty() {
        Observation::Converged(held.map(expiry).unwrap_or_default())
    } else {
        Observation::Changes(changes)
    }
}

impl Step for KubeletCredentials {
    fn id(&self) -> &'static str {
        "kubelet-credentials"
    }
    fn description(&self) -> &'static str {
        "the node's own client certificate (TLS bootstrap, rotation) and kubelet's kubeconfig"
    }
    fn deps(&self) -> &'static [&'static str] {
        &["node-identity", "bootstrap-kubeconfig"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let (held, need, phase) = self.assess(cx);
            // The request stored its certificate but has not ended (the node kubeconfig, the
            // phase, the wake-up come next): a pass woken by the new files in the watched key
            // directory waits for the pass the request's end wakes, so kubelet is neither
            // started on half the credentials nor started and then restarted.
            if let Phase::Running { since, .. } = &phase {
                if issued_since(cx, *since) {
                    return Ok(Observation::Waiting(
                        "the node's new certificate to be stored (the request is ending)".into(),
                    ));
                }
            }
            let changes = files::files(cx, owns(held.as_ref(), cx))?.changes(cx)?;
            let activity = activity(&phase, cx);
            refused(&phase, &need, cx)?;
            let seen = decide(cx, held.as_ref(), &need, activity, changes);
            Ok(match (seen, self.owed_restart(cx).await?) {
                (Observation::Converged(_), Some(c)) => Observation::Changes(vec![c]),
                (Observation::Changes(mut v), Some(c)) => {
                    v.push(c);
                    Observation::Changes(v)
                }
                (seen, _) => seen,
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let (held, need, phase) = self.assess(cx);
            let waiting = phase.holds_off(cx);
            // Nothing on a controller's critical path waits for the API: before its first
            // certificate its kubelet runs standalone (its static pods serve the API this request
            // goes to), so in the daemon (which carries the request on) the pass does not wait.
            let first_on_controller = cx.settings.role == Role::Controller
                && !owns(held.as_ref(), cx)
                && cx.waker.is_some();
            let inline_wait = if first_on_controller {
                Duration::ZERO
            } else {
                cx.inline_wait
            };
            let via = match need {
                Need::Nothing => None,
                Need::Rotate(_) => Some(Via::NodeCertificate),
                Need::Bootstrap(_) if awaits_control_plane(cx) => None,
                Need::Bootstrap(_) => Some(Via::BootstrapToken),
            };
            // (no bus call to ask whether kubelet runs: a running one costs one pass of delay)
            let defer = first_on_controller && matches!(phase, Phase::Idle);
            if let (Some(_), true) = (&via, defer) {
                // kubelet-running starts kubelet later in this pass; the request's own work
                // (client, key, connection) would come first on this thread. The next pass
                // makes the request.
                request::defer(&self.state, cx);
            } else if let (Some(via), false) = (via, waiting && !self.running()) {
                let done = request::start(&self.state, cx, via);
                // An auto-approved request (or an unreachable server) ends within the pass; a
                // longer one continues in the background and wakes the daemon when it ends.
                request::await_end(&self.state, done, inline_wait).await;
            }
            self.write_files(cx).await
        }
        .boxed()
    }
}

impl KubeletCredentials {
    /// The files for whatever the node holds now; kubelet restarted when their content changed
    /// (it reads them at start; a mode or label fix does not restart it).
    async fn write_files(&self, cx: &Cx) -> anyhow::Result<()> {
        let (held, _, _) = self.assess(cx);
        let set = files::files(cx, owns(held.as_ref(), cx))?;
        let w = cx.writer();
        let mut changed = false;
        for f in &set.files {
            let d = w.check(f)?;
            changed |= d.missing || d.content;
        }
        // (whether kubelet runs is asked only when it matters: new content, or a restart owed)
        let is_up = || async {
            anyhow::Ok(kubelet_is_up(
                &cx.systemd.brief(KUBELET_UNIT, false).await?.active,
            ))
        };
        let mut up = None;
        if changed {
            let u = is_up().await?;
            if u {
                mark_restart(cx, Why::Credentials)?;
            }
            up = Some(u);
        }
        set.apply(cx)?;
        let pending = restart_pending(cx).await?;
        if pending == Pending::Nothing {
            return Ok(());
        }
        let running = self.running();
        if pending == Pending::Issued && running {
            return Ok(()); // the request is storing what it was issued; its end wakes a pass
        }
        if pending == Pending::Issued && !issued_switched(cx) {
            // The request ended (a crash) before it switched the node's credentials: nothing
            // kubelet reads changed, so no restart is owed for it; the next request that is
            // issued a certificate marks one again.
            cx.writer().remove(std::path::Path::new(RESTART_MARKER))?;
            return Ok(());
        }
        // (a `Done` marker is only removed: whether kubelet runs does not matter to it)
        let up = match up {
            Some(u) => u,
            None if pending == Pending::Done => false,
            None => is_up().await?,
        };
        if up && pending != Pending::Done {
            tracing::info!(
                unit = KUBELET_UNIT,
                "restarting on the node's new credentials"
            );
        }
        finish_restart(cx, pending, up, !running).await
    }

    /// A restart the marker still owes kubelet for its credentials (after a crash, or a
    /// request that ended since), as a change of this step (with kubelet stopped, the change
    /// is the marker's removal: kubelet starts on the files as they are).
    async fn owed_restart(&self, cx: &Cx) -> anyhow::Result<Option<Change>> {
        let owed = match restart_pending(cx).await? {
            Pending::Credentials => true,
            Pending::Issued if !self.running() && !issued_switched(cx) => {
                return Ok(Some(Change::new(
                    "forget the kubelet restart marked for a certificate request",
                    "the request ended before it switched the node's credentials: nothing kubelet reads changed",
                )));
            }
            Pending::Issued => !self.running(),
            _ => false,
        };
        Ok(owed.then(|| {
            Change::new(
                "restart kubelet.service",
                "the node's credentials changed while it runs",
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::files::env_file;
    use std::path::Path;

    #[test]
    fn the_env_file_switches_kubelet_between_standalone_and_the_api() {
        let s = String::from_utf8(env_file(None, true).content).unwrap();
        assert!(
            s.ends_with("KUBELET_KUBECONFIG=\nKUBELET_CONFIG=--config=/etc/kubernetes/kubelet-standalone.yaml\n"),
            "{s}"
        );
        let kc = Path::new("/var/lib/kubelet/kubeconfig");
        for standalone in [true, false] {
            let s = String::from_utf8(env_file(Some(kc), standalone).content).unwrap();
            assert!(s.ends_with("KUBELET_KUBECONFIG=--kubeconfig=/var/lib/kubelet/kubeconfig\nKUBELET_CONFIG=--config=/etc/kubernetes/kubelet.yaml\n"), "{s}");
        }
    }
}
