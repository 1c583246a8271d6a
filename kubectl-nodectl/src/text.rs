//! Text other machines wrote, made safe to print on an operator's terminal.

/// At most this many characters of one value are shown.
pub const MAX_CHARS: usize = 1024;

/// `s` with every control character (C0, DEL, C1: the terminal escapes `ESC [`, `CSI`, `OSC`, a
/// carriage return that overwrites the line) and every bidirectional override or isolate (text
/// that reads in another order than it runs) shown as `\u{..}`, cut at [`MAX_CHARS`]
/// characters. For text a node writes on its Node object (a condition's message, annotations),
/// which a compromised node controls.
pub fn printable(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == MAX_CHARS {
            out.push('…');
            break;
        }
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}');
        if c.is_control() || bidi {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// A table for people: the header, then one line per row, columns padded to their widest cell
/// and two spaces apart (as kubectl prints them), an empty cell shown as `-`.
pub fn table<const N: usize>(head: [&str; N], rows: &[[String; N]]) -> String {
    let cell = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    let rows: Vec<[String; N]> = rows.iter().map(|r| r.clone().map(|c| cell(&c))).collect();
    let mut width = head.map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut o = String::new();
    let mut line = |cells: &[String]| {
        let l: Vec<String> = cells
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        o.push_str(l.join("  ").trim_end());
        o.push('\n');
    };
    line(&head.map(String::from));
    for r in &rows {
        line(r);
    }
    o
}

/// How long ago, as kubectl shows an age (k8s.io/apimachinery `pkg/util/duration/duration.go`
/// `HumanDuration`): `45s`, `3m20s`, `12m`, `5h30m`, `30h`, `3d4h`, `40d`, `3y12d`, `9y`;
/// `<invalid>` for a time more than a second in the future (a skewed clock).
pub fn age(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        match s % 60 {
            0 => format!("{m}m"),
            r => format!("{m}m{r}s"),
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            r => format!("{h}h{r}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        match h % 24 {
            0 => format!("{d}d"),
            r => format!("{d}d{r}h"),
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        match d % 365 {
            0 => format!("{}y", d / 365),
            r => format!("{}y{r}d", d / 365),
        }
    } else {
        format!("{}y", d / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectls() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (45, "45s"),
            (119, "119s"),
            (200, "3m20s"),
            (600, "10m"),
            (5 * 3600 + 30 * 60, "5h30m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (40 * 86400, "40d"),
            (3 * 365 * 86400 + 12 * 86400, "3y12d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (s, want) in cases {
            assert_eq!(age(s), want, "{s}");
        }
    }

    #[test]
    fn a_table_pads_its_columns_and_dashes_empty_cells() {
        let t = table(
            ["A", "BB"],
            &[["xyz".into(), String::new()], ["ü".into(), "2".into()]],
        );
        assert_eq!(t, "A    BB\nxyz  -\nü    2\n");
    }

    /// Issue 37, 9: a node's message with terminal escapes (a colour, a cursor move, a title
    /// set by OSC, a line overwritten by CR) or a bidi override reaches the operator inert.
    #[test]
    fn escapes_and_overrides_are_shown_not_obeyed() {
        assert_eq!(printable("ok: drained"), "ok: drained");
        assert_eq!(printable("ü ✓ 日本"), "ü ✓ 日本");
        assert_eq!(
            printable("\x1b[2J\x1b]0;pwned\x07fine\rREADY\n\u{9b}31m"),
            "\\u{1b}[2J\\u{1b}]0;pwned\\u{7}fine\\u{d}READY\\u{a}\\u{9b}31m"
        );
        assert_eq!(printable("a\u{202e}gnp.exe"), "a\\u{202e}gnp.exe");
        let long = "x".repeat(MAX_CHARS + 10);
        assert_eq!(printable(&long).chars().count(), MAX_CHARS + 1);
    }
}
