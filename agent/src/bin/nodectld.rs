use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// nodectld: the Kubernetes node agent (runs as the systemd unit nodectld.service).
#[derive(Parser, Debug)]
#[command(name = "nodectld", version)]
struct Args {
    /// Root to manage: `/` on a node, a scratch directory in tests.
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Do not serve org.nodectl.Agent1 on the system bus.
    #[arg(long)]
    no_bus: bool,
    /// Seconds between drift-repair passes when nothing else wakes the agent.
    #[arg(long, default_value_t = 3600)]
    resync_secs: u64,
    /// Quiet period (ms) after an event before a pass.
    #[arg(long, default_value_t = 250)]
    debounce_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The crash campaign's crash points (FAILPOINTS), in builds with the feature only.
    #[cfg(feature = "failpoints")]
    let _crash_points = fail::FailScenario::setup();
    nodectl::logging::init("nodectld", "info");
    nodectl::util::timers::announce();
    let a = Args::parse();
    let opts = nodectl::daemon::Options {
        root: nodectl::root::Root::new(a.root),
        serve_bus: !a.no_bus,
        resync: Duration::from_secs(a.resync_secs),
        debounce: Duration::from_millis(a.debounce_ms),
    };
    if let Err(e) = nodectl::daemon::run(opts).await {
        tracing::error!(error = %format!("{e:#}"), "nodectld failed");
        eprintln!("nodectld: {e:#}");
        std::process::exit(1);
    }
}
