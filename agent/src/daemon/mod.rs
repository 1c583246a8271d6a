//! nodectld: converges the node, then sleeps until something changes: SIGHUP, a config
//! fragment, an input file it waits for (inotify; no polling), a root `Converge` call over
//! D-Bus, a background request's end, or an hourly resync that repairs drift. `Type=notify`:
//! READY=1 once the first pass is done (converged, or waiting on outside input); STATUS= says
//! what it waits for.
//!
//! `pass`: one pass and its publication; `shared`: what the parts share (and the bus backend);
//! `watcher`: inotify; `reboots`: reboot coordination; `kubelet`: kubelet's state by signal;
//! `metrics`: the textfile for node_exporter; `node_status`: the `NodectlReady`
//! condition on the node's Node.

mod coordination;
mod events;
mod kubelet;
mod metrics;
mod node_status;
mod pass;
mod reboots;
mod shared;
mod verbs;
mod watcher;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use nodectl_units::systemd::{Client, Offline, Systemd};
use sd_notify::NotifyState;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, Mutex};

pub(crate) use shared::Trigger;

use crate::config::Settings;
use crate::dbus::{Agent, BUS_NAME, OBJECT_PATH};
use crate::root::Root;
use crate::status::{self, Daemon, Status};
use pass::{notify, Passes};
use shared::{Shared, State};

/// How nodectld runs.
pub struct Options {
    /// The sysroot (`/` on a node).
    pub root: Root,
    /// Serve `org.nodectl.Agent1` on the system bus (`DBUS_SYSTEM_BUS_ADDRESS` is honoured).
    pub serve_bus: bool,
    /// A pass at least this often (repairs drift).
    pub resync: Duration,
    /// Quiet period after an event before a pass starts, so a burst (a copy in progress, an
    /// editor's save) makes one pass.
    pub debounce: Duration,
}

/// How long after a pass (the first since the last trim) nodectld gives back memory freed by
/// work that outlived the pass. (Its code is not unmapped: that lowered RSS, not the memory the
/// node holds for it, whose pages stay in the page cache charged to the unit; issue 38.)
const LATE_TRIM: Duration = Duration::from_secs(10);

/// The signals that stop nodectld or ask for a pass.
struct Signals {
    hup: Signal,
    term: Signal,
    int: Signal,
}

/// With `kubelet.condition_heartbeat_secs = 0` nothing reports a 401 for the credentials check:
/// it then runs this often (seconds) unless `kubelet.credentials_check_secs` says otherwise.
const CHECK_WITHOUT_REPORTS_SECS: u64 = 900;

/// The daemon's credentials check (a task), and the settings it runs with.
#[derive(Default)]
struct Checks {
    task: Option<(tokio::task::JoinHandle<()>, PathBuf, u64)>,
}

impl Checks {
    /// Runs the check while the settings ask for one (restarted when they change).
    fn follow(&mut self, root: &Root, s: Option<&Settings>, shared: &Arc<Shared>) {
        let want = s.map(|s| {
            let every = match (s.credentials_check_secs, s.condition_heartbeat_secs) {
                // no condition reports, so no 401 from them: a timer finds a refusal instead
                (0, 0) => CHECK_WITHOUT_REPORTS_SECS,
                (every, _) => every,
            };
            (s.kubeconfig.clone(), every)
        });
        if let (Some((task, p, every)), Some((wp, wevery))) = (&self.task, &want) {
            if p == wp && every == wevery && !task.is_finished() {
                return;
            }
        }
        if let Some((task, _, _)) = self.task.take() {
            task.abort();
        }
        if let Some((kubeconfig, every)) = want {
            let wake = shared.wake.clone();
            let task = crate::credentials::check::spawn_checks(
                root.clone(),
                kubeconfig.clone(),
                (every > 0).then(|| Duration::from_secs(every)),
                shared.recheck_credentials.clone(),
                shared.facts.clone(),
                Arc::new(move || {
                    let _ = wake.send(Trigger::Credentials);
                }),
            );
            self.task = Some((task, kubeconfig, every));
            // a check the aborted task was running is asked again (at most one: a permit)
            shared.recheck_credentials.notify_one();
        }
    }
}

