//! nodectld: converges the node, then sleeps until something changes: SIGHUP, a config
//! fragment, an input file it waits for (inotify; no polling), a root `Converge` call over
//! D-Bus, or an hourly resync that repairs drift. `Type=notify`: READY=1 once the first pass is
//! done (converged, or waiting on outside input); STATUS= says what it waits for.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nodectl_units::systemd::{Client, Offline, Systemd};
use sd_notify::NotifyState;
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, Mutex};

use crate::config::{self, Settings};
use crate::engine::Cx;
use crate::dbus::{Agent, Shared, Trigger, BUS_NAME, OBJECT_PATH};
use crate::engine::StepState;
use crate::root::Root;
use crate::status::{self, Daemon, HostStatus, Pass, Status};
use crate::{load, steps};

pub struct Options {
    pub root: Root,
    /// Serve `org.nodectl.Agent1` on the system bus (`DBUS_SYSTEM_BUS_ADDRESS` is honoured).
    pub serve_bus: bool,
    pub resync: Duration,
    /// Quiet period after an event before a pass starts, so a burst (a copy in progress, an
    /// editor's save) makes one pass.
    pub debounce: Duration,
}

fn notify(states: &[NotifyState]) {
    // Outside systemd there is no NOTIFY_SOCKET; sd_notify then does nothing.
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify");
    }
}

pub async fn run(opts: Options) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        status: Mutex::new(Status {
            schema_version: status::SCHEMA_VERSION,
            source: "daemon".into(),
            daemon: Daemon {
                running: true,
                state: "starting".into(),
                pid: Some(std::process::id()),
                ..Daemon::default()
            },
            ..Status::default()
        }),
        wake: tx.clone(),
        reboot: std::sync::Mutex::new(None),
        reboot_deferred: Default::default(),
    });

    let conn = if opts.serve_bus {
        let conn = zbus::connection::Builder::system()
            .name(BUS_NAME)
            .serve_at(
                OBJECT_PATH,
                Agent {
                    shared: shared.clone(),
                },
            )
            .build()
            .await
            .with_context(|| format!("connecting to the system bus as {BUS_NAME}"))?;
        Some(conn)
    } else {
        None
    };

    let systemd = if opts.root.is_host() {
        let conn = match &conn {
            Some(c) => c.clone(),
            None => zbus::Connection::system()
                .await
                .context("connecting to the system bus")?,
        };
        Systemd::Bus(Client::from_connection(conn).await?)
    } else {
        tracing::info!(root = %opts.root.dir().display(), "scratch root: systemd calls are recorded in {}", Offline::STATE_FILE);
        Systemd::Offline(Offline::new(opts.root.dir()))
    };

    // kubelet's state, followed by signal for `nodectl status`.
    let follower = if let Systemd::Bus(client) = &systemd {
        let (client, shared) = (client.clone(), shared.clone());
        Some(tokio::spawn(
            async move { follow_kubelet(client, shared).await },
        ))
    } else {
        None
    };
    let mut watcher = Watcher::new().context("inotify")?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let engine = steps::engine();

    let mut trigger = Trigger::Startup;
    let mut reboots: Option<Reboots> = None;
    let mut passes = 0u64;
    loop {
        passes += 1;
        // Watches first, so an input arriving while the pass runs still wakes the next one.
        let loaded =
            load::host(&opts.root).and_then(|h| load::settings(&opts.root, &h).map(|s| (h, s)));
        watcher.update(&opts.root, loaded.as_ref().ok().map(|(_, s)| s));
        let settings = loaded.as_ref().ok().map(|(_, s)| s.clone());
        let recheck = pass(
            &opts.root, loaded, &engine, &systemd, &shared, trigger, passes,
        )
        .await;
        if let Some(s) = &settings {
            reboots = follow_reboot_settings(reboots, &opts.root, s, &systemd, &shared).await;
        }
        // Wait for the next reason to run, without polling. Once, a few seconds after the pass,
        // give back what work that outlived it freed (a certificate check, status calls).
        let resync_at = tokio::time::Instant::now() + recheck.unwrap_or(opts.resync);
        let mut trim_at = Some(tokio::time::Instant::now() + LATE_TRIM);
        let next = loop {
            tokio::select! {
                t = rx.recv() => break t,
                t = watcher.next() => break Some(t),
                _ = sighup.recv() => break Some(Trigger::Sighup),
                _ = tokio::time::sleep_until(resync_at) => break Some(Trigger::Resync),
                _ = sigterm.recv() => break None,
                _ = sigint.recv() => break None,
                _ = tokio::time::sleep_until(trim_at.unwrap_or(resync_at)), if trim_at.is_some() => {
                    crate::memory::release_freed();
                    trim_at = None;
                }
            }
        };
        let Some(t) = next else { break };
        trigger = t;
        // Let a burst settle; more events in the window fold into this pass.
        let deadline = tokio::time::Instant::now() + opts.debounce;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                _ = rx.recv() => {},
                _ = watcher.next() => {},
            }
        }
        tracing::info!(trigger = trigger.name(), "converging");
    }
    notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    shared.status.lock().await.daemon.state = "stopping".into();
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

