//! Terraform-style templates, as Typhoon's Butane files are (`templatefile`): `${name}` is a
//! variable, `$${` a literal `${` (Terraform's escape, which Typhoon's units use for systemd's
//! own `${VAR}`). Only plain names: no expressions, no directives.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;

/// `NAME=VALUE` lines (`#` comments, blank lines skipped) from `text`, named `name` in errors.
pub fn parse_vars(text: &str, name: &str) -> Result<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .with_context(|| format!("{name}:{}: expected NAME=VALUE", i + 1))?;
        if !valid_name(k) {
            bail!("{name}:{}: '{k}' is not a variable name", i + 1);
        }
        vars.insert(k.to_string(), v.to_string());
    }
    Ok(vars)
}

fn valid_name(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `template` (named `name` in errors) with every `${var}` replaced. An unknown or unclosed
/// variable is an error naming the line; so is a value with a line break (it would change the
/// YAML's structure).
pub fn render(template: &str, vars: &BTreeMap<String, String>, name: &str) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    for (i, line) in template.split_inclusive('\n').enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix("$${") {
                out.push_str("${");
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${") {
                let end = after
                    .find('}')
                    .with_context(|| format!("{name}:{}: unclosed ${{", i + 1))?;
                let var = &after[..end];
                let value = vars
                    .get(var)
                    .with_context(|| format!("{name}:{}: unknown variable '{var}'", i + 1))?;
                if value.contains('\n') {
                    bail!("{name}:{}: variable '{var}' has a line break", i + 1);
                }
                out.push_str(value);
                rest = &after[end + 1..];
            } else {
                out.push('$');
                rest = &tail[1..];
            }
        }
        out.push_str(rest);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        parse_vars("# c\nversion=1.2.3\nbase_url=https://x/y\n", "v").unwrap()
    }

    #[test]
    fn variables_are_replaced_and_escapes_kept_for_systemd() {
        let got = render(
            "a ${version} $${KUBELET_IMAGE} $5 ${base_url}/f\n",
            &vars(),
            "t",
        )
        .unwrap();
        assert_eq!(got, "a 1.2.3 ${KUBELET_IMAGE} $5 https://x/y/f\n");
    }

    #[test]
    fn unknown_unclosed_and_multiline_are_errors_naming_the_line() {
        let e = render("x\ny ${nope}\n", &vars(), "c.bu").unwrap_err();
        assert_eq!(e.to_string(), "c.bu:2: unknown variable 'nope'");
        let e = render("${version\n", &vars(), "c.bu").unwrap_err();
        assert_eq!(e.to_string(), "c.bu:1: unclosed ${");
        let mut v = vars();
        v.insert("k".into(), "a\nb".into());
        let e = render("${k}", &v, "c.bu").unwrap_err();
        assert_eq!(e.to_string(), "c.bu:1: variable 'k' has a line break");
        let e = parse_vars("Version=1", "v").unwrap_err();
        assert_eq!(e.to_string(), "v:1: 'Version' is not a variable name");
    }
}