/// nodectld's command line (its man page is made of it too: `nodectl-butane shell-docs`).
#[derive(clap::Parser, Debug)]
#[command(
    name = "nodectld",
    version,
    about = "The Kubernetes node agent (runs as the systemd unit nodectld.service)"
)]
pub struct Args {
    /// Root to manage: `/` on a node, a scratch directory in tests.
    #[arg(long, default_value = "/")]
    pub root: std::path::PathBuf,
    /// Do not serve org.nodectl.Agent1 on the system bus.
    #[arg(long)]
    pub no_bus: bool,
    /// Seconds between drift-repair passes when nothing else wakes the agent.
    #[arg(long, default_value_t = 3600)]
    pub resync_secs: u64,
    /// Quiet period (ms) after an event before a pass.
    #[arg(long, default_value_t = 250)]
    pub debounce_ms: u64,
}

/// Runs nodectld until SIGTERM or SIGINT.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    crate::memory::no_huge_pages();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        status: Mutex::new(Status {
            schema_version: status::SCHEMA_VERSION,
            source: "daemon".into(),
            daemon: Daemon {
                running: true,
                state: State::Starting.as_str().into(),
                pid: Some(std::process::id()),
                ..Daemon::default()
            },
            ..Status::default()
        }),
        wake: tx.clone(),
        reboot: std::sync::Mutex::new(None),
        reboot_deferred: Default::default(),
        coordination: Default::default(),
        facts: Default::default(),
        recheck_credentials: Default::default(),
        changed: Default::default(),
        passed: Default::default(),
        settled: Default::default(),
        fleetlock_socket: reboots::passed_socket(),
        bus: Default::default(),
    });
    let conn = serve_bus(&opts, &shared).await?;
    if let Some(c) = &conn {
        let _ = shared.bus.set(c.clone());
    }
    let systemd = systemd(&opts.root, conn.as_ref()).await?;
    // kubelet's state, followed by signal for `nodectl status`.
    let follower = if let Systemd::Bus(client) = &systemd {
        let (client, shared): (Client, _) = (client.clone(), shared.clone());
        Some(tokio::spawn(kubelet::follow(client, shared)))
    } else {
        None
    };
    let passes = Passes {
        root: opts.root.clone(),
        engine: crate::steps::engine(),
        systemd,
        shared: shared.clone(),
    };
    let mut signals = Signals {
        hup: signal(SignalKind::hangup())?,
        term: signal(SignalKind::terminate())?,
        int: signal(SignalKind::interrupt())?,
    };
    let mut watcher = watcher::Watcher::new(shared.settled.clone()).context("inotify")?;
    let keepalive = watchdog_keepalive();
    let reboots = converge_loop(&opts, &passes, &mut watcher, &mut signals, &mut rx).await;
    if let Some(k) = keepalive {
        k.abort();
    }
    notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    shared.set_state(State::Stopping).await;
    tracing::info!("stopping on signal");
    if let Some(f) = follower {
        f.abort();
    }
    if let Some(r) = reboots {
        r.task.abort();
    }
    drop(conn);
    Ok(())
}

/// systemd's watchdog (`WatchdogSec=` in the unit): `WATCHDOG=1` every half period, from this
/// runtime's one thread, the thread passes run on. A pass blocked in a system call (a read that
/// never returns) stops the keep-alive with it, and systemd aborts nodectld ("Watchdog timeout"
/// in the journal, `Result=watchdog`) and starts it again (`Restart=on-failure`). Nothing when
/// the unit asks for no watchdog (tests, `nodectl apply`).
fn watchdog_keepalive() -> Option<tokio::task::JoinHandle<()>> {
    let every = sd_notify::watchdog_enabled()? / 2;
    tracing::debug!("watchdog keep-alive every {} ms", every.as_millis());
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            notify(&[NotifyState::Watchdog]);
        }
    }))
}

/// How often a pass asks again for the pass lock while another process holds it.
const LOCK_RETRY: Duration = Duration::from_millis(100);

