//! The `kubelet-credentials` step: the node's own client certificate, requested with the
//! bootstrap token when the node has none (or it expired, or the server refuses it), renewed
//! with the node's certificate and a fresh key at a jittered 70-90% of its lifetime, and the
//! node kubeconfig kubelet uses.
//!
//! Requests run in the background: a pass starts one, waits a moment for it (an auto-approved
//! request finishes within the pass), and otherwise reports what it waits for; the request
//! wakes the daemon when it ends. Failures back off: an unreachable or failing server with a
//! capped exponential backoff with jitter; a denied or failed request for an hour, or until an
//! operator acts (`nodectl converge`, SIGHUP, a new bootstrap kubeconfig).
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
//! In the daemon, the API server is asked every `kubelet.credentials_check_secs` whether it
//! still accepts the node's certificate, so a revoked one (or a rotated cluster CA) sends the
//! node back to the bootstrap token within that time, not at the next renewal.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use nodectl_units::kubelet::KUBELET_UNIT;

use crate::bootstrap::{Bootstrap, BootstrapError, Via};
use crate::config::Role;
use crate::context::Cx;
use crate::credentials::{self, Validity};
use crate::engine::{Change, Observation, Step};
use crate::fsio::{FileSpec, Writer};
use crate::steps::FileSet;

/// kubelet.service's `EnvironmentFile=`: `KUBELET_KUBECONFIG` holds `--kubeconfig=...` once the
/// node has its own credentials, nothing before (standalone: static pods only).
pub const KUBELET_ENV: &str = "/etc/kubernetes/kubelet.env";
/// How long a request waits for approval and issuance (kubelet: an hour).
pub const APPROVAL_WAIT: Duration = Duration::from_secs(3600);
/// After a denied or failed request: how long before asking again by itself.
pub const REFUSED_BACKOFF: Duration = Duration::from_secs(3600);
/// Unreachable or failing server: first delay, factor 2, this cap, +-20% jitter.
pub const BACKOFF_BASE: Duration = Duration::from_secs(2);
pub const BACKOFF_CAP: Duration = Duration::from_secs(64);

/// The node's current certificate, as read from disk.
#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    pub subject: String,
    pub validity: Validity,
    /// The rotation deadline: a jitter drawn from the certificate itself, so every pass (and
    /// `nodectl status`) computes the same instant, and nodes issued together spread out.
    pub rotate_at: SystemTime,
}

/// Reads `kubelet-client-current.pem`. `Ok(None)` when there is none; an unreadable or garbled
/// file is an error naming it.
pub fn held(root: &crate::root::Root) -> anyhow::Result<Option<Held>> {
    let Some(pem) = credentials::current(root)? else {
        return Ok(None);
    };
    let path = Path::new(credentials::CERT_DIR).join(credentials::CURRENT);
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem)
        .map_err(|e| anyhow::anyhow!("{}: not a PEM certificate: {e}", path.display()))?;
    let cert = block
        .parse_x509()
        .map_err(|e| anyhow::anyhow!("{}: not an X.509 certificate: {e}", path.display()))?;
    let validity = credentials::validity(&pem)?;
    let subject = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let digest = ring::digest::digest(&ring::digest::SHA256, &block.contents);
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest.as_ref()[..8]);
    let jitter = (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64;
    Ok(Some(Held {
        subject,
        rotate_at: validity.rotation_deadline(jitter),
        validity,
    }))
}

/// What the node's certificate needs (pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    Nothing,
    /// A request with the bootstrap token, and why.
    Bootstrap(String),
    /// A renewal with the node's certificate, and why.
    Rotate(String),
}

pub fn need(held: Option<&Held>, node_name: &str, refused: bool, now: SystemTime) -> Need {
    let Some(h) = held else {
        return Need::Bootstrap("the node has no client certificate".into());
    };
    let want = format!("system:node:{node_name}");
    if h.subject != want {
        return Need::Bootstrap(format!(
            "the certificate is for {:?}, not {want:?}",
            h.subject
        ));
    }
    if h.validity.expired(now) {
        return Need::Bootstrap(format!(
            "the certificate expired at {}",
            crate::util::time::rfc3339(h.validity.not_after)
        ));
    }
    if refused {
        return Need::Bootstrap("the API server refused the node's certificate (401)".into());
    }
    if now >= h.rotate_at {
        return Need::Rotate(format!(
            "past its rotation time {} (expires {})",
            crate::util::time::rfc3339(h.rotate_at),
            crate::util::time::rfc3339(h.validity.not_after)
        ));
    }
    Need::Nothing
}

