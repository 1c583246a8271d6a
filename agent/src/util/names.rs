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
    if is_kubernetes_label(k) && !is_kubelet_label(k) {
        // kubelet would exit at start with this (cmd/kubelet/app/options/options.go
        // ValidateKubeletFlags); the Node authorizer's NodeRestriction refuses the rest too.
        return Err(SyntaxError(format!(
            "label {s:?}: kubelet refuses 'kubernetes.io' or 'k8s.io' labels other than its own \
             (prefixes {}; or one of {}) and exits at start; set {k:?} through the API instead \
             (kubectl label node)",
            KUBELET_LABEL_NAMESPACES.join(", "),
            KUBELET_LABELS.join(", ")
        )));
    }
    Ok(s.to_string())
}

/// The labels kubelet may set on its own Node although they are in the `kubernetes.io`
/// namespace (k8s.io/kubelet pkg/apis/well_known_labels.go `kubeletLabels`).
pub(crate) const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
/// The namespaces (and their subdomains) whose labels kubelet may set
/// (well_known_labels.go `kubeletLabelNamespaces`).
pub(crate) const KUBELET_LABEL_NAMESPACES: &[&str] =
    &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// A label key's namespace: what stands before its `/` (well_known_labels.go `getLabelNamespace`).
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

/// `ns` is `domain` or a subdomain of it.
fn in_domain(ns: &str, domain: &str) -> bool {
    ns == domain || ns.strip_suffix(domain).is_some_and(|p| p.ends_with('.'))
}

/// A label in the `kubernetes.io` or `k8s.io` namespaces (options.go `isKubernetesLabel`).
pub(crate) fn is_kubernetes_label(key: &str) -> bool {
    let ns = label_namespace(key);
    in_domain(ns, "kubernetes.io") || in_domain(ns, "k8s.io")
}

/// A label kubelet may set itself (well_known_labels.go `IsKubeletLabel`).
pub(crate) fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|d| in_domain(label_namespace(key), d))
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

/// A systemd service unit name (systemd's `unit_name_is_valid`: at most 255 bytes, of
/// `[A-Za-z0-9:_.\\-]`, an `@` instance allowed), ending in `.service`; not a path.
pub(crate) fn is_service_unit(u: &str) -> bool {
    u.len() <= 255
        && u.strip_suffix(".service").is_some_and(|stem| {
            !stem.is_empty()
                && stem
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ":_.\\-@".contains(c))
        })
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

    /// kubelet's own rule (options.go ValidateKubeletFlags with IsKubeletLabel): a label in the
    /// kubernetes.io or k8s.io namespaces that is not kubelet's makes kubelet exit at start.
    #[test]
    fn labels_kubelet_refuses_are_refused_and_its_own_kept() {
        for ok in [
            "pool=blue",
            "example.com/tier=gold",
            "node.kubernetes.io/node",
            "node.kubernetes.io/controller=true",
            "kubelet.kubernetes.io/x=y",
            "sub.node.kubernetes.io/x=y",
            "topology.kubernetes.io/zone=us-east-1a",
            "kubernetes.io/arch=amd64",
            "notkubernetes.io/x=y",
        ] {
            assert_eq!(parse_label(ok).as_deref(), Ok(ok), "{ok}");
        }
        for bad in [
            "node-role.kubernetes.io/infra",
            "node-role.kubernetes.io/worker=",
            "kubernetes.io/role=infra",
            "example.k8s.io/x=y",
            "k8s.io/x=y",
            "topology.kubernetes.io/rack=r1",
        ] {
            let e = parse_label(bad).unwrap_err().to_string();
            assert!(
                e.contains("kubelet refuses") && e.contains("kubectl label"),
                "{bad}: {e}"
            );
        }
    }
}
