//! Kubernetes label selectors as `kubectl -l` takes them (pure): the grammar and the matching of
//! k8s.io/apimachinery/pkg/labels/selector.go (`Parse`, `Requirement.Matches`): requirements
//! joined by commas, each `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`,
//! `key notin (a,b)`, `key>n`, `key<n`. As there, `!=` and `notin` match a pod without the label,
//! and an empty selector matches everything.

use std::collections::BTreeMap;

/// The longest selector taken (a config value, not a cluster's input).
const MAX_SELECTOR: usize = 4096;

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Exists,
    DoesNotExist,
    In(Vec<String>),
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

/// A parsed selector: every requirement must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    text: String,
    reqs: Vec<(String, Op)>,
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Splits at commas outside parentheses.
fn split_top(s: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced parentheses".into());
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn values(list: &str) -> Result<Vec<String>, String> {
    let inner = list
        .trim()
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesized list of values, found {list:?}"))?;
    inner
        .split(',')
        .map(|v| {
            let v = v.trim();
            if super::names::is_label_value(v) {
                Ok(v.to_string())
            } else {
                Err(format!("invalid label value {v:?}"))
            }
        })
        .collect()
}

fn requirement(r: &str) -> Result<(String, Op), String> {
    let r = r.trim();
    if r.is_empty() {
        return Err("an empty requirement (two commas, or one at an end)".into());
    }
    let key = |k: &str| -> Result<String, String> {
        let k = k.trim();
        if super::names::is_label_key(k) {
            Ok(k.to_string())
        } else {
            Err(format!("invalid label key {k:?}"))
        }
    };
    if let Some(k) = r.strip_prefix('!') {
        return Ok((key(k)?, Op::DoesNotExist));
    }
    for (sym, neg) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = r.split_once(sym) {
            let v = v.trim();
            if !super::names::is_label_value(v) {
                return Err(format!("invalid label value {v:?}"));
            }
            let vs = vec![v.to_string()];
            return Ok((key(k)?, if neg { Op::NotIn(vs) } else { Op::In(vs) }));
        }
    }
    for (sym, gt) in [(">", true), ("<", false)] {
        if let Some((k, v)) = r.split_once(sym) {
            let n: i64 = v
                .trim()
                .parse()
                .map_err(|_| format!("{v:?} is not an integer (for {sym})"))?;
            return Ok((key(k)?, if gt { Op::Gt(n) } else { Op::Lt(n) }));
        }
    }
    let mut words = r.splitn(2, char::is_whitespace);
    let k = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default().trim_start();
    if rest.is_empty() {
        return Ok((key(k)?, Op::Exists));
    }
    if let Some(l) = rest.strip_prefix("notin") {
        return Ok((key(k)?, Op::NotIn(values(l)?)));
    }
    if let Some(l) = rest.strip_prefix("in") {
        return Ok((key(k)?, Op::In(values(l)?)));
    }
    Err(format!("expected =, ==, !=, in, notin, > or < after {k:?}"))
}

/// Parses a selector; the error says what is wrong, not where the selector came from.
pub fn parse(s: &str) -> Result<Selector, String> {
    if s.len() > MAX_SELECTOR {
        return Err(format!("longer than {MAX_SELECTOR} bytes"));
    }
    let reqs = if s.trim().is_empty() {
        Vec::new()
    } else {
        split_top(s)?
            .into_iter()
            .map(requirement)
            .collect::<Result<_, _>>()?
    };
    Ok(Selector {
        text: s.trim().to_string(),
        reqs,
    })
}

impl Selector {
    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.reqs.iter().all(|(k, op)| {
            let v = labels.get(k);
            match op {
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::In(vs) => v.is_some_and(|v| vs.contains(v)),
                Op::NotIn(vs) => v.is_none_or(|v| !vs.contains(v)),
                Op::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                Op::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_as_the_api_server_matches_them() {
        let pod = labels(&[("app", "backup"), ("tier", "db"), ("gen", "7")]);
        for (sel, want) in [
            ("app=backup", true),
            ("app==backup", true),
            ("app = backup , tier=db", true),
            ("app=backup,tier=web", false),
            ("app!=backup", false),
            ("missing!=x", true),
            ("app in (backup, restore)", true),
            ("app notin (backup)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("example.com/role", false),
            ("gen>5,gen<8", true),
            ("gen>7", false),
            ("", true),
        ] {
            let s = parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(&pod), want, "{sel}");
        }
    }

    #[test]
    fn bad_selectors_are_refused_with_what_is_wrong() {
        for (sel, says) in [
            ("app=", ""),
            ("app=back up", "invalid label value"),
            ("a,,b", "empty requirement"),
            ("app in backup", "parenthesized"),
            ("app in (a", "unbalanced"),
            ("-app=x", "invalid label key"),
            ("gen>x", "not an integer"),
            ("app ~ x", "expected ="),
        ] {
            match parse(sel) {
                // `app=` is valid: an empty value.
                Ok(_) if says.is_empty() => {}
                Ok(s) => panic!("{sel}: parsed as {s:?}"),
                Err(e) => assert!(e.contains(says), "{sel}: {e}"),
            }
        }
        assert!(parse(&"a".repeat(5000)).is_err());
    }
}
