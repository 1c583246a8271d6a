//! Terminal output in the user's locale: the status and plan glyphs (`✓`, `✗`, `→`, `…`, `●`)
//! are UTF-8, and a terminal under the C/POSIX locale or a non-UTF-8 one shows them as mojibake.
//! Where the locale's character set is not UTF-8 they are printed as ASCII instead (issue 40).

use std::borrow::Cow;

/// Whether the locale's character set is UTF-8, as POSIX resolves `LC_CTYPE`: the first of
/// `LC_ALL`, `LC_CTYPE`, `LANG` that is set and not empty decides; none set is the C locale.
pub fn is_utf8(lc_all: Option<&str>, lc_ctype: Option<&str>, lang: Option<&str>) -> bool {
    let Some(l) = [lc_all, lc_ctype, lang]
        .into_iter()
        .flatten()
        .find(|v| !v.is_empty())
    else {
        return false;
    };
    let codeset = l
        .split_once('.')
        .map_or("", |(_, c)| c.split('@').next().unwrap_or(""))
        .to_ascii_lowercase();
    codeset == "utf-8" || codeset == "utf8"
}

/// This process's locale (the environment), as [`is_utf8`] reads it.
pub fn env_is_utf8() -> bool {
    let v = |k| std::env::var(k).ok();
    is_utf8(
        v("LC_ALL").as_deref(),
        v("LC_CTYPE").as_deref(),
        v("LANG").as_deref(),
    )
}

/// nodectl's glyphs and what stands for each in ASCII: one column each, as the glyph takes, but
/// the ellipsis (`...`, three: a waiting step's row in the step table is two columns wider).
const GLYPHS: &[(char, &str)] = &[
    ('✓', "+"),
    ('✗', "x"),
    ('→', ">"),
    ('·', "-"),
    ('●', "*"),
    ('○', "o"),
    ('…', "..."),
];

/// `text` as printed in a locale that is (`utf8`) or is not UTF-8: nodectl's glyphs replaced by
/// ASCII in the latter; any other character is left as it is.
pub fn for_terminal(text: &str, utf8: bool) -> Cow<'_, str> {
    if utf8 || !text.chars().any(|c| GLYPHS.iter().any(|(g, _)| *g == c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match GLYPHS.iter().find(|(g, _)| *g == c) {
            Some((_, a)) => out.push_str(a),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Prints `text` (no newline added) for this process's locale.
pub fn print(text: &str) {
    print!("{}", for_terminal(text, env_is_utf8()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locale_decides_as_posix_resolves_lc_ctype() {
        assert!(is_utf8(None, None, Some("C.UTF-8")));
        assert!(is_utf8(None, None, Some("en_US.utf8")));
        assert!(is_utf8(None, None, Some("de_DE.UTF-8@euro")));
        assert!(!is_utf8(None, None, None), "unset: the C locale");
        assert!(!is_utf8(Some("C"), None, Some("C.UTF-8")), "LC_ALL first");
        assert!(
            !is_utf8(None, Some("POSIX"), Some("en_US.UTF-8")),
            "then LC_CTYPE"
        );
        assert!(
            is_utf8(Some(""), None, Some("C.UTF-8")),
            "an empty one is unset"
        );
        assert!(!is_utf8(None, None, Some("en_US.ISO-8859-1")));
        assert!(!is_utf8(None, None, Some("en_US")));
    }

    #[test]
    fn glyphs_become_ascii_outside_utf8_and_nothing_else_changes() {
        let t = "  ✓ node-files  converged  ok\n  ✗ relabel  failed  ünïcode stays…\n● nodectld\n";
        assert_eq!(for_terminal(t, true), t);
        let a = for_terminal(t, false);
        assert_eq!(
            a,
            "  + node-files  converged  ok\n  x relabel  failed  ünïcode stays...\n* nodectld\n"
        );
        assert!(matches!(for_terminal("plain", false), Cow::Borrowed(_)));
    }
}
