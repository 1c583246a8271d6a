use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    nodectl::logging::init("warn");
    let cli = nodectl::cli::Cli::parse();
    match nodectl::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}
