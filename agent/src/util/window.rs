//! Reboot windows, as Zincati's `periodic` strategy has them (days, start time, length, time
//! zone), applied to FleetLock: outside every window no new slot is taken. A window may cross
//! midnight (`Sun 23:30 60m` ends Monday 00:30).

use jiff::civil::Weekday;
use serde::{Deserialize, Serialize};

/// A refused window or time zone: what was given and what is expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WindowError(String);

/// A reboot window, parsed; kept with its text (settings and status show it as written).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Window {
    text: String,
    /// The days it starts on.
    pub days: Vec<Weekday>,
    /// Minutes after local midnight.
    pub start: u32,
    /// Minutes.
    pub length: u32,
}

fn weekday(s: &str) -> Option<Weekday> {
    Some(match s {
        "Mon" => Weekday::Monday,
        "Tue" => Weekday::Tuesday,
        "Wed" => Weekday::Wednesday,
        "Thu" => Weekday::Thursday,
        "Fri" => Weekday::Friday,
        "Sat" => Weekday::Saturday,
        "Sun" => Weekday::Sunday,
        _ => return None,
    })
}

/// Parses `"Sat,Sun 23:30 60m"` (days, start `HH:MM`, length in minutes).
pub fn parse(s: &str) -> Result<Window, WindowError> {
    let bad = |why: &str| {
        WindowError(format!(
            "{s:?}: {why} (expected e.g. \"Sat,Sun 23:30 60m\")"
        ))
    };
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [days, start, length] = parts[..] else {
        return Err(bad("three fields: days, start, length"));
    };
    let days = days
        .split(',')
        .map(|d| weekday(d).ok_or_else(|| bad(&format!("unknown day {d:?} (Mon..Sun)"))))
        .collect::<Result<Vec<_>, _>>()?;
    let (h, m) = start.split_once(':').ok_or_else(|| bad("start is HH:MM"))?;
    let (h, m): (u32, u32) = (
        h.parse().map_err(|_| bad("start is HH:MM"))?,
        m.parse().map_err(|_| bad("start is HH:MM"))?,
    );
    if h > 23 || m > 59 {
        return Err(bad("start is HH:MM within a day"));
    }
    let length: u32 = length
        .strip_suffix('m')
        .and_then(|l| l.parse().ok())
        .filter(|l| (1..=7 * 24 * 60).contains(l))
        .ok_or_else(|| bad("length is minutes, e.g. 60m, at most a week"))?;
    Ok(Window {
        text: s.to_string(),
        days,
        start: h * 60 + m,
        length,
    })
}

impl TryFrom<String> for Window {
    type Error = WindowError;
    fn try_from(s: String) -> Result<Self, WindowError> {
        parse(&s)
    }
}

impl From<Window> for String {
    fn from(w: Window) -> String {
        w.text
    }
}

/// Whether local time (`day`, minutes after midnight) is inside a window (pure).
pub(crate) fn open_at(windows: &[Window], day: Weekday, minute: u32) -> bool {
    windows.iter().any(|w| {
        w.days.iter().any(|&d| {
            // Minutes since the window's start day's midnight, looking back up to a week.
            let back = (day.to_monday_zero_offset() as i32 - d.to_monday_zero_offset() as i32)
                .rem_euclid(7) as u32;
            let t = back * 24 * 60 + minute;
            t >= w.start && t < w.start + w.length
                || t + 7 * 24 * 60 >= w.start && t + 7 * 24 * 60 < w.start + w.length
        })
    })
}

/// Whether now is inside a window in `time_zone` (`UTC`, `localtime` or an IANA name).
pub(crate) fn open_now(windows: &[Window], zone: &Zone) -> bool {
    if windows.is_empty() {
        return true;
    }
    let now = jiff::Timestamp::now().to_zoned(zone.tz.clone());
    open_at(
        windows,
        now.weekday(),
        now.hour() as u32 * 60 + now.minute() as u32,
    )
}

/// A time zone by name (`UTC`, `localtime` or an IANA name), resolved once.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Zone {
    name: String,
    tz: jiff::tz::TimeZone,
}

impl Zone {
    /// The UTC zone.
    pub fn utc() -> Zone {
        Zone {
            name: "UTC".into(),
            tz: jiff::tz::TimeZone::UTC,
        }
    }

    /// The name it was given.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

impl TryFrom<String> for Zone {
    type Error = WindowError;
    fn try_from(name: String) -> Result<Self, WindowError> {
        zone(&name)
    }
}

impl From<Zone> for String {
    fn from(z: Zone) -> String {
        z.name
    }
}

/// Resolves a time zone name: `UTC`, `localtime` (the system's) or an IANA name.
pub(crate) fn zone(name: &str) -> Result<Zone, WindowError> {
    let tz = match name {
        "UTC" => jiff::tz::TimeZone::UTC,
        "localtime" => jiff::tz::TimeZone::system(),
        n => {
            jiff::tz::TimeZone::get(n).map_err(|e| WindowError(format!("time zone {n:?}: {e}")))?
        }
    };
    Ok(Zone {
        name: name.into(),
        tz,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_with_errors_that_say_what_is_expected() {
        let w = parse("Sat,Sun 23:30 60m").unwrap();
        assert_eq!(w.days, [Weekday::Saturday, Weekday::Sunday]);
        assert_eq!((w.start, w.length), (23 * 60 + 30, 60));
        for (bad, why) in [
            ("Sat 23:30", "three fields"),
            ("Sam 23:30 60m", "unknown day \"Sam\""),
            ("Sat 24:00 60m", "within a day"),
            ("Sat 23:30 60", "length is minutes"),
            ("Sat 23:30 0m", "length is minutes"),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("Sat,Sun 23:30 60m"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_window_is_open_from_its_start_for_its_length_across_midnight() {
        let w = [parse("Sun 23:30 60m").unwrap()];
        assert!(!open_at(&w, Weekday::Sunday, 23 * 60 + 29));
        assert!(open_at(&w, Weekday::Sunday, 23 * 60 + 30));
        assert!(open_at(&w, Weekday::Monday, 0));
        assert!(open_at(&w, Weekday::Monday, 29));
        assert!(!open_at(&w, Weekday::Monday, 30));
        assert!(!open_at(&w, Weekday::Saturday, 23 * 60 + 45));
        let long = [parse("Fri 22:00 1560m").unwrap()]; // 26 h: to Sunday 00:00
        assert!(open_at(&long, Weekday::Saturday, 12 * 60));
        assert!(!open_at(&long, Weekday::Sunday, 0));
    }

    #[test]
    fn no_windows_means_always_and_zones_resolve() {
        assert!(open_now(&[], &Zone::utc()));
        assert!(zone("UTC").is_ok());
        assert!(zone("Nowhere/Zone").is_err());
    }
}
