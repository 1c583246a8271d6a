//! systemd over D-Bus (zbus + zbus_systemd proxies; `systemctl` is never spawned).
//!
//! [`Client`] talks to a real systemd; [`Offline`] stands in for it when the agent runs against
//! a scratch root (`--root DIR`): it keeps unit states in a JSON file under that root and records
//! every call, so plans and re-runs behave as on a node and tests can count calls.
//! [`Systemd`] is what the agent holds: one of the two.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::jobs::JobWatch;
use crate::memo::Memo;
pub use crate::state::UnitState;
use zbus_systemd::systemd1::{ManagerProxy, ServiceProxy, UnitProxy};
use zbus_systemd::zbus;

#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("D-Bus: {context}: {source}")]
    Bus {
        context: String,
        source: zbus::Error,
    },
    #[error("{unit}: job {op} finished with result '{result}'")]
    JobFailed {
        unit: String,
        op: &'static str,
        result: String,
    },
    #[error("{unit}: no result for job {op} within {secs}s")]
    JobTimeout {
        unit: String,
        op: &'static str,
        secs: u64,
    },
    #[error("offline systemd state {path}: {msg}")]
    Offline { path: PathBuf, msg: String },
}

type Result<T> = std::result::Result<T, SystemdError>;

// `crash_point!` (lib.rs) after each call systemd has carried out (feature `failpoints`: the
// crash campaign aborts the process there, the reply read and nothing yet recorded of it).

fn bus(context: impl Into<String>) -> impl FnOnce(zbus::Error) -> SystemdError {
    let context = context.into();
    move |source| SystemdError::Bus { context, source }
}

/// CLOCK_MONOTONIC now: the clock of systemd's `*TimestampMonotonic` properties.
pub fn monotonic() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the valid pointer given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    assert_eq!(rc, 0, "CLOCK_MONOTONIC is always there");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The value of `name` in systemd's `Environment` list (`NAME=value` entries; the last wins).
pub fn env_lookup(env: &[String], name: &str) -> Option<String> {
    env.iter()
        .rev()
        .find_map(|e| e.strip_prefix(name)?.strip_prefix('='))
        .map(String::from)
}

/// Counts of state-changing calls, for tests and for `nodectl status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounts {
    pub reload: u32,
    pub start: u32,
    pub restart: u32,
    pub stop: u32,
    pub enable: u32,
}

#[derive(Default)]
struct Counters {
    reload: AtomicU32,
    start: AtomicU32,
    restart: AtomicU32,
    stop: AtomicU32,
    enable: AtomicU32,
}

