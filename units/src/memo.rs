//! What systemd said of a unit during one pass, so a later step of the pass that asks the same
//! does not ask again (kubelet-running asks what kubelet-unit asked: one bus round trip, ~6 ms
//! under QEMU TCG on a bundle's way to kubelet). Forgotten on every call through the same
//! [`crate::systemd::Systemd`] that changes units (start, stop, restart, reload, enable), and
//! after [`MEMO_TTL`]: a unit changed by someone else meanwhile is seen by the next look after
//! that (the next pass: kubelet's own `Restart=` handles its crashes, and a pass comes with the
//! next event or the hourly resync), as a change after a pass's last look always is. Steps run
//! one after another, so no answer is asked while a call of the pass changes units.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::systemd::UnitState;

/// How long an answer is reused.
pub const MEMO_TTL: Duration = Duration::from_secs(1);

/// A unit's brief state as last asked, and whether its unit file state was asked too.
struct Seen {
    at: Instant,
    state: UnitState,
    unit_file: bool,
}

/// Brief unit states of one pass (cloned handles share them).
#[derive(Clone, Default)]
pub struct Memo(Arc<Mutex<HashMap<String, Seen>>>);

impl Memo {
    /// The state asked for `unit` within [`MEMO_TTL`], when it answers as much as `unit_file`
    /// wants.
    pub fn get(&self, unit: &str, unit_file: bool) -> Option<UnitState> {
        let m = self.0.lock().expect("memo lock");
        m.get(unit)
            .filter(|s| s.at.elapsed() < MEMO_TTL && (s.unit_file || !unit_file))
            .map(|s| s.state.clone())
    }

    /// Remembers what systemd answered, asked at `at`.
    pub fn put(&self, unit: &str, at: Instant, state: &UnitState, unit_file: bool) {
        self.0.lock().expect("memo lock").insert(
            unit.to_string(),
            Seen {
                at,
                state: state.clone(),
                unit_file,
            },
        );
    }

    /// Forgets every answer (units are about to change).
    pub fn forget(&self) {
        self.0.lock().expect("memo lock").clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_serves_as_much_as_was_asked_until_forgotten_or_old() {
        let m = Memo::default();
        let st = UnitState {
            active: "inactive".into(),
            ..UnitState::default()
        };
        assert_eq!(m.get("kubelet.service", false), None);
        m.put("kubelet.service", Instant::now(), &st, false);
        assert_eq!(m.get("kubelet.service", false), Some(st.clone()));
        assert_eq!(m.get("kubelet.service", true), None, "unit file not asked");
        assert_eq!(m.get("other.service", false), None);
        m.put("kubelet.service", Instant::now(), &st, true);
        assert_eq!(m.get("kubelet.service", true), Some(st.clone()));
        m.clone().forget();
        assert_eq!(m.get("kubelet.service", false), None, "clones share it");
        m.put("kubelet.service", Instant::now() - MEMO_TTL, &st, true);
        assert_eq!(m.get("kubelet.service", false), None, "too old");
    }
}
