//! SELinux security contexts (`user:role:type:range`) and MCS levels, parsed and validated in
//! pure Rust so planning and tests need no libselinux and no SELinux kernel.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The highest MCS category number in the Fedora and Debian MCS policies (`c0.c1023`).
pub const MAX_CATEGORY: u16 = 1023;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ContextError {
    #[error("context {0:?} must have the form user:role:type[:range]")]
    Shape(String),
    #[error("context {ctx:?}: {part} {value:?} is not a valid SELinux identifier")]
    Identifier {
        ctx: String,
        part: &'static str,
        value: String,
    },
    #[error("MCS level {0:?}: {1}")]
    Level(String, String),
}

/// One MCS level: a sensitivity (`s0`) and a set of categories (`c1,c2`, `c0.c1023`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Level {
    pub sensitivity: u16,
    /// Sorted, without duplicates.
    pub categories: Vec<u16>,
}

impl Level {
    /// `s0`: no categories. Every container at `s0` or with a category pair can read it.
    pub fn s0() -> Self {
        Level {
            sensitivity: 0,
            categories: Vec::new(),
        }
    }

    /// Whether `self` dominates `other` (same sensitivity or higher, superset of categories).
    pub fn dominates(&self, other: &Level) -> bool {
        self.sensitivity >= other.sensitivity
            && other
                .categories
                .iter()
                .all(|c| self.categories.binary_search(c).is_ok())
    }
}

impl FromStr for Level {
    type Err = ContextError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| ContextError::Level(s.to_string(), why.to_string());
        let (sens, cats) = match s.split_once(':') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let sensitivity = sens
            .strip_prefix('s')
            .and_then(|n| n.parse::<u16>().ok())
            .ok_or_else(|| err("sensitivity must be s<number>, e.g. s0"))?;
        let mut categories = Vec::new();
        if let Some(cats) = cats {
            for item in cats.split(',') {
                let cat = |c: &str| -> Result<u16, ContextError> {
                    let n = c
                        .strip_prefix('c')
                        .and_then(|n| n.parse::<u16>().ok())
                        .ok_or_else(|| {
                            err("categories must be c<number>, e.g. c1,c2 or c0.c1023")
                        })?;
                    if n > MAX_CATEGORY {
                        return Err(err(&format!("category c{n} is above c{MAX_CATEGORY}")));
                    }
                    Ok(n)
                };
                match item.split_once('.') {
                    Some((lo, hi)) => {
                        let (lo, hi) = (cat(lo)?, cat(hi)?);
                        if lo > hi {
                            return Err(err("a category range must go upwards (c0.c1023)"));
                        }
                        categories.extend(lo..=hi);
                    }
                    None => categories.push(cat(item)?),
                }
            }
            if categories.is_empty() {
                return Err(err("empty category list"));
            }
        }
        categories.sort_unstable();
        categories.dedup();
        Ok(Level {
            sensitivity,
            categories,
        })
    }
}

impl fmt::Display for Level {
    /// Canonical form: runs of three or more categories are written as ranges, as libselinux does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.sensitivity)?;
        let mut sep = ':';
        let cats = &self.categories;
        let mut i = 0;
        while i < cats.len() {
            let mut j = i;
            while j + 1 < cats.len() && cats[j + 1] == cats[j] + 1 {
                j += 1;
            }
            if j >= i + 2 {
                write!(f, "{sep}c{}.c{}", cats[i], cats[j])?;
            } else {
                for c in &cats[i..=j] {
                    write!(f, "{sep}c{c}")?;
                    sep = ',';
                }
            }
            sep = ',';
            i = j + 1;
        }
        Ok(())
    }
}

/// An MLS/MCS range: `low` or `low-high`; `high` must dominate `low`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Range {
    pub low: Level,
    pub high: Option<Level>,
}

impl FromStr for Range {
    type Err = ContextError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('-') {
            Some((lo, hi)) => {
                let (low, high): (Level, Level) = (lo.parse()?, hi.parse()?);
                if !high.dominates(&low) {
                    return Err(ContextError::Level(
                        s.to_string(),
                        "the high level must dominate the low level".into(),
                    ));
                }
                Ok(Range {
                    low,
                    high: Some(high),
                })
            }
            None => Ok(Range {
                low: s.parse()?,
                high: None,
            }),
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.high {
            Some(h) => write!(f, "{}-{}", self.low, h),
            None => write!(f, "{}", self.low),
        }
    }
}

/// A full security context. `range` is absent only on policies without MLS/MCS.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Context {
    pub user: String,
    pub role: String,
    pub type_: String,
    pub range: Option<Range>,
}

impl Context {
    /// `system_u:object_r:container_file_t:s0`: files that several containers read (shared,
    /// no categories). A private pair (`:Z`) would lock out every other container.
    pub fn shared_container_file() -> Self {
        "system_u:object_r:container_file_t:s0"
            .parse()
            .expect("static context")
    }

    pub fn with_type(mut self, t: &str) -> Self {
        self.type_ = t.to_string();
        self
    }

    pub fn with_user(mut self, u: &str) -> Self {
        self.user = u.to_string();
        self
    }

