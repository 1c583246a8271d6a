//! Terraform-style templates, as Typhoon's Butane files are (`templatefile`): `${name}` is a
//! variable, `$${` a literal `${` (Terraform's escape, which Typhoon's units use for systemd's
//! own `${VAR}`), and of Terraform's directives the one Typhoon's templates use for optional
//! values: `%{ if name != null }` ... `%{ endif }` (a `~` inside either brace strips the white
//! space, line breaks included, on that side, as Terraform does). A variable not given is
//! `null`: a directive may test it, a `${name}` of it is an error (Terraform's too).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// `NAME=VALUE` lines (`#` comments, blank lines skipped) from `text`, named `name` in errors.
/// `NAME@N=PATH` gives NAME the text of the file PATH (relative to `base`), its lines after
/// the first indented by N spaces and its last line break dropped: what Typhoon's modules pass
/// as `indent(N, module.bootstrap.kubeconfig-kubelet)` for a multi-line value.
pub fn parse_vars_in(text: &str, name: &str, base: &Path) -> Result<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .with_context(|| format!("{name}:{}: expected NAME=VALUE", i + 1))?;
        let (k, value) = match k.split_once('@') {
            Some((k, n)) => {
                let n: usize = n
                    .parse()
                    .ok()
                    .filter(|n| *n <= 64)
                    .with_context(|| format!("{name}:{}: '@{n}' is not an indent", i + 1))?;
                let path = base.join(v);
                let t = std::fs::read_to_string(&path)
                    .with_context(|| format!("{name}:{}: reading {}", i + 1, path.display()))?;
                let pad = format!("\n{}", " ".repeat(n));
                (k, t.trim_end_matches('\n').replace('\n', &pad))
            }
            None => (k, v.to_string()),
        };
        if !valid_name(k) {
            bail!("{name}:{}: '{k}' is not a variable name", i + 1);
        }
        vars.insert(k.to_string(), value);
    }
    Ok(vars)
}

/// [`parse_vars_in`] with file paths relative to the current directory.
pub fn parse_vars(text: &str, name: &str) -> Result<BTreeMap<String, String>> {
    parse_vars_in(text, name, Path::new("."))
}

fn valid_name(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A directive's body: `if NAME != null` or `endif`.
enum Directive<'a> {
    IfSet(&'a str),
    EndIf,
}

fn directive<'a>(body: &'a str, at: &str) -> Result<Directive<'a>> {
    let words: Vec<&str> = body.split_whitespace().collect();
    match words.as_slice() {
        ["if", var, "!=", "null"] if valid_name(var) => Ok(Directive::IfSet(var)),
        ["endif"] => Ok(Directive::EndIf),
        _ => {
            bail!("{at}: unsupported directive '%{{{body}}}' (only 'if NAME != null' and 'endif')")
        }
    }
}

