//! Reboot coordination's health (issue 65, 2): whether it runs, failed to start or ended, started
//! again after a backoff; and (FleetLock) whether Zincati's configuration asks it (issue 65, 1).
//! Published as `status.coordination`, from which the condition, the annotation, the metrics and
//! `nodectl status` say it; each change logged once, with a `MESSAGE_ID` its Event comes from.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;

use super::shared::{CoordinationKey as Key, Shared, Trigger};
use crate::config::{RebootStrategy, Settings};
use crate::root::Root;
use crate::status::Coordination;

/// The first restart's wait; doubled at each failure in a row, up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

fn key(s: &Settings) -> Key {
    (s.reboot, s.reboot_policy.clone(), s.node_name.clone())
}

/// `reboot.strategy` as configured (`fleet-lock`, ...).
fn strategy_name(s: RebootStrategy) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The wait before the `failures`-th start in a row.
fn backoff(failures: u32) -> Duration {
    let d = BACKOFF_FIRST.saturating_mul(1 << failures.saturating_sub(1).min(16));
    crate::util::timers::scaled(d.min(BACKOFF_MAX))
}

/// Reads Zincati's configuration (FleetLock) and records whether it asks this nodectld; logs
/// (with an Event) when that changes. Nothing for other strategies.
pub(super) fn check_zincati(root: &Root, s: &Settings, shared: &Shared) {
    let check = (s.reboot == RebootStrategy::FleetLock)
        .then(|| crate::reboot::zincati::check(root, s.reboot_policy.listen));
    let mut h = shared.coordination.lock().expect("coordination");
    let before = h.status.as_ref().and_then(|c| c.zincati.clone());
    if before.as_ref().map(|z| (&z.state, &z.problem))
        != check.as_ref().map(|z| (&z.state, &z.problem))
    {
        match check.as_ref().and_then(|z| z.problem.as_ref()) {
            Some(p) => tracing::warn!(
                message_id = crate::logging::ids::REBOOT_UNCOORDINATED,
                "{p}"
            ),
            None if before.is_some_and(|b| b.problem.is_some()) => {
                tracing::info!("Zincati asks nodectld's FleetLock again")
            }
            None => {}
        }
    }
    if s.reboot == RebootStrategy::Off {
        h.status = None;
        return;
    }
    let st = h.status.get_or_insert_with(|| Coordination {
        strategy: strategy_name(s.reboot),
        state: "waiting".into(),
        ..Coordination::default()
    });
    st.strategy = strategy_name(s.reboot);
    st.zincati = check;
}

/// Whether coordination may be started now: not within the backoff of a failure with these
/// settings (changed settings are tried at once).
pub(super) fn may_start(s: &Settings, shared: &Shared) -> bool {
    let h = shared.coordination.lock().expect("coordination");
    match (&h.failed_for, h.retry_at) {
        (Some(k), Some(at)) => *k != key(s) || tokio::time::Instant::now() >= at,
        _ => true,
    }
}

/// Coordination runs (`true`), or waits for the node's credentials (`false`).
pub(super) fn started(s: &Settings, shared: &Shared, running: bool) {
    let mut h = shared.coordination.lock().expect("coordination");
    if s.reboot == RebootStrategy::Off {
        // (a restart a failure had scheduled is moot)
        h.status = None;
        h.failed_for = None;
        h.retry_at = None;
        if let Some(t) = h.timer.take() {
            t.abort();
        }
        return;
    }
    let was_down = h.status.as_ref().is_some_and(Coordination::is_down);
    let st = h.status.get_or_insert_with(Coordination::default);
    st.strategy = strategy_name(s.reboot);
    if running {
        if was_down {
            tracing::info!(
                "reboot coordination ({}) started again after {} failure(s)",
                st.strategy,
                st.failures
            );
        }
        st.state = "up".into();
        st.error = None;
        st.failures = 0;
        st.retry_at = None;
        h.failed_for = None;
        h.retry_at = None;
        if let Some(t) = h.timer.take() {
            t.abort();
        }
    } else if !was_down {
        st.state = "waiting".into();
    }
    drop(h);
    // (the condition reporter: a coordination back up clears the condition at once)
    shared.changed.notify_one();
}

/// Coordination failed to start (`state` `failed`) or ended (`ended`): recorded, logged with its
/// Event, and started again after the backoff (a `Trigger::Reboot` then).
pub(super) fn down(s_key: Option<&Settings>, shared: &Arc<Shared>, state: &str, error: &str) {
    let mut h = shared.coordination.lock().expect("coordination");
    let st = h.status.get_or_insert_with(Coordination::default);
    if let Some(s) = s_key {
        st.strategy = strategy_name(s.reboot);
    }
    st.state = state.into();
    st.error = Some(error.to_string());
    st.failures = st.failures.saturating_add(1);
    let wait = backoff(st.failures);
    st.retry_at = Some(crate::util::time::now_secs() + wait.as_secs().max(1));
    tracing::error!(
        message_id = crate::logging::ids::REBOOT_COORDINATION_FAILED,
        failures = st.failures,
        retry_in_s = wait.as_secs(),
        "reboot coordination ({}) {state}: {error}",
        st.strategy
    );
    if let Some(s) = s_key {
        h.failed_for = Some(key(s));
    }
    let at = tokio::time::Instant::now() + wait;
    h.retry_at = Some(at);
    if let Some(t) = h.timer.take() {
        t.abort();
    }
    let wake = shared.wake.clone();
    h.timer = Some(tokio::spawn(async move {
        tokio::time::sleep_until(at).await;
        let _ = wake.send(Trigger::Reboot);
    }));
    drop(h);
    shared.changed.notify_one();
}

/// Whether the running coordination ended (its end recorded by [`supervised`]): it is then to
/// be started again.
pub(super) fn ended(shared: &Shared) -> bool {
    shared
        .coordination
        .lock()
        .expect("coordination")
        .status
        .as_ref()
        .is_some_and(|c| c.state == "ended")
}

/// Runs coordination's task; its end with an error (or a panic) is recorded as `ended`, and
/// wakes the loop after the backoff to start it again. An `Ok` end (the follower asked logind
/// to reboot) is left as it is.
pub(super) fn supervised(
    root: &Root,
    s: &Settings,
    shared: &Arc<Shared>,
    task: impl Future<Output = anyhow::Result<()>> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let (root, shared, s) = (root.clone(), shared.clone(), s.clone());
    tokio::spawn(async move {
        let why = match std::panic::AssertUnwindSafe(task).catch_unwind().await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("{e:#}"),
            Err(_) => "its task panicked (the journal has the panic)".to_string(),
        };
        down(Some(&s), &shared, "ended", &why);
        super::metrics::write(&root, &shared).await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_five_minutes() {
        let secs: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff(u32::MAX).as_secs(), 300);
        assert_eq!(strategy_name(RebootStrategy::UpdateEngine), "update-engine");
    }
}
