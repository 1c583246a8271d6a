//! Feature `failpoints` (tests/run-tests.sh runs it): the crash campaign. A controller comes up
//! from nothing (its Typhoon bundle in the inbox, the API double issuing its certificate) with
//! `nodectl apply`, which is killed:
//! - at every crash point of the pass, each hit in turn (`FAILPOINTS=<point>=<k>*off->return`:
//!   the process aborts at hit k+1 of that point): temp file created, labeled, chowned,
//!   chmodded, written, fsynced, renamed; directory created, its metadata set, renamed into
//!   place; file removed; the credential store's file stored, link made, link switched; the CSR
//!   created; each systemd call done (EnableUnitFiles, Reload, StartUnit, RestartUnit: the
//!   process dies with systemd's reply read, nothing recorded of it; [`POINTS`] is the list);
//! - and with SIGKILL at random instants inside a pass (drawn from the reference pass's length;
//!   one that finds the pass already ended is drawn again, not counted).
//!
//! After each kill, every file the finished pass would have is absent or complete with its
//! final mode, owner and group (a directory may also still be 0700, as born), the credential store's
//! `kubelet-client-current.pem` names a complete certificate and key that match, and the next
//! pass converges to the same node, leaves no temp file, and kubelet was started at most as
//! often as in a pass that was not killed. Prints
//! `trials N, converged N, partial 0, mislabeled 0, wrong mode 0, wrong owner 0` and fails otherwise, or under
//! 500 trials.
//!
//! Two beds:
//! - tier 1 (`a_pass_killed_anywhere_...`): a scratch root per trial, systemd the offline
//!   stand-in (it records calls; starts are its count of start calls);
//! - tier 2 (`on_real_systemd_...`, ignored here; tests/nspawn/crash.sh runs it inside
//!   systemd-nspawn): this host's root, systemd PID 1 over the system bus, kubelet a stand-in
//!   unit whose every start is counted by systemd running its ExecStart.
//!
//! (No SELinux in either: labels are the VM tier's, tests/vm/suites/crash.sh; "mislabeled"
//! counts files whose security.selinux xattr differs from the finished pass's.)
#![cfg(feature = "failpoints")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
mod crash;
use common::{controller_bundle, controller_root, drop_bundle};
use crash::{check_killed, compared, is_temp, store_consistent, walk, Tally, Tree};

const POINTS: &[&str] = &[
    "fsio::temp",
    "fsio::chown",
    "fsio::chmod",
    "fsio::write",
    "fsio::fsync",
    "fsio::rename",
    "fsio::fixed",
    "fsio::mkdir",
    "fsio::dirmeta",
    "fsio::dirrename",
    "fsio::removed",
    "store::stored",
    "store::link",
    "store::switched",
    "csr::created",
    "systemd::enable",
    "systemd::reload",
    "systemd::start",
    "systemd::restart",
    "systemd::queue",
];
/// Points no `nodectl apply` pass of these scenarios reaches: no file whose content is right and
/// whose metadata is not; no job queued (only nodectld's first pass queues kubelet's start).
const NEVER_HIT: &[&str] = &["fsio::fixed", "systemd::queue"];
/// Points the daemon's pass on a fresh controller never reaches: its first pass queues
/// kubelet's start (no StartUnit waited for), and kubelet's unit is new to systemd, which loads
/// it when the job names it (no Reload).
const DAEMON_NEVER_HIT: &[&str] = &["fsio::fixed", "systemd::reload", "systemd::start"];
const MIN_TRIALS: usize = 500;
/// The daemon's campaign: every crash point of a fresh controller's pass, its first hits each
/// and every fourth after.
const MIN_DAEMON_TRIALS: usize = 60;
/// Sampled ([`Extent::Sample`]): `nodectl apply`'s campaign (~75 trials: three hits of each
/// point of two scenarios, 20 random kills) and the daemon's (~40).
const MIN_SAMPLED_TRIALS: usize = 50;
const MIN_SAMPLED_DAEMON_TRIALS: usize = 25;
/// Where a reference pass on the host tallies the crash points it reaches
/// (NODECTL_CRASH_TALLY; /run: nodectld.service, PrivateTmp=yes, writes there).
const HOST_TALLY: &str = "/run/nodectl-crash-tally";

