//! The secrets inbox: which directory and which files in it nodectld reads bundles from.

use std::path::Path;

/// The inbox, when it exists, is a directory root owns and nobody else may write: whoever may
/// put a file in it chooses what nodectld places as root (static pod manifests, keys). nodectld
/// makes it so (0700) when it is missing; one made otherwise beforehand is refused, not used.
pub(super) fn inbox_trusted(real: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = match std::fs::symlink_metadata(real) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    if !m.is_dir() {
        return Err("not a directory (a symlink is not followed)".into());
    }
    if m.uid() != 0 || m.mode() & 0o022 != 0 {
        return Err(format!(
            "owned by uid {} with mode {:04o}: others could drop a bundle nodectld places as \
             root; make it root's alone (`chown root:root`, `chmod 0700`); no bundle is read",
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// The bundles in the inbox directory `real`: its regular, non-hidden files (a file being
/// written aside is hidden until renamed in), by name, sorted; none when it does not exist.
pub(super) fn bundle_names(real: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(real) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !e.file_type()?.is_file() {
            continue;
        }
        out.push(name);
    }
    out.sort();
    Ok(out)
}