    /// Replaces the range with a single level.
    pub fn with_level(mut self, level: Level) -> Self {
        self.range = Some(Range {
            low: level,
            high: None,
        });
        self
    }

    /// Whether containers may read files of this type (the container policy's content types).
    pub fn is_container_readable(&self) -> bool {
        matches!(
            self.type_.as_str(),
            "container_file_t"
                | "container_ro_file_t"
                | "container_share_t"
                | "svirt_sandbox_file_t"
        )
    }

    /// Whether this is a label several containers can share (level `s0`, no categories).
    pub fn is_shared_level(&self) -> bool {
        matches!(&self.range, Some(Range { low, high: None }) if low.categories.is_empty())
    }
}

fn valid_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

impl FromStr for Context {
    type Err = ContextError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // libselinux may hand back a trailing NUL.
        let s = s.trim_end_matches('\0');
        let mut parts = s.splitn(4, ':');
        let (user, role, type_) = match (parts.next(), parts.next(), parts.next()) {
            (Some(u), Some(r), Some(t)) => (u, r, t),
            _ => return Err(ContextError::Shape(s.to_string())),
        };
        for (part, value) in [("user", user), ("role", role), ("type", type_)] {
            if !valid_identifier(value) {
                return Err(ContextError::Identifier {
                    ctx: s.to_string(),
                    part,
                    value: value.to_string(),
                });
            }
        }
        let range = parts.next().map(str::parse).transpose()?;
        Ok(Context {
            user: user.into(),
            role: role.into(),
            type_: type_.into(),
            range,
        })
    }
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.user, self.role, self.type_)?;
        if let Some(r) = &self.range {
            write!(f, ":{r}")?;
        }
        Ok(())
    }
}

impl TryFrom<String> for Context {
    type Error = ContextError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Context> for String {
    fn from(c: Context) -> String {
        c.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_canonical_contexts() {
        for (input, canonical) in [
            (
                "system_u:object_r:container_file_t:s0",
                "system_u:object_r:container_file_t:s0",
            ),
            (
                "system_u:system_r:container_t:s0:c2,c1",
                "system_u:system_r:container_t:s0:c1,c2",
            ),
            (
                "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023",
                "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023",
            ),
            ("u:r:t:s0:c1,c2,c3,c7", "u:r:t:s0:c1.c3,c7"),
            ("user_u:object_r:etc_t", "user_u:object_r:etc_t"),
        ] {
            let c: Context = input.parse().unwrap();
            assert_eq!(c.to_string(), canonical, "{input}");
            assert_eq!(canonical.parse::<Context>().unwrap(), c);
        }
    }

    #[test]
    fn rejects_bad_contexts() {
        for bad in [
            "",
            "a:b",
            "a::t:s0",
            "a:b:c:s",
            "a:b:c:x0",
            "a:b:c:s0:c1024",
            "a:b:c:s0:c5.c1",
            "a:b:c:s0:c1,c2-s0:c1",
            "a:b:t y:s0",
            "a:b:c:s0:",
        ] {
            assert!(
                bad.parse::<Context>().is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn dominance_follows_mcs_rules() {
        let l = |s: &str| s.parse::<Level>().unwrap();
        assert!(l("s0:c1,c2").dominates(&l("s0")));
        assert!(l("s0:c1,c2").dominates(&l("s0:c1,c2")));
        assert!(!l("s0:c1,c2").dominates(&l("s0:c3,c4")));
        assert!(!l("s0").dominates(&l("s0:c1,c2")));
        assert!(l("s0:c0.c1023").dominates(&l("s0:c584,c591")));
    }

    #[test]
    fn edits_keep_the_other_fields() {
        let c: Context = "unconfined_u:object_r:user_home_t:s0:c1,c2"
            .parse()
            .unwrap();
        let c = c
            .with_user("system_u")
            .with_type("container_file_t")
            .with_level(Level::s0());
        assert_eq!(c.to_string(), "system_u:object_r:container_file_t:s0");
        assert_eq!(c, Context::shared_container_file());
        let l: Level = "s0:c584,c591".parse().unwrap();
        let p = Context::shared_container_file().with_level(l);
        assert_eq!(
            p.to_string(),
            "system_u:object_r:container_file_t:s0:c584,c591"
        );
        assert!(!p.is_shared_level());
    }

    #[test]
    fn container_content_types_are_container_readable() {
        let c = |s: &str| s.parse::<Context>().unwrap();
        assert!(c("system_u:object_r:container_file_t:s0").is_container_readable());
        assert!(c("system_u:object_r:container_file_t:s0:c1,c2").is_container_readable());
        assert!(c("system_u:object_r:container_ro_file_t:s0").is_container_readable());
        assert!(!c("system_u:object_r:var_lib_t:s0").is_container_readable());
        assert!(!c("system_u:object_r:etc_t:s0").is_container_readable());
    }

    #[test]
    fn shared_label_has_no_categories() {
        assert!(Context::shared_container_file().is_shared_level());
        let private: Context = "system_u:object_r:container_file_t:s0:c584,c591"
            .parse()
            .unwrap();
        assert!(!private.is_shared_level());
    }
}