/// A pass under the pass lock (`fsio::lock`): never at once with `nodectl apply` or `nodectl
/// audit --fix` (it waits for one under way, the runtime and its watchdog keep-alive going on).
/// A lock that cannot be taken (an unusable `/run/nodectl`) is logged, and the pass runs.
async fn locked_pass(
    passes: &Passes,
    root: &Root,
    loaded: Result<(crate::host::Host, crate::config::Settings), crate::load::LoadError>,
    trigger: Trigger,
    n: u64,
) -> Option<Duration> {
    use crate::fsio::lock::{pass_lock_retrying, PASS_LOCK};
    // (shown as converging from here: `nodectl converge --wait` counts this pass as under way)
    passes.shared.set_state(State::Converging).await;
    let lock = pass_lock_retrying(root, LOCK_RETRY, || {
        tracing::info!(
            "another pass is under way (`nodectl apply`: {PASS_LOCK}); this one waits for it"
        );
        // Ready for systemd meanwhile: that pass may wait for a job ordered after nodectld's
        // start (kubelet's), which would otherwise wait for this one
        notify(&[
            NotifyState::Ready,
            NotifyState::Status("waiting for another pass (nodectl apply) to end"),
        ]);
    })
    .await;
    if let Err(e) = &lock {
        tracing::warn!("the pass lock {PASS_LOCK}: {e}; this pass runs without it");
    }
    passes.run(loaded, trigger, n).await
}

/// Passes until a stop signal; returns the reboot coordination to stop.
async fn converge_loop(
    opts: &Options,
    passes: &Passes,
    watcher: &mut watcher::Watcher,
    signals: &mut Signals,
    rx: &mut mpsc::UnboundedReceiver<Trigger>,
) -> Option<reboots::Reboots> {
    let root = &opts.root;
    let mut trigger = Trigger::Startup;
    let mut reboots = None;
    let mut checks = Checks::default();
    let mut reporter = node_status::Reporter::default();
    // When the late trim is due: LATE_TRIM after the first pass since the last one, so passes
    // coming more often (a request backing off) do not put it off for good.
    let mut trim_at = None;
    for n in 1u64.. {
        // Watches first, so an input arriving while the pass runs still wakes the next one.
        let t = std::time::Instant::now();
        let loaded =
            crate::load::host(root).and_then(|h| crate::load::settings(root, &h).map(|s| (h, s)));
        let load = t.elapsed();
        watcher.update(root, loaded.as_ref().ok().map(|(_, s)| s));
        tracing::debug!(
            target: "nodectl::engine",
            "host and settings loaded in {:.1} ms, watches updated in {:.1} ms",
            load.as_secs_f64() * 1e3,
            (t.elapsed() - load).as_secs_f64() * 1e3
        );
        let settings = loaded.as_ref().ok().map(|(_, s)| s.clone());
        let host = loaded.as_ref().ok().map(|(h, _)| h.clone());
        // A stop signal ends a pass where it is, as a crash would (every write is atomic and
        // the next start converges; the crash campaigns prove it). Waiting for the pass instead
        // can deadlock: a pass that starts kubelet waits for its job, and that job, ordered
        // after nodectld, waits for nodectld's stop job, until systemd's stop timeout (90 s)
        // kills nodectld (seen when kubelet was stopped and a hostname change woke a pass).
        let recheck = tokio::select! {
            r = locked_pass(passes, root, loaded, trigger, n) => r,
            _ = signals.term.recv() => { stopped_mid_pass(trigger, "SIGTERM"); break; }
            _ = signals.int.recv() => { stopped_mid_pass(trigger, "SIGINT"); break; }
        };
        // And again after it: a directory the pass created (the inbox on a fresh node) is
        // watched before anything is delivered into it (provisioning may deliver as soon as
        // nodectld is READY).
        watcher.update(root, settings.as_ref());
        if let Some(s) = &settings {
            reboots =
                reboots::follow_settings(reboots, root, s, &passes.systemd, &passes.shared).await;
        }
        if let (Some(h), Some(s)) = (&host, &settings) {
            warm_labels(root, h, s);
        }
        checks.follow(root, settings.as_ref(), &passes.shared);
        reporter.follow(root, settings.as_ref(), &passes.shared);
        trim_at.get_or_insert_with(|| tokio::time::Instant::now() + LATE_TRIM);
        let Some(t) = next_trigger(opts, recheck, watcher, signals, rx, &mut trim_at).await else {
            break;
        };
        trigger = t;
        tracing::info!(trigger = trigger.name(), "converging");
    }
    if let Some((task, _, _)) = checks.task {
        task.abort();
    }
    reporter.stop();
    reboots
}

