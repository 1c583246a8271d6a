//! What the CLI asks of nodectld over D-Bus: `converge` (a pass now; `--wait` until it ran, with
//! its progress on a terminal) and `reboot-lock release`. Root only (nodectld checks the
//! caller). Exit codes ([`kubectl_nodectl::exit`]): 0 done (`--wait`: every step converged),
//! 3 `--wait`: a step failed, 4 nodectld is not running, 5 `--wait`: timed out, 1 error.

use std::io::IsTerminal as _;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use kubectl_nodectl::exit;

use crate::dbus::Agent1Proxy;
use crate::status::Status;

/// nodectld is not there to ask (its name has no owner on the bus).
pub(super) fn not_running(e: &zbus::Error) -> bool {
    match e {
        zbus::Error::MethodError(name, _, _) => {
            name.as_str().ends_with("ServiceUnknown") || name.as_str().ends_with("NameHasNoOwner")
        }
        zbus::Error::FDO(f) => matches!(
            **f,
            zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
        ),
        _ => false,
    }
}

pub(super) async fn agent(conn: &zbus::Connection) -> anyhow::Result<Agent1Proxy<'_>> {
    Ok(Agent1Proxy::new(conn).await?)
}

async fn status(agent: &Agent1Proxy<'_>) -> Result<Status, zbus::Error> {
    let json = agent.get_status().await?;
    serde_json::from_str(&json)
        .map_err(|e| zbus::Error::Failure(format!("nodectld's status does not parse: {e}")))
}

pub(super) fn say_not_running(json: bool, what: &str) -> anyhow::Result<i32> {
    if json {
        let v = serde_json::json!({"error": "nodectld is not running", "asked": what});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        eprintln!(
            "nodectld is not running (systemctl status nodectld): nothing asked it to {what}"
        );
    }
    Ok(exit::NOT_RUNNING)
}

/// `nodectl converge [--wait [--timeout S]] [--json]`.
pub(super) async fn converge(wait: bool, timeout: u64, json: bool) -> anyhow::Result<i32> {
    let conn = zbus::Connection::system()
        .await
        .context("connecting to the system bus")?;
    let agent = agent(&conn).await?;
    // Subscribed before asking: no state change between the request and the wait is missed.
    let mut changes = agent.receive_state_changed().await;
    let before = if wait {
        match status(&agent).await {
            Ok(st) => Some(st),
            Err(e) if not_running(&e) => return say_not_running(json, "converge"),
            Err(e) => return Err(e).context("asking nodectld for its status"),
        }
    } else {
        None
    };
    match agent.converge().await {
        Ok(()) => {}
        Err(e) if not_running(&e) => return say_not_running(json, "converge"),
        Err(e) => return Err(e).context("asking nodectld to converge"),
    }
    let Some(before) = before else {
        if json {
            println!("{}", serde_json::json!({"requested": true}));
        } else {
            println!(
                "nodectld is converging; see `nodectl status` (or `nodectl converge --wait`)."
            );
        }
        return Ok(exit::OK);
    };
    // A pass under way when asked ends first; the one asked for runs after it.
    let want = before.daemon.passes
        + if before.daemon.state == "converging" {
            2
        } else {
            1
        };
    let progress = !json && std::io::stderr().is_terminal();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let mut said = String::new();
    loop {
        let st = status(&agent)
            .await
            .context("asking nodectld for its status")?;
        let restarted = st.daemon.pid != before.daemon.pid;
        if (st.daemon.passes >= want || (restarted && st.daemon.passes >= 1))
            && st.daemon.state != "converging"
        {
            // (a nodectld that restarted meanwhile: its first pass is newer than the request)
            return finished(&st, json);
        }
        let line = format!("{}: {}", st.daemon.state, st.daemon.status_line);
        if progress && line != said {
            eprintln!("{line}");
            said = line;
        }
        tokio::select! {
            c = changes.next() => {
                if c.is_none() {
                    anyhow::bail!("nodectld left the bus while converging");
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                if json {
                    let v = serde_json::json!({"ok": false, "timed_out": true,
                        "state": st.daemon.state, "status_line": st.daemon.status_line});
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    eprintln!("no pass finished within {timeout} s: {}", st.daemon.status_line);
                }
                return Ok(exit::TIMEOUT);
            }
        }
    }
}

/// The pass asked for ran: what it left.
fn finished(st: &Status, json: bool) -> anyhow::Result<i32> {
    let failed: Vec<&str> = st
        .steps
        .iter()
        .filter(|s| s.state.name() == "failed")
        .map(|s| s.id.as_str())
        .collect();
    let code = if failed.is_empty() && st.config_error.is_none() {
        exit::OK
    } else {
        exit::FAILED
    };
    if json {
        let v = serde_json::json!({"ok": code == exit::OK, "passes": st.daemon.passes,
            "failed_steps": failed, "config_error": st.config_error,
            "status_line": st.daemon.status_line});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else if code == exit::OK {
        println!("pass finished: {}", st.daemon.status_line);
    } else {
        eprintln!(
            "the pass finished with {}: {}; see `nodectl status`",
            if failed.is_empty() {
                "an invalid config".to_string()
            } else {
                format!("failed steps {}", failed.join(", "))
            },
            st.daemon.status_line
        );
    }
    Ok(code)
}

/// `nodectl reboot-lock release HOLDER [--group G] [--json]`.
pub(super) async fn release(group: &str, holder: &str, json: bool) -> anyhow::Result<i32> {
    let conn = zbus::Connection::system()
        .await
        .context("connecting to the system bus")?;
    let agent = agent(&conn).await?;
    let msg = match agent.release_reboot_slot(group, holder).await {
        Ok(m) => m,
        Err(e) if not_running(&e) => return say_not_running(json, "release a reboot slot"),
        Err(e) => return Err(e).context("asking nodectld to release the slot"),
    };
    if json {
        let v = serde_json::json!({"group": group, "holder": holder, "message": msg});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{msg}");
    }
    Ok(exit::OK)
}
