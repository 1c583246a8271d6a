//! `nodectl config check [FILES]`: the settings as nodectld would take them, checked offline
//! (no daemon, no bus, nothing written): the fragments under the root, or FILES alone in their
//! order (what an operator is about to ship). An error names the file and the key, as nodectld's
//! would. `--os` checks for a node of another OS than this host (defaults differ: kubelet's
//! runtime, the reboot strategy), e.g. on a workstation.

use std::path::PathBuf;

use crate::host::Os;
use crate::load;
use crate::root::Root;

/// The OS to check for.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum CheckOs {
    /// Fedora CoreOS.
    Fcos,
    /// Flatcar Container Linux.
    Flatcar,
    /// Any other systemd host.
    Generic,
}

/// Exit 0: valid; 3: invalid; 1: the host cannot be read.
pub fn check(
    root: &Root,
    files: &[PathBuf],
    os: Option<CheckOs>,
    json: bool,
) -> anyhow::Result<i32> {
    let mut host = load::host(root)?;
    if let Some(os) = os {
        host.os = match os {
            CheckOs::Fcos => Os::FedoraCoreos,
            CheckOs::Flatcar => Os::Flatcar,
            CheckOs::Generic => Os::Generic,
        };
    }
    let settings = if files.is_empty() {
        load::settings(root, &host)
    } else {
        load::settings_of_files(root, &host, files)
    };
    match settings {
        Ok(s) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"valid": true, "settings": s})
                    )?
                );
            } else {
                let from: Vec<String> = s.files.iter().map(|f| f.display().to_string()).collect();
                println!(
                    "config valid for a {} node: {} {} (kubelet runtime {}, reboot strategy {}, group {}); from {}",
                    name(&host.os),
                    name(&s.role),
                    s.node_name,
                    name(&s.runtime),
                    name(&s.reboot),
                    s.reboot_policy.group,
                    if from.is_empty() {
                        "no fragment (every default)".to_string()
                    } else {
                        from.join(", ")
                    }
                );
            }
            Ok(0)
        }
        Err(e) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"valid": false, "error": e.to_string()})
                    )?
                );
            } else {
                eprintln!("config invalid: {e}");
            }
            Ok(kubectl_nodectl::exit::FAILED)
        }
    }
}

/// A value's name as the config and status spell it (its serde form).
fn name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}