/// Where the trials run.
trait Bed: Send {
    /// A fresh node with the bundle in its inbox: its root.
    fn fresh(&mut self) -> PathBuf;
    /// Every entry of the node (temp files too).
    fn tree(&self, root: &Path) -> Tree;
    /// kubelet's starts since [`Bed::fresh`].
    fn starts(&self, root: &Path) -> u64;
    /// Anything else a converged node shows.
    fn settled(&self, root: &Path) -> Result<(), String>;
    /// One pass over the node with crash points armed (FAILPOINTS syntax): `nodectl apply`
    /// here; nodectld.service on the daemon bed. Err when it died or failed (its output).
    /// With `tally`, it appends the name of every crash point it reaches to that file
    /// (NODECTL_CRASH_TALLY).
    fn pass(
        &self,
        root: &Path,
        failpoints: Option<&str>,
        tally: Option<&Path>,
    ) -> Result<(), String> {
        apply_pass(root, failpoints, tally)
    }
    /// The file a tallied [`Bed::pass`] appends to.
    fn tally(&self) -> PathBuf {
        std::env::temp_dir().join(format!("nodectl-crash-tally.{}", std::process::id()))
    }
    /// Whether random SIGKILLs are part of this bed's campaign.
    fn random_kills(&self) -> bool {
        true
    }
    /// After a trial at hit k+1 of a point, the next hit to kill at is k+1+stride: every hit
    /// (1), or on the daemon bed, whose trials cost a start of the unit, every fourth after the
    /// first four.
    fn stride(&self, _k: usize) -> usize {
        1
    }
    /// kubelet's starts in a pass that is not killed: one (a `nodectl apply` pass has the
    /// node's credentials before it starts kubelet); the daemon's controller starts kubelet
    /// standalone, then restarts it once the credentials came: two.
    fn reference_starts(&self) -> u64 {
        1
    }
    /// What explains a trial that did not converge (printed with it).
    fn diagnose(&self) -> String {
        String::new()
    }
    /// A crash point at which a pass that is not killed has every file in a whole version of
    /// its own, between the old node and the finished one (the daemon's controller: kubelet
    /// standalone, its `kubelet.env` without credentials, when the certificate request is
    /// made); a kill may leave those versions too.
    fn between(&self) -> Option<&'static str> {
        None
    }
}

/// What every bed's converged node shows: no restart owed (a marker left in /run/nodectl).
fn nothing_owed(root: &Path) -> Result<(), String> {
    let left: Vec<_> = std::fs::read_dir(root.join("run/nodectl"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".restart-pending"))
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("restarts still owed: {left:?}"))
    }
}

/// A scratch root per trial; systemd the offline stand-in.
struct Scratch {
    bundle: String,
    current: Option<tempfile::TempDir>,
}

impl Bed for Scratch {
    fn fresh(&mut self) -> PathBuf {
        let d = controller_root();
        drop_bundle(d.path(), "assets", &self.bundle);
        let root = d.path().to_path_buf();
        self.current = Some(d);
        root
    }
    fn tree(&self, root: &Path) -> Tree {
        // /run is the offline systemd's record
        walk(root, &[""], &|rel, _| !rel.starts_with("run"))
    }
    fn starts(&self, root: &Path) -> u64 {
        let Ok(t) = std::fs::read_to_string(root.join("run/nodectl/offline-systemd.json")) else {
            return 0; // no call yet
        };
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        v["started"]["kubelet.service"].as_u64().unwrap_or(0)
    }
    /// kubelet active; the oneshots that apply sysctl.d and modules-load.d started since the
    /// node was fresh (their files are written once, in the Fresh pass); nothing owed.
    fn settled(&self, root: &Path) -> Result<(), String> {
        let t = std::fs::read_to_string(root.join("run/nodectl/offline-systemd.json"))
            .map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        if v["units"]["kubelet.service"]["active"] != "active" {
            return Err(format!("kubelet.service {}", v["units"]["kubelet.service"]));
        }
        for unit in ["systemd-sysctl.service", "systemd-modules-load.service"] {
            if v["started"][unit].as_u64().unwrap_or(0) == 0 {
                return Err(format!("{unit} never restarted after its file was written"));
            }
        }
        nothing_owed(root)
    }
}

