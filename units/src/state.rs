//! What systemd says about a unit: the one type the client ([`crate::systemd`]) and its answers'
//! memo ([`crate::memo`]) share, apart from both (neither imports the other for it).

use serde::{Deserialize, Serialize};

/// What systemd says about a unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitState {
    /// `loaded`, `not-found`, `masked`, ...
    pub load: String,
    /// `active`, `inactive`, `activating`, `failed`, ...
    pub active: String,
    /// `running`, `dead`, `exited`, `auto-restart`, ...
    pub sub: String,
    /// `enabled`, `disabled`, `static`, ... (empty when there is no unit file)
    pub unit_file: String,
    /// For services: the last result (`success`, `exit-code`, `signal`, ...).
    pub result: String,
    /// For services: how often systemd restarted it (Restart=).
    pub restarts: u32,
    /// For services: the main process's exit status (or signal number) when it last exited.
    pub exit_status: i32,
    /// The id of a job queued for the unit and not yet run (0: none), e.g. kubelet's start
    /// waiting for nodectld's own start (kubelet is ordered after it).
    #[serde(default)]
    pub job: u32,
}

impl UnitState {
    /// Why the unit last failed, when it is failed or waiting to be restarted after a failure.
    pub fn failure(&self) -> Option<String> {
        let failing = self.active == "failed" || self.sub == "auto-restart";
        (failing && !self.result.is_empty() && self.result != "success").then(|| {
            format!(
                "{} (exit status {}), restarted {} times",
                self.result, self.exit_status, self.restarts
            )
        })
    }
}
