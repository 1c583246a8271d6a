//! `nodectl`: status, plan, apply, converge.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use nodectl_units::systemd::{Client, Offline, Systemd};

use crate::engine::Cx;
use crate::dbus::Agent1Proxy;
use crate::root::Root;
use crate::status::{self, Daemon, HostStatus, Status};
use crate::{load, steps};

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
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show the agent, the host and every step (asks nodectld over D-Bus; reads the disk when it
    /// is not running).
    Status {
        /// Machine-readable output (schema: docs/status.md).
        #[arg(long)]
        json: bool,
    },
    /// Show what a pass would change and why. Changes nothing.
    Plan {
        #[arg(long)]
        json: bool,
        /// Exit 2 when changes are pending (0: none, 1: error).
        #[arg(long)]
        detailed_exitcode: bool,
    },
    /// Run one convergence pass here (without the daemon).
    Apply {
        #[arg(long)]
        json: bool,
    },
    /// Ask nodectld to run a pass now (root only).
    Converge,
    /// Check the node against a security review's node-level findings (docs/security.md).
    /// Exit 0: none; 2: medium or low only; 3: a high finding; 1: error.
    Audit {
        #[arg(long)]
        json: bool,
        /// Apply the safe fixes (remove etcd credentials from a worker, fix key modes and
        /// labels), each logged; then audit again.
        #[arg(long)]
        fix: bool,
    },
    /// The group's reboot lock (a Lease; docs/reboot.md).
    RebootLock {
        #[command(subcommand)]
        action: RebootLockAction,
    },
}

#[derive(Subcommand, Debug)]
pub enum RebootLockAction {
    /// Free a stuck slot (root only): a holder whose update failed, a node gone for good.
    Release {
        /// The holder: its FleetLock client id or its node name.
        holder: String,
        #[arg(long, default_value = "default")]
        group: String,
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
        systemd_for(root).await?,
    ))
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
        } => {
            let cx = cx_for(&root).await?;
            let report = steps::engine().plan(&cx).await;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", status::render_plan(&report, &heading(&cx)));
            }
            Ok(if !report.failed().is_empty() {
                1
            } else if detailed_exitcode && report.pending_changes() > 0 {
                2
            } else {
                0
            })
        }
        Command::Apply { json } => {
            let mut cx = cx_for(&root).await?;
            // An operator asked: retry what a daemon would leave to a backoff, and see a
            // certificate request through (this process is gone after the pass).
            cx.forced = true;
            cx.inline_wait = crate::steps::APPROVAL_WAIT;
            let report = steps::engine().apply(&cx).await;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", status::render_steps(&report.steps));
                for s in &report.steps {
                    if let crate::engine::StepState::Applied { changes } = &s.state {
                        for c in changes {
                            println!("  {}: {}  [{}]", s.id, c.what, c.why);
                        }
                    }
                }
                println!("{}", Status::summary(&report));
            }
            Ok(if report.failed().is_empty() { 0 } else { 1 })
        }
        Command::Converge => {
            let conn = zbus::Connection::system()
                .await
                .context("connecting to the system bus")?;
            let agent = Agent1Proxy::new(&conn).await?;
            agent
                .converge()
                .await
                .context("asking nodectld to converge")?;
            println!("nodectld is converging; see `nodectl status`.");
            Ok(0)
        }
        Command::RebootLock {
            action: RebootLockAction::Release { holder, group },
        } => {
            let conn = zbus::Connection::system()
                .await
                .context("connecting to the system bus")?;
            let agent = Agent1Proxy::new(&conn).await?;
            let msg = agent
                .release_reboot_slot(&group, &holder)
                .await
                .context("asking nodectld to release the slot")?;
            println!("{msg}");
            Ok(0)
        }
        Command::Audit { json, fix } => {
            let os_release = ["/etc/os-release", "/usr/lib/os-release"]
                .iter()
                .find_map(|p| std::fs::read_to_string(root.path(p)).ok())
                .unwrap_or_default();
            let host = load::host(&root);
            let settings = host
                .as_ref()
                .map_err(|e| e.to_string())
                .and_then(|h| load::settings(&root, h).map_err(|e| e.to_string()));
            let label_of = |p: &std::path::Path| {
                nodectl_selinux::relabel::stored_label(&root.path(p))
                    .ok()
                    .flatten()
            };
            let mut findings = match &settings {
                Ok(s) => crate::audit::audit(&root, s, &os_release, &label_of),
                Err(e) => {
                    // Without settings (an end-of-life OS is refused by the loader), only
                    // what needs none.
                    eprintln!("settings: {e}; auditing the OS only");
                    crate::audit::audit_os(&os_release)
                }
            };
            if fix && !findings.is_empty() {
                let host = host.context("fixing needs the host")?;
                let labeler = nodectl_selinux::Labeler::new(root.dir(), &host.selinux);
                let relabel = |p: &std::path::Path| -> anyhow::Result<()> {
                    let real = root.path(p);
                    let mode =
                        std::os::unix::fs::MetadataExt::mode(&std::fs::symlink_metadata(&real)?);
                    let ctx = labeler.default_for(p, mode).ok_or_else(|| {
                        anyhow::anyhow!("no policy default label for {}", p.display())
                    })?;
                    labeler.set_on_path(&real, &ctx)?;
                    Ok(())
                };
                for line in crate::audit::fix(&root, &findings, &relabel) {
                    eprintln!("{line}");
                }
                if let Ok(s) = &settings {
                    findings = crate::audit::audit(&root, s, &os_release, &label_of);
                }
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "findings": findings,
                        "checks": crate::audit::CHECKS.iter().map(|(id, sev, what)| serde_json::json!({"id": id, "severity": sev, "finds": what})).collect::<Vec<_>>(),
                    }))?
                );
            } else {
                print!("{}", crate::audit::render(&findings));
            }
            Ok(crate::audit::exit_code(&findings))
        }
        Command::Status { json } => {
            let st = status_from_daemon(&root).await;
            let st = match st {
                Ok(st) => st,
                Err(why) => status_from_disk(&root, why).await,
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&st)?);
            } else {
                print!("{}", st.render());
            }
            Ok(
                if st.config_error.is_some() || st.steps.iter().any(|s| s.state.name() == "failed")
                {
                    3
                } else {
                    0
                },
            )
        }
    }
}