/// This host (inside systemd-nspawn): systemd PID 1; kubelet a stand-in unit that counts its
/// starts in [`Host::STARTS`] (tests/nspawn/crash.sh sets it up).
struct Host {
    bundle: String,
    /// The node before the first pass: what [`Bed::fresh`] puts back.
    baseline: Tree,
    /// Passes are nodectld.service's (the daemon with crash points, as installed by
    /// tests/nspawn/crash.sh), not `nodectl apply`'s.
    daemon: bool,
}

impl Host {
    /// Where nodectld writes (and the units it installs live).
    const TOPS: &[&str] = &[
        "etc",
        "opt",
        "var/lib/kubelet",
        "var/lib/nodectl",
        "var/log/pods",
    ];
    const STARTS: &str = "/run/kubelet-standin.starts";

    fn new(bundle: String, daemon: bool) -> Host {
        let mut h = Host {
            bundle,
            baseline: Tree::new(),
            daemon,
        };
        h.baseline = h.tree(Path::new("/"));
        h
    }

    /// The node as it was before the campaign (what each trial starts from, and what a
    /// campaign leaves for the next).
    fn reset(&mut self) {
        let root = Path::new("/");
        systemctl(&["stop", "kubelet.service"]);
        systemctl(&["reset-failed", "kubelet.service"]);
        let now = self.tree(root);
        // children sort after their directory: reversed, they go first
        for (rel, e) in now.iter().rev() {
            if !self.baseline.contains_key(rel) {
                let p = root.join(rel);
                let _ = if e.dir && !e.symlink {
                    std::fs::remove_dir_all(p)
                } else {
                    std::fs::remove_file(p)
                };
            }
        }
        for (rel, e) in &self.baseline {
            if let (true, Some(n)) = (e.dir, now.get(rel)) {
                if n.mode != e.mode {
                    let perm = std::os::unix::fs::PermissionsExt::from_mode(e.mode);
                    std::fs::set_permissions(root.join(rel), perm).unwrap();
                }
            }
            assert!(
                e.dir || now.get(rel) == Some(e),
                "the campaign changed {}, which the node had before it",
                rel.display()
            );
        }
        let _ = std::fs::remove_dir_all("/run/nodectl");
        std::fs::write(Host::STARTS, "").unwrap();
        // systemd forgets the units the last trial installed, as on a node that never had them
        systemctl(&["daemon-reload"]);
    }
}