/// Capped exponential backoff with +-20% jitter; `attempt` counts from 1.
pub fn backoff(attempt: u32, jitter01: f64) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    exp.min(BACKOFF_CAP)
        .mul_f64(0.8 + 0.4 * jitter01.clamp(0.0, 1.0))
}

#[derive(Clone, Debug, Default)]
enum Phase {
    #[default]
    Idle,
    Running {
        via: Via,
        request: Option<String>,
        since: SystemTime,
    },
    /// The server was unreachable or failed; retry at `until`.
    Backoff {
        attempt: u32,
        since: SystemTime,
        until: SystemTime,
        reason: String,
    },
    /// Denied or failed by the cluster; retry at `until` or when the operator acts.
    Refused {
        since: SystemTime,
        until: SystemTime,
        reason: String,
        bootstrap_kubeconfig: Option<Vec<u8>>,
    },
}

#[derive(Default)]
struct State {
    phase: Phase,
    /// The server answered 401 to the node's certificate: next request with the bootstrap token.
    revoked: bool,
    /// Counts failed attempts in a row (backoff).
    failures: u32,
    /// When the last check that the server accepts the node's certificate began, and whether
    /// one runs now.
    checked: Option<SystemTime>,
    checking: bool,
    done: Option<tokio::sync::watch::Receiver<bool>>,
}

/// The step; its state lives across passes (the daemon keeps one engine).
#[derive(Default)]
pub struct KubeletCredentials {
    state: Arc<Mutex<State>>,
}

fn env_file(with_kubeconfig: Option<&Path>) -> FileSpec {
    let value = with_kubeconfig.map_or(String::new(), |p| format!("--kubeconfig={}", p.display()));
    FileSpec::new(
        KUBELET_ENV,
        format!(
            "{}: kubelet's API credentials (empty: standalone, no node certificate yet).\nKUBELET_KUBECONFIG={value}\n",
            crate::steps::MANAGED_HEADER
        ),
        0o644,
    )
}