/// The running reboot coordination (FleetLock server or update_engine follower) and the
/// settings it started with.
struct Reboots {
    task: tokio::task::JoinHandle<()>,
    strategy: config::RebootStrategy,
    policy: config::RebootPolicy,
}

/// After a pass: starts reboot coordination when wanted (and possible), and restarts it when
/// `reboot.*` changed, but never in the middle of a reboot: a slot held in one namespace's Lease
/// would be left behind by a coordinator started on another. Stops it when `reboot.strategy`
/// became `off`.
async fn follow_reboot_settings(
    current: Option<Reboots>,
    root: &Root,
    s: &Settings,
    systemd: &Systemd,
    shared: &Arc<Shared>,
) -> Option<Reboots> {
    use crate::reboot::coordinator::HOLDING_NOTHING;
    if let Some(r) = current {
        if r.strategy == s.reboot && r.policy == s.reboot_policy {
            return Some(r);
        }
        let state = shared
            .reboot
            .lock()
            .expect("reboot")
            .as_ref()
            .map(|c| c.status().state);
        if let Some(st) = state.filter(|st| !HOLDING_NOTHING.contains(&st.as_str())) {
            // (logged once: the flag is set until the coordination restarts)
            if !shared.reboot_deferred.swap(true, Ordering::SeqCst) {
                tracing::warn!(
                    state = %st,
                    "reboot settings changed; they apply once the reboot under way is over"
                );
            }
            return Some(r);
        }
        tracing::info!("reboot settings changed: restarting reboot coordination");
        shared.reboot_deferred.store(false, Ordering::SeqCst);
        r.task.abort();
        let _ = r.task.await;
        *shared.reboot.lock().expect("reboot") = None;
        write_metrics(root, shared).await;
    }
    match start_reboots(root, s, systemd, shared).await {
        Ok(task) => {
            let started = task.map(|task| Reboots {
                task,
                strategy: s.reboot,
                policy: s.reboot_policy.clone(),
            });
            if started.is_some() {
                write_metrics(root, shared).await;
            }
            started
        }
        Err(e) => {
            tracing::error!("reboot coordination not started: {e:#}");
            None
        }
    }
}