/// Says that a stop signal cut a pass short. (The pass is dropped at one of its awaits, a bus
/// call or a wait for a job: its file writes are synchronous, so none is left half-done by
/// this; a temporary file of a step cut short is the next pass's to clean, as after a crash.)
fn stopped_mid_pass(trigger: Trigger, signal: &str) {
    tracing::warn!(
        trigger = trigger.name(),
        "{signal} during a pass ({}): the pass ends where it is; the next start converges",
        trigger.name()
    );
}

/// After a pass that left a controller waiting for its bundle: the default labels that bundle's
/// pass will ask for, looked up now (`steps::warm_labels`), so they are not on the way to
/// kubelet's start; the memory the lookups freed goes back at once.
fn warm_labels(
    root: &crate::root::Root,
    host: &crate::host::Host,
    settings: &crate::config::Settings,
) {
    let t = std::time::Instant::now();
    let labeler = nodectl_selinux::Labeler::new(root.dir(), &host.selinux);
    let opened = crate::steps::warm_labels(root, settings, &labeler);
    drop(labeler);
    if !opened.is_empty() {
        crate::memory::release_freed();
        tracing::info!(
            "default labels of a controller's bundle looked up ahead in {:.1} ms ({})",
            t.elapsed().as_secs_f64() * 1e3,
            pass::prefixes(&opened)
        );
    }
}

/// Waits for the next reason to run, without polling, then lets a burst settle (more events in
/// the debounce window fold into this pass). At `trim_at`, gives back what work that outlived a
/// pass freed. `None`: stop.
async fn next_trigger(
    opts: &Options,
    recheck: Option<Duration>,
    watcher: &mut watcher::Watcher,
    signals: &mut Signals,
    rx: &mut mpsc::UnboundedReceiver<Trigger>,
    trim_at: &mut Option<tokio::time::Instant>,
) -> Option<Trigger> {
    let resync_at = tokio::time::Instant::now() + recheck.unwrap_or(opts.resync);
    let next = loop {
        tokio::select! {
            t = rx.recv() => break t,
            t = watcher.next() => break Some(t),
            _ = signals.hup.recv() => break Some(Trigger::Sighup),
            _ = tokio::time::sleep_until(resync_at) => {
                break Some(if recheck.is_some() { Trigger::Recheck } else { Trigger::Resync })
            }
            _ = signals.term.recv() => break None,
            _ = signals.int.recv() => break None,
            _ = tokio::time::sleep_until(trim_at.unwrap_or(resync_at)), if trim_at.is_some() => {
                crate::memory::release_freed();
                tracing::debug!("idle: freed memory given back");
                *trim_at = None;
            }
        }
    };
    let t = next?;
    // A bundle the kernel says is complete is placed at once (issue 18: arrival -> kubelet);
    // anything else waits out the debounce window, so a burst makes one pass.
    let debounce = if watcher.take_complete() {
        Duration::ZERO
    } else {
        opts.debounce
    };
    let deadline = tokio::time::Instant::now() + debounce;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            _ = rx.recv() => {},
            _ = watcher.next() => {},
        }
    }
    Some(t)
}

/// Owns `org.nodectl.Agent1` on the system bus, when asked to.
async fn serve_bus(
    opts: &Options,
    shared: &Arc<Shared>,
) -> anyhow::Result<Option<zbus::Connection>> {
    if !opts.serve_bus {
        return Ok(None);
    }
    let agent = Agent {
        backend: shared.clone(),
    };
    let conn = zbus::connection::Builder::system()
        .name(BUS_NAME)
        .serve_at(OBJECT_PATH, agent)
        .build()
        .await
        .with_context(|| format!("connecting to the system bus as {BUS_NAME}"))?;
    Ok(Some(conn))
}

/// systemd over the bus on a node; the offline stand-in under a scratch root.
async fn systemd(root: &Root, conn: Option<&zbus::Connection>) -> anyhow::Result<Systemd> {
    if !root.is_host() {
        tracing::info!(root = %root.dir().display(), "scratch root: systemd calls are recorded in {}", Offline::STATE_FILE);
        return Ok(Systemd::Offline(Offline::new(root.dir())));
    }
    let conn = match conn {
        Some(c) => c.clone(),
        None => zbus::Connection::system()
            .await
            .context("connecting to the system bus")?,
    };
    Ok(Systemd::Bus(Client::from_connection(conn).await?))
}
