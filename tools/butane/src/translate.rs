//! The Butane subset nodectl's configs use, translated as coreos/butane does it
//! (`base/v0_5/translate.go`: `translateFile`, `translateResource`, `translateUnit`,
//! `translateDropin`, `translateDirectory`, `translateLink`, `translatePasswdUser`), strictly:
//! an unknown or unsupported key is an error naming its path (`butane --strict`).
//!
//! Not modelled: compression of inline contents (Butane may gzip long contents; this writes a
//! percent-encoded `data:,` URL with the same bytes), `ignition.config` merges, `boot_device`,
//! `kernel_arguments`, storage disks/filesystems, trees.

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value as J};
use serde_yaml::{Mapping, Value as Y};
use std::path::{Component, Path};

/// The Ignition spec a Butane variant and version translate to (Butane's docs, "Config
/// versions"; `config/fcos/v1_5/translate.go` etc. set `Ignition.Version`).
pub fn ignition_version(variant: &str, version: &str) -> Result<&'static str> {
    Ok(match (variant, version) {
        ("fcos", "1.5.0") => "3.4.0",
        ("fcos", "1.6.0") => "3.5.0",
        ("flatcar", "1.0.0") => "3.3.0",
        ("flatcar", "1.1.0") => "3.4.0",
        _ => bail!("variant '{variant}' version '{version}' is not one nodectl ships (fcos 1.5.0/1.6.0, flatcar 1.0.0/1.1.0)"),
    })
}

/// Butane `src` (named `name` in errors) to Ignition JSON; `local` contents are read from
/// `files_dir` (Butane's `--files-dir`), never from outside it.
pub fn translate(src: &str, files_dir: &Path, name: &str) -> Result<J> {
    let doc: Y =
        serde_yaml::from_str(&octal_modes(src)).with_context(|| format!("{name}: not YAML"))?;
    let top = map(&doc, name)?;
    allow(
        top,
        &["variant", "version", "storage", "systemd", "passwd"],
        name,
    )?;
    let variant = string(top, "variant", name)?.context("missing variant")?;
    let version = string(top, "version", name)?.context("missing version")?;
    let ign_version = ignition_version(&variant, &version).with_context(|| name.to_string())?;
    let cx = Cx { files_dir, name };
    let mut out = Map::new();
    out.insert("ignition".into(), json!({ "version": ign_version }));
    if let Some(p) = top.get("passwd") {
        out.insert("passwd".into(), cx.passwd(p)?);
    }
    if let Some(s) = top.get("storage") {
        out.insert("storage".into(), cx.storage(s)?);
    }
    if let Some(s) = top.get("systemd") {
        out.insert("systemd".into(), cx.systemd(s)?);
    }
    Ok(J::Object(out))
}

