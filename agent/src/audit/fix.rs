//! `nodectl audit --fix`: the safe remedies, through the one write path (no symlink followed),
//! each logged.

use std::os::unix::fs::MetadataExt;

use super::{Finding, Remedy};
use crate::fsio::Writer;

/// Applies the safe remedies, logging each; returns what was done.
pub(crate) fn fix(w: &Writer, findings: &[Finding]) -> Vec<String> {
    let mut done = Vec::new();
    for f in findings {
        let r = match &f.remedy {
            None => continue,
            Some(Remedy::Remove) => w.remove(&f.path).map(|_| ()).map_err(anyhow::Error::from),
            Some(Remedy::Chmod { mode }) => w.set_mode(&f.path, *mode).map_err(anyhow::Error::from),
            Some(Remedy::Relabel) => relabel(w, f),
            Some(Remedy::Own { uid, gid, mode }) => w
                .set_owner_and_mode(&f.path, *uid, *gid, *mode)
                .map_err(anyhow::Error::from),
        };
        let line = match r {
            Ok(()) => format!(
                "fixed {} {}: {:?}",
                f.id,
                f.path.display(),
                f.remedy.as_ref().expect("a remedy")
            ),
            Err(e) => format!("could not fix {} {}: {e:#}", f.id, f.path.display()),
        };
        tracing::warn!(check = %f.id, path = %f.path.display(), "audit --fix: {line}");
        done.push(line);
    }
    done
}

/// Gives the file its policy default label (not readable by containers).
fn relabel(w: &Writer, f: &Finding) -> anyhow::Result<()> {
    let real = w.root().path(&f.path);
    let mode = std::fs::symlink_metadata(&real)?.mode();
    let ctx = w
        .labeler()
        .default_for(&f.path, mode)
        .ok_or_else(|| anyhow::anyhow!("no policy default label for {}", f.path.display()))?;
    w.labeler().set_on_path(&real, &ctx)?;
    Ok(())
}
