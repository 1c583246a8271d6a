//! nodectl-butane: release tooling (packaging/release.sh), not shipped to nodes.
//!
//! nodectl-butane render VARS TEMPLATE OUT.bu      ${var} from VARS (NAME=VALUE lines; NAME@N=FILE)
//! nodectl-butane translate FILES_DIR IN.bu OUT.ign the Butane subset to Ignition (strict)
//! nodectl-butane check FILE.ign...                 upstream spec types, unknown keys fail
//! nodectl-butane compare FILES_DIR IN.bu IN.ign    field by field
//! nodectl-butane krew TEMPLATE VERSION URL SHA256 OUT.yaml  the krew manifest, checked
//! nodectl-butane shell-docs OUTDIR                 completions and man pages (/usr/share layout)

use anyhow::{bail, Context, Result};
use std::path::Path;

fn main() {
    if let Err(e) = run(&std::env::args().skip(1).collect::<Vec<_>>()) {
        eprintln!("nodectl-butane: {e:#}");
        std::process::exit(1);
    }
}

fn read(p: &str) -> Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {p}"))
}

fn run(args: &[String]) -> Result<()> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["render", vars, template, out] => {
            // (`NAME@N=PATH` files are relative to the vars file)
            let base = Path::new(vars).parent().unwrap_or(Path::new("."));
            let vars = nodectl_butane::parse_vars_in(&read(vars)?, vars, base)?;
            let text = nodectl_butane::render(&read(template)?, &vars, template)?;
            std::fs::write(out, text).with_context(|| format!("writing {out}"))
        }
        ["translate", files_dir, bu, out] => {
            let ign = nodectl_butane::translate(&read(bu)?, Path::new(files_dir), bu)?;
            let text = serde_json::to_string_pretty(&ign)? + "\n";
            nodectl_butane::check(&text, out)?;
            std::fs::write(out, text).with_context(|| format!("writing {out}"))
        }
        ["check", files @ ..] if !files.is_empty() => {
            for f in files {
                let v = nodectl_butane::check(&read(f)?, f)?;
                println!("{f}: Ignition {v}, no unknown keys");
            }
            Ok(())
        }
        ["compare", files_dir, bu, ign] => {
            nodectl_butane::compare(&read(bu)?, &read(ign)?, Path::new(files_dir))
                .with_context(|| format!("{bu} and {ign} differ"))?;
            println!("{bu} = {ign}");
            Ok(())
        }
        ["krew", template, version, url, sha256, out] => {
            let text = nodectl_butane::render_krew(&read(template)?, version, url, sha256)
                .with_context(|| format!("rendering {template}"))?;
            nodectl_butane::check_krew(&text, out)?;
            std::fs::write(out, text).with_context(|| format!("writing {out}"))?;
            println!("{out}: krew's rules hold");
            Ok(())
        }
        ["shell-docs", out] => {
            let written = nodectl_butane::shell_docs(Path::new(out))?;
            println!("{out}: {} completion scripts and man pages", written.len());
            Ok(())
        }
        _ => bail!("usage: render VARS TEMPLATE OUT | translate FILES_DIR IN.bu OUT.ign | check FILE.ign... | compare FILES_DIR IN.bu IN.ign | krew TEMPLATE VERSION URL SHA256 OUT.yaml | shell-docs OUTDIR"),
    }
}
