//! The shape of `agent/src`, checked (docs/architecture.md): modules import only from their own
//! layer or below, no import cycle, no file over 500 lines and no function over 80 (test modules
//! excluded). Reads the source text, so a new module or an upward `crate::` path fails here,
//! naming both modules and the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every top-level module of the crate and its layer (1 is the bottom). A new module is added
/// here and in docs/architecture.md's diagram.
const LAYERS: &[(&str, u8)] = &[
    ("root", 1),
    ("util", 1),
    ("memory", 1),
    ("logging", 1),
    ("config", 2),
    ("host", 2),
    ("accounts", 2),
    ("fsio", 2),
    ("kubeconfig", 2),
    ("csr", 2),
    ("load", 2),
    ("credentials", 3),
    ("engine", 4),
    ("steps", 5),
    ("audit", 5),
    ("reboot", 5),
    ("status", 6),
    ("daemon", 7),
    ("dbus", 7),
    ("cli", 7),
];

const MAX_FILE_LINES: usize = 500;
const MAX_FN_LINES: usize = 80;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
}

/// The top-level module a file belongs to (`steps/secrets.rs` -> `steps`); None for the crate
/// root and the binaries.
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.as_str() {
        "lib.rs" | "bin" => None,
        f => Some(f.trim_end_matches(".rs").to_string()),
    }
}

/// The file's text up to its test module (`#[cfg(test)]` at the start of a line).
fn non_test(text: &str) -> &str {
    match text.find("\n#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// Strips comments (line and doc comments) so a module named in prose does not count.
fn code_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => l[..i].to_string(),
            _ => l.to_string(),
        })
        .collect()
}