impl Counters {
    fn snapshot(&self) -> CallCounts {
        CallCounts {
            reload: self.reload.load(Ordering::Relaxed),
            start: self.start.load(Ordering::Relaxed),
            restart: self.restart.load(Ordering::Relaxed),
            stop: self.stop.load(Ordering::Relaxed),
            enable: self.enable.load(Ordering::Relaxed),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum JobOp {
    Start,
    Restart,
    Stop,
}

impl JobOp {
    fn name(self) -> &'static str {
        match self {
            JobOp::Start => "start",
            JobOp::Restart => "restart",
            JobOp::Stop => "stop",
        }
    }
}

/// A client of systemd's Manager on some bus (the system bus on a node).
#[derive(Clone)]
pub struct Client {
    conn: zbus::Connection,
    manager: ManagerProxy<'static>,
    counters: Arc<Counters>,
    job_timeout: Duration,
    /// Brief states asked in one pass ([`Systemd::for_pass`]); none outside a pass.
    memo: Option<Memo>,
    /// A unit's JobRemoved signals followed from the pass's start
    /// ([`Systemd::watch_jobs_ahead`]), for its job in the pass; none outside a pass.
    jobs_ahead: Option<Arc<std::sync::Mutex<Option<JobWatch>>>>,
}

impl Client {
    /// Connects to the system bus and subscribes to the Manager's signals.
    pub async fn system() -> Result<Self> {
        let conn = zbus::Connection::system()
            .await
            .map_err(bus("connecting to the system bus"))?;
        Self::from_connection(conn).await
    }

    pub async fn from_connection(conn: zbus::Connection) -> Result<Self> {
        let manager = ManagerProxy::new(&conn)
            .await
            .map_err(bus("creating the systemd Manager proxy"))?;
        // systemd emits JobRemoved and PropertiesChanged only while someone is subscribed.
        manager
            .subscribe()
            .await
            .map_err(bus("Manager.Subscribe"))?;
        Ok(Client {
            conn,
            manager,
            counters: Arc::default(),
            job_timeout: Duration::from_secs(300),
            memo: None,
            jobs_ahead: None,
        })
    }

    pub fn with_job_timeout(mut self, t: Duration) -> Self {
        self.job_timeout = t;
        self
    }

    pub fn calls(&self) -> CallCounts {
        self.counters.snapshot()
    }

    /// `daemon-reload`: returns once systemd has reloaded its unit files.
    pub async fn reload(&self) -> Result<()> {
        self.counters.reload.fetch_add(1, Ordering::Relaxed);
        self.manager.reload().await.map_err(bus("Manager.Reload"))
    }

    pub async fn start(&self, unit: &str) -> Result<()> {
        self.counters.start.fetch_add(1, Ordering::Relaxed);
        self.job(unit, JobOp::Start).await
    }

    pub async fn restart(&self, unit: &str) -> Result<()> {
        self.counters.restart.fetch_add(1, Ordering::Relaxed);
        self.job(unit, JobOp::Restart).await
    }

    pub async fn stop(&self, unit: &str) -> Result<()> {
        self.counters.stop.fetch_add(1, Ordering::Relaxed);
        self.job(unit, JobOp::Stop).await
    }

    /// Queues a start (`restart`: a restart) and returns without waiting for it: for a unit
    /// ordered after the caller's own unit while that one is still starting, whose job runs only
    /// once the caller is ready (waiting for it would wait for ourselves).
    pub async fn queue(&self, unit: &str, restart: bool) -> Result<()> {
        let (u, mode) = (unit.to_string(), "replace".to_string());
        if restart {
            self.counters.restart.fetch_add(1, Ordering::Relaxed);
            self.manager.restart_unit(u, mode).await
        } else {
            self.counters.start.fetch_add(1, Ordering::Relaxed);
            self.manager.start_unit(u, mode).await
        }
        .map(|_| ())
        .map_err(bus(format!(
            "{} {unit}",
            if restart { "RestartUnit" } else { "StartUnit" }
        )))
    }

    /// Queues a job (mode `replace`) and waits for its JobRemoved signal. The signal stream is
    /// opened before the call (at the pass's start when it watched the unit ahead,
    /// [`crate::jobs`]), so a job that finishes at once is not missed: one AddMatch naming
    /// systemd as the sender, where a proxy's signal stream also asks for the name's owner and
    /// matches its changes (three round trips, ~8 ms under QEMU TCG on the bundle's way to
    /// kubelet). The bus daemon routes a broadcast signal by match rules, so a broadcast
    /// JobRemoved that reaches this rule is the name's owner's; a signal addressed to nodectld
    /// (which any peer may send, whatever the rules) is not one systemd sends, and is ignored.
    /// (A match held for the client's life would save the AddMatch too, but wake nodectld for
    /// every job that ends on the node: a busy node's container scopes.)
    async fn job(&self, unit: &str, op: JobOp) -> Result<()> {
        let t = std::time::Instant::now();
        let ahead = self.jobs_ahead.as_ref().and_then(|a| {
            let mut a = a.lock().expect("jobs ahead");
            a.take_if(|w| w.unit() == unit)
        });
        let opened = ahead.is_some();
        let mut watch = ahead.unwrap_or_else(|| JobWatch::start(&self.conn, unit));
        watch
            .subscribed()
            .await
            .map_err(bus("subscribing to JobRemoved"))?;
        let matched = t.elapsed();
        let (u, mode) = (unit.to_string(), "replace".to_string());
        let path = match op {
            JobOp::Start => self.manager.start_unit(u, mode).await,
            JobOp::Restart => self.manager.restart_unit(u, mode).await,
            JobOp::Stop => self.manager.stop_unit(u, mode).await,
        }
        .map_err(bus(format!("{} {unit}", op.name())))?;
        tracing::debug!(
            "{} {unit}: JobRemoved matched in {:.1} ms{}, job queued {:.1} ms later",
            op.name(),
            matched.as_secs_f64() * 1e3,
            if opened {
                " (the match opened at the pass's start)"
            } else {
                ""
            },
            (t.elapsed() - matched).as_secs_f64() * 1e3
        );
        let wait = watch.result(path.as_str());
        let result = tokio::time::timeout(self.job_timeout, wait)
            .await
            .map_err(|_| SystemdError::JobTimeout {
                unit: unit.into(),
                op: op.name(),
                secs: self.job_timeout.as_secs(),
            })?;
        match result.as_deref() {
            Some("done") => Ok(()),
            Some(r) => Err(SystemdError::JobFailed {
                unit: unit.into(),
                op: op.name(),
                result: r.into(),
            }),
            None => Err(SystemdError::JobFailed {
                unit: unit.into(),
                op: op.name(),
                result: "signal stream closed".into(),
            }),
        }
    }

    /// Runs `argv` as the transient service `unit` (`systemd-run --wait`'s way: `Type=oneshot`,
    /// collected once it ended; its output in the journal under its unit, outside the caller's
    /// sandbox) with `env`, killed after `timeout` (`TimeoutStartUSec=`), and waits for its
    /// start job: `done` when it exited 0, else the job's result (`failed`, `timeout`).
    /// Mode `fail`: a unit of that name still running is not replaced.
    pub async fn run_transient(
        &self,
        unit: &str,
        argv: &[String],
        env: &[String],
        timeout: Duration,
    ) -> Result<()> {
        use zbus::{OwnedVariant as OwnedValue, Variant as Value};
        let op = "run";
        let prop = |k: &str, v: Value<'_>| -> Result<(String, OwnedValue)> {
            OwnedValue::try_from(v)
                .map(|v| (k.to_string(), v))
                .map_err(bus(format!("{unit}: property {k}")))
        };
        let exec: Vec<(String, Vec<String>, bool)> = vec![(
            argv.first().cloned().unwrap_or_default(),
            argv.to_vec(),
            false,
        )];
        let props = vec![
            // (not the arguments: they may carry what the journal should not)
            prop("Description", Value::from(format!("nodectl {unit}")))?,
            prop("Type", Value::from("oneshot"))?,
            prop("ExecStart", Value::from(exec))?,
            prop("Environment", Value::from(env.to_vec()))?,
            prop("TimeoutStartUSec", Value::from(timeout.as_micros() as u64))?,
            // (killed for good soon after its timeout, not after systemd's default 90 s)
            prop("TimeoutStopUSec", Value::from(10_000_000u64))?,
            prop("CollectMode", Value::from("inactive-or-failed"))?,
        ];
        self.counters.start.fetch_add(1, Ordering::Relaxed);
        let mut watch = JobWatch::start(&self.conn, unit);
        watch
            .subscribed()
            .await
            .map_err(bus("subscribing to JobRemoved"))?;
        let path = self
            .manager
            .start_transient_unit(unit.to_string(), "fail".into(), props, Vec::new())
            .await
            .map_err(bus(format!("StartTransientUnit {unit}")))?;
        // (systemd's own timeout ends the job; this one only guards a lost signal)
        let limit = timeout + Duration::from_secs(30);
        let result = tokio::time::timeout(limit, watch.result(path.as_str()))
            .await
            .map_err(|_| SystemdError::JobTimeout {
                unit: unit.into(),
                op,
                secs: limit.as_secs(),
            })?;
        match result.as_deref() {
            Some("done") => Ok(()),
            r => Err(SystemdError::JobFailed {
                unit: unit.into(),
                op,
                result: r.unwrap_or("signal stream closed").into(),
            }),
        }
    }

    /// A proxy for the unit. `cache` is for following changes by signal; reads use uncached
    /// proxies, since a cached proxy keeps "const" properties (LoadState, UnitFileState) from
    /// when it was made, e.g. `not-found` before the unit file was written.
    async fn unit_proxy_with(
        &self,
        unit: &str,
        cache: bool,
    ) -> Result<(UnitProxy<'static>, zbus::OwnedObjectPath)> {
        let path = self
            .manager
            .load_unit(unit.to_string())
            .await
            .map_err(bus(format!("LoadUnit {unit}")))?;
        let cache = if cache {
            zbus::proxy::CacheProperties::Lazily
        } else {
            zbus::proxy::CacheProperties::No
        };
        let proxy = UnitProxy::builder(&self.conn)
            .path(path.clone())
            .cache_properties(cache)
            .build()
            .await
            .map_err(bus(format!("unit proxy for {unit}")))?;
        Ok((proxy, path))
    }

    async fn unit_proxy(&self, unit: &str) -> Result<(UnitProxy<'static>, zbus::OwnedObjectPath)> {
        self.unit_proxy_with(unit, false).await
    }

    /// Reads the unit's states (loading it if systemd has not yet).
    pub async fn state(&self, unit: &str) -> Result<UnitState> {
        let (u, path) = self.unit_proxy(unit).await?;
        self.read_state(unit, &u, &path).await
    }

    async fn read_state(
        &self,
        unit: &str,
        _u: &UnitProxy<'static>,
        path: &zbus::OwnedObjectPath,
    ) -> Result<UnitState> {
        // Two GetAll calls (the Unit and, for a service, the Service interface) instead of a
        // round trip per property: a state read is on every pass's path (kubelet-unit,
        // kubelet-running) and each bus round trip costs ~10 ms under QEMU TCG.
        let props = zbus::fdo::PropertiesProxy::builder(&self.conn)
            .destination("org.freedesktop.systemd1")
            .path(path.clone())
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .map_err(bus(format!("{unit} properties")))?;
        let all = |iface: &'static str| {
            let props = &props;
            async move {
                let name = zbus::names::InterfaceName::from_static_str(iface)
                    .map_err(bus(iface.to_string()))?;
                props
                    .get_all(name)
                    .await
                    .map_err(|e| bus(format!("{unit} GetAll {iface}"))(e.into()))
            }
        };
        type Props = std::collections::HashMap<String, zbus::OwnedVariant>;
        let text = |m: &Props, k: &str| {
            m.get(k)
                .and_then(|v| <&str>::try_from(v).ok())
                .unwrap_or_default()
                .to_string()
        };
        let u = all("org.freedesktop.systemd1.Unit").await?;
        let mut st = UnitState {
            load: text(&u, "LoadState"),
            active: text(&u, "ActiveState"),
            sub: text(&u, "SubState"),
            unit_file: text(&u, "UnitFileState"),
            // Job: (id, path); id 0 when none is queued.
            job: u
                .get("Job")
                .and_then(|v| <&zbus::Structure>::try_from(v).ok())
                .and_then(|s| s.fields().first().and_then(|f| u32::try_from(f).ok()))
                .unwrap_or(0),
            ..UnitState::default()
        };
        if unit.ends_with(".service") && st.load == "loaded" {
            let sv = all("org.freedesktop.systemd1.Service").await?;
            st.result = text(&sv, "Result");
            st.restarts = sv
                .get("NRestarts")
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(0);
            st.exit_status = sv
                .get("ExecMainStatus")
                .and_then(|v| i32::try_from(v).ok())
                .unwrap_or(0);
        }
        Ok(st)
    }

