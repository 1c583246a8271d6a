//! `nodectl status`: from nodectld over D-Bus, or observed from the disk when it is not there.

use std::time::Duration;

use super::systemd_for;
use crate::dbus::Agent1Proxy;
use crate::engine::Cx;
use crate::load;
use crate::root::Root;
use crate::status::{self, Daemon, HostStatus, Status};
use crate::steps;
use kubectl_nodectl::exit;

/// Runs `nodectl status`; returns the exit code: 0, 3 a step failed or the config is invalid,
/// 4 nodectld is not running, 1 it could not be asked (the bus, a timeout); what the disk shows
/// is printed in both.
pub(super) async fn run(root: &Root, json: bool) -> anyhow::Result<i32> {
    let st = status_from_daemon(root).await;
    // what the exit says before the steps do: nodectld not running (4), or not asked (1)
    let (st, unavailable) = match st {
        Ok(st) => (st, None),
        // a scratch root has no daemon by design
        Err(Unavailable::ScratchRoot) => (
            status_from_disk(root, Unavailable::ScratchRoot.to_string()).await,
            None,
        ),
        Err(Unavailable::NotRunning) => (
            status_from_disk(root, Unavailable::NotRunning.to_string()).await,
            Some(exit::NOT_RUNNING),
        ),
        Err(why) => (
            status_from_disk(root, why.to_string()).await,
            Some(exit::ERROR),
        ),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        crate::util::locale::print(&st.render());
    }
    Ok(if let Some(code) = unavailable {
        code
    } else if st.config_error.is_some() || st.steps.iter().any(|s| s.state.name() == "failed") {
        exit::FAILED
    } else {
        exit::OK
    })
}

/// Why the status is not nodectld's (shown as the daemon's state).
#[derive(Debug, thiserror::Error)]
pub(super) enum Unavailable {
    #[error("--root given: reading the scratch root")]
    ScratchRoot,
    #[error("system bus: {0}")]
    Bus(zbus::Error),
    #[error("nodectld does not own org.nodectl.Agent1 on the system bus")]
    NotRunning,
    #[error("{0}")]
    Call(zbus::Error),
    #[error("nodectld did not answer within 5s")]
    Timeout,
    #[error("nodectld's status does not parse: {0}")]
    Parse(serde_json::Error),
}

pub(super) async fn status_from_daemon(root: &Root) -> Result<Status, Unavailable> {
    if !root.is_host() {
        return Err(Unavailable::ScratchRoot);
    }
    let ask = async {
        let conn = zbus::Connection::system().await.map_err(Unavailable::Bus)?;
        let agent = Agent1Proxy::new(&conn).await.map_err(Unavailable::Call)?;
        agent.get_status().await.map_err(|e| {
            if super::converge::not_running(&e) {
                Unavailable::NotRunning
            } else {
                Unavailable::Call(e)
            }
        })
    };
    let json = tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .map_err(|_| Unavailable::Timeout)??;
    serde_json::from_str(&json).map_err(Unavailable::Parse)
}

pub(super) async fn status_from_disk(root: &Root, why: String) -> Status {
    let mut st = Status {
        schema_version: status::SCHEMA_VERSION,
        source: "disk".into(),
        daemon: Daemon {
            running: false,
            state: why,
            ..Daemon::default()
        },
        ..Status::default()
    };
    let host = match load::host(root) {
        Ok(h) => h,
        Err(e) => {
            st.config_error = Some(e.to_string());
            return st;
        }
    };
    let labeler = nodectl_selinux::Labeler::new(root.dir(), &host.selinux);
    st.host = Some(HostStatus::new(&host, &labeler));
    let settings = match load::settings(root, &host) {
        Ok(s) => s,
        Err(e) => {
            st.config_error = Some(e.to_string());
            return st;
        }
    };
    st.settings = Some(settings.clone());
    st.credentials = crate::credentials::read(root)
        .map(|h| status::Credentials::of(&h, std::time::SystemTime::now()));
    st.audit = Some(status::AuditSummary::of(&crate::audit::run_on(
        root, &settings,
    )));
    match systemd_for(root).await {
        Ok(sd) => {
            let cx = Cx::new(root.clone(), host, settings, sd);
            let report = steps::engine().plan(&cx).await;
            st.set_report(&report);
            if let Ok(k) = cx.systemd.state(nodectl_units::kubelet::KUBELET_UNIT).await {
                st.set_kubelet(k);
            }
            st.kubelet_image = steps::running_image(&cx.systemd).await;
        }
        Err(e) => st.config_error = Some(format!("cannot reach systemd: {e:#}")),
    }
    st
}