/// With a reboot strategy and the node's own credentials in place: serves FleetLock on
/// `reboot.listen` for Zincati, or follows update_engine (Flatcar). `Ok(None)`: not (yet) wanted.
async fn start_reboots(
    root: &Root,
    s: &Settings,
    systemd: &Systemd,
    shared: &Arc<Shared>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    use crate::reboot::coordinator::{zincati_id, LeaseCoordinator, Policy};
    use futures_util::FutureExt;
    let strategy = s.reboot;
    if strategy == config::RebootStrategy::Off || !root.path(&s.kubeconfig).is_file() {
        return Ok(None);
    }
    let id = if strategy == config::RebootStrategy::FleetLock {
        let mid_path = root.path("/etc/machine-id");
        let mid = std::fs::read_to_string(&mid_path)
            .with_context(|| format!("reading {}", mid_path.display()))?;
        zincati_id(&mid)
            .with_context(|| format!("{}: not 32 hexadecimal digits", mid_path.display()))?
    } else {
        // update_engine: nodectld asks for itself, by node name.
        s.node_name.clone()
    };
    let p = &s.reboot_policy;
    let policy = Policy {
        namespace: p.namespace.clone(),
        slots: p.group_slots as usize,
        stale_after: Duration::from_secs(p.stale_after_secs),
        drain_timeout: Duration::from_secs(p.drain_timeout_secs),
        windows: p.windows.clone(),
        time_zone: p.time_zone.clone(),
        ..Policy::default()
    };
    let (croot, kubeconfig) = (root.clone(), s.kubeconfig.clone());
    let connect: crate::reboot::coordinator::Connector = Arc::new(move || {
        let (root, kubeconfig) = (croot.clone(), kubeconfig.clone());
        async move {
            crate::kubeconfig::connect(&root, &kubeconfig, false)
                .await
                .map(|c| c.client)
                .map_err(|e| e.to_string())
        }
        .boxed()
    });
    let sd = systemd.clone();
    let kubelet_active: crate::reboot::coordinator::KubeletActive = Arc::new(move || {
        let sd = sd.clone();
        async move {
            sd.state(nodectl_units::kubelet::KUBELET_UNIT)
                .await
                .is_ok_and(|st| st.active == "active")
        }
        .boxed()
    });
    let c = Arc::new(LeaseCoordinator::new(
        connect,
        &s.node_name,
        &id,
        policy,
        kubelet_active,
    ));
    {
        let (root, shared) = (root.clone(), shared.clone());
        c.set_on_change(Arc::new(move |state: &str| {
            if crate::reboot::coordinator::HOLDING_NOTHING.contains(&state)
                && shared.reboot_deferred.load(Ordering::SeqCst)
            {
                let _ = shared.wake.send(Trigger::Reboot);
            }
            let (root, shared) = (root.clone(), shared.clone());
            tokio::spawn(async move { write_metrics(&root, &shared).await });
        }));
    }
    if strategy == config::RebootStrategy::UpdateEngine {
        let conn = zbus::Connection::system()
            .await
            .context("connecting to the system bus for update_engine")?;
        let follower = crate::reboot::update_engine::Follower {
            coordinator: c.clone(),
            params: crate::reboot::fleetlock::ClientParams {
                id: id.clone(),
                group: p.group.clone(),
            },
            retry: Duration::from_secs(60),
            reboot: crate::reboot::update_engine::logind_reboot(conn.clone()),
        };
        c.set_endpoint("update_engine (D-Bus)");
        *shared.reboot.lock().expect("reboot") = Some(c.clone());
        tracing::info!(
            group = %p.group,
            "following update_engine: reboots take a slot of group {} first",
            p.group
        );
        return Ok(Some(tokio::spawn(async move {
            if let Err(e) = follower.run(&conn).await {
                tracing::error!("following update_engine stopped: {e:#}");
            }
        })));
    }
    let listener = tokio::net::TcpListener::bind(p.listen)
        .await
        .with_context(|| format!("listening on {} (reboot.listen)", p.listen))?;
    c.set_endpoint(&format!("http://{}/", p.listen));
    *shared.reboot.lock().expect("reboot") = Some(c.clone());
    tracing::info!(listen = %p.listen, id = %id, "serving FleetLock for Zincati on http://{}/ (client id {id})", p.listen);
    Ok(Some(tokio::spawn(crate::reboot::fleetlock::serve(
        listener, c,
    ))))
}

/// Prometheus text metrics, rewritten after every pass (node_exporter:
/// `--collector.textfile.directory=/run/nodectl/metrics`).
pub const METRICS: &str = "/run/nodectl/metrics/nodectl.prom";

/// How long after a pass nodectld gives back memory freed by work that outlived the pass.
const LATE_TRIM: Duration = Duration::from_secs(10);

/// Metrics for node_exporter's textfile collector, written atomically: after every pass, and
/// when the reboot state changes.
async fn write_metrics(root: &Root, shared: &Shared) {
    let text = status::metrics(&shared.snapshot().await);
    let path = root.path(METRICS);
    let tmp = path.with_extension("prom.tmp");
    if let Err(e) = std::fs::create_dir_all(path.parent().expect("a parent"))
        .and_then(|_| std::fs::write(&tmp, text))
        .and_then(|_| std::fs::rename(&tmp, &path))
    {
        tracing::warn!("writing {}: {e}", path.display());
    }
}

