//! Reboot coordination under the daemon: started once the node has its own credentials,
//! restarted when `reboot.*` or the node name changes (never in the middle of a reboot), stopped
//! when the strategy becomes `off`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::FutureExt;
use nodectl_units::systemd::Systemd;

use super::shared::{Shared, Trigger};
use crate::config::{RebootPolicy, RebootStrategy, Settings};
use crate::reboot::coordinator::{
    zincati_id, Connector, KubeletActive, LeaseCoordinator, Policy, HOLDING_NOTHING,
};
use crate::root::Root;

/// The running reboot coordination (FleetLock server or update_engine follower) and the
/// settings it started with.
pub(super) struct Reboots {
    pub(super) task: tokio::task::JoinHandle<()>,
    strategy: RebootStrategy,
    policy: RebootPolicy,
    /// The node name its Lease entries, drain and readiness are for.
    node: String,
}

/// After a pass: starts reboot coordination when wanted (and possible), and restarts it when
/// `reboot.*` or the node's name changed, but never in the middle of a reboot: a slot held in
/// one namespace's Lease would be left behind by a coordinator started on another. Stops it when
/// `reboot.strategy` became `off`.
pub(super) async fn follow_settings(
    current: Option<Reboots>,
    root: &Root,
    s: &Settings,
    systemd: &Systemd,
    shared: &Arc<Shared>,
) -> Option<Reboots> {
    super::coordination::check_zincati(root, s, shared);
    // (an ended coordination's end is recorded; it is dropped here and started again below
    // once its backoff is over)
    let current = current.filter(|r| !(r.task.is_finished() && super::coordination::ended(shared)));
    if current.is_none() {
        if let Some(c) = shared.reboot.lock().expect("reboot").take() {
            c.cancel_operator_reboot();
        }
    }
    if let Some(r) = current {
        if r.strategy == s.reboot && r.policy == s.reboot_policy && r.node == s.node_name {
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
        tracing::info!("reboot settings or the node name changed: restarting reboot coordination");
        shared.reboot_deferred.store(false, Ordering::SeqCst);
        r.task.abort();
        let _ = r.task.await;
        if let Some(c) = shared.reboot.lock().expect("reboot").take() {
            // (an operator's reboot waiting on the old settings ends with them)
            c.cancel_operator_reboot();
        }
        super::metrics::write(root, shared).await;
    }
    if !super::coordination::may_start(s, shared) {
        return None;
    }
    match start(root, s, systemd, shared).await {
        Ok(task) => {
            super::coordination::started(s, shared, task.is_some());
            let started = task.map(|task| Reboots {
                task,
                strategy: s.reboot,
                policy: s.reboot_policy.clone(),
                node: s.node_name.clone(),
            });
            if started.is_some() {
                super::metrics::write(root, shared).await;
            }
            started
        }
        Err(e) => {
            super::coordination::down(Some(s), shared, "failed", &format!("{e:#}"));
            super::metrics::write(root, shared).await;
            None
        }
    }
}

/// The coordinator's policy from the settings (a gate that does not compile is an error: never
/// a gate left out).
fn policy(p: &RebootPolicy) -> anyhow::Result<Policy> {
    let gates = crate::reboot::gates::Gates::new(&p.gates)
        .map_err(|e| anyhow::anyhow!("reboot gates: {e}"))?;
    Ok(Policy {
        namespace: p.namespace.clone(),
        slots: p.group_slots as usize,
        stale_after: Duration::from_secs(p.stale_after_secs),
        drain_timeout: Duration::from_secs(p.drain_timeout_secs),
        drain_force: p.drain_force,
        windows: p.windows.clone(),
        time_zone: p.time_zone.clone(),
        group: p.group.clone(),
        abandon_after: Duration::from_secs(p.abandon_after_secs),
        wait_for_inhibitors: p.wait_for_inhibitors,
        gates,
        settle: Duration::from_secs(p.gates.settle_secs),
        checks: crate::reboot::commands::Checks {
            pre: p.gates.pre_commands.clone(),
            post: p.gates.post_commands.clone(),
            timeout: Duration::from_secs(p.gates.command_timeout_secs),
        },
        ..Policy::default()
    })
}

/// The API client, with the node's kubeconfig (read again at each connect).
fn connector(root: &Root, s: &Settings) -> Connector {
    let (root, kubeconfig) = (root.clone(), s.kubeconfig.clone());
    Arc::new(move || {
        let (root, kubeconfig) = (root.clone(), kubeconfig.clone());
        async move {
            crate::kubeconfig::connect(&root, &kubeconfig, false)
                .await
                .map(|c| c.client)
        }
        .boxed()
    })
}

/// Whether kubelet.service is active, as systemd says now.
fn kubelet_active(systemd: &Systemd) -> KubeletActive {
    let sd = systemd.clone();
    Arc::new(move || {
        let sd = sd.clone();
        async move {
            sd.state(nodectl_units::kubelet::KUBELET_UNIT)
                .await
                .is_ok_and(|st| st.active == "active")
        }
        .boxed()
    })
}

/// The id requests are made with: Zincati's (from the machine-id) for FleetLock, the node name
/// for update_engine (nodectld asks for itself).
fn client_id(root: &Root, s: &Settings) -> anyhow::Result<String> {
    if s.reboot != RebootStrategy::FleetLock {
        return Ok(s.node_name.clone());
    }
    let mid_path = root.path("/etc/machine-id");
    let mid =
        crate::util::bounded::read_to_string(&mid_path, crate::util::bounded::MAX_SMALL_BYTES)
            .with_context(|| format!("reading {}", mid_path.display()))?;
    zincati_id(&mid).with_context(|| format!("{}: not 32 hexadecimal digits", mid_path.display()))
}

/// With a reboot strategy and the node's own credentials in place: serves FleetLock on
/// `reboot.listen` for Zincati, or follows update_engine (Flatcar). `Ok(None)`: not (yet) wanted.
async fn start(
    root: &Root,
    s: &Settings,
    systemd: &Systemd,
    shared: &Arc<Shared>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if s.reboot == RebootStrategy::Off || !root.path(&s.kubeconfig).is_file() {
        return Ok(None);
    }
    let id = client_id(root, s)?;
    let c = Arc::new(LeaseCoordinator::new(
        connector(root, s),
        &s.node_name,
        &id,
        policy(&s.reboot_policy)?,
        kubelet_active(systemd),
    ));
    {
        let (root, shared) = (root.clone(), shared.clone());
        c.set_on_change(Arc::new(move |state: &str| {
            if HOLDING_NOTHING.contains(&state) && shared.reboot_deferred.load(Ordering::SeqCst) {
                let _ = shared.wake.send(Trigger::Reboot);
            }
            shared.changed.notify_one();
            let (root, shared) = (root.clone(), shared.clone());
            tokio::spawn(async move { super::metrics::write(&root, &shared).await });
        }));
    }
    c.set_command_runner(crate::reboot::commands::systemd_runner(systemd.clone()));
    {
        let c = c.clone();
        tokio::spawn(async move { c.recover_hold().await });
    }
    if s.reboot_policy.gates.settle_secs > 0 {
        // a released entry of this node's, left by a nodectld stopped during the settle time
        c.tidy_release(&s.reboot_policy.group);
    }
    if matches!(
        s.reboot,
        RebootStrategy::UpdateEngine | RebootStrategy::RebootRequired
    ) {
        return follow(root, s, c, id, shared).await;
    }
    let listen = s.reboot_policy.listen;
    let listener = listener(listen, shared.fleetlock_socket.as_ref()).await?;
    c.set_endpoint(&format!("http://{listen}/"));
    *shared.reboot.lock().expect("reboot") = Some(c.clone());
    tracing::info!(%listen, "serving FleetLock for Zincati on http://{listen}/ (group {})", s.reboot_policy.group);
    let callers = callers(root, &s.reboot_policy);
    Ok(Some(super::coordination::supervised(
        root,
        s,
        shared,
        async move {
            crate::reboot::fleetlock::serve(listener, c, callers).await;
            anyhow::bail!("the FleetLock endpoint stopped serving")
        },
    )))
}

/// The name `nodectld.socket` gives its descriptor (`FileDescriptorName=`).
pub(super) const SOCKET_NAME: &str = "fleetlock";

/// The listening TCP socket systemd passed under [`SOCKET_NAME`] (`sd_listen_fds`), if any.
/// Another descriptor passed, or one that is not a listening TCP socket, is logged and left.
pub(super) fn passed_socket() -> Option<std::net::TcpListener> {
    use std::os::fd::FromRawFd;
    let fds = match sd_notify::listen_fds_with_names() {
        Ok(fds) => fds,
        Err(e) => {
            tracing::warn!("the descriptors systemd passed cannot be read: {e}");
            return None;
        }
    };
    let mut found = None;
    for (fd, name) in fds {
        // Not inherited by what nodectld runs (systemd passes them without FD_CLOEXEC).
        let _ = nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        if name != SOCKET_NAME || found.is_some() {
            tracing::warn!(%name, "a descriptor systemd passed that nodectld does not use (only one named {SOCKET_NAME})");
            continue;
        }
        if !is_listening(fd) {
            tracing::warn!(
                "the descriptor named {SOCKET_NAME} is not a listening socket: left unused"
            );
            continue;
        }
        // SAFETY: a listening socket systemd passed to this process, owned from here on.
        let l = unsafe { std::net::TcpListener::from_raw_fd(fd) };
        match l.local_addr() {
            Ok(addr) => {
                tracing::info!(%addr, "FleetLock's port is held by systemd (nodectld.socket)");
                found = Some(l);
            }
            Err(e) => tracing::warn!("the socket named {SOCKET_NAME}: {e}; left unused"),
        }
    }
    found
}

/// Whether `fd` is a socket in the listening state (`SO_ACCEPTCONN`).
fn is_listening(fd: std::os::fd::RawFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for the call; a descriptor that is no socket gives ENOTSOCK.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    r == 0 && v != 0
}

/// What FleetLock is served on: a duplicate of the socket systemd holds (`nodectld.socket`),
/// which must listen on `listen` (`reboot.listen`); without one, `listen` bound here, with a
/// warning: the port is then free whenever nodectld is not running, for any local process to
/// take and answer Zincati in its place.
async fn listener(
    listen: std::net::SocketAddr,
    passed: Option<&std::net::TcpListener>,
) -> anyhow::Result<tokio::net::TcpListener> {
    let Some(passed) = passed else {
        tracing::warn!(%listen, "no socket from nodectld.socket: binding {listen} here; while nodectld is not running any local process may take it (systemctl enable --now nodectld.socket)");
        return tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen} (reboot.listen)"));
    };
    let held = passed.local_addr().context("nodectld.socket's address")?;
    if held != listen {
        anyhow::bail!(
            "nodectld.socket listens on {held}, reboot.listen is {listen}: make them the same (reboot.listen, or ListenStream= in a drop-in for nodectld.socket)"
        );
    }
    let dup = passed
        .try_clone()
        .context("duplicating nodectld.socket's descriptor")?;
    dup.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(dup)?)
}

