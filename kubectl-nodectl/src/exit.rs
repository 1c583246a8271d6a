//! One table of exit codes for every command of `nodectl` and `kubectl nodectl`
//! (docs/status.md, "Exit codes"): a script tells "the command failed" from "it worked and the
//! answer is no" from "nodectld is not there" without parsing text.

/// Done; the node, or the fleet, is as asked.
pub const OK: i32 = 0;
/// The command could not do its job (input unreadable, the bus or the API server unreachable,
/// a request refused).
pub const ERROR: i32 = 1;
/// It worked, and the answer is "not clean": changes pending (`plan --detailed-exitcode`),
/// medium or low findings (`audit`), a node not ready (`fleet`).
pub const NOT_CLEAN: i32 = 2;
/// Something failed: a step, the config (invalid), the bundle (refused); `audit`: a high
/// finding.
pub const FAILED: i32 = 3;
/// nodectld is not running (systemctl's `status` says 3; here 3 is taken by a failure). `status`
/// still prints what the disk shows.
pub const NOT_RUNNING: i32 = 4;
/// Gave up waiting (`wait`, `converge --wait`, `import`).
pub const TIMEOUT: i32 = 5;
/// The command line is wrong (sysexits' EX_USAGE; clap's own 2 would read as "not clean").
pub const USAGE: i32 = 64;

/// Parses the command line as clap does, but a usage error exits [`USAGE`] (help and version
/// exit 0).
pub fn parse<P: clap::Parser>() -> P {
    match P::try_parse() {
        Ok(p) => p,
        Err(e) => {
            let code = if e.use_stderr() { USAGE } else { OK };
            let _ = e.print();
            std::process::exit(code);
        }
    }
}