/// One pass: apply what was loaded, publish the status.
async fn pass(
    root: &Root,
    loaded: Result<(crate::host::Host, Settings), load::LoadError>,
    engine: &crate::engine::Engine,
    systemd: &Systemd,
    shared: &Shared,
    trigger: Trigger,
    passes: u64,
) -> Option<Duration> {
    let mut recheck = None;
    shared.status.lock().await.daemon.state = "converging".into();
    let line = match loaded {
        Err(e) => {
            let msg = e.to_string();
            tracing::error!("cannot load host or settings, waiting for a config change: {msg}");
            let host = load::host(root).ok().map(|h| {
                let l = nodectl_selinux::Labeler::new(root.dir(), &h.selinux);
                HostStatus::new(&h, &l)
            });
            let mut st = shared.status.lock().await;
            st.config_error = Some(msg.clone());
            st.settings = None;
            st.steps.clear();
            st.waiting_for.clear();
            st.host = host;
            format!("waiting for a valid config: {msg}")
        }
        Ok((host, settings)) => {
            let mut cx = Cx::new(root.clone(), host, settings, systemd.clone());
            cx.forced = matches!(trigger, Trigger::Sighup | Trigger::Dbus);
            cx.activating = passes == 1;
            let wake = shared.wake.clone();
            cx.waker = Some(Arc::new(move || {
                let _ = wake.send(Trigger::Credentials);
            }));
            let report = engine.apply(&cx).await;
            let line = Status::summary(&report);
            let applied: usize = report
                .steps
                .iter()
                .map(|s| match &s.state {
                    StepState::Applied { changes } => changes.len(),
                    _ => 0,
                })
                .sum();
            tracing::info!(
                trigger = trigger.name(),
                duration_ms = report.duration_ms,
                changes = applied,
                status = %line,
                "pass finished ({}, {} ms, {} changes): {line}",
                trigger.name(),
                report.duration_ms,
                applied
            );
            recheck = cx.take_recheck();
            let calls = systemd.calls().ok();
            let kubelet = systemd
                .state(nodectl_units::kubelet::KUBELET_UNIT)
                .await
                .ok();
            let kubelet_image = status::kubelet_image(systemd).await;
            // File reads: done before the status is locked (GetStatus waits on that lock).
            let audit = status::AuditSummary::read(root, &cx.settings);
            let credentials = status::Credentials::read(root);
            let mut st = shared.status.lock().await;
            st.config_error = None;
            st.host = Some(HostStatus::new(&cx.host, &cx.labeler));
            st.audit = Some(audit);
            st.settings = Some(cx.settings);
            st.set_report(&report);
            st.systemd_calls = calls;
            st.credentials = credentials;
            st.kubelet_image = kubelet_image;

            if let Some(k) = kubelet {
                st.set_kubelet(k);
            }
            st.daemon.last_pass = Some(Pass {
                finished_at: crate::util::time::now_secs(),
                duration_ms: report.duration_ms,
                trigger: trigger.name().into(),
                changes_applied: applied,
                failed_steps: report.failed().iter().map(|s| s.id.clone()).collect(),
            });
            line
        }
    };
    {
        let mut st = shared.status.lock().await;
        st.daemon.state = "ready".into();
        st.daemon.ready = true;
        st.daemon.passes = passes;
        st.daemon.status_line = line.clone();
    }
    crate::memory::release_freed();
    write_metrics(root, shared).await;
    notify(&[NotifyState::Ready, NotifyState::Status(&line)]);
    recheck
}

/// Keeps `status.kubelet` current from systemd's PropertiesChanged signals (no polling). If the
/// subscription ends (systemd reloaded the unit away, the bus hiccuped), it subscribes again.
async fn follow_kubelet(client: Client, shared: Arc<Shared>) {
    use futures_util::StreamExt;
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

/// What a watch is for, so unrelated events in a watched directory wake nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Interest {
    /// A config.d directory: any `*.toml` entry.
    ConfigDir,
    /// A parent of a path that does not exist yet: only this entry name.
    Entry(OsString, Trigger),
    /// An input directory (the secrets inbox): any non-hidden entry.
    AnyEntry(Trigger),
    /// Credentials: a label or mode changed (IN_ATTRIB) or an entry removed, on this entry or
    /// (`None`) any non-hidden one. nodectld's own writes (a hidden temp file renamed into
    /// place, its label and mode set before) raise neither on the final name.
    Altered(Option<OsString>, Trigger),
}

/// The inotify instance, owning its descriptor for its whole life (what AsyncFd requires).
struct InotifyFd(Inotify);

impl std::os::fd::AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

struct Watcher {
    fd: AsyncFd<InotifyFd>,
    watches: HashMap<WatchDescriptor, Vec<Interest>>,
}

impl Watcher {
    fn new() -> nix::Result<Self> {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        // SAFETY: InotifyFd owns the descriptor and always returns the same one until dropped
        // together with the AsyncFd.
        let fd = unsafe { AsyncFd::register(InotifyFd(ino)) }
            .map_err(|e| nix::Error::from_raw(e.into_parts().1.raw_os_error().unwrap_or(0)))?;
        Ok(Watcher {
            fd,
            watches: HashMap::new(),
        })
    }

