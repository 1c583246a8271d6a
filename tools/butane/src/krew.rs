//! The kubectl plugin's krew manifest (`packaging/krew/nodectl.yaml`): rendered with the
//! release's version, archive URL and SHA-256, and checked by krew's own rules, since krew is
//! not in Debian:
//! - kubernetes-sigs/krew `internal/index/validation/validate.go` `ValidatePlugin`: apiVersion
//!   `krew.googlecontainertools.github.com/v1alpha2`, kind `Plugin`, a safe name
//!   (`IsSafePluginName`: `^[\w-]+$`, not a Windows device name) equal to the file's name
//!   without `.yaml`, a one-line short description, a version `v` + semantic version
//!   (`internal/installation/semver`), at least one platform; `validatePlatform`: `uri`,
//!   `sha256` (`^[a-f0-9]{64}$`), `bin`, `files` absent or each with `from` and `to`,
//!   `validateSelector`: a selector on `os`/`arch` only, not empty;
//! - `cmd/validate-krew-manifest/main.go`: each selector matches a platform krew knows, and no
//!   two platforms match the same one.
//!
//! Stricter than krew: an unknown key is an error (a typo krew would drop).

use std::collections::BTreeMap;

use anyhow::{bail, ensure, Context, Result};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Plugin {
    api_version: String,
    kind: String,
    metadata: Metadata,
    spec: Spec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Spec {
    version: String,
    #[serde(default)]
    homepage: String,
    short_description: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    caveats: String,
    platforms: Vec<Platform>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Platform {
    #[serde(default)]
    uri: String,
    #[serde(default)]
    sha256: String,
    selector: Option<Selector>,
    files: Option<Vec<File>>,
    #[serde(default)]
    bin: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Selector {
    match_labels: Option<BTreeMap<String, String>>,
    match_expressions: Option<Vec<serde_yaml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
}

/// The platforms krew knows (`cmd/validate-krew-manifest/main.go` `allPlatforms`).
const PLATFORMS: &[(&str, &str)] = &[
    ("windows", "386"),
    ("windows", "amd64"),
    ("windows", "arm64"),
    ("linux", "386"),
    ("linux", "amd64"),
    ("linux", "arm"),
    ("linux", "arm64"),
    ("linux", "ppc64le"),
    ("darwin", "386"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
];

/// The template with `{{version}}`, `{{url}}` and `{{sha256}}` filled in; every placeholder
/// must be.
pub fn render_krew(template: &str, version: &str, url: &str, sha256: &str) -> Result<String> {
    let out = template
        .replace("{{version}}", version)
        .replace("{{url}}", url)
        .replace("{{sha256}}", sha256);
    if let Some(i) = out.find("{{") {
        let rest: String = out[i..].chars().take(40).collect();
        bail!("an unknown placeholder: {rest}");
    }
    Ok(out)
}

/// `k8s.io/apimachinery/pkg/util/version` `ParseSemantic`: MAJOR.MINOR.PATCH, numbers without
/// leading zeros, then an optional `-pre-release` and `+build` of dot-separated
/// `[0-9A-Za-z-]` identifiers.
fn semantic(v: &str) -> bool {
    let (core, build) = v.split_once('+').map_or((v, None), |(c, b)| (c, Some(b)));
    let (core, pre) = core
        .split_once('-')
        .map_or((core, None), |(c, p)| (c, Some(p)));
    let ids_ok = |s: &str| {
        s.split('.')
            .all(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    };
    let nums: Vec<&str> = core.split('.').collect();
    nums.len() == 3
        && nums.iter().all(|n| {
            !n.is_empty()
                && n.chars().all(|c| c.is_ascii_digit())
                && (n.len() == 1 || !n.starts_with('0'))
        })
        && pre.is_none_or(ids_ok)
        && build.is_none_or(ids_ok)
}

/// Checks `text`, the manifest in a file named `file`, by krew's rules (above).
pub fn check_krew(text: &str, file: &str) -> Result<()> {
    let stem = std::path::Path::new(file)
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".yaml"))
        .with_context(|| format!("{file}: a krew manifest's file name ends in .yaml"))?;
    let p: Plugin =
        serde_yaml::from_str(text).with_context(|| format!("{file}: not a krew Plugin"))?;
    let at = |what: String| anyhow::anyhow!("{file}: {what}");
    ensure!(
        p.api_version == "krew.googlecontainertools.github.com/v1alpha2",
        at(format!(
            "apiVersion={:?}, not krew.googlecontainertools.github.com/v1alpha2",
            p.api_version
        ))
    );
    ensure!(
        p.kind == "Plugin",
        at(format!("kind={:?}, not Plugin", p.kind))
    );
    let name = &p.metadata.name;
    let reserved = ["CON", "PRN", "AUX", "NUL"]
        .iter()
        .map(|s| s.to_string())
        .chain((1..=9).flat_map(|i| [format!("COM{i}"), format!("LPT{i}")]))
        .any(|r| r.eq_ignore_ascii_case(name));
    ensure!(
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
            && !reserved,
        at(format!("the plugin name {name:?} is not allowed"))
    );
    ensure!(
        name == stem,
        at(format!("plugin should be named {stem:?}, not {name:?}"))
    );
    let s = &p.spec;
    ensure!(
        !s.short_description.is_empty(),
        at("should have a short description".into())
    );
    ensure!(
        !s.short_description.contains(['\r', '\n']),
        at("should not have line breaks in short description".into())
    );
    ensure!(
        !s.platforms.is_empty(),
        at("should have a platform specified".into())
    );
    ensure!(
        s.version.strip_prefix('v').is_some_and(semantic),
        at(format!(
            "version {:?} is not v + a semantic version",
            s.version
        ))
    );
    let _ = (&s.homepage, &s.description, &s.caveats);
    let mut taken: Vec<&(&str, &str)> = Vec::new();
    for (i, pl) in s.platforms.iter().enumerate() {
        let at = |what: &str| anyhow::anyhow!("{file}: platforms[{i}]: {what}");
        ensure!(!pl.uri.is_empty(), at("`uri` has to be set"));
        ensure!(!pl.sha256.is_empty(), at("`sha256` sum has to be set"));
        ensure!(
            pl.sha256.len() == 64
                && pl
                    .sha256
                    .chars()
                    .all(|c| matches!(c, '0'..='9' | 'a'..='f')),
            at(&format!(
                "sha256 {:?} is not 64 lowercase hex digits",
                pl.sha256
            ))
        );
        ensure!(!pl.bin.is_empty(), at("`bin` has to be set"));
        if let Some(files) = &pl.files {
            ensure!(
                !files.is_empty(),
                at("`files` has to be unspecified or non-empty")
            );
            for f in files {
                ensure!(!f.from.is_empty(), at("`from` field has to be set"));
                ensure!(!f.to.is_empty(), at("`to` field has to be set"));
            }
        }
        let sel = pl
            .selector
            .as_ref()
            .ok_or_else(|| at("nil selector is not supported"))?;
        ensure!(
            sel.match_labels.is_some() || sel.match_expressions.is_some(),
            at("empty selector is not supported")
        );
        ensure!(
            sel.match_expressions.is_none(),
            at("matchExpressions: this check knows matchLabels only")
        );
        let labels = sel.match_labels.clone().unwrap_or_default();
        ensure!(!labels.is_empty(), at("`matchLabels` specified but empty"));
        for k in labels.keys() {
            ensure!(
                k == "os" || k == "arch",
                at(&format!("key {k:?} not supported"))
            );
        }
        let matched: Vec<&(&str, &str)> = PLATFORMS
            .iter()
            .filter(|(os, arch)| {
                labels.get("os").is_none_or(|o| o == os)
                    && labels.get("arch").is_none_or(|a| a == arch)
            })
            .collect();
        ensure!(
            !matched.is_empty(),
            at("its selector matches no platform krew supports")
        );
        for m in matched {
            ensure!(
                !taken.contains(&m),
                at(&format!("{}/{} is matched by two platforms", m.0, m.1))
            );
            taken.push(m);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "6df4def2caf5a9c291310124098ad6c4c3123936ddd4080b382b9f7930a233ec";

    fn shipped() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../packaging/krew/nodectl.yaml"
        ))
        .unwrap()
    }

    #[test]
    fn the_shipped_manifest_renders_and_passes_krews_rules() {
        let m = render_krew(
            &shipped(),
            "0.1.0",
            "https://dl.example.com/nodectl/0.1.0",
            SHA,
        )
        .unwrap();
        check_krew(&m, "dist/krew/nodectl.yaml").unwrap();
        assert!(m.contains("uri: https://dl.example.com/nodectl/0.1.0/kubectl-nodectl-0.1.0-linux-amd64.tar.gz"), "{m}");
    }

    /// Each of krew's rules refuses what it should (each case one change to a valid manifest).
    #[test]
    fn krews_rules_refuse_what_krew_refuses() {
        let good = render_krew(&shipped(), "0.1.0", "https://x.example/r", SHA).unwrap();
        check_krew(&good, "nodectl.yaml").unwrap();
        let cases: &[(&str, &str, &str)] = &[
            ("v1alpha2", "v1alpha1", "apiVersion"),
            ("kind: Plugin", "kind: Plug", "kind"),
            ("name: nodectl", "name: node/ctl", "not allowed"),
            ("name: nodectl", "name: other", "should be named"),
            ("version: v0.1.0", "version: 0.1.0", "semantic"),
            ("version: v0.1.0", "version: v0.01.0", "semantic"),
            (SHA, &SHA.to_uppercase(), "lowercase hex"),
            ("bin: kubectl-nodectl", "bin: ''", "`bin`"),
            ("arch: amd64", "arch: sparc", "no platform"),
            ("os: linux", "shell: bash", "not supported"),
            (
                "bin: kubectl-nodectl",
                "bin: kubectl-nodectl\n    binary: x",
                "unknown field",
            ),
        ];
        for (from, to, why) in cases {
            assert!(good.contains(from), "{from}");
            let bad = good.replacen(from, to, 1);
            let e = format!("{:#}", check_krew(&bad, "nodectl.yaml").unwrap_err());
            assert!(e.contains(why), "{from} -> {to}: {e}");
        }
        assert!(check_krew(&good, "nodectl.yml").is_err());
        assert!(render_krew("{{verison}}", "1", "u", SHA).is_err());
    }
}
