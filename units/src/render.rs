//! A small model of systemd's INI-style files (units, drop-ins, `.link` files) and its
//! rendering. Pure: no I/O.

use std::fmt::Write as _;

/// One `[Section]` with its `Key=Value` lines, in order (systemd keys may repeat).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub entries: Vec<(String, String)>,
}

impl Section {
    pub fn new(name: &str) -> Self {
        Section {
            name: name.to_string(),
            entries: Vec::new(),
        }
    }

    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        self.entries.push((key.to_string(), value.into()));
        self
    }

    pub fn set_all<I, S>(mut self, key: &str, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for v in values {
            self.entries.push((key.to_string(), v.into()));
        }
        self
    }
}

/// A whole file: an optional header comment, then sections.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IniFile {
    pub header: Vec<String>,
    pub sections: Vec<Section>,
}

impl IniFile {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn comment(mut self, line: &str) -> Self {
        self.header.push(line.to_string());
        self
    }

    pub fn section(mut self, s: Section) -> Self {
        self.sections.push(s);
        self
    }

    /// Renders the file. A value with several lines is continued with ` \` as systemd reads it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for h in &self.header {
            let _ = writeln!(out, "# {h}");
        }
        for (i, s) in self.sections.iter().enumerate() {
            if i > 0 || !self.header.is_empty() {
                out.push('\n');
            }
            let _ = writeln!(out, "[{}]", s.name);
            for (k, v) in &s.entries {
                let mut lines = v.lines();
                let first = lines.next().unwrap_or("");
                let rest: Vec<&str> = lines.collect();
                if rest.is_empty() {
                    let _ = writeln!(out, "{k}={first}");
                } else {
                    let _ = writeln!(out, "{k}={first} \\");
                    for (j, l) in rest.iter().enumerate() {
                        let cont = if j + 1 < rest.len() { " \\" } else { "" };
                        let _ = writeln!(out, "  {l}{cont}");
                    }
                }
            }
        }
        out
    }
}

/// Quotes one word for a systemd `Exec*=` line when it needs it (systemd's own rules:
/// double quotes, backslash escapes). `$` is left alone so `${VAR}` still expands.
pub fn exec_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| !c.is_whitespace() && !matches!(c, '"' | '\'' | '\\' | ';'));
    if plain {
        return word.to_string();
    }
    let mut q = String::with_capacity(word.len() + 2);
    q.push('"');
    for c in word.chars() {
        match c {
            '"' | '\\' => {
                q.push('\\');
                q.push(c);
            }
            _ => q.push(c),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_sections_and_continuations() {
        let f = IniFile::new()
            .comment("Managed by nodectl")
            .section(Section::new("Unit").set("Description", "x"))
            .section(
                Section::new("Service")
                    .set_all("ExecStartPre", ["/bin/true", "/bin/false"])
                    .set("ExecStart", "/usr/bin/a\n--b\n--c"),
            );
        assert_eq!(
            f.render(),
            "# Managed by nodectl\n\n[Unit]\nDescription=x\n\n[Service]\nExecStartPre=/bin/true\nExecStartPre=/bin/false\nExecStart=/usr/bin/a \\\n  --b \\\n  --c\n"
        );
    }

    #[test]
    fn quotes_exec_words() {
        assert_eq!(exec_quote("--a=b"), "--a=b");
        assert_eq!(exec_quote("${KUBELET_IMAGE}"), "${KUBELET_IMAGE}");
        assert_eq!(exec_quote("a b"), "\"a b\"");
        assert_eq!(exec_quote("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(exec_quote(""), "\"\"");
    }
}
