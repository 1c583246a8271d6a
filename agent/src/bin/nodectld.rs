use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The crash campaign's crash points (FAILPOINTS), in builds with the feature only.
    #[cfg(feature = "failpoints")]
    let _crash_points = fail::FailScenario::setup();
    nodectl::logging::init("nodectld", "info");
    nodectl::util::timers::announce();
    let a: nodectl::daemon::Args = kubectl_nodectl::exit::parse();
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