    /// Re-derives the watch list from the settings (new directories may exist now).
    fn update(&mut self, root: &Root, settings: Option<&Settings>) {
        let mut want: Vec<(PathBuf, Interest)> = Vec::new();
        for d in config::CONFIG_DIRS {
            want.push(nearest(
                root,
                Path::new(d),
                Interest::ConfigDir,
                Trigger::ConfigChange,
            ));
        }
        if let Some(s) = settings {
            want.push(nearest_file(
                root,
                &s.bootstrap_kubeconfig,
                Trigger::InputChange,
            ));
            let inbox = Interest::AnyEntry(Trigger::InputChange);
            want.push(nearest(root, &s.secrets_inbox, inbox, Trigger::InputChange));
            // The node kubeconfig and the key directory (the bootstrap kubeconfig is watched
            // above): a label made container-readable is put back by the next pass, now.
            let cred = Trigger::CredentialChange;
            let kc = &s.kubeconfig;
            if let (Some(dir), Some(name)) = (kc.parent(), kc.file_name()) {
                if root.path(dir).is_dir() {
                    let i = Interest::Altered(Some(name.to_os_string()), cred);
                    want.push((root.path(dir), i));
                }
            }
            let pki = Path::new(crate::credentials::CERT_DIR);
            if root.path(pki).is_dir() {
                want.push((root.path(pki), Interest::Altered(None, cred)));
            }
        }
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_ONLYDIR;
        // Re-adding a watched directory returns its existing descriptor: no gap in which an
        // event could be lost. Descriptors no longer wanted are removed afterwards.
        let mut next: HashMap<WatchDescriptor, Vec<Interest>> = HashMap::new();
        for (dir, interest) in want {
            match self.fd.get_ref().0.add_watch(&dir, flags) {
                Ok(wd) => next.entry(wd).or_default().push(interest),
                Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot watch"),
            }
        }
        for wd in self.watches.keys() {
            if !next.contains_key(wd) {
                let _ = self.fd.get_ref().0.rm_watch(*wd);
            }
        }
        self.watches = next;
    }

    /// The next event someone cares about.
    async fn next(&mut self) -> Trigger {
        loop {
            let mut guard = match self.fd.readable().await {
                Ok(g) => g,
                Err(e) => {
                    tracing::error!(error = %e, "inotify");
                    std::future::pending::<()>().await;
                    unreachable!()
                }
            };
            let events = match guard.try_io(|fd| {
                fd.get_ref()
                    .0
                    .read_events()
                    .map_err(|e| std::io::Error::from_raw_os_error(e as i32))
            }) {
                Ok(Ok(ev)) => ev,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "reading inotify events");
                    continue;
                }
                Err(_would_block) => continue,
            };
            for ev in events {
                let Some(interests) = self.watches.get(&ev.wd) else {
                    continue;
                };
                let name = ev.name.unwrap_or_default();
                let hidden = name.to_string_lossy().starts_with('.');
                let altered = ev
                    .mask
                    .intersects(AddWatchFlags::IN_ATTRIB | AddWatchFlags::IN_DELETE);
                for i in interests {
                    match i {
                        Interest::ConfigDir
                            if !hidden && name.to_string_lossy().ends_with(".toml") =>
                        {
                            return Trigger::ConfigChange
                        }
                        Interest::Entry(n, t) if *n == name => return *t,
                        Interest::AnyEntry(t) if !hidden && !name.is_empty() => return *t,
                        Interest::Altered(n, t)
                            if altered
                                && !hidden
                                && !name.is_empty()
                                && n.as_ref().is_none_or(|n| *n == name) =>
                        {
                            return *t
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// The directory to watch for `dir`: itself when it exists, else its nearest existing ancestor,
/// watching for the next path component to appear.
fn nearest(root: &Root, dir: &Path, interest: Interest, trigger: Trigger) -> (PathBuf, Interest) {
    if root.path(dir).is_dir() {
        return (root.path(dir), interest);
    }
    let mut child = dir;
    let mut p = dir.parent();
    while let Some(d) = p {
        if root.path(d).is_dir() {
            let name = child
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default();
            return (root.path(d), Interest::Entry(name, trigger));
        }
        child = d;
        p = d.parent();
    }
    (root.path("/"), Interest::Entry(OsString::new(), trigger))
}

/// Watch for a file: its directory (for its name) when that exists.
fn nearest_file(root: &Root, file: &Path, trigger: Trigger) -> (PathBuf, Interest) {
    let dir = file.parent().unwrap_or(Path::new("/"));
    if root.path(dir).is_dir() {
        let name = file
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        return (root.path(dir), Interest::Entry(name, trigger));
    }
    nearest(
        root,
        dir,
        Interest::Entry(OsString::new(), trigger),
        trigger,
    )
}
