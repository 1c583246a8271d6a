//! `[reboot]`: how reboots for updates are coordinated: the strategy, the FleetLock endpoint,
//! the group's slots in a Lease, the drain, reboot windows.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::check::Check;
use super::fragment::RebootSection;
use super::node::Role;
use super::ConfigError;
use crate::host::Os;
use crate::util::names;
use crate::util::window::{self, Window, Zone};

/// Where the FleetLock endpoint listens for Zincati.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:9455";
/// The group a controller's reboots take a slot of (update_engine and reboot-required; Zincati
/// names its group in each request: the FCOS configs nodectl ships give it the same name).
pub(crate) const CONTROLLERS_GROUP: &str = "controllers";
/// The group a worker's reboots take a slot of.
pub(crate) const WORKERS_GROUP: &str = "workers";

/// The reboot group of a role: controllers and workers apart, so one slot for controllers keeps
/// etcd's quorum whatever the workers do.
pub(crate) fn default_group(role: Role) -> &'static str {
    match role {
        Role::Controller => CONTROLLERS_GROUP,
        Role::Worker => WORKERS_GROUP,
    }
}

/// The strategy of an OS's updater: Zincati asks over FleetLock on Fedora CoreOS, update_engine
/// is followed on Flatcar (locksmithd masked); elsewhere no updater is known, so none.
pub(crate) fn default_strategy(os: Os) -> RebootStrategy {
    match os {
        Os::FedoraCoreos => RebootStrategy::FleetLock,
        Os::Flatcar => RebootStrategy::UpdateEngine,
        _ => RebootStrategy::Off,
    }
}
/// The namespace of the reboot Leases.
pub(crate) const DEFAULT_NAMESPACE: &str = "nodectl-reboot";
/// Concurrent reboots per group.
pub(crate) const DEFAULT_GROUP_SLOTS: i64 = 1;
/// Seconds a drain may take before the reboot is granted anyway: 0, never (PodDisruptionBudgets
/// are waited for, as `kubectl drain` and kured do; forcing is an operator's setting).
pub(crate) const DEFAULT_DRAIN_TIMEOUT_SECS: i64 = 0;
/// Seconds after which a holder that did not renew its slot is reclaimed.
pub(crate) const DEFAULT_STALE_AFTER_SECS: i64 = 3600;
/// A slot granted in this boot is released by a steady-state of the same boot only once it is
/// this old: the reboot it was granted for counts as abandoned then.
pub(crate) const DEFAULT_ABANDON_AFTER_SECS: i64 = 1800;
/// The local users whose FleetLock requests are served (Zincati runs as `zincati`).
pub(crate) const DEFAULT_FLEETLOCK_USERS: &[&str] = &["zincati"];
/// The units whose processes' FleetLock requests are served (Zincati's).
pub(crate) const DEFAULT_FLEETLOCK_UNITS: &[&str] = &["zincati.service"];

/// The most concurrent reboots a group may allow.
pub const MAX_GROUP_SLOTS: i64 = 10_000;
/// The longest duration a `reboot.*_secs` key takes (a year).
pub const MAX_SECS: i64 = 365 * 24 * 3600;

/// Who reboots the node for updates, and through what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RebootStrategy {
    /// No coordination.
    Off,
    /// Serve FleetLock for Zincati (Fedora CoreOS).
    FleetLock,
    /// Follow update_engine (Flatcar).
    UpdateEngine,
    /// Reboot when `/run/reboot-required` appears (kured's and Flatcar sysext updates'
    /// convention).
    RebootRequired,
}

/// How reboots are coordinated (FleetLock endpoint, the group's Lease, the drain).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootPolicy {
    /// The FleetLock endpoint's address.
    pub listen: SocketAddr,
    /// The group update_engine's reboots take a slot of (Zincati names its own in requests).
    pub group: String,
    /// Concurrent reboots per group.
    pub group_slots: u32,
    /// The namespace of the reboot Leases.
    pub namespace: String,
    /// How long a drain may take before the reboot is granted anyway (0: never; the drain
    /// waits for PodDisruptionBudgets as `kubectl drain` does).
    pub drain_timeout_secs: u64,
    /// Evict pods no controller manages (lost for good), as `kubectl drain --force`.
    pub drain_force: bool,
    /// A holder that did not renew its slot for this long is reclaimed.
    pub stale_after_secs: u64,
    /// A slot granted in this boot is given back by a steady-state of the same boot only once
    /// it is this old (the reboot counts as abandoned).
    pub abandon_after_secs: u64,
    /// The local users (Zincati's) whose FleetLock requests are served; others get 403.
    pub fleetlock_users: Vec<String>,
    /// The units (in `system.slice`) whose processes' FleetLock requests are served: the
    /// client socket must have been made in one of their cgroups.
    pub fleetlock_units: Vec<String>,
    /// update_engine and reboot-required: after the drain, wait while a logind block
    /// inhibitor on shutdown is held ("don't reboot while work is running").
    #[serde(default)]
    pub wait_for_inhibitors: bool,
    /// When new reboot slots may be taken; empty: any time.
    pub windows: Vec<Window>,
    /// The time zone of the windows.
    pub time_zone: Zone,
    /// What must hold before a slot is taken, the settle time, the pre/post commands.
    #[serde(default)]
    pub gates: super::RebootGates,
}

/// Validates a list of names (`reboot.fleetlock_users`, `reboot.fleetlock_units`): each must
/// pass `valid`; unset, `default`.
fn names_list(
    key: &str,
    set: Option<&Vec<String>>,
    default: &[&str],
    valid: fn(&str) -> bool,
    c: &Check,
) -> Result<Vec<String>, ConfigError> {
    match set {
        None => Ok(default.iter().map(|u| u.to_string()).collect()),
        Some(list) => list
            .iter()
            .map(|u| {
                if valid(u) {
                    Ok(u.clone())
                } else {
                    Err(c.bad(key, u))
                }
            })
            .collect(),
    }
}