    /// The unit's load, active and sub state and queued job in one Manager call
    /// (`ListUnitsByNames`, which loads the unit as `LoadUnit` does, retrying a not-found one
    /// once the unit directories changed: src/core/dbus-manager.c,
    /// `method_list_units_by_names`), and, with `unit_file`, its unit file state
    /// (`GetUnitFileState`; empty when it has no unit file). What a pass decides on, at one or
    /// two small replies instead of [`Client::state`]'s three (two of them every property of
    /// the Unit and Service interfaces, ~35 ms each under QEMU TCG on the bundle's path).
    pub async fn brief(&self, unit: &str, unit_file: bool) -> Result<UnitState> {
        // Both asked at once: one round trip on the bundle's path to kubelet, not two.
        let rows = self.manager.list_units_by_names(vec![unit.to_string()]);
        let file = async {
            if !unit_file {
                return Ok(String::new());
            }
            match self.manager.get_unit_file_state(unit.to_string()).await {
                Ok(s) => Ok(s),
                // No unit file (ENOENT of the lookup, sent as
                // org.freedesktop.DBus.Error.FileNotFound, or NoSuchUnit): what the Unit
                // interface reports as an empty UnitFileState.
                Err(zbus::Error::FDO(e)) if matches!(*e, zbus::fdo::Error::FileNotFound(_)) => {
                    Ok(String::new())
                }
                Err(zbus::Error::MethodError(name, ..))
                    if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit" =>
                {
                    Ok(String::new())
                }
                Err(e) => Err(bus(format!("GetUnitFileState {unit}"))(e)),
            }
        };
        let (rows, unit_file_state) = futures_util::future::join(rows, file).await;
        let rows = rows.map_err(bus(format!("ListUnitsByNames {unit}")))?;
        // One name asked, one row: under the unit's primary name when `unit` is an alias
        // (the row carries `u->id`), so the single row is the unit's.
        let row = match <[_; 1]>::try_from(rows) {
            Ok([row]) => row,
            Err(rows) => match rows.into_iter().find(|r| r.0 == unit) {
                Some(row) => row,
                None => {
                    return Err(SystemdError::JobFailed {
                        unit: unit.into(),
                        op: "ListUnitsByNames",
                        result: "no row for the unit".into(),
                    })
                }
            },
        };
        let st = UnitState {
            load: row.2,
            active: row.3,
            sub: row.4,
            job: row.7,
            unit_file: unit_file_state?,
            ..UnitState::default()
        };
        Ok(st)
    }

