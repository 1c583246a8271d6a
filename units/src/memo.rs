//! What systemd said of a unit during one pass, so a later step of the pass that asks the same
//! does not ask again (kubelet-running asks what kubelet-unit asked: one bus round trip, ~6 ms
//! under QEMU TCG on a bundle's way to kubelet). Forgotten on every call through the same
//! [`crate::systemd::Systemd`] that changes units (start, stop, restart, reload, enable), and
//! after [`MEMO_TTL`]: a unit changed by someone else meanwhile is seen by the next look after
//! that (the next pass: kubelet's own `Restart=` handles its crashes, and a pass comes with the
//! next event or the hourly resync), as a change after a pass's last look always is. Steps run
//! one after another, so no answer is asked while a call of the pass changes units, except the
//! one a pass asks ahead ([`crate::systemd::Systemd::ask_ahead`]): its answer is kept only when
//! nothing was forgotten while it was asked, and a step that wants it waits for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::state::UnitState;

/// How long an answer is reused.
pub const MEMO_TTL: Duration = Duration::from_secs(1);

/// A unit's brief state as last asked, and whether its unit file state was asked too.
struct Seen {
    at: Instant,
    state: UnitState,
    unit_file: bool,
}

/// An answer being asked ahead: resolves when it is in (or the asking ended without one).
pub type Asking = futures_util::future::Shared<tokio::sync::oneshot::Receiver<()>>;

#[derive(Default)]
struct Inner {
    seen: HashMap<String, Seen>,
    /// Answers asked ahead and not in yet (brief states without the unit file state).
    asking: HashMap<String, Asking>,
    /// How often everything was forgotten: an answer asked before a forget is not kept.
    generation: u64,
}

/// Brief unit states of one pass (cloned handles share them).
#[derive(Clone, Default)]
pub struct Memo(Arc<Mutex<Inner>>);

impl Memo {
    /// The state asked for `unit` within [`MEMO_TTL`], when it answers as much as `unit_file`
    /// wants.
    pub fn get(&self, unit: &str, unit_file: bool) -> Option<UnitState> {
        let m = self.0.lock().expect("memo lock");
        m.seen
            .get(unit)
            .filter(|s| s.at.elapsed() < MEMO_TTL && (s.unit_file || !unit_file))
            .map(|s| s.state.clone())
    }

    /// The count of forgets so far (see [`Memo::put_unless_forgotten`]).
    pub fn generation(&self) -> u64 {
        self.0.lock().expect("memo lock").generation
    }

    /// Remembers what systemd answered to a question asked at `at`, when nothing was forgotten
    /// since `generation` (units may have changed while it was asked).
    pub fn put_unless_forgotten(
        &self,
        unit: &str,
        at: Instant,
        state: &UnitState,
        unit_file: bool,
        generation: u64,
    ) {
        let mut m = self.0.lock().expect("memo lock");
        // (nor over an answer asked after it)
        if m.generation != generation || m.seen.get(unit).is_some_and(|s| s.at > at) {
            return;
        }
        m.seen.insert(
            unit.to_string(),
            Seen {
                at,
                state: state.clone(),
                unit_file,
            },
        );
    }

    /// Notes that `unit`'s brief state is being asked ahead; `done` resolves when it is in.
    pub fn asking(&self, unit: &str, done: Asking) {
        self.0
            .lock()
            .expect("memo lock")
            .asking
            .insert(unit.to_string(), done);
    }

    /// What to wait for before asking `unit`'s brief state again: its question asked ahead, in
    /// flight since the last forget.
    pub fn asked_ahead(&self, unit: &str) -> Option<Asking> {
        self.0.lock().expect("memo lock").asking.get(unit).cloned()
    }

    /// Forgets every answer (units are about to change), and those being asked.
    pub fn forget(&self) {
        let mut m = self.0.lock().expect("memo lock");
        m.seen.clear();
        m.asking.clear();
        m.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Remembers an answer as of now (nothing forgotten while it was asked).
    fn put(m: &Memo, unit: &str, at: Instant, state: &UnitState, unit_file: bool) {
        m.put_unless_forgotten(unit, at, state, unit_file, m.generation());
    }

    #[test]
    fn an_answer_serves_as_much_as_was_asked_until_forgotten_or_old() {
        let m = Memo::default();
        let st = UnitState {
            active: "inactive".into(),
            ..UnitState::default()
        };
        assert_eq!(m.get("kubelet.service", false), None);
        put(&m, "kubelet.service", Instant::now(), &st, false);
        assert_eq!(m.get("kubelet.service", false), Some(st.clone()));
        assert_eq!(m.get("kubelet.service", true), None, "unit file not asked");
        assert_eq!(m.get("other.service", false), None);
        put(&m, "kubelet.service", Instant::now(), &st, true);
        assert_eq!(m.get("kubelet.service", true), Some(st.clone()));
        m.clone().forget();
        assert_eq!(m.get("kubelet.service", false), None, "clones share it");
        put(&m, "kubelet.service", Instant::now() - MEMO_TTL, &st, true);
        assert_eq!(m.get("kubelet.service", false), None, "too old");
    }

    #[tokio::test]
    async fn an_answer_asked_ahead_is_waited_for_and_dropped_when_units_changed_meanwhile() {
        use futures_util::FutureExt;
        let m = Memo::default();
        let st = UnitState {
            active: "inactive".into(),
            ..UnitState::default()
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let generation = m.generation();
        m.asking("kubelet.service", rx.shared());
        let wait = m.asked_ahead("kubelet.service").expect("asked ahead");
        assert!(m.asked_ahead("other.service").is_none());
        m.put_unless_forgotten("kubelet.service", Instant::now(), &st, false, generation);
        tx.send(()).unwrap();
        let _ = wait.await;
        assert_eq!(m.get("kubelet.service", false), Some(st.clone()));
        // Units changed while another answer was being asked: it is not kept, and nothing is
        // waited for any more.
        let (_tx, rx) = tokio::sync::oneshot::channel::<()>();
        let generation = m.generation();
        m.asking("kubelet.service", rx.shared());
        m.forget();
        assert!(m.asked_ahead("kubelet.service").is_none());
        m.put_unless_forgotten("kubelet.service", Instant::now(), &st, false, generation);
        assert_eq!(m.get("kubelet.service", false), None);
    }
}