/// The node kubeconfig the current certificate calls for: server and CA from the bootstrap
/// kubeconfig when present, else from the node kubeconfig already written.
fn kubeconfig_file(cx: &Cx) -> anyhow::Result<Option<FileSpec>> {
    let s = &cx.settings;
    let source = [&s.bootstrap_kubeconfig, &s.kubeconfig]
        .into_iter()
        .find(|p| cx.root.path(p).is_file());
    let Some(source) = source else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(cx.root.path(source))?;
    let kc = crate::kubeconfig::parse(&text, source)?;
    let server = crate::kubeconfig::cluster(&kc, source)?
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .ok_or_else(|| anyhow::anyhow!("{}: the cluster has no server", source.display()))?;
    let ca = crate::kubeconfig::cluster_ca(&cx.root, source)?;
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

impl KubeletCredentials {
    /// The files this pass should hold: with the node kubeconfig once the node holds a
    /// certificate of its own (`own`), standalone before.
    fn files(cx: &Cx, own: bool) -> anyhow::Result<FileSet> {
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
        let env = env_file(api);
        let label = crate::steps::managed_label(cx, &env.path);
        files.push(FileSpec { label, ..env });
        Ok(FileSet {
            files,
            ..FileSet::default()
        })
    }

    fn bootstrap_kubeconfig_bytes(cx: &Cx) -> Option<Vec<u8>> {
        std::fs::read(cx.root.path(&cx.settings.bootstrap_kubeconfig)).ok()
    }

    /// What to do about the certificate now, given the phase (the part of observe that decides).
    fn assess(&self, cx: &Cx) -> anyhow::Result<(Option<Held>, Need, Phase)> {
        let held = match held(&cx.root) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("{e:#}; requesting a new certificate");
                None
            }
        };
        let st = self.state.lock().expect("credentials state");
        let now = SystemTime::now();
        let need = need(held.as_ref(), &cx.settings.node_name, st.revoked, now);
        Ok((held, need, st.phase.clone()))
    }

    fn running(&self) -> bool {
        matches!(
            self.state.lock().expect("credentials state").phase,
            Phase::Running { .. }
        )
    }

    /// Starts a request in the background unless one runs; returns a receiver that turns true
    /// when it ends.
    fn start(&self, cx: &Cx, via: Via) -> tokio::sync::watch::Receiver<bool> {
        let mut st = self.state.lock().expect("credentials state");
        if let (Phase::Running { .. }, Some(rx)) = (&st.phase, &st.done) {
            return rx.clone();
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        st.phase = Phase::Running {
            via,
            request: None,
            since: SystemTime::now(),
        };
        st.done = Some(rx.clone());
        drop(st);
        let state = self.state.clone();
        let root = cx.root.clone();
        let selinux = cx.host.selinux.clone();
        let settings = cx.settings.clone();
        let waker = cx.waker.clone();
        let bk = Self::bootstrap_kubeconfig_bytes(cx);
        tracing::info!(via = %via, node = %settings.node_name, "requesting a node client certificate");
        tokio::spawn(async move {
            let labeler = nodectl_selinux::Labeler::new(root.dir(), &selinux);
            let writer = Writer::new(&root, &labeler);
            let on_request = {
                let state = state.clone();
                move |name: &str| {
                    tracing::info!(request = name, "waiting for approval and issuance");
                    if let Phase::Running { request, .. } =
                        &mut state.lock().expect("credentials state").phase
                    {
                        *request = Some(name.to_string());
                    }
                }
            };
            // kubelet reads its credentials at start: restart it on the new ones. The marker is
            // written once the certificate is issued, before it is stored, so a crash before
            // the restart still restarts kubelet on the next pass.
            let on_issued = || {
                if let Err(e) =
                    writer.write(&FileSpec::new(crate::steps::RESTART_MARKER, "", 0o600))
                {
                    tracing::warn!("recording the pending kubelet restart: {e}");
                }
            };
            let run = |via| Bootstrap {
                writer: &writer,
                via,
                node_name: &settings.node_name,
                bootstrap_kubeconfig: &settings.bootstrap_kubeconfig,
                kubeconfig: &settings.kubeconfig,
                wait: APPROVAL_WAIT,
                on_request: Some(&on_request),
                on_issued: Some(&on_issued),
            };
            let mut result = run(via).run().await;
            if let (Via::NodeCertificate, Err(BootstrapError::Unauthorized { .. })) = (via, &result)
            {
                tracing::warn!(
                    "the API server refused the node's certificate (401); requesting one with the bootstrap token"
                );
                state.lock().expect("credentials state").revoked = true;
                result = run(Via::BootstrapToken).run().await;
            }
            let mut st = state.lock().expect("credentials state");
            let now = SystemTime::now();
            match result {
                Ok(issued) => {
                    tracing::info!(
                        request = %issued.request,
                        not_after = %crate::util::time::rfc3339(issued.validity.not_after),
                        "node client certificate issued and written"
                    );
                    st.phase = Phase::Idle;
                    st.failures = 0;
                    st.revoked = false;
                }
                Err(e @ (BootstrapError::Denied { .. } | BootstrapError::Failed { .. })) => {
                    let reason = e.to_string();
                    tracing::error!(
                        "{reason}; not asking again before {} unless an operator acts (nodectl converge)",
                        crate::util::time::rfc3339(now + REFUSED_BACKOFF)
                    );
                    st.phase = Phase::Refused {
                        since: now,
                        until: now + REFUSED_BACKOFF,
                        reason,
                        bootstrap_kubeconfig: bk,
                    };
                }
                Err(e) => {
                    st.failures += 1;
                    let delay = backoff(st.failures, crate::util::jitter());
                    let reason = e.to_string();
                    tracing::warn!(
                        attempt = st.failures,
                        retry_in_s = delay.as_secs_f64(),
                        "{reason}; retrying in {:.0} s",
                        delay.as_secs_f64()
                    );
                    st.phase = Phase::Backoff {
                        attempt: st.failures,
                        since: now,
                        until: now + delay,
                        reason,
                    };
                }
            }
            drop(st);
            drop(labeler);
            crate::memory::release_freed();
            let _ = tx.send(true);
            if let Some(w) = waker {
                w();
            }
        });
        rx
    }
}