/// The uids of `reboot.fleetlock_users` (a user this node does not have is logged and left out:
/// nobody may call as it) and the cgroups of `reboot.fleetlock_units` (system services: the
/// kernel's cgroup tree, not a node file).
fn callers(root: &Root, p: &RebootPolicy) -> crate::reboot::fleetlock::Callers {
    let mut c = crate::reboot::fleetlock::Callers::default();
    for name in &p.fleetlock_users {
        match crate::accounts::resolve(root, name) {
            Ok((uid, _)) => c.uids.push(uid),
            Err(e) => {
                tracing::warn!(user = %name, "reboot.fleetlock_users: {e}; nobody calls FleetLock as {name}")
            }
        }
        c.names.push(name.clone());
    }
    for unit in &p.fleetlock_units {
        c.cgroups
            .push(crate::reboot::peer::service_cgroup_dir(unit));
        c.units.push(unit.clone());
    }
    c
}

/// update_engine's reboots (Flatcar), or `/run/reboot-required`, take a slot of `group` first.
async fn follow(
    root: &Root,
    s: &Settings,
    c: Arc<LeaseCoordinator>,
    id: String,
    shared: &Arc<Shared>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let group = s.reboot_policy.group.clone();
    let conn = zbus::Connection::system()
        .await
        .context("connecting to the system bus for logind")?;
    let follower = crate::reboot::update_engine::Follower {
        coordinator: c.clone(),
        params: crate::reboot::fleetlock::ClientParams {
            id,
            group: group.clone(),
        },
        retry: crate::util::timers::scaled(Duration::from_secs(60)),
        reboot: crate::reboot::update_engine::logind_reboot(conn.clone()),
        inhibited: s
            .reboot_policy
            .wait_for_inhibitors
            .then(|| crate::reboot::update_engine::logind_inhibitors(conn.clone())),
    };
    let required = s.reboot == RebootStrategy::RebootRequired;
    c.set_endpoint(if required {
        crate::reboot::reboot_required::REBOOT_REQUIRED
    } else {
        "update_engine (D-Bus)"
    });
    *shared.reboot.lock().expect("reboot") = Some(c);
    let at = root.clone();
    Ok(Some(super::coordination::supervised(
        root,
        s,
        shared,
        async move {
            if required {
                tracing::info!(group = %group, "following /run/reboot-required: reboots take a slot of group {group} first");
                crate::reboot::reboot_required::run(&follower, &at)
                    .await
                    .context("following /run/reboot-required stopped")
            } else {
                tracing::info!(group = %group, "following update_engine: reboots take a slot of group {group} first");
                follower
                    .run(&conn)
                    .await
                    .context("following update_engine stopped")
            }
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped `nodectld.socket` holds the port `reboot.listen` defaults to and names its
    /// descriptor as nodectld takes it; a socket on another address is refused by name.
    #[tokio::test]
    async fn the_shipped_socket_is_where_reboot_listen_defaults_and_another_is_refused() {
        let unit = include_str!("../../../packaging/systemd/nodectld.socket");
        let value = |key: &str| {
            unit.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("{key}= in nodectld.socket"))
        };
        assert_eq!(value("ListenStream"), crate::config::DEFAULT_LISTEN);
        assert_eq!(value("FileDescriptorName"), SOCKET_NAME);
        // before zincati.service: sockets.target is before basic.target, which it starts after
        assert_eq!(value("WantedBy"), "sockets.target");
        let unit = include_str!("../../../packaging/systemd/nodectld.service");
        assert!(unit.contains("\nWants=nodectld.socket\nAfter=nodectld.socket\n"));

        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = held.local_addr().unwrap();
        let l = listener(at, Some(&held)).await.unwrap();
        assert_eq!(
            l.local_addr().unwrap(),
            at,
            "served on a duplicate of the held socket"
        );
        drop(l);
        // The held socket outlives the coordination that served on it.
        assert!(is_listening(std::os::fd::AsRawFd::as_raw_fd(&held)));
        let other: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        let e = listener(other, Some(&held)).await.unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "nodectld.socket listens on {at}, reboot.listen is {other}"
            )),
            "{e}"
        );
    }
}