fn systemctl(args: &[&str]) -> String {
    let out = Command::new("systemctl").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Bed for Host {
    fn fresh(&mut self) -> PathBuf {
        self.reset();
        let root = Path::new("/");
        drop_bundle(root, "assets", &self.bundle);
        root.to_path_buf()
    }
    fn pass(
        &self,
        root: &Path,
        failpoints: Option<&str>,
        tally: Option<&Path>,
    ) -> Result<(), String> {
        match self.daemon {
            false => apply_pass(root, failpoints, tally),
            true => self.daemon_pass(failpoints, tally),
        }
    }
    fn tally(&self) -> PathBuf {
        PathBuf::from(HOST_TALLY)
    }
    fn reference_starts(&self) -> u64 {
        if self.daemon {
            2
        } else {
            1
        }
    }
    fn random_kills(&self) -> bool {
        !self.daemon // (the VM tier kills the daemon at random instants: crash.sh)
    }
    fn between(&self) -> Option<&'static str> {
        self.daemon.then_some("csr::created=0*off->return")
    }
    /// The daemon's journal lines about kubelet's jobs and the restart owed, since the trial's
    /// kill (the last three starts of nodectld.service).
    fn diagnose(&self) -> String {
        if !self.daemon {
            return String::new();
        }
        let out = Command::new("journalctl")
            .args([
                "-u",
                "nodectld.service",
                "-u",
                "kubelet.service",
                "--since",
                "-60s",
            ])
            .args(["--no-pager", "-o", "short-monotonic"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| {
                [
                    "kubelet",
                    "restart",
                    "queued",
                    "Started",
                    "Starting",
                    "credentials",
                    "pass finished",
                ]
                .iter()
                .any(|k| l.contains(k))
            })
            .collect();
        lines[lines.len().saturating_sub(40)..].join("\n    ")
    }
    fn stride(&self, k: usize) -> usize {
        if self.daemon && k >= 3 {
            4
        } else {
            1
        }
    }
    fn tree(&self, root: &Path) -> Tree {
        walk(root, Host::TOPS, &|_, _| true)
    }
    fn starts(&self, _: &Path) -> u64 {
        std::fs::read_to_string(Host::STARTS)
            .unwrap_or_default()
            .lines()
            .count() as u64
    }
    /// kubelet runs, and each boot-time oneshot ran (its conditions checked: in a container
    /// they skip it) after nodectld last wrote its file.
    fn settled(&self, root: &Path) -> Result<(), String> {
        match systemctl(&["is-active", "kubelet.service"]).as_str() {
            "active" => {}
            s => return Err(format!("kubelet.service {s}")),
        }
        for (file, unit) in [
            (
                "/etc/sysctl.d/50-nodectl.conf",
                "systemd_2dsysctl_2eservice",
            ),
            (
                "/etc/modules-load.d/nodectl.conf",
                "systemd_2dmodules_2dload_2eservice",
            ),
        ] {
            let written = std::fs::metadata(file)
                .and_then(|m| m.modified())
                .map_err(|e| format!("{file}: {e}"))?;
            let out = Command::new("busctl")
                .args(["get-property", "org.freedesktop.systemd1"])
                .arg(format!("/org/freedesktop/systemd1/unit/{unit}"))
                .args(["org.freedesktop.systemd1.Unit", "ConditionTimestamp"])
                .output()
                .unwrap();
            // "t <µs since the epoch>"
            let text = String::from_utf8_lossy(&out.stdout);
            let ran = text
                .trim()
                .strip_prefix("t ")
                .and_then(|us| us.parse::<u64>().ok())
                .map(|us| std::time::UNIX_EPOCH + Duration::from_micros(us))
                .ok_or_else(|| format!("{unit}: ConditionTimestamp {text:?}"))?;
            if ran < written {
                return Err(format!("{unit} did not run after {file} was written"));
            }
        }
        nothing_owed(root)
    }
}

impl Host {
    const DROP_IN: &str = "/run/systemd/system/nodectld.service.d/50-crash.conf";

    /// nodectld.service from its start until the node converged (then stopped) or it died (a
    /// crash point aborts it): Restart=no, no core files; FAILPOINTS in its environment.
    fn daemon_pass(&self, failpoints: Option<&str>, tally: Option<&Path>) -> Result<(), String> {
        let mut env = failpoints.map_or(String::new(), |f| format!("Environment=FAILPOINTS={f}\n"));
        if let Some(t) = tally {
            env += &format!("Environment=NODECTL_CRASH_TALLY={}\n", t.display());
        }
        let dir = Path::new(Host::DROP_IN).parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            Host::DROP_IN,
            format!("[Service]\nRestart=no\nLimitCORE=0\n{env}"),
        )
        .unwrap();
        systemctl(&["daemon-reload"]);
        systemctl(&["reset-failed", "nodectld.service"]);
        systemctl(&["start", "--no-block", "nodectld.service"]);
        let start = Instant::now();
        let result = loop {
            let state = systemctl(&["show", "-p", "ActiveState", "--value", "nodectld.service"]);
            let text = systemctl(&["show", "-p", "StatusText", "--value", "nodectld.service"]);
            match state.as_str() {
                "failed" | "inactive" if start.elapsed() > Duration::from_millis(200) => {
                    break Err(format!("nodectld.service {state} ({text})"));
                }
                // (a controller reports converged with kubelet standalone; the pass is over
                // once the node's credentials are stored and kubelet restarted with them, as
                // `nodectl apply`'s is)
                "active"
                    if text == "node converged"
                        && Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem")
                            .exists()
                        && nothing_owed(Path::new("/")).is_ok() =>
                {
                    break Ok(())
                }
                _ if start.elapsed() > Duration::from_secs(60) => {
                    break Err(format!("nodectld.service {state} after 60 s ({text})"));
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        systemctl(&["stop", "nodectld.service"]);
        let _ = std::fs::remove_file(Host::DROP_IN);
        result
    }
}

fn nodectl() -> Command {
    // NODECTL_BIN: the binary with crash points where this test runs apart from its build
    // (tests/nspawn/crash.sh)
    Command::new(
        std::env::var_os("NODECTL_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_nodectl").into()),
    )
}

/// A `nodectl apply` pass: Err with its exit status and output when it failed or died.
fn apply_pass(root: &Path, failpoints: Option<&str>, tally: Option<&Path>) -> Result<(), String> {
    let out = apply(root, failpoints, tally);
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout)
        )),
    }
}

