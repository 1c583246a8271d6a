//! The node's current certificate as read from disk: its subject, validity and rotation
//! deadline.

use std::path::Path;
use std::time::SystemTime;

use super::{Validity, CERT_DIR, CURRENT};
use crate::root::Root;

/// The node's current certificate, as read from disk.
#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    /// The subject's common name, e.g. `system:node:<name>` (empty when it has none).
    pub subject: String,
    /// When the certificate is valid.
    pub validity: Validity,
    /// The rotation deadline: a jitter drawn from the certificate itself, so every pass (and
    /// `nodectl status`) computes the same instant, and nodes issued together spread out.
    pub rotate_at: SystemTime,
}

/// Reads `kubelet-client-current.pem`. `Ok(None)` when there is none; an unreadable or garbled
/// file is an error naming it.
pub fn held(root: &Root) -> anyhow::Result<Option<Held>> {
    let Some(pem) = super::current(root)? else {
        return Ok(None);
    };
    let path = Path::new(CERT_DIR).join(CURRENT);
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem)
        .map_err(|e| anyhow::anyhow!("{}: not a PEM certificate: {e}", path.display()))?;
    let cert = block
        .parse_x509()
        .map_err(|e| anyhow::anyhow!("{}: not an X.509 certificate: {e}", path.display()))?;
    let validity = super::validity(&pem)?;
    let subject = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let digest = ring::digest::digest(&ring::digest::SHA256, &block.contents);
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest.as_ref()[..8]);
    let jitter = (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64;
    Ok(Some(Held {
        subject,
        rotate_at: validity.rotation_deadline(jitter),
        validity,
    }))
}

/// The node's certificate, read from disk (`None` when absent or unreadable).
pub fn read(root: &Root) -> Option<Held> {
    held(root).ok().flatten()
}