    /// One variable of a service's `Environment=` as systemd has loaded it (drop-ins applied,
    /// the last assignment wins); `None` when unset.
    pub async fn environment_var(&self, unit: &str, name: &str) -> Result<Option<String>> {
        let (_, path) = self.unit_proxy(unit).await?;
        let s = ServiceProxy::builder(&self.conn)
            .path(path)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .map_err(bus(format!("{unit}.Service")))?;
        let env = s
            .environment()
            .await
            .map_err(bus(format!("{unit}.Environment")))?;
        Ok(env_lookup(&env, name))
    }

    /// When the unit last left the inactive state (its latest start or restart began), on
    /// CLOCK_MONOTONIC (`InactiveExitTimestampMonotonic`: no clock step moves it); `None` when
    /// it never did in this boot.
    pub async fn started_at(&self, unit: &str) -> Result<Option<Duration>> {
        let (proxy, _) = self.unit_proxy(unit).await?;
        let usec = proxy
            .inactive_exit_timestamp_monotonic()
            .await
            .map_err(bus(format!("{unit}.InactiveExitTimestampMonotonic")))?;
        Ok((usec > 0).then(|| Duration::from_micros(usec)))
    }

    /// Waits, by PropertiesChanged signals (no polling), until `pred` holds for the unit's state.
    pub async fn wait_for<F>(&self, unit: &str, timeout: Duration, pred: F) -> Result<UnitState>
    where
        F: Fn(&UnitState) -> bool,
    {
        let stream = self.follow(unit).await?;
        let fut = async {
            let mut stream = std::pin::pin!(stream);
            while let Some(st) = stream.next().await {
                let st = st?;
                if pred(&st) {
                    return Ok(st);
                }
            }
            Err(SystemdError::JobFailed {
                unit: unit.into(),
                op: "watch",
                result: "property stream closed".into(),
            })
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| SystemdError::JobTimeout {
                unit: unit.into(),
                op: "watch",
                secs: timeout.as_secs(),
            })?
    }

