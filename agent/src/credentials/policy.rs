//! What the node's certificate needs now, and how long to wait after a failure (pure).

use std::time::{Duration, SystemTime};

use super::Held;
use crate::util::time::rfc3339;

/// How long a request waits for approval and issuance (kubelet: an hour).
pub(crate) const APPROVAL_WAIT: Duration = Duration::from_secs(3600);
/// After a denied or failed request: the first wait before asking again by itself, doubling
/// with each refusal in a row up to [`REFUSED_CAP`] (an approver that said no is not asked
/// again at once; one that was not yet configured is asked again within minutes, not an hour).
pub(crate) const REFUSED_BASE: Duration = Duration::from_secs(60);
pub(crate) const REFUSED_CAP: Duration = Duration::from_secs(3600);
/// Unreachable or failing server: first delay, factor 2, this cap, +-20% jitter.
pub(crate) const BACKOFF_BASE: Duration = Duration::from_secs(2);
pub(crate) const BACKOFF_CAP: Duration = Duration::from_secs(64);

/// What the node's certificate needs (pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    Nothing,
    /// A request with the bootstrap token, and why.
    Bootstrap(String),
    /// A renewal with the node's certificate, and why.
    Rotate(String),
}

pub(crate) fn need(held: Option<&Held>, node_name: &str, refused: bool, now: SystemTime) -> Need {
    let Some(h) = held else {
        return Need::Bootstrap("the node has no client certificate".into());
    };
    let want = format!("system:node:{node_name}");
    if h.subject != want {
        return Need::Bootstrap(format!(
            "the certificate is for {:?}, not {want:?}",
            h.subject
        ));
    }
    if h.validity.expired(now) {
        return Need::Bootstrap(format!(
            "the certificate expired at {}",
            rfc3339(h.validity.not_after)
        ));
    }
    if refused {
        return Need::Bootstrap("the API server refused the node's certificate (401)".into());
    }
    if now >= h.rotate_at {
        return Need::Rotate(format!(
            "past its rotation time {} (expires {})",
            rfc3339(h.rotate_at),
            rfc3339(h.validity.not_after)
        ));
    }
    Need::Nothing
}

/// Capped exponential backoff with +-20% jitter; `attempt` counts from 1.
pub(crate) fn backoff(attempt: u32, jitter01: f64) -> Duration {
    doubling(BACKOFF_BASE, BACKOFF_CAP, attempt, jitter01)
}

/// The wait after the `refusal`-th denied or failed request in a row (from 1): 60 s doubling to
/// an hour, +-20% jitter.
pub(crate) fn refused_backoff(refusal: u32, jitter01: f64) -> Duration {
    doubling(REFUSED_BASE, REFUSED_CAP, refusal, jitter01)
}

/// (NODECTL_TEST_TIMERS shortens it in a test build: [`crate::util::timers`])
fn doubling(base: Duration, cap: Duration, attempt: u32, jitter01: f64) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    crate::util::timers::scaled(exp.min(cap).mul_f64(0.8 + 0.4 * jitter01.clamp(0.0, 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Validity;

    fn held_for(subject: &str, from: u64, to: u64) -> Held {
        let v = Validity {
            not_before: SystemTime::UNIX_EPOCH + Duration::from_secs(from),
            not_after: SystemTime::UNIX_EPOCH + Duration::from_secs(to),
        };
        Held {
            subject: subject.into(),
            rotate_at: v.rotation_deadline(0.5),
            validity: v,
        }
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn what_the_certificate_needs() {
        let h = held_for("system:node:n1", 1000, 2000);
        assert_eq!(need(Some(&h), "n1", false, at(1500)), Need::Nothing);
        assert!(matches!(
            need(None, "n1", false, at(1500)),
            Need::Bootstrap(_)
        ));
        // 92-96% with jitter 0.5: 94% = 1940 (kubelet's own rotation is due by 90%).
        assert!(matches!(
            need(Some(&h), "n1", false, at(1940)),
            Need::Rotate(_)
        ));
        assert_eq!(need(Some(&h), "n1", false, at(1939)), Need::Nothing);
        assert_eq!(need(Some(&h), "n1", false, at(1900)), Need::Nothing);
        let Need::Bootstrap(why) = need(Some(&h), "n1", false, at(2000)) else {
            panic!()
        };
        assert!(why.contains("expired"), "{why}");
        let Need::Bootstrap(why) = need(Some(&h), "n1", true, at(1500)) else {
            panic!()
        };
        assert!(why.contains("401"), "{why}");
        let Need::Bootstrap(why) = need(Some(&h), "n2", false, at(1500)) else {
            panic!()
        };
        assert!(why.contains("system:node:n2"), "{why}");
    }

    #[test]
    fn a_refusal_is_asked_again_within_minutes_then_hourly() {
        assert_eq!(refused_backoff(1, 0.5), Duration::from_secs(60));
        assert_eq!(refused_backoff(2, 0.5), Duration::from_secs(120));
        assert_eq!(refused_backoff(7, 0.5), REFUSED_CAP);
        assert_eq!(refused_backoff(99, 1.0), REFUSED_CAP.mul_f64(1.2));
        assert_eq!(refused_backoff(1, 0.0), Duration::from_secs(48));
    }

    #[test]
    fn backoff_doubles_to_a_cap_with_jitter() {
        assert_eq!(backoff(1, 0.5), Duration::from_secs(2));
        assert_eq!(backoff(2, 0.5), Duration::from_secs(4));
        assert_eq!(backoff(6, 0.5), Duration::from_secs(64));
        assert_eq!(backoff(40, 0.5), BACKOFF_CAP);
        assert!(backoff(3, 0.0) < backoff(3, 1.0));
        assert_eq!(backoff(3, 0.0), Duration::from_secs(8).mul_f64(0.8));
        assert_eq!(backoff(40, 1.0), BACKOFF_CAP.mul_f64(1.2));
    }
}
