//! Errors about merged values, naming the file each key came from and what the schema expects.

use std::path::PathBuf;

use super::{err, schema, ConfigError, Merged};

/// Checks values of a merge; every error names the key and the fragment that set it.
pub(crate) struct Check<'m> {
    pub(crate) merged: &'m Merged,
}

impl Check<'_> {
    /// An error about `key`, in the file that set it.
    pub(crate) fn at(&self, key: &str, message: impl Into<String>) -> ConfigError {
        err(self.merged.origin(key), key, message)
    }

    /// `key` holds `value`, which is not what the schema expects.
    pub(crate) fn bad(&self, key: &str, value: &str) -> ConfigError {
        self.at(
            key,
            format!("expected {}, found {value:?}", schema::expected(key)),
        )
    }

    /// An integer key: `default` when unset, within `min..=max` (every duration and count is
    /// bounded: a value near `i64::MAX` would overflow the arithmetic that uses it).
    pub(crate) fn int(
        &self,
        key: &str,
        v: Option<i64>,
        default: i64,
        (min, max): (i64, i64),
    ) -> Result<i64, ConfigError> {
        match v {
            None => Ok(default),
            Some(n) if (min..=max).contains(&n) => Ok(n),
            Some(n) if n < min => Err(self.bad(key, &n.to_string())),
            Some(n) => Err(self.at(
                key,
                format!(
                    "expected {} (at most {max}), found {n}",
                    super::schema::expected(key)
                ),
            )),
        }
    }

    /// An absolute path without `..`: `default` when unset.
    pub(crate) fn path(
        &self,
        key: &str,
        v: Option<&String>,
        default: &str,
    ) -> Result<PathBuf, ConfigError> {
        self.abs_path(key, v.map(String::as_str).unwrap_or(default))
    }

    /// An absolute path without `..`.
    pub(crate) fn abs_path(&self, key: &str, s: &str) -> Result<PathBuf, ConfigError> {
        let p = PathBuf::from(s);
        if !p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(self.at(key, format!("{s:?} must be an absolute path without `..`")));
        }
        Ok(p)
    }
}