impl KubeletCredentials {
    /// In the daemon, every `kubelet.credentials_check_secs`: asks the API server, with the
    /// node's kubeconfig, who the node is (a SelfSubjectReview, which every authenticated user
    /// may create). A 401 (the certificate revoked, its CA rotated away) marks the certificate
    /// refused and wakes the daemon, whose next pass requests one with the bootstrap token;
    /// an unreachable server changes nothing. Returns how long until the next check is due.
    fn check(&self, cx: &Cx) -> Option<Duration> {
        let every = Duration::from_secs(cx.settings.credentials_check_secs);
        let waker = cx.waker.clone()?;
        if every.is_zero() || !cx.root.path(&cx.settings.kubeconfig).is_file() {
            return None;
        }
        let mut st = self.state.lock().expect("credentials state");
        let now = SystemTime::now();
        let due = st.checked.map_or(now, |t| t + every);
        if st.checking || now < due {
            return Some(left(due));
        }
        st.checked = Some(now);
        st.checking = true;
        drop(st);
        let state = self.state.clone();
        let root = cx.root.clone();
        let kubeconfig = cx.settings.kubeconfig.clone();
        tokio::spawn(async move {
            let verdict =
                tokio::time::timeout(Duration::from_secs(30), accepted(&root, &kubeconfig))
                    .await
                    .unwrap_or_else(|_| Err("no answer within 30 s".into()));
            crate::memory::release_freed();
            let mut st = state.lock().expect("credentials state");
            st.checking = false;
            match verdict {
                Ok(Some(user)) => tracing::debug!(%user, "the API server accepts the node's certificate"),
                Ok(None) => {
                    tracing::warn!(
                        "the API server refused the node's certificate (401); requesting one with the bootstrap token"
                    );
                    st.revoked = true;
                    drop(st);
                    waker();
                }
                Err(e) => tracing::info!(
                    "could not check the node's certificate with the API server ({e}); next check in {} s",
                    every.as_secs()
                ),
            }
        });
        Some(every)
    }
}

/// Whether the API server accepts the node kubeconfig's certificate: `Some(username)`, or
/// `None` for a 401.
async fn accepted(root: &crate::root::Root, kubeconfig: &Path) -> Result<Option<String>, String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let conn = crate::kubeconfig::connect(root, kubeconfig, true)
        .await
        .map_err(|e| e.to_string())?;
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
        Err(e) => Err(format!("{}: {e}", conn.server)),
    }
}

