//! Kubernetes name syntax (apimachinery's `validation.IsDNS1123Label`/`Subdomain`, label keys
//! and values), taints as kubelet's `--register-with-taints` takes them, FleetLock group names.

/// Why a label or taint is refused (the message names it; it holds no credential).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SyntaxError(pub String);

/// A DNS-1123 label: at most 63 lowercase letters, digits and `-`, not starting or ending in `-`.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain, what Kubernetes requires of node names.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label key: optional DNS-subdomain prefix and `/`, then a name of at most 63 characters of
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
pub(crate) fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_dns_subdomain) && is_label_value(name) && !name.is_empty()
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`, alphanumeric at both ends.
pub(crate) fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && v.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && v.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

/// A node label `key=value` (the master label refused: nodectl sets the controller label).
pub(crate) fn parse_label(s: &str) -> Result<String, SyntaxError> {
    let (k, v) = s.split_once('=').unwrap_or((s, ""));
    if !is_label_key(k) {
        return Err(SyntaxError(format!(
            "label {s:?}: key {k:?} is not a valid label key"
        )));
    }
    if !is_label_value(v) {
        return Err(SyntaxError(format!(
            "label {s:?}: value {v:?} is not a valid label value"
        )));
    }
    if k == "node.kubernetes.io/master" || k == "node-role.kubernetes.io/master" {
        return Err(SyntaxError(format!("label {s:?}: the master label is deprecated; nodectl sets node.kubernetes.io/controller")));
    }
    Ok(s.to_string())
}

/// A taint `key=value:Effect` or `key:Effect`, checked and returned as written.
pub(crate) fn parse_taint(s: &str) -> Result<String, SyntaxError> {
    let (kv, effect) = s.rsplit_once(':').ok_or_else(|| {
        SyntaxError(format!(
            "taint {s:?}: expected key=value:Effect or key:Effect"
        ))
    })?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(SyntaxError(format!(
            "taint {s:?}: effect {effect:?} must be NoSchedule, PreferNoSchedule or NoExecute"
        )));
    }
    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
    if !is_label_key(k) || !is_label_value(v) {
        return Err(SyntaxError(format!(
            "taint {s:?}: {kv:?} is not a valid key=value"
        )));
    }
    Ok(s.to_string())
}

/// A FleetLock group name as Zincati accepts it: `^[a-zA-Z0-9.-]+$`.
/// A local user name as shadow-utils accepts it: `[a-z_][a-z0-9_-]*[$]?`, at most 32 bytes.
pub(crate) fn is_user_name(u: &str) -> bool {
    let b = u.as_bytes();
    let body = b.strip_suffix(b"$").unwrap_or(b);
    !body.is_empty()
        && b.len() <= 32
        && (body[0].is_ascii_lowercase() || body[0] == b'_')
        && body[1..]
            .iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
}

pub(crate) fn valid_group(g: &str) -> bool {
    !g.is_empty()
        && g.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_as_zincati_takes_them() {
        for g in ["default", "workers", "Workers", "a.b-c", "0"] {
            assert!(valid_group(g), "{g}");
        }
        for g in ["", "a b", "a/b", "ä", "a_b"] {
            assert!(!valid_group(g), "{g}");
        }
    }
}
