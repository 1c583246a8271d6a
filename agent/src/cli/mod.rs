//! `nodectl`: status, plan, apply, converge, audit, config check, the reboot lock.
//!
//! `status`: the status from nodectld or, without it, from the disk; `audit`: `nodectl audit`.

mod audit;
mod config_cmd;
mod converge;
mod fleet;
mod follow;
mod import;
mod reboot;
mod status_cmd;
mod wait;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kubectl_nodectl::exit;
use nodectl_units::systemd::{Client, Offline, Systemd};

use crate::engine::Cx;
use crate::root::Root;
use crate::status::{self, Status};
use crate::{load, steps};

/// How long `nodectl apply` waits for a pass under way (nodectld's) before it gives up.
const APPLY_LOCK_WAIT: u64 = 600;

/// The `nodectl` command line.
#[derive(Parser, Debug)]
#[command(
    name = "nodectl",
    version,
    about = "Inspect and drive nodectld, the Kubernetes node agent"
)]
pub struct Cli {
    /// Run against this root instead of `/` (a scratch directory; systemd is then simulated in
    /// <root>/run/nodectl/offline-systemd.json).
    #[arg(long, global = true, default_value = "/")]
    pub root: PathBuf,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The `nodectl` commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show the agent, the host and every step (asks nodectld over D-Bus; reads the disk when it
    /// is not running).
    Status {
        /// Machine-readable output (schema: docs/status.md).
        #[arg(long)]
        json: bool,
    },
    /// Show what a pass would change and why. Changes nothing. Exit 0; 2: with
    /// `--detailed-exitcode`, changes pending; 3: a step failed.
    Plan {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Exit 2 when changes are pending (0: none, 3: a step failed, 1: error).
        #[arg(long)]
        detailed_exitcode: bool,
    },
    /// Run one convergence pass here (without the daemon). Exit 0: converged; 3: a step failed;
    /// 5: another pass (nodectld's) did not end within 10 minutes.
    Apply {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Ask nodectld to run a pass now (root only). Exit 0: asked (`--wait`: the pass ran and
    /// every step converged); 3: `--wait`, a step failed; 4: nodectld is not running; 5:
    /// `--wait`, timed out; 1: error.
    Converge {
        /// Wait until the pass ran (its progress on a terminal).
        #[arg(long)]
        wait: bool,
        /// With `--wait`: give up after this many seconds.
        #[arg(long, default_value_t = 600, requires = "wait")]
        timeout: u64,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check the node against a security review's node-level findings (docs/security.md).
    /// Exit 0: none; 2: medium or low only; 3: a high finding; 1: error.
    Audit {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Apply the safe fixes (remove etcd credentials from a worker, fix key modes and
        /// labels), each logged; then audit again.
        #[arg(long)]
        fix: bool,
    },
    /// Wait until these steps are converged (an ordering point for units that need them, e.g.
    /// Typhoon's bootstrap.service: `ExecStartPre=nodectl wait secrets`). Exit 0: converged;
    /// 3: the config is invalid; 5: timed out (what each step waits for is printed; a failed
    /// step is waited out, a later pass may mend it); 64: no such step.
    Wait {
        /// Step ids (`nodectl status` lists them), e.g. `secrets`, `kubelet-running`.
        #[arg(required = true)]
        steps: Vec<String>,
        /// Give up after this many seconds (an hour: Terraform's SSH, which runs the units that
        /// wait, waits as long).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        /// Machine-readable output (one object when it ends).
        #[arg(long)]
        json: bool,
    },
    /// Hand a Typhoon assets bundle to nodectld (root only), as Typhoon's Terraform delivers it:
    /// `ssh.tf` copies it to /home/core/assets and runs /opt/bootstrap/layout, which is
    /// `nodectl import assets` on a nodectl node. Checks it first (nothing is handed over from a
    /// bundle nodectld would refuse), puts it in the inbox atomically (0600), removes FILE, and
    /// waits until nodectld placed it. Exit 0: placed; 3: refused; 5: timed out; 1: error.
    Import {
        /// The bundle (terraform-render-bootstrap's `##### <path>` records).
        file: PathBuf,
        /// Return once it is in the inbox, without waiting for nodectld to place it.
        #[arg(long)]
        no_wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        /// Machine-readable output: one object when it ends (what it says goes to stderr).
        #[arg(long)]
        json: bool,
    },
    /// Every node's nodectld state (its NodectlReady condition and annotations), unhealthy
    /// first, with an operator's kubeconfig (`kubectl nodectl fleet` on a workstation). Exit 0:
    /// all ready; 2: some not; 1: error.
    Fleet {
        /// Which cluster, as who (as `kubectl nodectl fleet` takes them).
        #[command(flatten)]
        target: fleet::Target,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// nodectld's settings, offline (docs/config.md).
    Config {
        /// What to do with them.
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// This node's reboots (root only; docs/reboot.md "Operator verbs").
    Reboot {
        /// What to do.
        #[command(subcommand)]
        action: RebootAction,
    },
    /// The group's reboot lock (a Lease; docs/reboot.md).
    RebootLock {
        /// What to do with the lock.
        #[command(subcommand)]
        action: RebootLockAction,
    },
}

/// What to do with the settings.
#[derive(Subcommand, Debug)]
pub enum ConfigAction {
    /// Check the settings as nodectld would take them, without it: the fragments under the
    /// root's config directories, or FILES alone in their order. Exit 0: valid; 3: invalid
    /// (the file and key are named).
    Check {
        /// Fragments to check instead of the root's (merged in this order, later files win).
        files: Vec<PathBuf>,
        /// Check for a node of this OS (its defaults) instead of this host's.
        #[arg(long, value_enum)]
        os: Option<config_cmd::CheckOs>,
        /// Machine-readable output: `{"valid": true, "settings": ...}` or `{"valid": false,
        /// "error": ...}`.
        #[arg(long)]
        json: bool,
    },
}

/// An operator's verb on this node's reboots.
#[derive(Subcommand, Debug)]
pub enum RebootAction {
    /// Reboot now: take this node's slot of its group (a maintenance hold of its own becomes
    /// it), run the pre-reboot checks, drain, reboot through logind; the slot goes back after
    /// the boot. Waits as an update's reboot would for the windows, gates and settle time.
    Now {
        /// Pass by the windows, the gates, the settle time and the checks (never by the slot
        /// or the drain).
        #[arg(long)]
        force: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Hold this node's slot of its group for maintenance: no other node of the group
    /// reboots and no update reboots this one until `nodectl reboot release` (or `reboot now`).
    Hold {
        /// Why (shown in the Lease, the status and `kubectl nodectl reboots`).
        #[arg(long, default_value = "maintenance")]
        reason: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Give the maintenance hold back.
    Release {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// What to do with the reboot lock.
#[derive(Subcommand, Debug)]
pub enum RebootLockAction {
    /// Free a stuck slot (root only): a holder whose update failed, a node gone for good.
    Release {
        /// The holder: its FleetLock client id or its node name.
        holder: String,
        /// The reboot group the slot is in (default: this node's, `reboot.group`).
        #[arg(long)]
        group: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

async fn systemd_for(root: &Root) -> anyhow::Result<Systemd> {
    Ok(if root.is_host() {
        Systemd::Bus(Client::system().await?)
    } else {
        Systemd::Offline(Offline::new(root.dir()))
    })
}

async fn cx_for(root: &Root) -> anyhow::Result<Cx> {
    let host = load::host(root)?;
    let settings = load::settings(root, &host)?;
    Ok(Cx::new(
        root.clone(),
        host,
        settings,
        systemd_for(root).await?.for_pass(),
    ))
}

/// The context of a pass, or the exit code when the host or the settings do not load (said on
/// stderr): an invalid config is a failure (3), not an error of the command.
async fn cx_or_failed(root: &Root) -> anyhow::Result<Result<Cx, i32>> {
    match cx_for(root).await {
        Ok(cx) => Ok(Ok(cx)),
        Err(e) if e.downcast_ref::<load::LoadError>().is_some() => {
            eprintln!("error: {e:#}");
            Ok(Err(exit::FAILED))
        }
        Err(e) => Err(e),
    }
}

fn heading(cx: &Cx) -> String {
    format!(
        "Plan for {} {} on {} (root {}):",
        format!("{:?}", cx.settings.role).to_lowercase(),
        cx.settings.node_name,
        cx.host.name,
        cx.root.dir().display()
    )
}

/// Runs the CLI; returns the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    let root = Root::new(&cli.root);
    match cli.command {
        Command::Plan {
            json,
            detailed_exitcode,
        } => plan(&root, json, detailed_exitcode).await,
        Command::Apply { json } => apply(&root, json).await,
        Command::Converge {
            wait,
            timeout,
            json,
        } => converge::converge(wait, timeout, json).await,
        Command::RebootLock {
            action:
                RebootLockAction::Release {
                    holder,
                    group,
                    json,
                },
        } => {
            let group = match group {
                Some(g) => g,
                None => {
                    load::settings(&root, &load::host(&root)?)?
                        .reboot_policy
                        .group
                }
            };
            converge::release(&group, &holder, json).await
        }
        Command::Reboot { action } => {
            use crate::dbus::RebootVerb;
            let (verb, json) = match action {
                RebootAction::Now { force, json } => (RebootVerb::Now { force }, json),
                RebootAction::Hold { reason, json } => (RebootVerb::Hold(reason), json),
                RebootAction::Release { json } => (RebootVerb::Release, json),
            };
            reboot::run(verb, json).await
        }
        Command::Audit { json, fix } => audit::run(&root, json, fix),
        Command::Config {
            action: ConfigAction::Check { files, os, json },
        } => config_cmd::check(&root, &files, os, json),
        Command::Status { json } => status_cmd::run(&root, json).await,
        Command::Wait {
            steps,
            timeout,
            json,
        } => wait::run(&root, &steps, timeout, json).await,
        Command::Import {
            file,
            no_wait,
            timeout,
            json,
        } => import::run(&root, &file, !no_wait, timeout, json).await,
        Command::Fleet { target, json } => fleet::run(&target, json).await,
    }
}

async fn plan(root: &Root, json: bool, detailed_exitcode: bool) -> anyhow::Result<i32> {
    let cx = match cx_or_failed(root).await? {
        Ok(cx) => cx,
        Err(code) => return Ok(code),
    };
    let report = steps::engine().plan(&cx).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::util::locale::print(&status::render_plan(&report, &heading(&cx)));
    }
    Ok(if !report.failed().is_empty() {
        exit::FAILED
    } else if detailed_exitcode && report.pending_changes() > 0 {
        exit::NOT_CLEAN
    } else {
        exit::OK
    })
}

async fn apply(root: &Root, json: bool) -> anyhow::Result<i32> {
    let mut cx = match cx_or_failed(root).await? {
        Ok(cx) => cx,
        Err(code) => return Ok(code),
    };
    // Never at once with nodectld's pass (it waits for one under way; nodectld's next waits
    // for this one).
    let wait = std::time::Duration::from_secs(APPLY_LOCK_WAIT);
    let lock = crate::fsio::lock::pass_lock(root, || {
        eprintln!(
            "nodectld is running a pass; waiting for it to end ({})",
            crate::fsio::lock::PASS_LOCK
        )
    });
    let _lock = match tokio::time::timeout(wait, lock).await {
        Ok(l) => l.context("taking the pass lock")?,
        Err(_) => {
            eprintln!("the pass under way did not end within {APPLY_LOCK_WAIT} s");
            return Ok(exit::TIMEOUT);
        }
    };
    // An operator asked: retry what a daemon would leave to a backoff, and see a
    // certificate request through (this process is gone after the pass).
    cx.forced = true;
    cx.inline_wait = crate::steps::APPROVAL_WAIT;
    let report = steps::engine().apply(&cx).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::util::locale::print(&status::render_steps(&report.steps));
        for s in &report.steps {
            if let crate::engine::StepState::Applied { changes } = &s.state {
                for c in changes {
                    println!("  {}: {}  [{}]", s.id, c.what, c.why);
                }
            }
        }
        println!("{}", Status::summary(&report));
    }
    Ok(if report.failed().is_empty() {
        exit::OK
    } else {
        exit::FAILED
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Terraform's SSH provisioners wait up to an hour (Typhoon's bare-metal `ssh.tf`: timeout
    /// 60m) while `bootstrap.service` and etcd wait on `nodectl wait`, and `import` waits for
    /// the placement the layout script hands over: neither gives up first.
    #[test]
    fn waits_outlast_terraforms_ssh_by_default() {
        for args in [
            &["nodectl", "wait", "secrets"][..],
            &["nodectl", "import", "assets"][..],
        ] {
            let timeout = match Cli::try_parse_from(args).unwrap().command {
                Command::Wait { timeout, .. } | Command::Import { timeout, .. } => timeout,
                c => panic!("{c:?}"),
            };
            assert!(timeout >= 3600, "{args:?}: {timeout} s");
        }
    }
}