/// go-yaml v3, which Butane uses, reads `0644` as octal (YAML 1.1's form, kept "for
/// compatibility": yaml.v3 `resolve.go`); serde_yaml reads YAML 1.2, where it is decimal 644.
/// `mode:` values with a leading 0 are rewritten to decimal before parsing.
fn octal_modes(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.split_inclusive('\n') {
        let body = line.trim_end();
        let key_at = body.find("mode: 0");
        let rewritten = key_at.and_then(|at| {
            let head = &body[..at];
            let digits = &body[at + 6..];
            let head_ok = head.trim_start().is_empty() || head.trim() == "-";
            let octal = digits.len() > 1 && digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
            (head_ok && octal).then(|| {
                format!(
                    "{head}mode: {}",
                    u32::from_str_radix(digits, 8).unwrap_or(0)
                )
            })
        });
        match rewritten {
            Some(r) => {
                out.push_str(&r);
                out.push_str(&line[body.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

struct Cx<'a> {
    files_dir: &'a Path,
    name: &'a str,
}

impl Cx<'_> {
    fn at(&self, path: &str) -> String {
        format!("{}: {path}", self.name)
    }

    fn passwd(&self, v: &Y) -> Result<J> {
        let m = map(v, &self.at("passwd"))?;
        allow(m, &["users"], &self.at("passwd"))?;
        let mut users = Vec::new();
        for (i, u) in seq(m, "users", &self.at("passwd"))?.iter().enumerate() {
            let at = self.at(&format!("passwd.users[{i}]"));
            let u = map(u, &at)?;
            allow(u, &["name", "ssh_authorized_keys", "groups"], &at)?;
            let mut o = Map::new();
            o.insert(
                "name".into(),
                J::String(string(u, "name", &at)?.context(format!("{at}: no name"))?),
            );
            for k in ["ssh_authorized_keys", "groups"] {
                if u.contains_key(k) {
                    o.insert(
                        camel(k),
                        J::Array(strings(u, k, &at)?.into_iter().map(J::String).collect()),
                    );
                }
            }
            users.push(J::Object(o));
        }
        Ok(json!({ "users": users }))
    }

    fn storage(&self, v: &Y) -> Result<J> {
        let at = self.at("storage");
        let m = map(v, &at)?;
        allow(m, &["files", "directories", "links"], &at)?;
        let mut o = Map::new();
        if m.contains_key("directories") {
            let dirs = seq(m, "directories", &at)?.iter().enumerate();
            let dirs: Result<Vec<J>> = dirs
                .map(|(i, d)| self.node(d, &format!("storage.directories[{i}]"), &[]))
                .collect();
            o.insert("directories".into(), J::Array(dirs?));
        }
        if m.contains_key("files") {
            let files: Result<Vec<J>> = seq(m, "files", &at)?
                .iter()
                .enumerate()
                .map(|(i, f)| self.file(f, i))
                .collect();
            o.insert("files".into(), J::Array(files?));
        }
        if m.contains_key("links") {
            let links = seq(m, "links", &at)?.iter().enumerate();
            let links: Result<Vec<J>> = links
                .map(|(i, l)| self.node(l, &format!("storage.links[{i}]"), &["target", "hard"]))
                .collect();
            o.insert("links".into(), J::Array(links?));
        }
        Ok(J::Object(o))
    }

    /// A directory or link (`extra` keys beyond path/mode/overwrite/user/group), as Butane
    /// copies them field for field (`translateDirectory`, `translateLink`).
    fn node(&self, v: &Y, path: &str, extra: &[&str]) -> Result<J> {
        let at = self.at(path);
        let m = map(v, &at)?;
        let mut keys = vec!["path", "mode", "overwrite", "user", "group"];
        keys.extend_from_slice(extra);
        if extra.is_empty() {
            keys.retain(|k| *k != "target");
        } else {
            keys.retain(|k| *k != "mode");
        }
        allow(m, &keys, &at)?;
        let mut o = Map::new();
        o.insert(
            "path".into(),
            J::String(string(m, "path", &at)?.context(format!("{at}: no path"))?),
        );
        for k in ["mode"] {
            if let Some(n) = m.get(k) {
                o.insert(
                    k.into(),
                    J::from(
                        n.as_u64()
                            .with_context(|| format!("{at}.{k}: not a number"))?,
                    ),
                );
            }
        }
        for k in ["overwrite", "hard"] {
            if let Some(b) = m.get(k) {
                o.insert(
                    k.into(),
                    J::Bool(
                        b.as_bool()
                            .with_context(|| format!("{at}.{k}: not true/false"))?,
                    ),
                );
            }
        }
        if let Some(t) = string(m, "target", &at)? {
            o.insert("target".into(), J::String(t));
        }
        for k in ["user", "group"] {
            if let Some(u) = m.get(k) {
                o.insert(k.into(), self.owner(u, &format!("{at}.{k}"))?);
            }
        }
        Ok(J::Object(o))
    }

    fn owner(&self, v: &Y, at: &str) -> Result<J> {
        let m = map(v, at)?;
        allow(m, &["name", "id"], at)?;
        if let Some(n) = string(m, "name", at)? {
            return Ok(json!({ "name": n }));
        }
        let id = m
            .get("id")
            .and_then(Y::as_u64)
            .with_context(|| format!("{at}: needs name or id"))?;
        Ok(json!({ "id": id }))
    }

    fn file(&self, v: &Y, i: usize) -> Result<J> {
        let path = format!("storage.files[{i}]");
        let at = self.at(&path);
        let m = map(v, &at)?;
        allow(
            m,
            &["path", "mode", "overwrite", "user", "group", "contents"],
            &at,
        )?;
        let mut o = match self.node(&without(m, "contents"), &path, &[])? {
            J::Object(o) => o,
            _ => unreachable!("node returns an object"),
        };
        if let Some(c) = m.get("contents") {
            o.insert(
                "contents".into(),
                self.contents(c, &format!("{at}.contents"))?,
            );
        }
        Ok(J::Object(o))
    }

    /// `translateResource`: `inline` and `local` become a data URL of the same bytes; `source`
    /// and `verification` are copied.
    fn contents(&self, v: &Y, at: &str) -> Result<J> {
        let m = map(v, at)?;
        allow(m, &["inline", "local", "source", "verification"], at)?;
        let given = ["inline", "local", "source"]
            .iter()
            .filter(|k| m.contains_key(**k))
            .count();
        if given != 1 {
            bail!("{at}: exactly one of inline, local, source");
        }
        let mut o = Map::new();
        if let Some(s) = string(m, "inline", at)? {
            o.insert("source".into(), J::String(data_url(s.as_bytes())));
        } else if let Some(l) = string(m, "local", at)? {
            let bytes = self.local(&l, at)?;
            o.insert("source".into(), J::String(data_url(&bytes)));
        } else if let Some(s) = string(m, "source", at)? {
            o.insert("source".into(), J::String(s));
        }
        if let Some(ver) = m.get("verification") {
            let vm = map(ver, &format!("{at}.verification"))?;
            allow(vm, &["hash"], &format!("{at}.verification"))?;
            let hash =
                string(vm, "hash", at)?.with_context(|| format!("{at}.verification: no hash"))?;
            o.insert("verification".into(), json!({ "hash": hash }));
        }
        Ok(J::Object(o))
    }

    /// Butane's `--files-dir` rule (`translateResource` with `options.FilesDir`): relative,
    /// no `..`, a regular file.
    fn local(&self, rel: &str, at: &str) -> Result<Vec<u8>> {
        let p = Path::new(rel);
        if p.components().any(|c| !matches!(c, Component::Normal(_))) {
            bail!("{at}.local: '{rel}' must be relative to the files dir, without '..'");
        }
        std::fs::read(self.files_dir.join(p)).with_context(|| {
            format!(
                "{at}.local: reading '{rel}' in {}",
                self.files_dir.display()
            )
        })
    }

    fn systemd(&self, v: &Y) -> Result<J> {
        let at = self.at("systemd");
        let m = map(v, &at)?;
        allow(m, &["units"], &at)?;
        let mut units = Vec::new();
        for (i, u) in seq(m, "units", &at)?.iter().enumerate() {
            units.push(self.unit(u, &self.at(&format!("systemd.units[{i}]")))?);
        }
        Ok(json!({ "units": units }))
    }

    /// `translateUnit`/`translateDropin`: `contents_local` becomes `contents`.
    fn unit(&self, v: &Y, at: &str) -> Result<J> {
        let m = map(v, at)?;
        allow(
            m,
            &[
                "name",
                "enabled",
                "mask",
                "contents",
                "contents_local",
                "dropins",
            ],
            at,
        )?;
        let mut o = Map::new();
        o.insert(
            "name".into(),
            J::String(string(m, "name", at)?.with_context(|| format!("{at}: no name"))?),
        );
        for k in ["enabled", "mask"] {
            if let Some(b) = m.get(k) {
                o.insert(
                    k.into(),
                    J::Bool(
                        b.as_bool()
                            .with_context(|| format!("{at}.{k}: not true/false"))?,
                    ),
                );
            }
        }
        if let Some(c) = self.unit_contents(m, at)? {
            o.insert("contents".into(), J::String(c));
        }
        if m.contains_key("dropins") {
            let mut dropins = Vec::new();
            for (i, d) in seq(m, "dropins", at)?.iter().enumerate() {
                let dat = format!("{at}.dropins[{i}]");
                let dm = map(d, &dat)?;
                allow(dm, &["name", "contents", "contents_local"], &dat)?;
                let mut d = Map::new();
                d.insert(
                    "name".into(),
                    J::String(
                        string(dm, "name", &dat)?.with_context(|| format!("{dat}: no name"))?,
                    ),
                );
                if let Some(c) = self.unit_contents(dm, &dat)? {
                    d.insert("contents".into(), J::String(c));
                }
                dropins.push(J::Object(d));
            }
            o.insert("dropins".into(), J::Array(dropins));
        }
        Ok(J::Object(o))
    }

    fn unit_contents(&self, m: &Mapping, at: &str) -> Result<Option<String>> {
        match (string(m, "contents", at)?, string(m, "contents_local", at)?) {
            (Some(_), Some(_)) => bail!("{at}: contents and contents_local both set"),
            (Some(c), None) => Ok(Some(c)),
            (None, Some(l)) => {
                let bytes = self.local(&l, at)?;
                Ok(Some(String::from_utf8(bytes).with_context(|| {
                    format!("{at}.contents_local: not UTF-8")
                })?))
            }
            (None, None) => Ok(None),
        }
    }
}

/// RFC 2397 `data:,` URL, every byte but unreserved ones percent-encoded.
pub(crate) fn data_url(bytes: &[u8]) -> String {
    let mut s = String::from("data:,");
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

fn camel(k: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in k.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.push(c.to_ascii_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn map<'a>(v: &'a Y, at: &str) -> Result<&'a Mapping> {
    v.as_mapping()
        .with_context(|| format!("{at}: expected a mapping"))
}

pub(crate) fn allow(m: &Mapping, keys: &[&str], at: &str) -> Result<()> {
    for k in m.keys() {
        let k = k
            .as_str()
            .with_context(|| format!("{at}: a key is not a string"))?;
        if !keys.contains(&k) {
            bail!("{at}: unknown or unsupported key '{k}'");
        }
    }
    Ok(())
}

pub(crate) fn string(m: &Mapping, k: &str, at: &str) -> Result<Option<String>> {
    match m.get(k) {
        None => Ok(None),
        Some(Y::String(s)) => Ok(Some(s.clone())),
        Some(_) => bail!("{at}.{k}: expected a string"),
    }
}

pub(crate) fn seq<'a>(m: &'a Mapping, k: &str, at: &str) -> Result<&'a Vec<Y>> {
    m.get(k)
        .and_then(Y::as_sequence)
        .with_context(|| format!("{at}.{k}: expected a list"))
}

fn strings(m: &Mapping, k: &str, at: &str) -> Result<Vec<String>> {
    seq(m, k, at)?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .with_context(|| format!("{at}.{k}: expected strings"))
        })
        .collect()
}

fn without(m: &Mapping, k: &str) -> Y {
    let mut m = m.clone();
    m.remove(k);
    Y::Mapping(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_modes_are_read_as_butane_reads_them() {
        assert_eq!(
            octal_modes("  - path: /a\n    mode: 0644\n"),
            "  - path: /a\n    mode: 420\n"
        );
        assert_eq!(octal_modes("    mode: 0700\r\n"), "    mode: 448\r\n");
        assert_eq!(octal_modes("- mode: 0544"), "- mode: 356");
        // decimal stays; a mode inside contents text is not a key at the start of a line
        assert_eq!(octal_modes("    mode: 420\n"), "    mode: 420\n");
        assert_eq!(
            octal_modes("  inline: x mode: 0644\n"),
            "  inline: x mode: 0644\n"
        );
    }

    #[test]
    fn a_small_config_translates_and_unknown_keys_are_refused() {
        let dir = std::env::temp_dir();
        let src = "variant: flatcar\nversion: 1.0.0\nstorage:\n  files:\n    - path: /etc/a b\n      mode: 0600\n      contents:\n        inline: |\n          x=1 %\nsystemd:\n  units:\n    - name: locksmithd.service\n      mask: true\n";
        let got = translate(src, &dir, "t.bu").unwrap();
        let want = json!({"ignition": {"version": "3.3.0"},
            "storage": {"files": [{"path": "/etc/a b", "mode": 384, "contents": {"source": "data:,x%3D1%20%25%0A"}}]},
            "systemd": {"units": [{"name": "locksmithd.service", "mask": true}]}});
        assert_eq!(got, want);
        let e = translate(
            &src.replace("mask: true", "mask: true\n      enable: true"),
            &dir,
            "t.bu",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.bu: systemd.units[0]: unknown or unsupported key 'enable'"
        );
        let e = translate(&src.replace("1.0.0", "1.9.0"), &dir, "t.bu").unwrap_err();
        assert!(
            format!("{e:#}").contains("flatcar' version '1.9.0' is not one nodectl ships"),
            "{e:#}"
        );
        let e = translate(
            &src.replace("inline: |\n          x=1 %", "local: ../etc/passwd"),
            &dir,
            "t.bu",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("must be relative to the files dir"),
            "{e}"
        );
    }
}
