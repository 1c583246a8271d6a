//! `nodectl wait STEP...`: an ordering point for what must run after nodectld placed something
//! (Typhoon's bootstrap.service reads `/etc/kubernetes/pki`: `ExecStartPre=nodectl wait
//! secrets`). Asks nodectld's status every half second (from the disk when nodectld is not
//! there) until every step named is converged.

use std::time::{Duration, Instant};

use super::status_cmd::{status_from_daemon, status_from_disk};
use crate::engine::StepState;
use crate::root::Root;
use crate::status::Status;

/// How often the status is asked again.
const EVERY: Duration = Duration::from_millis(500);

/// Why waiting stops before the steps converged.
#[derive(Debug, thiserror::Error)]
enum Stop {
    #[error("config: {0}")]
    Config(String),
    #[error("no step {0:?} (steps: {1})")]
    Unknown(String, String),
}

/// What the steps still wait for (empty: all converged); `Err` when one failed or is unknown.
fn pending(st: &Status, steps: &[String]) -> Result<Vec<String>, Stop> {
    if let Some(e) = &st.config_error {
        return Err(Stop::Config(e.clone()));
    }
    let mut out = Vec::new();
    for id in steps {
        let Some(s) = st.steps.iter().find(|s| s.id == *id) else {
            if st.steps.is_empty() {
                // nodectld starting: no pass published yet.
                out.push(format!("{id}: nodectld's first pass"));
                continue;
            }
            let known: Vec<&str> = st.steps.iter().map(|s| s.id.as_str()).collect();
            return Err(Stop::Unknown(id.clone(), known.join(", ")));
        };
        match &s.state {
            StepState::Converged { .. } | StepState::Applied { .. } => {}
            // A failure may be mended by the next pass (a bundle replaced): waited out, shown
            // at the timeout.
            StepState::Failed { error } => out.push(format!("{id} failed: {error}")),
            StepState::Waiting { waiting_for } => out.push(format!("{id}: {waiting_for}")),
            StepState::Blocked { blocked_by } => {
                out.push(format!("{id}: blocked by {}", blocked_by.join(", ")))
            }
            StepState::Pending { changes } => {
                out.push(format!("{id}: {} change(s) pending", changes.len()))
            }
        }
    }
    Ok(out)
}

/// Runs `nodectl wait`; returns the exit code.
pub(super) async fn run(root: &Root, steps: &[String], timeout: u64) -> anyhow::Result<i32> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        let st = match status_from_daemon(root).await {
            Ok(st) => st,
            Err(why) => status_from_disk(root, why.to_string()).await,
        };
        match pending(&st, steps) {
            Ok(left) if left.is_empty() => {
                println!("converged: {}", steps.join(", "));
                return Ok(0);
            }
            Ok(left) if Instant::now() >= deadline => {
                eprintln!("still waiting after {timeout} s: {}", left.join("; "));
                return Ok(1);
            }
            Ok(_) => tokio::time::sleep(EVERY).await,
            Err(e) => {
                eprintln!("{e}");
                return Ok(1);
            }
        }
    }
}