fn apply(root: &Path, failpoints: Option<&str>, tally: Option<&Path>) -> std::process::Output {
    let mut c = nodectl();
    c.arg("--root").arg(root).arg("apply");
    match failpoints {
        Some(f) => c.env("FAILPOINTS", f),
        None => c.env_remove("FAILPOINTS"),
    };
    match tally {
        Some(t) => c.env("NODECTL_CRASH_TALLY", t),
        None => c.env_remove("NODECTL_CRASH_TALLY"),
    };
    c.output().unwrap()
}

/// What a pass that is not killed leaves, and kubelet's starts in it.
struct Reference {
    /// The node before the pass (what a kill may also leave).
    old: Tree,
    /// The node at [`Bed::between`] (whole versions a kill may also leave).
    between: Option<Tree>,
    want: Tree,
    starts: u64,
    pass: Duration,
    /// How often the pass reached each crash point (its NODECTL_CRASH_TALLY), in [`POINTS`]'s
    /// order.
    hits: Vec<(&'static str, usize)>,
}

fn compared_tree(bed: &dyn Bed, root: &Path) -> Tree {
    let mut t = bed.tree(root);
    t.retain(|rel, _| compared(rel, &rel.file_name().unwrap().to_string_lossy()));
    t
}

/// After a kill: nothing partial; then the next passes converge to the reference node, leave
/// no temp file, and kubelet started no more often than in the reference.
fn trial(bed: &dyn Bed, (root, before): (&Path, u64), r: &Reference, t: &mut Tally, name: &str) {
    t.trials += 1;
    let have = compared_tree(bed, root);
    check_killed(root, (&have, &r.old, &r.want), r.between.as_ref(), t, name);
    let out = bed.pass(root, None, None);
    let again = bed.pass(root, None, None);
    let have = compared_tree(bed, root);
    let temps: Vec<_> = bed
        .tree(root)
        .into_keys()
        .filter(|k| is_temp(&k.file_name().unwrap().to_string_lossy()))
        .collect();
    let starts = bed.starts(root) - before;
    let settled = bed.settled(root);
    let ok = out.is_ok()
        && again.is_ok()
        && have == r.want
        && temps.is_empty()
        && store_consistent(root).is_ok()
        && settled.is_ok();
    // exactly as often as the pass not killed: never twice, and never lost
    if ok && starts == r.starts {
        t.converged += 1;
    } else {
        let diff: Vec<String> = have
            .iter()
            .filter(|(k, v)| r.want.get(*k) != Some(v))
            .map(|(k, _)| k.display().to_string())
            .chain(
                r.want
                    .keys()
                    .filter(|k| !have.contains_key(*k))
                    .map(|k| format!("missing {}", k.display())),
            )
            .take(5)
            .collect();
        eprintln!(
            "{name}: not converged (starts {starts}, want {}, {settled:?}, temp files {temps:?}, differs: {diff:?}): {:?} {:?}",
            r.starts, out, again
        );
        let why = bed.diagnose();
        if !why.is_empty() {
            eprintln!("  {name}: its journal:\n    {why}");
        }
    }
}

/// What a trial starts from and the change its pass makes.
#[derive(Clone, Copy, Debug)]
enum Scenario {
    /// A fresh node, the controller's bundle in its inbox.
    Fresh,
    /// That node converged, then the operator changes kubelet's image: the drop-in is
    /// rewritten, systemd reloaded, kubelet restarted.
    ImageChange,
}

/// A node ready for the scenario's pass: its root and kubelet's starts so far.
fn prepare(bed: &mut dyn Bed, s: Scenario) -> (PathBuf, u64) {
    let root = bed.fresh();
    if let Scenario::ImageChange = s {
        bed.pass(&root, None, None).unwrap();
        std::fs::write(
            root.join("etc/nodectl/config.d/20-image.toml"),
            "[kubelet]\nimage = \"quay.io/poseidon/kubelet:v1.36.2\"\n",
        )
        .unwrap();
    }
    let before = bed.starts(&root);
    (root, before)
}

fn reference(bed: &mut dyn Bed, s: Scenario) -> Reference {
    let between = bed.between().map(|point| {
        let (root, _) = prepare(bed, s);
        assert!(
            bed.pass(&root, Some(point), None).is_err(),
            "{s:?}: the pass did not reach {point}"
        );
        compared_tree(bed, &root)
    });
    let (root, before) = prepare(bed, s);
    let old = compared_tree(bed, &root);
    let tally = bed.tally();
    let _ = std::fs::remove_file(&tally);
    let start = Instant::now();
    bed.pass(&root, None, Some(&tally)).unwrap();
    let pass = start.elapsed();
    let reached = std::fs::read_to_string(&tally).unwrap_or_default();
    let _ = std::fs::remove_file(&tally);
    let hits = POINTS
        .iter()
        .map(|p| (*p, reached.lines().filter(|l| l == p).count()))
        .collect();
    let want = compared_tree(bed, &root);
    assert!(
        want.contains_key(Path::new("etc/kubernetes/pki/ca.key")),
        "{want:?}"
    );
    store_consistent(&root).unwrap();
    bed.settled(&root).unwrap();
    let starts = bed.starts(&root) - before;
    assert_eq!(
        starts,
        bed.reference_starts(),
        "{s:?}: the reference pass started kubelet {starts} times"
    );
    eprintln!("{s:?}: reference pass {pass:?}, kubelet started {starts} time(s)");
    Reference {
        old,
        between,
        want,
        starts,
        pass,
        hits,
    }
}

/// How much of a campaign runs (CRASH_CAMPAIGN): `sample` (the default; the test command's)
/// or `full` (`tests/run-tests.sh --full`; docs/testing.md's figures).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extent {
    /// Every crash point at its first and last hit in the pass and at one hit between drawn
    /// from the seed; a few SIGKILLs at random instants.
    Sample,
    /// Every hit of every crash point (the bed's stride), then SIGKILLs at random instants.
    Full,
}