    /// The unit's state now, then after every change systemd signals (PropertiesChanged on
    /// ActiveState or SubState; no polling). Ends when the bus closes.
    pub async fn follow(
        &self,
        unit: &str,
    ) -> Result<impl futures_util::Stream<Item = Result<UnitState>> + '_> {
        let (watch, _) = self.unit_proxy_with(unit, true).await?;
        let active = watch.receive_active_state_changed().await;
        let sub = watch.receive_sub_state_changed().await;
        let changes = futures_util::stream::select(active.map(|_| ()), sub.map(|_| ()));
        let unit = unit.to_string();
        Ok(futures_util::stream::unfold(
            (changes, watch, unit, true),
            move |(mut changes, watch, unit, first)| async move {
                if !first {
                    changes.next().await?;
                }
                let st = self.state(&unit).await;
                Some((st, (changes, watch, unit, false)))
            },
        ))
    }

    /// Enables units (their `[Install]` sections) as `systemctl enable` would, without a reload
    /// of our own: the caller reloads when it also changed unit files.
    pub async fn enable(&self, units: &[String]) -> Result<()> {
        self.counters.enable.fetch_add(1, Ordering::Relaxed);
        self.manager
            .enable_unit_files(units.to_vec(), false, true)
            .await
            .map(|_| ())
            .map_err(bus(format!("EnableUnitFiles {units:?}")))
    }
}

/// A stand-in for systemd under a scratch root: unit states live in
/// `<root>/run/nodectl/offline-systemd.json`. Nothing is started; the file says what would be.
#[derive(Clone)]
pub struct Offline {
    path: PathBuf,
    /// As [`Client`]'s.
    memo: Option<Memo>,
}

#[derive(Default, Serialize, Deserialize)]
struct OfflineState {
    units: BTreeMap<String, UnitState>,
    calls: CallCounts,
    /// Per unit, how often it was started or restarted (what systemd would run ExecStart for).
    #[serde(default)]
    started: BTreeMap<String, u32>,
    /// Per unit, when it was last started or restarted (CLOCK_MONOTONIC, microseconds).
    #[serde(default)]
    started_at: BTreeMap<String, u64>,
}

impl Offline {
    pub const STATE_FILE: &'static str = "run/nodectl/offline-systemd.json";

    pub fn new(root: &Path) -> Self {
        Offline {
            path: root.join(Self::STATE_FILE),
            memo: None,
        }
    }

