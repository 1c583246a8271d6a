//! The commands: `fleet`, `reboots`, `describe NODE` (each a list or two, then the pure
//! modules' text or JSON). Exit codes ([`crate::exit`]): 0 done (for `fleet`: every node
//! ready), 1 error, 2 `fleet`: some node's `NodectlReady` is not `True`, 64 usage.

use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Subcommand;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::Api;

use crate::load::{self, Target};
use crate::names::REBOOT_NAMESPACE;
use crate::{describe, exit, fleet, reboots};

/// `kubectl nodectl`: the command line.
#[derive(clap::Parser, Debug)]
#[command(
    name = "kubectl-nodectl",
    bin_name = "kubectl nodectl",
    version,
    about = "The nodectld state of a cluster's nodes, from what each wrote on its Node and in the reboot Leases"
)]
pub struct Cli {
    /// Which cluster, as who.
    #[command(flatten)]
    pub target: Target,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table for people.
    #[default]
    Text,
    /// JSON (for scripts).
    Json,
}

/// `-o json` or `--json`.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct Output {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// The same as `-o json`.
    #[arg(long)]
    pub json: bool,
}

impl Output {
    fn json(self) -> bool {
        self.json || self.output == Format::Json
    }
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Every node's nodectld state, unhealthy first. Exit 0: every node's NodectlReady is True;
    /// 2: some node's is not; 1: error.
    Fleet {
        #[command(flatten)]
        output: Output,
    },
    /// The reboot groups' Leases: who holds a slot, since when, and what each holder is doing;
    /// then the nodes waiting for a slot or a window.
    Reboots {
        /// The namespace of the reboot Leases (nodectld's `reboot.namespace`).
        #[arg(short = 'n', long, default_value = REBOOT_NAMESPACE)]
        namespace: String,
        #[command(flatten)]
        output: Output,
    },
    /// One node's nodectld state in full.
    Describe {
        /// The Node's name.
        node: String,
        /// The namespace of the reboot Leases (nodectld's `reboot.namespace`).
        #[arg(short = 'n', long, default_value = REBOOT_NAMESPACE)]
        namespace: String,
        #[command(flatten)]
        output: Output,
    },
}

/// Writes `text` to stdout; a closed pipe (`| head`) ends the output quietly.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}

fn json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    emit(&(serde_json::to_string_pretty(v)? + "\n"))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs a command; returns the exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Fleet { output } => fleet_cmd(&cli.target, output.json()).await,
        Command::Reboots { namespace, output } => {
            let client = load::client(&cli.target).await?;
            let (leases, nodes) = reboot_objects(&client, &cli.target, &namespace).await?;
            let rows = reboots::rows(&leases, &nodes);
            if output.json() {
                json(&rows)?;
            } else {
                emit(&reboots::render(&rows, now()))?;
            }
            Ok(exit::OK)
        }
        Command::Describe {
            node,
            namespace,
            output,
        } => {
            let client = load::client(&cli.target).await?;
            let timeout = Duration::from_secs(cli.target.request_timeout.max(1));
            let n = tokio::time::timeout(timeout, Api::<Node>::all(client.clone()).get(&node))
                .await
                .map_err(|_| {
                    anyhow::anyhow!("node {node}: no answer within {} s", timeout.as_secs())
                })?
                .with_context(|| format!("node {node}"))?;
            let leases = load::list_all(
                &Api::<Lease>::namespaced(client.clone(), &namespace),
                cli.target.chunk_size,
                timeout,
                &format!("the reboot Leases in {namespace}"),
            )
            .await?;
            // nodectld's Events about it (in `default`, as kubelet's about its Node); a user
            // who may not list Events still gets the rest
            let selector = format!(
                "involvedObject.kind=Node,involvedObject.name={node},source={}",
                crate::names::EVENT_COMPONENT
            );
            let events = tokio::time::timeout(
                timeout,
                Api::<Event>::namespaced(client, "default").list(
                    &kube::api::ListParams::default()
                        .fields(&selector)
                        .limit(500),
                ),
            )
            .await;
            let events = match events {
                Ok(Ok(l)) => Some(l.items),
                Ok(Err(kube::Error::Api(s))) if s.code == 403 => None,
                Ok(Err(e)) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("listing the Events about node {node}")))
                }
                Err(_) => anyhow::bail!(
                    "listing the Events about node {node}: no answer within {} s",
                    timeout.as_secs()
                ),
            };
            let d = describe::describe(&n, &leases, events.as_deref());
            if output.json() {
                json(&d)?;
            } else {
                emit(&describe::render(&d, now()))?;
            }
            Ok(exit::OK)
        }
    }
}

/// `fleet`: also `nodectl fleet` on a node.
pub async fn fleet_cmd(target: &Target, as_json: bool) -> anyhow::Result<i32> {
    let client = load::client(target).await?;
    let nodes = load::list_all(
        &Api::<Node>::all(client),
        target.chunk_size,
        Duration::from_secs(target.request_timeout.max(1)),
        "nodes",
    )
    .await?;
    let rows = fleet::rows(&nodes);
    if as_json {
        json(&rows)?;
    } else {
        emit(&fleet::render(&rows))?;
    }
    Ok(if rows.iter().all(|r| r.ready) {
        exit::OK
    } else {
        exit::NOT_CLEAN
    })
}

async fn reboot_objects(
    client: &kube::Client,
    target: &Target,
    namespace: &str,
) -> anyhow::Result<(Vec<Lease>, Vec<Node>)> {
    let timeout = Duration::from_secs(target.request_timeout.max(1));
    let leases = load::list_all(
        &Api::<Lease>::namespaced(client.clone(), namespace),
        target.chunk_size,
        timeout,
        &format!("the reboot Leases in {namespace}"),
    )
    .await?;
    let nodes = load::list_all(
        &Api::<Node>::all(client.clone()),
        target.chunk_size,
        timeout,
        "nodes",
    )
    .await?;
    Ok((leases, nodes))
}