impl Extent {
    fn from_env() -> Extent {
        match std::env::var("CRASH_CAMPAIGN").as_deref() {
            Ok("full") => Extent::Full,
            Ok("sample") | Ok("") | Err(_) => Extent::Sample,
            Ok(other) => panic!("CRASH_CAMPAIGN={other:?}: sample or full"),
        }
    }
    fn pick<T>(self, sample: T, full: T) -> T {
        match self {
            Extent::Sample => sample,
            Extent::Full => full,
        }
    }
}

/// The hits (0-based) at which a sampled campaign kills a point the pass reached `n` times:
/// the first, the last and one between them drawn from `draws`.
fn sampled_hits(n: usize, draws: &mut crash::Draws) -> Vec<usize> {
    if n == 0 {
        return vec![];
    }
    let mut ks = vec![0];
    if n > 2 {
        ks.push(1 + (draws.fraction() * (n - 2) as f64) as usize);
    }
    if n > 1 {
        ks.push(n - 1);
    }
    ks
}

/// Each crash point killed at its hits ([`Extent`]), then SIGKILLs at random instants, as many
/// as `random` says given the trials so far. Returns how often each point was hit in the
/// reference pass.
fn scenario(
    bed: &mut dyn Bed,
    s: Scenario,
    t: &mut Tally,
    extent: Extent,
    random: impl Fn(usize) -> usize,
) -> Vec<(&'static str, usize)> {
    let r = reference(bed, s);
    let first = t.trials;
    let mut draws = crash::Draws::from_env(s as u64);
    let mut ended_early = 0;
    for &(point, n) in &r.hits {
        let kill_at = |bed: &mut dyn Bed, k: usize, t: &mut Tally| -> bool {
            let (root, before) = prepare(bed, s);
            if bed
                .pass(&root, Some(&format!("{point}={k}*off->return")), None)
                .is_ok()
            {
                return false; // the pass ended before hit k+1
            }
            let name = format!("{s:?}: {point} hit {}", k + 1);
            trial(bed, (&root, before), &r, t, &name);
            true
        };
        match extent {
            Extent::Full => {
                let mut k = 0;
                while kill_at(bed, k, t) {
                    k += bed.stride(k);
                }
            }
            Extent::Sample => {
                for k in sampled_hits(n, &mut draws) {
                    if !kill_at(bed, k, t) {
                        // (this pass reached the point less often than the reference's)
                        eprintln!("{s:?}: {point}: the pass ended before hit {}", k + 1);
                        ended_early += 1;
                    }
                }
            }
        }
    }
    let list: Vec<String> = r.hits.iter().map(|(p, k)| format!("{p} {k}")).collect();
    eprintln!("{s:?}: hits per crash point in a pass: {}", list.join(", "));
    let deterministic = t.trials - first;
    // (a pass may reach a point a time less than the reference's did; most sampled hits land)
    assert!(
        ended_early * 4 <= deterministic,
        "{s:?}: {ended_early} sampled hits were not reached, {deterministic} were: the passes differ from the reference's"
    );
    let random = if bed.random_kills() {
        random(t.trials)
    } else {
        0
    };
    // Drawn inside the reference pass; a kill that finds the process already exited (its pass
    // ran faster than the reference's) is not a trial and is drawn again.
    let (mut landed, mut late) = (0, 0);
    while landed < random {
        let (root, before) = prepare(bed, s);
        let at = Duration::from_micros((draws.fraction() * r.pass.as_micros() as f64) as u64);
        let mut child = nodectl()
            .arg("--root")
            .arg(&root)
            .arg("apply")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        if child.try_wait().unwrap().is_some() {
            late += 1;
            assert!(
                late <= 2 * random + 20,
                "{late} kills came after the pass had ended"
            );
            continue;
        }
        let _ = child.kill();
        let _ = child.wait();
        landed += 1;
        trial(
            bed,
            (&root, before),
            &r,
            t,
            &format!("{s:?}: SIGKILL at {at:?}"),
        );
    }
    eprintln!(
        "{s:?}: {deterministic} trials at crash points ({extent:?}), {random} at random instants inside the pass ({late} drawn after it had ended, not counted)"
    );
    r.hits
}