/// `reboot.fleetlock_users` and `reboot.fleetlock_units`.
fn fleetlock_callers(
    f: &RebootSection,
    c: &Check,
) -> Result<(Vec<String>, Vec<String>), ConfigError> {
    Ok((
        names_list(
            "reboot.fleetlock_users",
            f.fleetlock_users.as_ref(),
            DEFAULT_FLEETLOCK_USERS,
            names::is_user_name,
            c,
        )?,
        names_list(
            "reboot.fleetlock_units",
            f.fleetlock_units.as_ref(),
            DEFAULT_FLEETLOCK_UNITS,
            names::is_service_unit,
            c,
        )?,
    ))
}

impl RebootPolicy {
    /// Validates `[reboot]`: the strategy and the policy.
    /// Unset, the strategy is the OS's updater's ([`default_strategy`]) and the group the
    /// role's ([`default_group`]).
    pub(crate) fn with_config(
        f: &RebootSection,
        c: &Check,
        os: Os,
        role: Role,
    ) -> Result<(RebootStrategy, RebootPolicy), ConfigError> {
        let strategy = match f.strategy.as_deref() {
            None => default_strategy(os),
            Some("off") => RebootStrategy::Off,
            Some("fleet-lock") => RebootStrategy::FleetLock,
            Some("update-engine") => RebootStrategy::UpdateEngine,
            Some("reboot-required") => RebootStrategy::RebootRequired,
            Some(v) => return Err(c.bad("reboot.strategy", v)),
        };
        let listen = f.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let (fleetlock_users, fleetlock_units) = fleetlock_callers(f, c)?;
        let policy = RebootPolicy {
            listen: match listen.parse::<SocketAddr>() {
                // FleetLock has no authentication: its callers must be this node's processes.
                Ok(a) if a.ip().is_loopback() => a,
                Ok(_) => {
                    return Err(c.at(
                        "reboot.listen",
                        format!("{listen:?} is not a loopback address: FleetLock has no authentication, so nodectld serves it to this node only (127.0.0.1 or ::1)"),
                    ))
                }
                Err(_) => return Err(c.bad("reboot.listen", listen)),
            },
            group: match f.group.as_deref() {
                None => default_group(role).into(),
                Some(g) if names::valid_group(g) => g.into(),
                Some(g) => return Err(c.bad("reboot.group", g)),
            },
            group_slots: c.int(
                "reboot.group_slots",
                f.group_slots,
                DEFAULT_GROUP_SLOTS,
                (1, MAX_GROUP_SLOTS),
            )? as u32,
            namespace: match f.namespace.as_deref() {
                None => DEFAULT_NAMESPACE.into(),
                Some(n) if names::is_dns_label(n) => n.into(),
                Some(n) => return Err(c.bad("reboot.namespace", n)),
            },
            drain_timeout_secs: c.int(
                "reboot.drain_timeout_secs",
                f.drain_timeout_secs,
                DEFAULT_DRAIN_TIMEOUT_SECS,
                (0, MAX_SECS),
            )? as u64,
            stale_after_secs: c.int(
                "reboot.stale_after_secs",
                f.stale_after_secs,
                DEFAULT_STALE_AFTER_SECS,
                (60, MAX_SECS),
            )? as u64,
            abandon_after_secs: c.int(
                "reboot.abandon_after_secs",
                f.abandon_after_secs,
                DEFAULT_ABANDON_AFTER_SECS,
                (5, 86_400),
            )? as u64,
            fleetlock_users,
            fleetlock_units,
            wait_for_inhibitors: f.wait_for_inhibitors.unwrap_or(false),
            drain_force: f.drain_force.unwrap_or(false),
            windows: f
                .windows
                .iter()
                .flatten()
                .map(|w| window::parse(w).map_err(|e| c.at("reboot.windows", e.to_string())))
                .collect::<Result<_, _>>()?,
            time_zone: window::zone(f.time_zone.as_deref().unwrap_or("UTC"))
                .map_err(|e| c.at("reboot.time_zone", e.to_string()))?,
            gates: super::RebootGates::with_config(f, c)?,
        };
        Ok((strategy, policy))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{RebootStrategy, Settings};
    use crate::host::{Host, Os};

    /// A node from the shipped configs (no `[reboot]` section) coordinates its OS's updater:
    /// Zincati over FleetLock on Fedora CoreOS, update_engine on Flatcar, in its role's group;
    /// an operator's strategy still wins.
    #[test]
    fn reboots_are_coordinated_by_default_where_the_os_updates_itself() {
        let s = |os, toml: &str| Settings::from_toml(toml, &Host::with_os(os), "n1");
        let worker = "[node]\nrole = \"worker\"\n";
        let controller = "[node]\nrole = \"controller\"\n";
        let fcos = s(Os::FedoraCoreos, controller);
        assert_eq!(fcos.reboot, RebootStrategy::FleetLock);
        assert_eq!(fcos.reboot_policy.group, "controllers");
        let flatcar = s(Os::Flatcar, worker);
        assert_eq!(flatcar.reboot, RebootStrategy::UpdateEngine);
        assert_eq!(flatcar.reboot_policy.group, "workers");
        assert_eq!(s(Os::Generic, worker).reboot, RebootStrategy::Off);
        let off = s(
            Os::FedoraCoreos,
            "[node]\nrole = \"worker\"\n[reboot]\nstrategy = \"off\"\n",
        );
        assert_eq!(off.reboot, RebootStrategy::Off);
    }
}
