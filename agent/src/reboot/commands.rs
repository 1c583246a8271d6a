//! The operator's checks around a reboot (`reboot.pre_commands`, `reboot.post_commands`): each
//! command runs as a transient service of its own (`nodectl-pre-reboot-1-<ms>.service`, ...), as
//! `systemd-run --wait` runs one: outside nodectld's sandbox, its output in the journal under
//! its unit, killed by systemd after `reboot.command_timeout_secs`. One after another; the
//! first that fails ends the run. kured's and FLUO's before/after-reboot hooks are other
//! controllers; here the check is on the node, where a local health check can look.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

/// Runs one command as the transient unit named: `Err(why)` unless it exited 0 in time.
/// (unit, argv, environment, timeout)
pub type RunCommand = Arc<
    dyn Fn(String, Vec<String>, Vec<String>, Duration) -> BoxFuture<'static, Result<(), String>>
        + Send
        + Sync,
>;

/// Which checks, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Once the slot is taken, before the drain.
    PreReboot,
    /// After the reboot, once kubelet is active and the Node Ready, before the release.
    PostReboot,
}

impl Phase {
    /// `pre-reboot` or `post-reboot` (unit names, `NODECTL_REBOOT_PHASE`).
    pub fn name(self) -> &'static str {
        match self {
            Phase::PreReboot => "pre-reboot",
            Phase::PostReboot => "post-reboot",
        }
    }
}

/// The checks of a reboot: the commands of each phase and their timeout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checks {
    /// `reboot.pre_commands`.
    pub pre: Vec<Vec<String>>,
    /// `reboot.post_commands`.
    pub post: Vec<Vec<String>>,
    /// `reboot.command_timeout_secs`.
    pub timeout: Duration,
}

impl Checks {
    /// The commands of `phase`.
    pub fn of(&self, phase: Phase) -> &[Vec<String>] {
        match phase {
            Phase::PreReboot => &self.pre,
            Phase::PostReboot => &self.post,
        }
    }
}

/// Runs the commands of `phase` in order, each as `nodectl-<phase>-<n>-<ms>.service` with
/// `NODECTL_REBOOT_PHASE`, `NODECTL_NODE` and `NODECTL_REBOOT_GROUP` set; the first failure
/// ends the run and says which command (its program, never its arguments) and why.
pub async fn run(
    runner: &RunCommand,
    checks: &Checks,
    phase: Phase,
    node: &str,
    group: &str,
) -> Result<(), String> {
    let env = vec![
        format!("NODECTL_REBOOT_PHASE={}", phase.name()),
        format!("NODECTL_NODE={node}"),
        format!("NODECTL_REBOOT_GROUP={group}"),
    ];
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    for (i, argv) in checks.of(phase).iter().enumerate() {
        // (a name of its own per run: one still stopping after a timeout, or left running by a
        // request that went away, never makes the next run fail as "already exists")
        let unit = format!("nodectl-{}-{}-{stamp}.service", phase.name(), i + 1);
        let program = argv.first().cloned().unwrap_or_default();
        tracing::info!(unit = %unit, "{} check {}: running {program} as {unit}", phase.name(), i + 1);
        runner(unit.clone(), argv.clone(), env.clone(), checks.timeout)
            .await
            .map_err(|e| {
                format!(
                    "{} check {} ({program}) failed: {e} (journalctl -u {unit})",
                    phase.name(),
                    i + 1
                )
            })?;
    }
    Ok(())
}

/// The runner of a node: systemd's transient units over D-Bus.
pub fn systemd_runner(systemd: nodectl_units::systemd::Systemd) -> RunCommand {
    Arc::new(move |unit, argv, env, timeout| {
        let sd = systemd.clone();
        Box::pin(async move {
            sd.run_transient(&unit, &argv, &env, timeout)
                .await
                .map_err(|e| e.to_string())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn checks_run_in_order_as_units_of_their_own_and_stop_at_the_first_failure() {
        let ran = Arc::new(Mutex::new(Vec::new()));
        let r = ran.clone();
        let runner: RunCommand = Arc::new(move |unit, argv: Vec<String>, env, t| {
            r.lock().unwrap().push((unit, argv.clone(), env, t));
            Box::pin(async move {
                if argv[0] == "/bin/false" {
                    Err("job run finished with result 'failed'".into())
                } else {
                    Ok(())
                }
            })
        });
        let checks = Checks {
            pre: vec![
                vec!["/bin/true".into(), "token=secret".into()],
                vec!["/bin/false".into(), "secret".into()],
                vec!["/bin/never".into()],
            ],
            post: vec![],
            timeout: Duration::from_secs(7),
        };
        let e = run(&runner, &checks, Phase::PreReboot, "w1", "workers")
            .await
            .unwrap_err();
        let ran = ran.lock().unwrap().clone();
        assert_eq!(ran.len(), 2, "stopped at the first failure");
        let stamp = ran[0].0.strip_prefix("nodectl-pre-reboot-1-").unwrap();
        assert!(stamp.ends_with(".service"), "{}", ran[0].0);
        assert_eq!(ran[1].0, format!("nodectl-pre-reboot-2-{stamp}"));
        assert_eq!(
            e,
            format!("pre-reboot check 2 (/bin/false) failed: job run finished with result 'failed' (journalctl -u nodectl-pre-reboot-2-{stamp})")
        );
        assert_eq!(
            ran[0].2,
            [
                "NODECTL_REBOOT_PHASE=pre-reboot",
                "NODECTL_NODE=w1",
                "NODECTL_REBOOT_GROUP=workers"
            ]
        );
        assert_eq!(ran[0].3, Duration::from_secs(7));
        assert!(run(&runner, &checks, Phase::PostReboot, "w1", "g")
            .await
            .is_ok());
    }
}
