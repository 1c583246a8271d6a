//! `nodectl reboot now|hold|release`: an operator's verbs on this node's reboots, asked of
//! nodectld over D-Bus (root only; docs/reboot.md "Operator verbs").

use anyhow::Context as _;
use kubectl_nodectl::exit;

use super::converge::{agent, not_running, say_not_running};
use crate::dbus::RebootVerb;

/// Asks nodectld for `verb`; prints its answer (`--json`: `{"verb", "message"}`).
pub(super) async fn run(verb: RebootVerb, json: bool) -> anyhow::Result<i32> {
    let conn = zbus::Connection::system()
        .await
        .context("connecting to the system bus")?;
    let agent = agent(&conn).await?;
    let (name, asked) = match &verb {
        RebootVerb::Now { force } => ("now", agent.reboot_now(*force).await),
        RebootVerb::Hold(reason) => ("hold", agent.hold_reboots(reason).await),
        RebootVerb::Release => ("release", agent.release_reboot_hold().await),
    };
    let msg = match asked {
        Ok(m) => m,
        Err(e) if not_running(&e) => return say_not_running(json, "change this node's reboots"),
        Err(zbus::Error::MethodError(_, Some(m), _)) => {
            if json {
                let v = serde_json::json!({"verb": name, "error": m});
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                eprintln!("nodectl reboot {name}: {m}");
            }
            return Ok(exit::ERROR);
        }
        Err(e) => return Err(e).context(format!("asking nodectld: reboot {name}")),
    };
    if json {
        let v = serde_json::json!({"verb": name, "message": msg});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{msg}");
    }
    Ok(exit::OK)
}