/// The node holds a certificate of its own (expired or refused included): kubelet keeps its
/// kubeconfig. Standalone, kubelet would stop every pod the API server gave it; with the old
/// certificate it keeps them running (and static pods run either way) until the new one comes.
fn owns(held: Option<&Held>, cx: &Cx) -> bool {
    held.is_some_and(|h| h.subject == format!("system:node:{}", cx.settings.node_name))
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

impl Phase {
    /// No new request now: one runs, a backoff has time left, or a refusal stands (no operator
    /// action, no new bootstrap kubeconfig, its hour not over).
    fn holds_off(&self, cx: &Cx) -> bool {
        match self {
            Phase::Running { .. } => true,
            Phase::Backoff { since, until, .. } => {
                !overridden(cx, *since) && left(*until) > Duration::ZERO
            }
            Phase::Refused {
                since,
                until,
                bootstrap_kubeconfig,
                ..
            } => {
                !overridden(cx, *since)
                    && left(*until) > Duration::ZERO
                    && *bootstrap_kubeconfig == KubeletCredentials::bootstrap_kubeconfig_bytes(cx)
            }
            Phase::Idle => false,
        }
    }
}

/// An operator's pass overrides a backoff set before it began (not one its own attempt set).
fn overridden(cx: &Cx, since: SystemTime) -> bool {
    cx.forced && since < cx.started
}

fn left(until: SystemTime) -> Duration {
    until
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
}

impl Step for KubeletCredentials {
    fn id(&self) -> &'static str {
        "kubelet-credentials"
    }
    fn description(&self) -> &'static str {
        "the node's own client certificate (TLS bootstrap, rotation) and kubelet's kubeconfig"
    }
    fn deps(&self) -> &'static [&'static str] {
        &["bootstrap-kubeconfig"]
    }
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
        async move {
            let (held, need, phase) = self.assess(cx)?;
            let mut changes = Self::files(cx, owns(held.as_ref(), cx))?.changes(cx)?;
            let controller = cx.settings.role == Role::Controller;
            let activity = match &phase {
                Phase::Running {
                    via,
                    request: Some(r),
                    since,
                } => Some(format!(
                    "certificate request {r} ({via}) pending approval since {}",
                    crate::util::time::rfc3339(*since)
                )),
                Phase::Running { via, .. } => Some(format!("requesting a certificate ({via})")),
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
            };
            if let Phase::Refused { until, reason, .. } = &phase {
                if phase.holds_off(cx) && !matches!(need, Need::Nothing) {
                    cx.recheck_in(left(*until));
                    anyhow::bail!(
                        "{reason} (next request at {}, or after `nodectl converge`, SIGHUP or a new {})",
                        crate::util::time::rfc3339(*until),
                        cx.settings.bootstrap_kubeconfig.display()
                    );
                }
            }
            let expiry = |h: &Held| {
                format!(
                    "{} valid until {}, rotation at {}",
                    h.subject,
                    crate::util::time::rfc3339(h.validity.not_after),
                    crate::util::time::rfc3339(h.rotate_at)
                )
            };
            match (&need, activity) {
                (Need::Nothing, _) => {
                    if let Some(h) = &held {
                        cx.recheck_in(left(h.rotate_at).max(Duration::from_secs(1)));
                        if let Some(next) = self.check(cx) {
                            cx.recheck_in(next.max(Duration::from_secs(1)));
                        }
                    }
                }
                (Need::Rotate(_), Some(a)) => {
                    if changes.is_empty() {
                        let h = held.as_ref().expect("a rotation has a certificate");
                        return Ok(Observation::Converged(format!("{}; renewing: {a}", expiry(h))));
                    }
                }
                (Need::Rotate(_), None) if issued_since(cx, cx.started) => {
                    // Issued in this very pass (a short-lived certificate): renew in the next.
                    cx.recheck_in(Duration::from_secs(1));
                    let h = held.as_ref().expect("a rotation has a certificate");
                    return Ok(Observation::Converged(format!(
                        "{}; renewal due, in the next pass",
                        expiry(h)
                    )));
                }
                (Need::Rotate(why), None) => {
                    changes.push(Change::new("renew the node's certificate with a fresh key", why))
                }
                (Need::Bootstrap(_), Some(a)) => {
                    // A controller's kubelet runs standalone meanwhile (its static pods serve
                    // the API this request goes to).
                    if controller && changes.is_empty() {
                        return Ok(Observation::Converged(format!(
                            "kubelet standalone until the node's certificate is issued; {a}"
                        )));
                    }
                    if changes.is_empty() {
                        return Ok(Observation::Waiting(a));
                    }
                }
                (Need::Bootstrap(why), None) => changes.push(Change::new(
                    "request the node's client certificate with the bootstrap token",
                    why,
                )),
            }
            Ok(if changes.is_empty() {
                Observation::Converged(held.as_ref().map(expiry).unwrap_or_default())
            } else {
                Observation::Changes(changes)
            })
        }
        .boxed()
    }
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let (_, need, phase) = self.assess(cx)?;
            let waiting = phase.holds_off(cx);
            let via = match need {
                Need::Nothing => None,
                Need::Rotate(_) => Some(Via::NodeCertificate),
                Need::Bootstrap(_) => Some(Via::BootstrapToken),
            };
            if let (Some(via), false) = (via, waiting && !self.running()) {
                let mut done = self.start(cx, via);
                // An auto-approved request ends within the pass; a longer one continues in the
                // background and wakes the daemon when it ends.
                let _ = tokio::time::timeout(cx.inline_wait, done.wait_for(|d| *d)).await;
            }
            // The files for whatever the node holds now.
            let (held, _, _) = self.assess(cx)?;
            // kubelet reads these at start: a content change restarts it, a mode or label fix
            // does not.
            let set = Self::files(cx, owns(held.as_ref(), cx))?;
            let w = cx.writer();
            let mut changed = false;
            for f in &set.files {
                let d = w.check(f)?;
                changed |= d.missing || d.content;
            }
            set.apply(cx)?;
            let marker = cx.root.path(crate::steps::RESTART_MARKER);
            if changed || marker.exists() {
                let st = cx.systemd.state(KUBELET_UNIT).await?;
                if crate::steps::kubelet_is_up(&st.active) {
                    tracing::info!(
                        unit = KUBELET_UNIT,
                        "restarting on the node's new credentials"
                    );
                    crate::steps::start_kubelet(cx, true).await?;
                }
                if marker.exists() && !self.running() {
                    cx.writer()
                        .remove(Path::new(crate::steps::RESTART_MARKER))?;
                }
            }
            Ok(())
        }
        .boxed()
    }
}

