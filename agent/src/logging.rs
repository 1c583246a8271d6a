//! Logs go to journald with structured fields when stderr is the journal (systemd sets
//! `JOURNAL_STREAM`), to stderr otherwise. `NODECTL_LOG` takes a tracing filter (default info).

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter};

/// Sets up logging: journald when stderr is the journal, stderr otherwise; the filter comes from
/// `NODECTL_LOG`, else `default_level`.
pub fn init(default_level: &str) {
    let filter =
        EnvFilter::try_from_env("NODECTL_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let registry = tracing_subscriber::registry().with(filter);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            registry
                .with(journald.with_syslog_identifier("nodectld".into()))
                .init();
            return;
        }
    }
    registry
        .with(fmt::layer().with_writer(std::io::stderr).with_target(false))
        .init();
}