    fn load(&self) -> Result<OfflineState> {
        match std::fs::read(&self.path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| SystemdError::Offline {
                path: self.path.clone(),
                msg: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(OfflineState::default()),
            Err(e) => Err(SystemdError::Offline {
                path: self.path.clone(),
                msg: e.to_string(),
            }),
        }
    }

    fn update(&self, f: impl FnOnce(&mut OfflineState)) -> Result<()> {
        let mut st = self.load()?;
        f(&mut st);
        let err = |e: std::io::Error| SystemdError::Offline {
            path: self.path.clone(),
            msg: e.to_string(),
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&st).expect("serializable")).map_err(err)?;
        std::fs::rename(&tmp, &self.path).map_err(err)
    }

    fn set_active(
        &self,
        unit: &str,
        active: bool,
        counter: fn(&mut CallCounts) -> &mut u32,
    ) -> Result<()> {
        self.update(|s| {
            *counter(&mut s.calls) += 1;
            if active {
                *s.started.entry(unit.to_string()).or_default() += 1;
                s.started_at
                    .insert(unit.to_string(), monotonic().as_micros() as u64);
            }
            let u = s
                .units
                .entry(unit.to_string())
                .or_insert_with(Offline::loaded);
            u.active = if active { "active" } else { "inactive" }.into();
            u.sub = if active { "running" } else { "dead" }.into();
            u.result = "success".into();
        })
    }

    pub fn calls(&self) -> Result<CallCounts> {
        Ok(self.load()?.calls)
    }

    fn loaded() -> UnitState {
        UnitState {
            load: "loaded".into(),
            active: "inactive".into(),
            sub: "dead".into(),
            ..UnitState::default()
        }
    }
}

/// The systemd the agent talks to.
#[derive(Clone)]
pub enum Systemd {
    Bus(Client),
    Offline(Offline),
}

impl Systemd {
    pub fn is_offline(&self) -> bool {
        matches!(self, Systemd::Offline(_))
    }

    /// The same systemd for one pass: what [`Systemd::brief`] answers is reused by the pass's
    /// later steps until a call of it changes units ([`crate::memo`]).
    pub fn for_pass(&self) -> Systemd {
        let mut s = self.clone();
        match &mut s {
            Systemd::Bus(c) => {
                c.memo = Some(Memo::default());
                c.jobs_ahead = Some(Arc::default());
            }
            Systemd::Offline(o) => o.memo = Some(Memo::default()),
        }
        s
    }

    /// Follows `unit`'s JobRemoved signals from now, for a job of it later in the pass
    /// ([`crate::jobs`]): returns once the AddMatch is sent, its reply read when the job
    /// comes. Nothing offline or outside a pass; replaces one watched before.
    pub async fn watch_jobs_ahead(&self, unit: &str) {
        let Systemd::Bus(c) = self else { return };
        let Some(ahead) = &c.jobs_ahead else { return };
        let watch = JobWatch::start(&c.conn, unit);
        *ahead.lock().expect("jobs ahead") = Some(watch);
        // (the task runs to its first wait, the reply: the AddMatch is then on the bus)
        tokio::task::yield_now().await;
    }

    fn memo(&self) -> Option<&Memo> {
        match self {
            Systemd::Bus(c) => c.memo.as_ref(),
            Systemd::Offline(o) => o.memo.as_ref(),
        }
    }

    /// Before a call that changes units: what was asked before no longer holds.
    fn forget(&self) {
        if let Some(m) = self.memo() {
            m.forget();
        }
    }

    pub async fn reload(&self) -> Result<()> {
        self.forget();
        let r = match self {
            Systemd::Bus(c) => c.reload().await,
            Systemd::Offline(o) => o.update(|s| s.calls.reload += 1),
        };
        if r.is_ok() {
            crash_point!("systemd::reload");
        }
        r
    }

    pub async fn start(&self, unit: &str) -> Result<()> {
        self.forget();
        let r = match self {
            Systemd::Bus(c) => c.start(unit).await,
            Systemd::Offline(o) => o.set_active(unit, true, |c| &mut c.start),
        };
        if r.is_ok() {
            crash_point!("systemd::start");
        }
        r
    }

    pub async fn restart(&self, unit: &str) -> Result<()> {
        self.forget();
        let r = match self {
            Systemd::Bus(c) => c.restart(unit).await,
            Systemd::Offline(o) => o.set_active(unit, true, |c| &mut c.restart),
        };
        if r.is_ok() {
            crash_point!("systemd::restart");
        }
        r
    }