/// The node's certificate, read from disk (`None` when absent or unreadable).
pub fn read(root: &crate::root::Root) -> Option<Held> {
    held(root).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_for(subject: &str, from: u64, to: u64) -> Held {
        let v = Validity {
            not_before: SystemTime::UNIX_EPOCH + Duration::from_secs(from),
            not_after: SystemTime::UNIX_EPOCH + Duration::from_secs(to),
        };
        Held {
            subject: subject.into(),
            rotate_at: v.rotation_deadline(0.5),
            validity: v,
        }
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn what_the_certificate_needs() {
        let h = held_for("system:node:n1", 1000, 2000);
        assert_eq!(need(Some(&h), "n1", false, at(1500)), Need::Nothing);
        assert!(matches!(
            need(None, "n1", false, at(1500)),
            Need::Bootstrap(_)
        ));
        // 70-90% with jitter 0.5: 80% = 1800.
        assert!(matches!(
            need(Some(&h), "n1", false, at(1800)),
            Need::Rotate(_)
        ));
        assert_eq!(need(Some(&h), "n1", false, at(1799)), Need::Nothing);
        let Need::Bootstrap(why) = need(Some(&h), "n1", false, at(2000)) else {
            panic!()
        };
        assert!(why.contains("expired"), "{why}");
        let Need::Bootstrap(why) = need(Some(&h), "n1", true, at(1500)) else {
            panic!()
        };
        assert!(why.contains("401"), "{why}");
        let Need::Bootstrap(why) = need(Some(&h), "n2", false, at(1500)) else {
            panic!()
        };
        assert!(why.contains("system:node:n2"), "{why}");
    }

    #[test]
    fn backoff_doubles_to_a_cap_with_jitter() {
        assert_eq!(backoff(1, 0.5), Duration::from_secs(2));
        assert_eq!(backoff(2, 0.5), Duration::from_secs(4));
        assert_eq!(backoff(6, 0.5), Duration::from_secs(64));
        assert_eq!(backoff(40, 0.5), BACKOFF_CAP);
        assert!(backoff(3, 0.0) < backoff(3, 1.0));
        assert_eq!(backoff(3, 0.0), Duration::from_secs(8).mul_f64(0.8));
        assert_eq!(backoff(40, 1.0), BACKOFF_CAP.mul_f64(1.2));
    }

    #[test]
    fn the_env_file_switches_kubelet_between_standalone_and_the_api() {
        let s = String::from_utf8(env_file(None).content).unwrap();
        assert!(s.ends_with("KUBELET_KUBECONFIG=\n"), "{s}");
        let s = String::from_utf8(env_file(Some(Path::new("/var/lib/kubelet/kubeconfig"))).content)
            .unwrap();
        assert!(s.ends_with("KUBELET_KUBECONFIG=--kubeconfig=/var/lib/kubelet/kubeconfig\n"));
    }
}