/// Both scenarios. Sampled ([`Extent::Sample`]): every point at three hits at most, 10 random
/// kills each. Full: every hit, 50 random kills in the image change and enough in the fresh
/// node's pass (at least 100) for [`MIN_TRIALS`] trials in all (CRASH_TRIALS for more).
fn campaign(bed: &mut dyn Bed, extent: Extent) -> Tally {
    let mut t = Tally::default();
    let hits = if extent == Extent::Sample {
        let mut hits = scenario(bed, Scenario::ImageChange, &mut t, extent, |_| 10);
        hits.extend(scenario(bed, Scenario::Fresh, &mut t, extent, |_| 10));
        hits
    } else {
        let mut hits = scenario(bed, Scenario::ImageChange, &mut t, extent, |_| 50);
        let trials: usize = std::env::var("CRASH_TRIALS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(MIN_TRIALS);
        hits.extend(scenario(bed, Scenario::Fresh, &mut t, extent, |done| {
            trials.saturating_sub(done).max(100)
        }));
        hits
    };
    every_point_hit(&hits, &format!("{:?}", nodectl().get_program()), NEVER_HIT);
    t
}

/// Every crash point was hit in some pass of `by` (a binary built without crash points never
/// aborts: all would count 0), but those listed as out of these scenarios' reach, which are not.
fn every_point_hit(hits: &[(&str, usize)], by: &str, never: &[&str]) {
    for point in POINTS {
        let hit = hits.iter().any(|(p, k)| p == point && *k > 0);
        assert_eq!(
            hit,
            !never.contains(point),
            "{point}: hit {hit} by {by} (built with feature failpoints?)"
        );
    }
}

/// The host campaigns change this host's root: only inside tests/nspawn/crash.sh's container.
fn assert_in_crash_container() {
    assert!(
        std::env::var_os("NODECTL_CRASH_HOST").is_some()
            && Path::new("/run/systemd/container").exists(),
        "runs only inside a container with NODECTL_CRASH_HOST=1 (tests/nspawn/crash.sh)"
    );
}

fn report(t: &Tally, min_trials: usize) {
    println!(
        "trials {}, converged {}, partial {}, mislabeled {}, wrong mode {}, wrong owner {}",
        t.trials,
        t.converged,
        t.partial.len(),
        t.mislabeled.len(),
        t.wrong_mode.len(),
        t.wrong_owner.len()
    );
    for v in t
        .partial
        .iter()
        .chain(&t.wrong_mode)
        .chain(&t.wrong_owner)
        .chain(&t.mislabeled)
        .take(20)
    {
        println!("  {v}");
    }
    assert!(t.trials >= min_trials, "{} trials", t.trials);
    assert_eq!(t.converged, t.trials);
    assert!(
        t.partial.is_empty()
            && t.mislabeled.is_empty()
            && t.wrong_mode.is_empty()
            && t.wrong_owner.is_empty()
    );
}

async fn bundle() -> (nodectl_apiserver_double::Double, String) {
    let api = nodectl_apiserver_double::Double::start(Default::default())
        .await
        .unwrap();
    let bundle = controller_bundle(api.bootstrap_kubeconfig(common::TOKEN).trim_end());
    (api, bundle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_killed_anywhere_leaves_nothing_partial_and_the_next_converges() {
    let (_api, bundle) = bundle().await;
    let mut bed = Scratch {
        bundle,
        current: None,
    };
    let extent = Extent::from_env();
    let t = tokio::task::spawn_blocking(move || campaign(&mut bed, extent))
        .await
        .unwrap();
    report(&t, extent.pick(MIN_SAMPLED_TRIALS, MIN_TRIALS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "changes this host's /etc, /opt and /var/lib: tests/nspawn/crash.sh runs it in systemd-nspawn"]
async fn on_real_systemd_a_pass_killed_anywhere_leaves_nothing_partial_and_the_next_converges() {
    assert_in_crash_container();
    let (_api, bundle) = bundle().await;
    let extent = Extent::from_env();
    let t = tokio::task::spawn_blocking(move || {
        let mut bed = Host::new(bundle, false);
        let t = campaign(&mut bed, extent);
        bed.reset(); // as found: the daemon's campaign may follow in this container
        t
    })
    .await
    .unwrap();
    report(&t, extent.pick(MIN_SAMPLED_TRIALS, MIN_TRIALS));
}

/// The daemon's campaign (tier 2): nodectld.service, with crash points, killed at each of them
/// in the pass it runs on a fresh controller (what `nodectl apply` never runs: the read-ahead
/// of the bundle before the bus questions, kubelet's start queued and its JobRemoved watched),
/// then started again without them; the same checks. At least [`MIN_DAEMON_TRIALS`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs nodectld.service on this host: tests/nspawn/crash.sh runs it in systemd-nspawn"]
async fn on_real_systemd_the_daemon_killed_at_each_crash_point_leaves_nothing_partial() {
    assert_in_crash_container();
    let (_api, bundle) = bundle().await;
    let extent = Extent::from_env();
    let t = tokio::task::spawn_blocking(move || {
        let mut bed = Host::new(bundle, true);
        let mut t = Tally::default();
        let hits = scenario(&mut bed, Scenario::Fresh, &mut t, extent, |_| 0);
        every_point_hit(&hits, "the daemon", DAEMON_NEVER_HIT);
        bed.reset();
        t
    })
    .await
    .unwrap();
    println!("daemon:");
    report(
        &t,
        extent.pick(MIN_SAMPLED_DAEMON_TRIALS, MIN_DAEMON_TRIALS),
    );
}
