//! `kubectl-nodectl`: kubectl runs it for `kubectl nodectl ...`.

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = kubectl_nodectl::cli::Cli::parse();
    match kubectl_nodectl::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}