    /// See [`Client::run_transient`]. Offline there is no systemd to run anything: an error.
    pub async fn run_transient(
        &self,
        unit: &str,
        argv: &[String],
        env: &[String],
        timeout: Duration,
    ) -> Result<()> {
        self.forget();
        match self {
            Systemd::Bus(c) => c.run_transient(unit, argv, env, timeout).await,
            Systemd::Offline(o) => Err(SystemdError::Offline {
                path: o.path.clone(),
                msg: format!("no systemd to run {unit}"),
            }),
        }
    }

    /// See [`Client::queue`]; offline the same as [`Self::start`] / [`Self::restart`].
    pub async fn queue(&self, unit: &str, restart: bool) -> Result<()> {
        self.forget();
        let r = match (self, restart) {
            (Systemd::Bus(c), _) => c.queue(unit, restart).await,
            (Systemd::Offline(o), false) => o.set_active(unit, true, |c| &mut c.start),
            (Systemd::Offline(o), true) => o.set_active(unit, true, |c| &mut c.restart),
        };
        if r.is_ok() {
            // (the job is queued; the process dies before it records anything of it)
            crash_point!("systemd::queue");
        }
        r
    }

    pub async fn stop(&self, unit: &str) -> Result<()> {
        self.forget();
        match self {
            Systemd::Bus(c) => c.stop(unit).await,
            Systemd::Offline(o) => o.set_active(unit, false, |c| &mut c.stop),
        }
    }

    pub async fn enable(&self, units: &[String]) -> Result<()> {
        self.forget();
        let r = match self {
            Systemd::Bus(c) => c.enable(units).await,
            Systemd::Offline(o) => o.update(|s| {
                s.calls.enable += 1;
                for u in units {
                    s.units
                        .entry(u.clone())
                        .or_insert_with(Offline::loaded)
                        .unit_file = "enabled".into();
                }
            }),
        };
        if r.is_ok() {
            crash_point!("systemd::enable");
        }
        r
    }

    pub async fn state(&self, unit: &str) -> Result<UnitState> {
        match self {
            Systemd::Bus(c) => c.state(unit).await,
            Systemd::Offline(o) => {
                Ok(o.load()?
                    .units
                    .get(unit)
                    .cloned()
                    .unwrap_or_else(|| UnitState {
                        load: "not-found".into(),
                        active: "inactive".into(),
                        sub: "dead".into(),
                        ..UnitState::default()
                    }))
            }
        }
    }

    /// See [`Client::brief`]; offline, the same as [`Systemd::state`].
    /// Within a pass ([`Systemd::for_pass`]), an answer given earlier in it is reused.
    pub async fn brief(&self, unit: &str, unit_file: bool) -> Result<UnitState> {
        let t = std::time::Instant::now();
        if let Some(m) = self.memo() {
            if let Some(ahead) = m.asked_ahead(unit).filter(|_| !unit_file) {
                let _ = ahead.await;
            }
            if let Some(st) = m.get(unit, unit_file) {
                tracing::debug!(
                    "{unit}: brief state as asked before in this pass ({:.1} ms)",
                    t.elapsed().as_secs_f64() * 1e3
                );
                return Ok(st);
            }
        }
        let asked = std::time::Instant::now();
        let generation = self.memo().map(Memo::generation);
        let st = match self {
            Systemd::Bus(c) => c.brief(unit, unit_file).await,
            Systemd::Offline(_) => self.state(unit).await,
        }?;
        if let (Some(m), Some(g)) = (self.memo(), generation) {
            m.put_unless_forgotten(unit, asked, &st, unit_file, g);
        }
        tracing::debug!(
            "{unit}: brief state asked ({:.1} ms)",
            t.elapsed().as_secs_f64() * 1e3
        );
        Ok(st)
    }

    /// Asks systemd for `unit`'s brief state (without its unit file state) in a task of its
    /// own, for a later step of the pass ([`Systemd::brief`] waits for it instead of asking
    /// again): the pass's first steps run while the question is on its way (kubelet's state,
    /// asked by kubelet-unit: one bus round trip, 6-12 ms under QEMU TCG, on a bundle's way to
    /// kubelet, when its `[Install]` link is in place; without it kubelet-unit asks the unit
    /// file state too, and asks). Returns once the question is sent, or at once offline and
    /// outside a pass. An answer that came while units changed is dropped; a failed one is
    /// asked again by the step, which reports its error.
    pub async fn ask_ahead(&self, unit: &str) {
        let (Systemd::Bus(c), Some(m)) = (self, self.memo()) else {
            return;
        };
        let (done, asking) = tokio::sync::oneshot::channel();
        m.asking(unit, futures_util::FutureExt::shared(asking));
        let (c, m, unit, generation) = (c.clone(), m.clone(), unit.to_string(), m.generation());
        tokio::spawn(async move {
            let asked = std::time::Instant::now();
            if let Ok(st) = c.brief(&unit, false).await {
                m.put_unless_forgotten(&unit, asked, &st, false, generation);
            }
            let _ = done.send(());
        });
        // (the task runs to its first wait, the reply: the question is then on the bus)
        tokio::task::yield_now().await;
    }

