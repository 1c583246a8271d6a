//! A Butane file and an Ignition config compared field by field, by code apart from
//! [`crate::translate`]: every file, directory, link, unit, drop-in and user of the Butane file
//! is found in the Ignition config by its key (path or name) with the same mode, owner,
//! contents (the data URL decoded), hash, target, enablement, and nothing else is there.

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value as J;
use serde_yaml::Value as Y;
use std::collections::BTreeMap;
use std::path::Path;

/// Ok when `ign` says what `bu` says; `local` contents are read from `files_dir`.
pub fn compare(bu: &str, ign: &str, files_dir: &Path) -> Result<()> {
    let b: Y = serde_yaml::from_str(bu).context("Butane: not YAML")?;
    let i: J = serde_json::from_str(ign).context("Ignition: not JSON")?;
    let want = crate::ignition_version(ystr(&b["variant"]), ystr(&b["version"]))?;
    ensure!(
        i["ignition"]["version"] == want,
        "ignition.version: {} where Butane says {want}",
        i["ignition"]["version"]
    );
    let files = by_key(&i["storage"]["files"], "path")?;
    let bfiles = yseq(&b["storage"]["files"]);
    ensure!(
        files.len() == bfiles.len(),
        "storage.files: {} in Ignition, {} in Butane",
        files.len(),
        bfiles.len()
    );
    for f in bfiles {
        let path = ystr(&f["path"]);
        let g = files
            .get(path)
            .with_context(|| format!("storage.files: {path} missing from Ignition"))?;
        same_node(f, g, path)?;
        let c = &f["contents"];
        if let Some(src) = c["source"].as_str() {
            ensure!(g["contents"]["source"] == src, "{path}: source differs");
        } else {
            let want = match c["local"].as_str() {
                Some(l) => std::fs::read(files_dir.join(l))
                    .with_context(|| format!("{path}: local {l}"))?,
                None => ystr(&c["inline"]).as_bytes().to_vec(),
            };
            let got = decode_data_url(g["contents"]["source"].as_str().unwrap_or_default())
                .with_context(|| format!("{path}: contents"))?;
            ensure!(
                got == want,
                "{path}: contents differ ({} bytes in Ignition, {} in Butane)",
                got.len(),
                want.len()
            );
        }
        let hash = c["verification"]["hash"].as_str();
        ensure!(
            g["contents"]["verification"]["hash"].as_str() == hash,
            "{path}: verification.hash differs"
        );
    }
    for (kind, extra) in [("directories", ""), ("links", "target")] {
        let got = by_key(&i["storage"][kind], "path")?;
        let want = yseq(&b["storage"][kind]);
        ensure!(
            got.len() == want.len(),
            "storage.{kind}: {} in Ignition, {} in Butane",
            got.len(),
            want.len()
        );
        for d in want {
            let path = ystr(&d["path"]);
            let g = got
                .get(path)
                .with_context(|| format!("storage.{kind}: {path} missing from Ignition"))?;
            same_node(d, g, path)?;
            if !extra.is_empty() {
                ensure!(
                    g[extra].as_str() == d[extra].as_str(),
                    "{path}: {extra} differs"
                );
                ensure!(
                    g["hard"].as_bool() == d["hard"].as_bool(),
                    "{path}: hard differs"
                );
            }
        }
    }
    units(&b, &i, files_dir)?;
    users(&b, &i)
}

fn units(b: &Y, i: &J, files_dir: &Path) -> Result<()> {
    let got = by_key(&i["systemd"]["units"], "name")?;
    let want = yseq(&b["systemd"]["units"]);
    ensure!(
        got.len() == want.len(),
        "systemd.units: {} in Ignition, {} in Butane",
        got.len(),
        want.len()
    );
    for u in want {
        let name = ystr(&u["name"]);
        let g = got
            .get(name)
            .with_context(|| format!("systemd.units: {name} missing from Ignition"))?;
        for k in ["enabled", "mask"] {
            ensure!(g[k].as_bool() == u[k].as_bool(), "{name}: {k} differs");
        }
        ensure!(
            g["contents"].as_str() == unit_text(u, files_dir)?.as_deref(),
            "{name}: contents differ"
        );
        let gd = by_key(&g["dropins"], "name")?;
        let wd = yseq(&u["dropins"]);
        ensure!(
            gd.len() == wd.len(),
            "{name}: {} drop-ins in Ignition, {} in Butane",
            gd.len(),
            wd.len()
        );
        for d in wd {
            let dn = ystr(&d["name"]);
            let gdd = gd
                .get(dn)
                .with_context(|| format!("{name}: drop-in {dn} missing from Ignition"))?;
            ensure!(
                gdd["contents"].as_str() == unit_text(d, files_dir)?.as_deref(),
                "{name}: drop-in {dn} differs"
            );
        }
    }
    Ok(())
}

