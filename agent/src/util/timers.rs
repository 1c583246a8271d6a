//! Test-only timer settings (issue 50): `NODECTL_TEST_TIMERS=scale=1/N` makes the daemon's
//! backoffs (the node certificate's, the certificate watch's pauses) and node-identity's 5 s
//! rechecks (a transient hostname, afterburn's metadata) N times shorter, so that a
//! test reaches the capped-backoff state in seconds instead of minutes and asserts what happened
//! (a backoff that doubled, the attempt that ended it) rather than timing it.
//!
//! Honoured only by a debug build (`cfg!(debug_assertions)`: the test suites' binaries). A
//! release build, what ships, ignores it and says so at start: an operator's environment cannot
//! turn a node's backoff into a storm against the API server.

use std::sync::OnceLock;
use std::time::Duration;

/// The variable's name.
pub const VAR: &str = "NODECTL_TEST_TIMERS";
/// The largest N of `scale=1/N`.
pub const MAX_DIVISOR: u32 = 1000;

/// What `NODECTL_TEST_TIMERS` says, once parsed and weighed against the build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setting {
    /// Unset: real timers.
    Off,
    /// Honoured: every scaled timer divided by this.
    Scaled(u32),
    /// Set but not honoured (a release build, or a value that does not parse): real timers,
    /// and why.
    Ignored(String),
}

/// Parses `scale=1/N` (1 <= N <= [`MAX_DIVISOR`]) for a build that honours it or not (pure).
pub fn parse(value: Option<&str>, honoured: bool) -> Setting {
    let Some(v) = value else {
        return Setting::Off;
    };
    let n = v
        .trim()
        .strip_prefix("scale=1/")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=MAX_DIVISOR).contains(n));
    match (n, honoured) {
        (None, _) => Setting::Ignored(format!(
            "{VAR}={v:?} is not scale=1/N with N from 1 to {MAX_DIVISOR}"
        )),
        (Some(_), false) => Setting::Ignored(format!(
            "{VAR} is a test setting, honoured only by a debug build: this one uses its real timers"
        )),
        (Some(n), true) => Setting::Scaled(n),
    }
}

/// This process's setting (read once).
pub fn setting() -> &'static Setting {
    static SETTING: OnceLock<Setting> = OnceLock::new();
    SETTING.get_or_init(|| {
        let v = std::env::var(VAR).ok();
        parse(v.as_deref(), cfg!(debug_assertions))
    })
}

/// `d` as this process's setting has it: `d / N` when scaled, `d` otherwise.
pub fn scaled(d: Duration) -> Duration {
    match setting() {
        Setting::Scaled(n) => d / *n,
        _ => d,
    }
}

/// Logs the setting at start when it is not [`Setting::Off`]: a warning when honoured (this
/// process's timers are not the real ones), an error when ignored.
pub fn announce() {
    match setting() {
        Setting::Off => {}
        Setting::Scaled(n) => tracing::warn!(
            test_timers = %format!("scale=1/{n}"),
            "{VAR}: backoffs and rechecks are 1/{n} as long as a node's (a test setting)"
        ),
        Setting::Ignored(why) => tracing::error!("{why}; ignored"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_is_honoured_by_a_debug_build_only() {
        assert_eq!(parse(None, true), Setting::Off);
        assert_eq!(parse(Some("scale=1/16"), true), Setting::Scaled(16));
        assert!(
            matches!(parse(Some("scale=1/16"), false), Setting::Ignored(w) if w.contains("debug build"))
        );
    }

    #[test]
    fn anything_but_scale_one_over_n_is_refused_by_name() {
        for v in [
            "",
            "scale=2",
            "scale=1/0",
            "scale=1/1001",
            "scale=1/x",
            "1/16",
        ] {
            match parse(Some(v), true) {
                Setting::Ignored(w) => assert!(w.contains(VAR) && w.contains("scale=1/N"), "{w}"),
                other => panic!("{v:?}: {other:?}"),
            }
        }
    }
}
