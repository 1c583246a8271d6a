//! `nodectl wait STEP...`: an ordering point for what must run after nodectld placed something
//! (Typhoon's bootstrap.service reads `/etc/kubernetes/pki`: `ExecStartPre=nodectl wait
//! secrets`). Reads nodectld's status at each change of its state (signalled on the bus; the
//! disk every half second while nodectld is not there: [`super::follow`]) until every step
//! named is converged.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use kubectl_nodectl::exit;

use super::follow::Follow;
use crate::engine::StepState;
use crate::root::Root;
use crate::status::Status;

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

/// Runs `nodectl wait`; returns the exit code: 0 converged; 3 the config is invalid; 5 timed
/// out (what each step still waits for is printed); 64 no such step. On a terminal, what it
/// waits for is shown as it changes (stderr); `json`: one object at the end.
pub(super) async fn run(
    root: &Root,
    steps: &[String],
    timeout: u64,
    json: bool,
) -> anyhow::Result<i32> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let progress = !json && std::io::stderr().is_terminal();
    let mut said = Vec::new();
    let mut follow = Follow::new(root).await;
    loop {
        let st = follow.status().await;
        let (code, left) = match pending(&st, steps) {
            Ok(left) if left.is_empty() => (exit::OK, left),
            Ok(left) if Instant::now() >= deadline => (exit::TIMEOUT, left),
            Ok(left) => {
                if progress && left != said {
                    eprintln!("waiting for {}", left.join("; "));
                    said = left;
                }
                follow.changed(deadline.into()).await;
                continue;
            }
            Err(e) => {
                let code = match e {
                    Stop::Config(_) => exit::FAILED,
                    Stop::Unknown(..) => exit::USAGE,
                };
                if json {
                    let v = serde_json::json!({"converged": false, "steps": steps, "error": e.to_string()});
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    eprintln!("{e}");
                }
                return Ok(code);
            }
        };
        if json {
            let v = serde_json::json!({"converged": code == exit::OK, "steps": steps,
                "waiting_for": left, "timed_out": code == exit::TIMEOUT});
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else if code == exit::OK {
            println!("converged: {}", steps.join(", "));
        } else {
            eprintln!("still waiting after {timeout} s: {}", left.join("; "));
        }
        return Ok(code);
    }
}
