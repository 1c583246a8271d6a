//! Loading what a pass needs: the host, then the settings.

use crate::config::{self, ConfigError, Settings};
use crate::host::{Host, HostError};
use crate::root::Root;

/// Why the host or the settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The host could not be detected or is refused.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The settings fragments could not be read or are invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Where the kernel's hostname is read: on a node, the kernel's own (nodectld must share the
/// host's UTS namespace: no `ProtectHostname=`); in a scratch root, a file the test writes.
pub(crate) const KERNEL_HOSTNAME: &str = "/proc/sys/kernel/hostname";

/// The node's hostname as kubelet takes it: the kernel's (`os.Hostname`, i.e. uname), trimmed
/// and lowercased (component-helpers node/util/hostname.go `GetHostname`), never
/// `/etc/hostname`: a transient name (DHCP, afterburn, `hostnamectl --transient`) is what the
/// kernel and kubelet have, whatever the static file says.
pub(crate) fn hostname(root: &Root) -> String {
    crate::util::bounded::read_to_string(
        &root.path(KERNEL_HOSTNAME),
        crate::util::bounded::MAX_SMALL_BYTES,
    )
    .ok()
    .or_else(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
    })
    .map(|s| s.trim().to_lowercase())
    .filter(|s| !s.is_empty())
    .unwrap_or_else(|| "localhost".into())
}

/// Detects the host under `root` (see [`Host::detect`]).
pub fn host(root: &Root) -> Result<Host, LoadError> {
    Ok(Host::detect(root)?)
}

/// Reads, merges and validates `files` alone, in this order, as nodectld would on `host`
/// (`nodectl config check FILES`: nothing under the root's config directories is read).
pub fn settings_of_files(
    root: &Root,
    host: &Host,
    files: &[std::path::PathBuf],
) -> Result<Settings, LoadError> {
    let merged = config::load_files(files)?;
    Ok(Settings::validate(&merged, host, &hostname(root))?)
}

/// Reads, merges and validates the settings under `root`, with the host's defaults and the
/// hostname as the default node name.
pub fn settings(root: &Root, host: &Host) -> Result<Settings, LoadError> {
    let merged = config::load(root)?;
    Ok(Settings::validate(&merged, host, &hostname(root))?)
}
