#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The crash campaign's crash points (FAILPOINTS), in builds with the feature only.
    #[cfg(feature = "failpoints")]
    let _crash_points = fail::FailScenario::setup();
    nodectl::logging::init("nodectl", "warn");
    let cli: nodectl::cli::Cli = kubectl_nodectl::exit::parse();
    match nodectl::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(kubectl_nodectl::exit::ERROR);
        }
    }
}
