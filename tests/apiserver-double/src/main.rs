//! `nodectl-apiserver-double`: the API double as a process, for the demo and the VM tier (it
//! runs inside the VM on loopback). Writes a bootstrap kubeconfig in Typhoon's form for its CA
//! and token, then serves until SIGTERM, printing one line per CSR it sees change.

use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Parser;
use nodectl_apiserver_double::{Approval, Double, Options};

#[derive(Parser, Debug)]
#[command(
    name = "nodectl-apiserver-double",
    about = "kube-apiserver double for tests"
)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: std::net::SocketAddr,
    /// Bootstrap token `<id>.<secret>` (repeatable).
    #[arg(long = "token", required = true)]
    tokens: Vec<String>,
    /// How long issued certificates are valid, in seconds (Typhoon: 72h = 259200).
    #[arg(long, default_value_t = 259_200)]
    signing_seconds: u64,
    /// auto | after:<seconds> | manual | deny:<message> | fail:<message>
    #[arg(long, default_value = "auto")]
    approval: String,
    /// A Ready Node of this name (repeatable), for reboot coordination.
    #[arg(long = "node")]
    nodes: Vec<String>,
    /// A Node of this name that is not Ready (repeatable): as kubelet would report it before
    /// its first heartbeat after a reboot.
    #[arg(long = "not-ready")]
    not_ready: Vec<String>,
    /// The CA's key: used when the file exists, written (0600) when not, so a double started
    /// again is the same CA for the kubeconfigs it wrote before.
    #[arg(long)]
    ca_key: Option<std::path::PathBuf>,
    /// Write a bootstrap kubeconfig (first token) here once listening.
    #[arg(long)]
    write_bootstrap_kubeconfig: Option<std::path::PathBuf>,
    /// Write a cluster administrator's kubeconfig (`system:masters`) here once listening.
    #[arg(long)]
    write_admin_kubeconfig: Option<std::path::PathBuf>,
    /// Serve without `packaging/kubernetes/reboot-lease-policy.yaml`'s admission policy (as a
    /// cluster before 1.30, or one that did not apply it). By default it is enforced, as on a
    /// cluster that installed nodectl's manifests: a node adds, changes or removes only its
    /// own reboot slot entry in a Lease.
    #[arg(long)]
    no_reboot_lease_policy: bool,
    /// Keep the Leases, Nodes and pods in this file across restarts (read at start, written
    /// after each write): the cluster outlives a reboot of the machine the double runs on.
    #[arg(long)]
    state: Option<std::path::PathBuf>,
}

fn approval(s: &str) -> anyhow::Result<Approval> {
    Ok(match s.split_once(':') {
        None if s == "auto" => Approval::Auto,
        None if s == "manual" => Approval::Manual,
        Some(("after", n)) => Approval::After(Duration::from_secs(
            n.parse().context("--approval after:<seconds>")?,
        )),
        Some(("deny", m)) => Approval::Deny(m.into()),
        Some(("fail", m)) => Approval::Fail(m.into()),
        _ => bail!("--approval {s}: expected auto, after:<s>, manual, deny:<msg> or fail:<msg>"),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let opts = Options {
        bootstrap_tokens: args.tokens.clone(),
        signing_duration: Duration::from_secs(args.signing_seconds),
        approval: approval(&args.approval)?,
        ca_key_pem: match &args.ca_key {
            Some(p) if p.exists() => {
                Some(std::fs::read_to_string(p).with_context(|| p.display().to_string())?)
            }
            _ => None,
        },
        reboot_lease_policy: !args.no_reboot_lease_policy,
        state_file: args.state.clone(),
        ..Options::default()
    };
    let double = Double::start_on(args.listen, opts).await?;
    if let Some(p) = args.ca_key.as_ref().filter(|p| !p.exists()) {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(p)
            .and_then(|mut f| f.write_all(double.ca_key_pem().as_bytes()))
            .with_context(|| p.display().to_string())?;
    }
    for n in &args.nodes {
        double.set_node(n, true);
    }
    for n in &args.not_ready {
        double.set_node(n, false);
    }
    if let Some(p) = &args.write_bootstrap_kubeconfig {
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, double.bootstrap_kubeconfig(&args.tokens[0]))
            .with_context(|| tmp.display().to_string())?;
        std::fs::rename(&tmp, p).with_context(|| p.display().to_string())?;
    }
    if let Some(p) = &args.write_admin_kubeconfig {
        let kc = double.client_kubeconfig("kubernetes-admin", &["system:masters"])?;
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, kc).with_context(|| tmp.display().to_string())?;
        std::fs::rename(&tmp, p).with_context(|| p.display().to_string())?;
    }
    println!("listening on {}", double.url());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut events = double.events();
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            line = events.recv() => match line {
                Ok(l) => println!("{l}"),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => break,
            },
        }
    }
    Ok(())
}
