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

#[cfg(test)]
mod tests {
    use super::*;

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