fn users(b: &Y, i: &J) -> Result<()> {
    let got = by_key(&i["passwd"]["users"], "name")?;
    let want = yseq(&b["passwd"]["users"]);
    ensure!(
        got.len() == want.len(),
        "passwd.users: {} in Ignition, {} in Butane",
        got.len(),
        want.len()
    );
    for u in want {
        let name = ystr(&u["name"]);
        let g = got
            .get(name)
            .with_context(|| format!("passwd.users: {name} missing from Ignition"))?;
        let keys: Vec<&str> = yseq(&u["ssh_authorized_keys"]).iter().map(ystr).collect();
        let gkeys: Vec<&str> = g["sshAuthorizedKeys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(J::as_str)
            .collect();
        ensure!(keys == gkeys, "passwd.users: {name}: ssh keys differ");
    }
    Ok(())
}

fn unit_text(u: &Y, files_dir: &Path) -> Result<Option<String>> {
    if let Some(l) = u["contents_local"].as_str() {
        return Ok(Some(
            std::fs::read_to_string(files_dir.join(l))
                .with_context(|| format!("contents_local {l}"))?,
        ));
    }
    Ok(u["contents"].as_str().map(str::to_string))
}

/// Mode, overwrite and owner. Butane files here write modes in octal (`0644`), read as octal
/// digits here: a decimal mode in a Butane file is a mismatch, on purpose.
fn same_node(b: &Y, g: &J, path: &str) -> Result<()> {
    // serde_yaml keeps `0644` as the string "0644" (not a YAML 1.2 integer); a decimal is a number
    let digits = match &b["mode"] {
        Y::Null => None,
        Y::Number(n) => Some(n.to_string()),
        Y::String(s) => Some(s.clone()),
        other => bail!("{path}: mode {other:?}"),
    };
    if let Some(m) = digits {
        let octal = u64::from_str_radix(m.trim_start_matches('0'), 8)
            .with_context(|| format!("{path}: mode {m} is not octal"))?;
        ensure!(
            g["mode"].as_u64() == Some(octal),
            "{path}: mode {:?} in Ignition, {m} in Butane",
            g["mode"]
        );
    } else {
        ensure!(g["mode"].is_null(), "{path}: mode in Ignition only");
    }
    ensure!(
        g["overwrite"].as_bool() == b["overwrite"].as_bool(),
        "{path}: overwrite differs"
    );
    for k in ["user", "group"] {
        ensure!(
            g[k]["name"].as_str() == b[k]["name"].as_str(),
            "{path}: {k} name differs"
        );
        ensure!(
            g[k]["id"].as_u64() == b[k]["id"].as_u64(),
            "{path}: {k} id differs"
        );
    }
    Ok(())
}

fn by_key<'a>(v: &'a J, key: &str) -> Result<BTreeMap<&'a str, &'a J>> {
    let mut out = BTreeMap::new();
    for e in v.as_array().into_iter().flatten() {
        let k = e[key]
            .as_str()
            .with_context(|| format!("an entry without {key}"))?;
        if out.insert(k, e).is_some() {
            bail!("{k}: twice in Ignition");
        }
    }
    Ok(out)
}

fn yseq(v: &Y) -> &[Y] {
    v.as_sequence().map(Vec::as_slice).unwrap_or_default()
}

fn ystr(v: &Y) -> &str {
    v.as_str().unwrap_or_default()
}

/// RFC 2397: `data:[<mediatype>][;base64],<data>`; percent-encoded data is decoded, base64 is
/// not used by [`crate::translate`] and refused here.
fn decode_data_url(url: &str) -> Result<Vec<u8>> {
    let rest = url.strip_prefix("data:").context("not a data URL")?;
    let (meta, data) = rest.split_once(',').context("data URL without ','")?;
    ensure!(
        !meta.ends_with(";base64"),
        "base64 data URL (not expected here)"
    );
    let bytes = data.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = data.get(i + 1..i + 3).context("truncated %-escape")?;
            out.push(u8::from_str_radix(hex, 16).context("bad %-escape")?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BU: &str = "variant: flatcar\nversion: 1.0.0\nstorage:\n  files:\n    - path: /etc/x\n      mode: 0644\n      contents:\n        inline: \"a b\"\n";

    #[test]
    fn a_translation_agrees_and_each_kind_of_drift_is_named() {
        let dir = std::env::temp_dir();
        let ign = crate::translate(BU, &dir, "t").unwrap().to_string();
        compare(BU, &ign, &dir).unwrap();
        let e = compare(BU, &ign.replace("420", "384"), &dir).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/x: mode Number(384) in Ignition, 0644 in Butane"
        );
        let e = compare(BU, &ign.replace("a%20b", "a%20c"), &dir).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/x: contents differ (3 bytes in Ignition, 3 in Butane)"
        );
        let e = compare(BU, &ign.replace("3.3.0", "3.4.0"), &dir).unwrap_err();
        assert!(e.to_string().starts_with("ignition.version"), "{e}");
        let e = compare(&BU.replace("0644", "420"), &ign, &dir).unwrap_err();
        assert!(
            e.to_string().contains("is not octal") || e.to_string().contains("mode"),
            "{e}"
        );
    }
}
