//! What every step sees: the root, the host, the settings, the labeler and systemd.

use nodectl_selinux::Labeler;
use nodectl_units::systemd::Systemd;

use crate::config::Settings;
use crate::credentials::check::Facts;
use crate::fsio::Writer;
use crate::host::Host;
use crate::root::Root;

/// Wakes the daemon for another pass.
pub type Waker = std::sync::Arc<dyn Fn() + Send + Sync>;

/// The context of one pass.
pub struct Cx {
    /// The sysroot every path goes through.
    pub root: Root,
    /// The host's OS and SELinux state.
    pub host: Host,
    /// The validated settings.
    pub settings: Settings,
    /// Labels files (a no-op where SELinux is absent or under a scratch root).
    pub labeler: Labeler,
    /// systemd over D-Bus, or the offline stand-in under a scratch root.
    pub systemd: Systemd,
    /// The pass was asked for by an operator (`nodectl converge`, SIGHUP, `nodectl apply`):
    /// steps retry now what they would otherwise leave to a backoff.
    pub forced: bool,
    /// When this pass began.
    pub started: std::time::SystemTime,
    /// How long a step may wait within the pass for work it started in the background.
    pub inline_wait: std::time::Duration,
    /// Wakes the daemon for another pass (background work that ended); none outside the daemon.
    pub waker: Option<Waker>,
    /// nodectld's first pass, before READY=1: nodectld.service is still starting, and
    /// kubelet.service is ordered after it, so a kubelet start or restart is queued, not waited
    /// for (it runs as soon as this pass ends).
    pub activating: bool,
    /// What the daemon learnt about the node's certificate between passes (a 401 from the
    /// API server); shared across passes.
    pub facts: std::sync::Arc<Facts>,
    /// Files the kernel said are complete (closed after writing, renamed in), from the
    /// daemon's inotify watches; empty outside the daemon (the age rule applies then).
    pub settled: std::sync::Arc<crate::util::settled::Settled>,
    /// Directory fsyncs after this pass's renames, finishing in the background; the engine
    /// waits for them at the pass's end (`fsio::deferred`).
    pub deferred: crate::fsio::Deferred,
    /// Set by a step that waits for something to settle (a bundle still being written): the
    /// daemon runs another pass after this long even without an event.
    recheck: std::sync::Mutex<Option<std::time::Duration>>,
    /// Set by [`super::Engine::apply`], unset by [`super::Engine::plan`]: the observes are a
    /// pass's, each followed by its step's apply, so a step may name a change whole where its
    /// apply compares and reports file by file anyway (`secrets`); a plan lists every file.
    pub applying: std::sync::atomic::AtomicBool,
}

impl Cx {
    /// A pass's context with the defaults of a one-off pass (`nodectl apply`).
    pub fn new(root: Root, host: Host, settings: Settings, systemd: Systemd) -> Self {
        let labeler = Labeler::new(root.dir(), &host.selinux);
        Cx {
            root,
            host,
            settings,
            labeler,
            systemd,
            forced: false,
            started: std::time::SystemTime::now(),
            inline_wait: std::time::Duration::from_secs(5),
            waker: None,
            activating: false,
            facts: Default::default(),
            settled: Default::default(),
            deferred: Default::default(),
            recheck: std::sync::Mutex::new(None),
            applying: Default::default(),
        }
    }

    /// Asks for another pass within `d` (the shortest request wins).
    pub fn recheck_in(&self, d: std::time::Duration) {
        let mut r = self.recheck.lock().expect("recheck lock");
        *r = Some(r.map_or(d, |x| x.min(d)));
    }

    /// The shortest recheck asked for in this pass, cleared.
    pub fn take_recheck(&self) -> Option<std::time::Duration> {
        self.recheck.lock().expect("recheck lock").take()
    }

    /// In an apply pass (see [`Cx::applying`]), not a plan.
    pub fn applying(&self) -> bool {
        self.applying.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The one atomic write, with this pass's labeler.
    pub fn writer(&self) -> Writer<'_> {
        Writer::new(&self.root, &self.labeler).deferring(&self.deferred)
    }
}

#[cfg(test)]
impl Cx {
    /// A worker's pass on a fresh scratch root, systemd offline (unit tests).
    pub(crate) fn scratch() -> (tempfile::TempDir, Cx) {
        let d = tempfile::tempdir().expect("a scratch root");
        let root = crate::root::Root::new(d.path());
        let host = crate::host::Host::generic();
        let settings =
            crate::config::Settings::from_toml("[node]\nrole = \"worker\"\n", &host, "n1");
        let sd = nodectl_units::systemd::Systemd::Offline(nodectl_units::systemd::Offline::new(
            d.path(),
        ));
        (d, Cx::new(root, host, settings, sd))
    }
}