async fn status_from_daemon(root: &Root) -> Result<Status, String> {
    if !root.is_host() {
        return Err("--root given: reading the scratch root".into());
    }
    let ask = async {
        let conn = zbus::Connection::system()
            .await
            .map_err(|e| format!("system bus: {e}"))?;
        let agent = Agent1Proxy::new(&conn).await.map_err(|e| e.to_string())?;
        agent.get_status().await.map_err(|e| match e {
            zbus::Error::MethodError(name, _, _)
                if name.as_str().ends_with("ServiceUnknown")
                    || name.as_str().ends_with("NameHasNoOwner") =>
            {
                "nodectld does not own org.nodectl.Agent1 on the system bus".to_string()
            }
            e => e.to_string(),
        })
    };
    let json = tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .map_err(|_| "nodectld did not answer within 5s".to_string())??;
    serde_json::from_str(&json).map_err(|e| format!("nodectld's status does not parse: {e}"))
}

async fn status_from_disk(root: &Root, why: String) -> Status {
    let mut st = Status {
        schema_version: status::SCHEMA_VERSION,
        source: "disk".into(),
        daemon: Daemon {
            running: false,
            state: why,
            ..Daemon::default()
        },
        ..Status::default()
    };
    let host = match load::host(root) {
        Ok(h) => h,
        Err(e) => {
            st.config_error = Some(e.to_string());
            return st;
        }
    };
    let labeler = nodectl_selinux::Labeler::new(root.dir(), &host.selinux);
    st.host = Some(HostStatus::new(&host, &labeler));
    let settings = match load::settings(root, &host) {
        Ok(s) => s,
        Err(e) => {
            st.config_error = Some(e.to_string());
            return st;
        }
    };
    st.settings = Some(settings.clone());
    st.credentials = status::Credentials::read(root);
    st.audit = Some(status::AuditSummary::read(root, &settings));
    match systemd_for(root).await {
        Ok(sd) => {
            let cx = Cx::new(root.clone(), host, settings, sd);
            let report = steps::engine().plan(&cx).await;
            st.set_report(&report);
            if let Ok(k) = cx.systemd.state(nodectl_units::kubelet::KUBELET_UNIT).await {
                st.set_kubelet(k);
            }
            st.kubelet_image = status::kubelet_image(&cx.systemd).await;
        }
        Err(e) => st.config_error = Some(format!("cannot reach systemd: {e:#}")),
    }
    st
}
