//! Release tooling for nodectl's Butane configs: render a template (Typhoon's Terraform-style
//! `${var}`), translate the Butane subset the templates use to Ignition JSON, check an Ignition
//! config by the upstream types (coreos/ignition-config-rs, unknown keys are errors), and
//! compare a Butane file with an Ignition config field by field.
//!
//! `butane` itself is Go-only and cannot run here; [`translate`] follows its rules for the
//! subset (cited per function) and [`compare`] checks the result by independent code.

mod compare;
mod krew;
mod shell_docs;
mod template;
mod translate;

pub use compare::compare;
pub use krew::{check_krew, render_krew};
pub use shell_docs::shell_docs;
pub use template::{parse_vars, parse_vars_in, render};
pub use translate::{ignition_version, translate};

use anyhow::{bail, Context, Result};

/// Parses `ign` (named `name` in errors) with the Ignition spec types of its declared version;
/// returns that version. An unknown key is an error, as Ignition's own validator reports it
/// (`ignition-validate`: "Unused key"), and so is any spec before 3.3.0 (Flatcar's Butane 1.0.0
/// is the oldest nodectl ships for).
pub fn check(ign: &str, name: &str) -> Result<String> {
    let (config, warnings) = ignition_config::Config::parse_str(ign)
        .with_context(|| format!("{name}: not an Ignition config"))?;
    if let Some(w) = warnings.first() {
        bail!("{name}: {w:?} ({} warning(s) in all)", warnings.len());
    }
    let version = match config {
        ignition_config::Config::V3_3(_) => "3.3.0",
        ignition_config::Config::V3_4(_) => "3.4.0",
        ignition_config::Config::V3_5(_) => "3.5.0",
        ignition_config::Config::V3_6(_) => "3.6.0",
        _ => bail!("{name}: Ignition spec older than 3.3.0"),
    };
    Ok(version.to_string())
}
