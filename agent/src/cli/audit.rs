//! `nodectl audit`: the findings, `--fix`, `--json`, the exit code scripts gate on.

use anyhow::Context as _;

use crate::load;
use crate::root::Root;

/// Runs `nodectl audit`; returns the exit code.
pub(super) fn run(root: &Root, json: bool, fix: bool) -> anyhow::Result<i32> {
    let os_release = crate::audit::os_release(root);
    let host = load::host(root);
    let settings = host
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|h| load::settings(root, h).map_err(|e| e.to_string()));
    let label_of = |p: &std::path::Path| {
        nodectl_selinux::relabel::stored_label(&root.path(p))
            .ok()
            .flatten()
    };
    let mut findings = match &settings {
        Ok(s) => crate::audit::audit(root, s, &os_release, &label_of),
        Err(e) => {
            // Without settings (an end-of-life OS is refused by the loader), only
            // what needs none.
            eprintln!("settings: {e}; auditing the OS only");
            crate::audit::audit_os(&os_release)
        }
    };
    if fix && !findings.is_empty() {
        let host = host.context("fixing needs the host")?;
        // (not while nodectld's pass runs: the fixes are changes too)
        let _lock = crate::fsio::lock::pass_lock_blocking(root, || {
            eprintln!(
                "nodectld is running a pass; waiting for it to end ({})",
                crate::fsio::lock::PASS_LOCK
            )
        })
        .context("taking the pass lock")?;
        let labeler = nodectl_selinux::Labeler::new(root.dir(), &host.selinux);
        let writer = crate::fsio::Writer::new(root, &labeler);
        for line in crate::audit::fix(&writer, &findings) {
            eprintln!("{line}");
        }
        if let Ok(s) = &settings {
            findings = crate::audit::audit(root, s, &os_release, &label_of);
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "findings": findings,
                "checks": crate::audit::CHECKS.iter().map(|(id, sev, what)| serde_json::json!({"id": id, "severity": sev, "finds": what})).collect::<Vec<_>>(),
            }))?
        );
    } else {
        crate::util::locale::print(&crate::audit::render(&findings));
    }
    Ok(crate::audit::exit_code(&findings))
}
