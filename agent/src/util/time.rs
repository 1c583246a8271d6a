//! Instants for people and for file names: RFC 3339 in UTC, kubelet's certificate-store stamp,
//! human durations.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `YYYY-MM-DD-HH-MM-SS` in UTC, as kubelet's certificate store names its files.
pub(crate) fn stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}-{:02}-{:02}-{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `2026-11-30T04:10:36Z` (UTC, seconds).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let s = stamp(t);
    // stamp: YYYY-MM-DD-HH-MM-SS
    format!("{}T{}:{}:{}Z", &s[..10], &s[11..13], &s[14..16], &s[17..19])
}

/// Now, as Unix seconds.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Now, as Unix milliseconds.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The time left until `until` (zero once it passed).
pub(crate) fn left(until: SystemTime) -> Duration {
    until
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
}

/// `71h 58m`, `12m 5s`, `-3m 2s` (expired).
pub(crate) fn human_duration(secs: i64) -> String {
    let (sign, s) = if secs < 0 { ("-", -secs) } else { ("", secs) };
    if s >= 3600 {
        format!("{sign}{}h {}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{sign}{}m {}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_calendar_times() {
        assert_eq!(stamp(UNIX_EPOCH), "1970-01-01-00-00-00");
        assert_eq!(
            stamp(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29-00-00-00"
        );
        assert_eq!(
            stamp(UNIX_EPOCH + Duration::from_secs(1_796_000_000)),
            "2026-11-30-00-53-20"
        );
    }
}
