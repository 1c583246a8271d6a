//! `kubectl-nodectl`: kubectl runs it for `kubectl nodectl ...`.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli: kubectl_nodectl::cli::Cli = kubectl_nodectl::exit::parse();
    match kubectl_nodectl::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(kubectl_nodectl::exit::ERROR);
        }
    }
}