/// The top-level modules a piece of code names through `crate::`, with the line of each.
fn crate_refs(lines: &[String]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let joined: Vec<(usize, char)> = lines
        .iter()
        .enumerate()
        .flat_map(|(n, l)| {
            l.chars()
                .chain(std::iter::once('\n'))
                .map(move |c| (n + 1, c))
        })
        .collect();
    let text: String = joined.iter().map(|(_, c)| *c).collect();
    let line_at = |byte: usize| -> usize {
        let idx = text[..byte].chars().count();
        joined.get(idx).map_or(0, |(n, _)| *n)
    };
    let mut i = 0;
    while let Some(pos) = text[i..].find("crate::") {
        let at = i + pos;
        let before = text[..at].chars().last();
        i = at + "crate::".len();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `nodectl_crate::`
        }
        let rest = &text[i..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c, d::{e, f}}`: the first segment of each top-level item.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push_first(&item, line_at(at), &mut out);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            push_first(&item, line_at(at), &mut out);
        } else {
            push_first(rest, line_at(at), &mut out);
        }
    }
    out
}

fn push_first(item: &str, line: usize, out: &mut Vec<(String, usize)>) {
    let name: String = item
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if !name.is_empty() && name != "self" {
        out.push((name, line));
    }
}

#[test]
fn modules_import_only_downward_and_form_no_cycle() {
    let layer: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut problems = Vec::new();
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for f in &files {
        let Some(m) = module_of(f) else { continue };
        let rel = f.strip_prefix(src()).unwrap().display().to_string();
        let Some(&lm) = layer.get(m.as_str()) else {
            problems.push(format!(
                "module {m} ({rel}) has no layer: add it to LAYERS and docs/architecture.md"
            ));
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (dep, line) in crate_refs(&code_lines(non_test(&text))) {
            if dep == m {
                continue;
            }
            let Some(&ld) = layer.get(dep.as_str()) else {
                problems.push(format!(
                    "{rel}:{line}: {m} names crate::{dep}, which has no layer"
                ));
                continue;
            };
            if ld > lm {
                problems.push(format!(
                    "{rel}:{line}: upward import: {m} (layer {lm}) imports {dep} (layer {ld})"
                ));
            }
            edges
                .entry(m.clone())
                .or_default()
                .entry(dep)
                .or_insert(format!("{rel}:{line}"));
        }
    }
    // A cycle among modules (within a layer: across layers it is an upward import already).
    let mut state: BTreeMap<String, u8> = BTreeMap::new(); // 1 visiting, 2 done
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeMap<String, String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
        problems: &mut Vec<String>,
    ) {
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for (d, at) in edges.get(m).into_iter().flatten() {
            match state.get(d.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == d).unwrap();
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(d.clone());
                    problems.push(format!(
                        "import cycle: {} (closing edge at {at})",
                        cycle.join(" -> ")
                    ));
                }
                Some(_) => {}
                None => visit(d, edges, state, stack, problems),
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
    }
    let modules: BTreeSet<String> = edges.keys().cloned().collect();
    for m in &modules {
        if !state.contains_key(m.as_str()) {
            visit(m, &edges, &mut state, &mut Vec::new(), &mut problems);
        }
    }
    assert!(problems.is_empty(), "layering:\n{}", problems.join("\n"));
}

/// Lengths of the functions in a piece of code: from the line with `fn name` to its closing
/// brace (brace counting outside strings and char literals).
fn function_lengths(lines: &[String]) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let clean: Vec<String> = lines.iter().map(|l| strip_literals(l)).collect();
    for (i, l) in clean.iter().enumerate() {
        let Some(name) = fn_name(l) else { continue };
        let (mut depth, mut started) = (0i32, false);
        for (j, body) in clean.iter().enumerate().skip(i) {
            for c in body.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        started = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if !started && body.trim_end().ends_with(';') {
                break; // a declaration (trait method without a body)
            }
            if started && depth <= 0 {
                out.push((name.clone(), i + 1, j - i + 1));
                break;
            }
        }
    }
    out
}

fn fn_name(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "fn")?;
    // Only item position: `fn`, `pub fn`, `pub(crate) async fn`, `unsafe fn`, `const fn`.
    if !words[..at].iter().all(|w| {
        w.starts_with("pub") || matches!(*w, "async" | "unsafe" | "const" | "extern" | "\"C\"")
    }) {
        return None;
    }
    let name: String = words
        .get(at + 1)?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

fn strip_literals(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '\'' => {
                // A char literal ('{', '\'', '\n') or a lifetime ('a): skip a literal whole.
                let rest: String = chars.clone().take(3).collect();
                if let Some(esc) = rest.strip_prefix('\\') {
                    let n = esc.find('\'').map_or(0, |p| p + 2);
                    for _ in 0..n {
                        chars.next();
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
            }
            _ => out.push(c),
        }
    }
    out
}

#[test]
fn no_file_over_500_lines_and_no_function_over_80() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut problems = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src()).unwrap().display().to_string();
        let text = std::fs::read_to_string(f).unwrap();
        let code = non_test(&text);
        let n = code.lines().count();
        if n > MAX_FILE_LINES {
            problems.push(format!(
                "{rel}: {n} lines (at most {MAX_FILE_LINES} without tests)"
            ));
        }
        for (name, line, len) in function_lengths(&code_lines(code)) {
            if len > MAX_FN_LINES {
                problems.push(format!(
                    "{rel}:{line}: fn {name} is {len} lines (at most {MAX_FN_LINES})"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "size:\n{}", problems.join("\n"));
}

#[test]
fn the_checks_themselves_catch_what_they_are_for() {
    let lines = |s: &str| code_lines(s);
    let refs = crate_refs(&lines(
        "use crate::{config::Settings, steps::{a, b}, self};\nlet x = crate::status::rfc3339(t);\n// crate::daemon in prose\nnodectl_crate::x",
    ));
    let names: Vec<&str> = refs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["config", "steps", "status"]);
    assert_eq!(refs[2].1, 2);
    let fns = function_lengths(&lines(
        "pub(crate) async fn a() {\n    let c = '{';\n    let s = \"}}\";\n}\nfn decl();\nfn b<'a>(x: &'a str) {}\n",
    ));
    assert_eq!(fns, [("a".into(), 1, 4), ("b".into(), 6, 1)]);
    assert_eq!(non_test("a\n#[cfg(test)]\nmod tests {}"), "a");
}

/// The crates whose files are checked for import cycles between files (below), each by its
/// `src/` (their binaries' roots excluded: `bin/`, `main.rs`).
const CYCLE_CRATES: &[&str] = &["agent", "units", "selinux", "kubectl-nodectl"];

/// Every file of a crate's `src/` by its module path: `daemon/metrics.rs` -> `daemon::metrics`,
/// `daemon/mod.rs` -> `daemon`, `lib.rs` -> the crate root (empty).
fn file_modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let mut segs: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if segs.first().is_some_and(|s| s == "bin") || segs == ["main"] {
            continue;
        }
        if segs.last().is_some_and(|s| s == "mod" || s == "lib") {
            segs.pop();
        }
        out.insert(segs, f);
    }
    out
}

/// The paths a piece of code names from `crate::`, `super::` or `self::` (a `use` group
/// expanded: `crate::{a::b, c::{d, e}}` is three), each with its line, as written (relative).
fn module_paths(lines: &[String]) -> Vec<(Vec<String>, usize)> {
    let mut out = Vec::new();
    // (joined: a `use` group may run over several lines)
    let text = lines.join("\n");
    let line_at = |byte: usize| text[..byte].matches('\n').count() + 1;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let start = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| rest.starts_with(p));
        let after_ident = i > 0 && {
            let b = bytes[i - 1];
            b.is_ascii_alphanumeric() || b == b'_' || b == b':'
        };
        if start && !after_ident {
            let (paths, len) = expand(rest);
            for p in paths {
                out.push((p, line_at(i)));
            }
            i += len.max(1);
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// Reads one path (with `{...}` groups) from the start of `s`: the expanded paths and the
/// bytes read.
fn expand(s: &str) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut i = 0;
    loop {
        let seg: String = s[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '*')
            .collect();
        i += seg.len();
        if !seg.is_empty() {
            prefix.push(seg);
        }
        let rest = &s[i..];
        if let Some(r) = rest.strip_prefix("::") {
            i += 2;
            if r.starts_with('{') {
                i += 1;
                let mut paths = Vec::new();
                loop {
                    let ws = s[i..].len() - s[i..].trim_start().len();
                    i += ws;
                    if s[i..].starts_with('}') {
                        i += 1;
                        break;
                    }
                    if i >= s.len() {
                        break; // a group that does not close (the text was cut)
                    }
                    let (inner, len) = expand(&s[i..]);
                    i += len;
                    for p in inner {
                        let mut full = prefix.clone();
                        if p != ["self"] {
                            full.extend(p);
                        }
                        paths.push(full);
                    }
                    // skip `as alias`, up to the next item or the group's end
                    while i < s.len() && !s[i..].starts_with(',') && !s[i..].starts_with('}') {
                        i += s[i..].chars().next().map_or(1, char::len_utf8);
                    }
                    if s[i..].starts_with(',') {
                        i += 1;
                    }
                }
                return (paths, i);
            }
            continue;
        }
        return (vec![prefix], i);
    }
}

/// A written path as a path from the crate root, seen from the module `at`.
fn absolute(path: &[String], at: &[String]) -> Vec<String> {
    let mut base: Vec<String> = at.to_vec();
    let mut segs = path;
    match segs.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            segs = &segs[1..];
        }
        Some("self") => segs = &segs[1..],
        _ => {}
    }
    while segs.first().is_some_and(|s| s == "super") {
        base.pop();
        segs = &segs[1..];
    }
    base.extend(segs.iter().cloned());
    base
}

/// The names a file re-exports (`pub use`, `pub(crate) use`, `pub(super) use`) and the
/// absolute paths they stand for.
fn reexports(
    lines: &[String],
    at: &[String],
    modules: &BTreeMap<Vec<String>, PathBuf>,
) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for l in lines {
        let t = l.trim_start();
        let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| t.strip_prefix(p))
        else {
            continue;
        };
        let (paths, _) = expand(rest);
        for p in paths {
            // `use child::X` in a module's own file: relative to it when `child` is a module
            let mut rel = p.clone();
            if !matches!(
                rel.first().map(String::as_str),
                Some("crate" | "self" | "super")
            ) {
                let mut m = at.to_vec();
                m.push(rel[0].clone());
                if !modules.contains_key(&m) {
                    continue; // an external crate's item
                }
                rel.insert(0, "self".into());
            }
            if let Some(name) = p.last().filter(|n| *n != "*") {
                out.insert(name.clone(), absolute(&rel, at));
            }
        }
    }
    out
}

/// The file a path from the crate root lands in: its longest prefix that is a file's module,
/// followed through that file's re-exports.
fn resolve<'a>(
    path: &[String],
    modules: &'a BTreeMap<Vec<String>, PathBuf>,
    exports: &BTreeMap<PathBuf, BTreeMap<String, Vec<String>>>,
    depth: u8,
) -> Option<&'a PathBuf> {
    let n = (0..=path.len())
        .rev()
        .find(|n| modules.contains_key(&path[..*n]))?;
    let file = &modules[&path[..n]];
    if depth < 8 {
        if let Some(target) = path.get(n).and_then(|name| exports.get(file)?.get(name)) {
            let mut full = target.clone();
            full.extend(path[n + 1..].iter().cloned());
            if full != path {
                return resolve(&full, modules, exports, depth + 1).or(Some(file));
            }
        }
    }
    Some(file)
}

/// The imports between files of one crate: file -> file -> where (a module's own file naming
/// its submodules is not counted: a module holds its children).
fn file_edges(src: &Path) -> BTreeMap<PathBuf, BTreeMap<PathBuf, String>> {
    let modules = file_modules(src);
    let code: BTreeMap<&PathBuf, Vec<String>> = modules
        .values()
        .map(|f| {
            (
                f,
                code_lines(non_test(&std::fs::read_to_string(f).unwrap())),
            )
        })
        .collect();
    let by_file: BTreeMap<&PathBuf, &Vec<String>> = modules.iter().map(|(m, f)| (f, m)).collect();
    let exports: BTreeMap<PathBuf, BTreeMap<String, Vec<String>>> = modules
        .iter()
        .map(|(m, f)| (f.clone(), reexports(&code[f], m, &modules)))
        .collect();
    let mut edges: BTreeMap<PathBuf, BTreeMap<PathBuf, String>> = BTreeMap::new();
    for (f, lines) in &code {
        let at = by_file[f];
        for (p, line) in module_paths(lines) {
            let abs = absolute(&p, at);
            let Some(to) = resolve(&abs, &modules, &exports, 0) else {
                continue;
            };
            if by_file[to].starts_with(at) {
                continue; // itself, or a submodule of its own
            }
            let rel = shown(src, f);
            edges
                .entry((*f).clone())
                .or_default()
                .entry(to.clone())
                .or_insert(format!("{rel}:{line}"));
        }
    }
    edges
}

/// A file as the messages name it: from the workspace (`agent/src/daemon/metrics.rs`).
fn shown(src: &Path, f: &Path) -> String {
    let base = src.parent().and_then(Path::parent).unwrap_or(src);
    f.strip_prefix(base).unwrap_or(f).display().to_string()
}

/// Every import cycle between files, each once, as `a.rs -> b.rs -> a.rs (a.rs:12, b.rs:4)`.
fn file_cycles(src: &Path) -> Vec<String> {
    let edges = file_edges(src);
    let name = |f: &PathBuf| shown(src, f);
    let mut found = BTreeSet::new();
    let mut state: BTreeMap<PathBuf, u8> = BTreeMap::new();
    fn visit(
        f: &PathBuf,
        edges: &BTreeMap<PathBuf, BTreeMap<PathBuf, String>>,
        state: &mut BTreeMap<PathBuf, u8>,
        stack: &mut Vec<PathBuf>,
        found: &mut BTreeSet<Vec<PathBuf>>,
    ) {
        state.insert(f.clone(), 1);
        stack.push(f.clone());
        for d in edges.get(f).into_iter().flat_map(BTreeMap::keys) {
            match state.get(d) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == d).unwrap();
                    found.insert(stack[from..].to_vec());
                }
                Some(_) => {}
                None => visit(d, edges, state, stack, found),
            }
        }
        stack.pop();
        state.insert(f.clone(), 2);
    }
    for f in edges.keys() {
        if !state.contains_key(f) {
            visit(f, &edges, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
        .into_iter()
        .map(|cycle| {
            let mut names: Vec<String> = cycle.iter().map(name).collect();
            let at: Vec<&str> = cycle
                .iter()
                .zip(cycle.iter().cycle().skip(1))
                .map(|(a, b)| edges[a][b].as_str())
                .collect();
            names.push(name(&cycle[0]));
            format!("{} ({})", names.join(" -> "), at.join(", "))
        })
        .collect()
}

#[test]
fn no_import_cycle_between_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cycles: Vec<String> = CYCLE_CRATES
        .iter()
        .flat_map(|c| file_cycles(&root.join(c).join("src")))
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles between files (break each: move what both need below them):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_file_cycle_check_sees_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("agent/src");
    std::fs::create_dir_all(src.join("daemon")).unwrap();
    let w = |p: &str, s: &str| std::fs::write(src.join(p), s).unwrap();
    w("lib.rs", "mod daemon;\npub use daemon::Shared;\n");
    w(
        "daemon/mod.rs",
        "mod metrics;\nmod reboots;\nmod shared;\npub(crate) use shared::Shared;\nuse metrics::write;\n",
    );
    w(
        "daemon/metrics.rs",
        "use super::Shared;\n// super::reboots in prose\n",
    );
    w(
        "daemon/shared.rs",
        "fn f() { crate::daemon::reboots::verb(); }\n",
    );
    w(
        "daemon/reboots.rs",
        "use super::{metrics::{self, write as w}, other};\n",
    );
    let cycles = file_cycles(&src);
    assert_eq!(
        cycles,
        ["agent/src/daemon/metrics.rs -> agent/src/daemon/shared.rs -> agent/src/daemon/reboots.rs \
          -> agent/src/daemon/metrics.rs (agent/src/daemon/metrics.rs:1, agent/src/daemon/shared.rs:1, \
          agent/src/daemon/reboots.rs:1)"],
    );
    // broken: no cycle left (metrics names Shared no more)
    w("daemon/metrics.rs", "pub fn write() {}\n");
    assert!(file_cycles(&src).is_empty(), "{:?}", file_cycles(&src));
    assert_eq!(
        expand("crate::{a::b, c::{self, d as e}, f};"),
        (
            vec![
                vec!["crate".into(), "a".into(), "b".into()],
                vec!["crate".into(), "c".into()],
                vec!["crate".into(), "c".into(), "d".into()],
                vec!["crate".into(), "f".into()],
            ],
            "crate::{a::b, c::{self, d as e}, f}".len()
        )
    );
}