/// `template` (named `name` in errors) with every `${var}` replaced and its directives done.
/// An unknown or unclosed variable or directive is an error naming the line; so is a multi-line
/// value whose later lines are indented less than the column it starts at (it would change the
/// YAML's structure).
pub fn render(template: &str, vars: &BTreeMap<String, String>, name: &str) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    // For each open `if`: whether its body is kept.
    let mut open: Vec<bool> = Vec::new();
    let mut rest = template;
    let line_of = |rest: &str| {
        template[..template.len() - rest.len()]
            .matches('\n')
            .count()
            + 1
    };
    let mut strip_next = false;
    while !rest.is_empty() {
        if strip_next {
            rest = rest.trim_start();
            strip_next = false;
            continue;
        }
        let keep = open.iter().all(|k| *k);
        let Some(at) = rest.find(['$', '%']) else {
            if keep {
                out.push_str(rest);
            }
            break;
        };
        if keep {
            out.push_str(&rest[..at]);
        }
        let tail = &rest[at..];
        let here = format!("{name}:{}", line_of(tail));
        if let Some(after) = tail
            .strip_prefix("$${")
            .or_else(|| tail.strip_prefix("%%{"))
        {
            if keep {
                out.push_str(&tail[1..3]);
            }
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after
                .find('}')
                .with_context(|| format!("{here}: unclosed ${{"))?;
            let var = &after[..end];
            rest = &after[end + 1..];
            if !keep {
                continue;
            }
            let value = vars
                .get(var)
                .with_context(|| format!("{here}: unknown variable '{var}'"))?;
            if value.contains('\n') {
                let column = out.len() - out.rfind('\n').map_or(0, |i| i + 1);
                let shallow = value
                    .split('\n')
                    .skip(1)
                    .any(|l| !l.is_empty() && l.len() - l.trim_start_matches(' ').len() < column);
                if shallow {
                    bail!("{here}: variable '{var}' has a line less indented than column {column}");
                }
            }
            out.push_str(value);
        } else if let Some(after) = tail.strip_prefix("%{") {
            let end = after
                .find('}')
                .with_context(|| format!("{here}: unclosed %{{"))?;
            let mut body = &after[..end];
            rest = &after[end + 1..];
            if let Some(b) = body.strip_prefix('~') {
                if keep {
                    out.truncate(out.trim_end().len());
                }
                body = b;
            }
            if let Some(b) = body.strip_suffix('~') {
                strip_next = true;
                body = b;
            }
            match directive(body, &here)? {
                Directive::IfSet(var) => open.push(vars.contains_key(var)),
                Directive::EndIf => {
                    open.pop()
                        .with_context(|| format!("{here}: endif without if"))?;
                }
            }
        } else {
            if keep {
                out.push_str(&tail[..1]);
            }
            rest = &tail[1..];
        }
    }
    if !open.is_empty() {
        bail!("{name}: {} 'if' without 'endif'", open.len());
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
        let e = render("  x: ${k}", &v, "c.bu").unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.bu:1: variable 'k' has a line less indented than column 5"
        );
        v.insert("k".into(), "a\n     b".into());
        assert_eq!(render("  x: ${k}", &v, "c.bu").unwrap(), "  x: a\n     b");
        let e = parse_vars("Version=1", "v").unwrap_err();
        assert_eq!(e.to_string(), "v:1: 'Version' is not a variable name");
    }

    /// Typhoon's optional values (`cloud_provider` is null unless set): the block is kept only
    /// when the variable is given, and `~` strips the line breaks around the directive as
    /// Terraform does, so the lines around it stay as they were.
    #[test]
    fn if_not_null_keeps_its_block_only_for_a_given_variable() {
        let t = "a = 1\n  %{ if cloud_provider != null ~}\n  c = \"${cloud_provider}\"\n  %{ endif ~}\n  b = 2\n";
        assert_eq!(render(t, &vars(), "t").unwrap(), "a = 1\n  b = 2\n");
        let mut v = vars();
        v.insert("cloud_provider".into(), "external".into());
        assert_eq!(
            render(t, &v, "t").unwrap(),
            "a = 1\n  c = \"external\"\n  b = 2\n"
        );
        let e = render("%{ if x != null }\n", &vars(), "t").unwrap_err();
        assert_eq!(e.to_string(), "t: 1 'if' without 'endif'");
        let e = render("%{ for l in x }\n", &vars(), "t").unwrap_err();
        assert!(
            e.to_string().starts_with("t:1: unsupported directive"),
            "{e}"
        );
        assert_eq!(render("%%{ x }", &vars(), "t").unwrap(), "%{ x }");
    }

    /// `NAME@N=PATH`: a file's text as Typhoon passes `indent(N, ...)`.
    #[test]
    fn a_file_valued_variable_is_indented_as_terraforms_indent() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("kc"), "apiVersion: v1\nkind: Config\n").unwrap();
        let v = parse_vars_in("kubeconfig@4=kc\n", "v", d.path()).unwrap();
        assert_eq!(v["kubeconfig"], "apiVersion: v1\n    kind: Config");
        let t = "  inline: |\n    ${kubeconfig}\n";
        assert_eq!(
            render(t, &v, "t").unwrap(),
            "  inline: |\n    apiVersion: v1\n    kind: Config\n"
        );
    }
}