    /// See [`Client::started_at`]; offline, the time of the last start or restart recorded.
    pub async fn started_at(&self, unit: &str) -> Result<Option<Duration>> {
        match self {
            Systemd::Bus(c) => c.started_at(unit).await,
            Systemd::Offline(o) => Ok(o
                .load()?
                .started_at
                .get(unit)
                .map(|us| Duration::from_micros(*us))),
        }
    }

    /// See [`Client::environment_var`]; offline, systemd's merged view is not known: `None`.
    pub async fn environment_var(&self, unit: &str, name: &str) -> Result<Option<String>> {
        match self {
            Systemd::Bus(c) => c.environment_var(unit, name).await,
            Systemd::Offline(_) => Ok(None),
        }
    }

    pub fn calls(&self) -> Result<CallCounts> {
        match self {
            Systemd::Bus(c) => Ok(c.calls()),
            Systemd::Offline(o) => o.calls(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_assignment_of_a_variable_wins() {
        let env: Vec<String> = [
            "KUBELET_IMAGE=quay.io/poseidon/kubelet:v1.36.1",
            "KUBELET_IMAGE_X=no",
            "KUBELET_IMAGE=registry.example/kubelet:v1.36.1-fix",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            env_lookup(&env, "KUBELET_IMAGE").as_deref(),
            Some("registry.example/kubelet:v1.36.1-fix")
        );
        assert_eq!(env_lookup(&env, "KUBELET").as_deref(), None);
        assert_eq!(env_lookup(&[], "KUBELET_IMAGE"), None);
    }

    #[tokio::test]
    async fn offline_records_states_and_calls() {
        let d = std::env::temp_dir().join(format!("nodectl-offline-{}", std::process::id()));
        let s = Systemd::Offline(Offline::new(&d));
        assert_eq!(s.state("kubelet.service").await.unwrap().active, "inactive");
        s.reload().await.unwrap();
        s.enable(&["kubelet.service".into()]).await.unwrap();
        s.start("kubelet.service").await.unwrap();
        let st = s.state("kubelet.service").await.unwrap();
        assert_eq!(
            (st.active.as_str(), st.unit_file.as_str()),
            ("active", "enabled")
        );
        s.stop("kubelet.service").await.unwrap();
        assert_eq!(s.state("kubelet.service").await.unwrap().active, "inactive");
        let c = s.calls().unwrap();
        assert_eq!(
            (c.reload, c.enable, c.start, c.stop, c.restart),
            (1, 1, 1, 1, 0)
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Within a pass a brief answer is reused, until a call of the pass changes units; outside
    /// a pass every call asks.
    #[tokio::test]
    async fn a_pass_reuses_what_it_asked_until_it_changes_units() {
        let d = std::env::temp_dir().join(format!("nodectl-memo-{}", std::process::id()));
        let base = Systemd::Offline(Offline::new(&d));
        let pass = base.for_pass();
        let other = Systemd::Offline(Offline::new(&d));
        assert_eq!(
            pass.brief("kubelet.service", false).await.unwrap().active,
            "inactive"
        );
        // Started by someone else meanwhile: the pass keeps its answer, a call outside asks.
        other.start("kubelet.service").await.unwrap();
        assert_eq!(
            pass.brief("kubelet.service", false).await.unwrap().active,
            "inactive"
        );
        assert_eq!(
            base.brief("kubelet.service", false).await.unwrap().active,
            "active"
        );
        // A call of the pass that changes units: asked again.
        pass.stop("kubelet.service").await.unwrap();
        other.start("kubelet.service").await.unwrap();
        assert_eq!(
            pass.brief("kubelet.service", false).await.unwrap().active,
            "active"
        );
        // A pass that starts afresh asks.
        other.stop("kubelet.service").await.unwrap();
        assert_eq!(
            base.for_pass()
                .brief("kubelet.service", false)
                .await
                .unwrap()
                .active,
            "inactive"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
