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

/// The hostname: `<root>/etc/hostname` when present (a node's static name), else the kernel's.
pub(crate) fn hostname(root: &Root) -> String {
    crate::util::bounded::read_to_string(
        &root.path("/etc/hostname"),
        crate::util::bounded::MAX_SMALL_BYTES,
    )
    .ok()
    .map(|s| s.trim().to_string())
    .filter(|s| !s.is_empty())
    .or_else(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
    })
    .unwrap_or_else(|| "localhost".into())
}

/// Detects the host under `root` (see [`Host::detect`]).
pub fn host(root: &Root) -> Result<Host, LoadError> {
    Ok(Host::detect(root)?)
}

/// Reads, merges and validates the settings under `root`, with the host's defaults and the
/// hostname as the default node name.
pub fn settings(root: &Root, host: &Host) -> Result<Settings, LoadError> {
    let merged = config::load(root)?;
    Ok(Settings::validate(&merged, host, &hostname(root))?)
}
