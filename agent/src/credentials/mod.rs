//! The node's client credentials on disk, laid out as kubelet's certificate store keeps them
//! (client-go `util/certificate/certificate_store.go`), in `/var/lib/kubelet/pki`:
//!
//! - `kubelet-client.key.tmp`: the key of a request still pending (0600), kept so that a restart
//!   reuses it, and with it the request's name;
//! - `kubelet-client-<YYYY-MM-DD-HH-MM-SS>.pem`: certificate chain and key in one file (0600);
//! - `kubelet-client-current.pem`: a symlink to the newest, switched atomically (a new link
//!   renamed over the old one).
//!
//! This is the layout of kubelet's own certificate manager (client-go
//! `util/certificate/certificate_store.go` fileStore: `Current` reads the `current` link,
//! `Update` writes a timestamped file and renames a new link over it), so kubelet, started with
//! `rotateCertificates: true`, rotates in the store nodectld seeded and nodectld reads what
//! kubelet wrote.
//!
//! Plus the certificate's validity, and when nodectld renews: at a jittered 92–96% of its
//! lifetime, after kubelet's own window (70–90%): only when kubelet has not.

pub mod bootstrap;
pub mod check;
pub mod held;
pub mod policy;
pub mod store;

use std::path::PathBuf;

pub(crate) use held::held;
pub use held::{read, Held};
pub use store::Validity;
pub(crate) use store::{current, pending_key, private, store, validity};

/// Where kubelet's certificate store lives.
pub(crate) const CERT_DIR: &str = crate::kubeconfig::NODE_PKI;
/// The key of a request still pending (kept so a restart reuses it and its request).
pub(crate) const PENDING_KEY: &str = "kubelet-client.key.tmp";
/// The link to the newest chain+key file.
pub(crate) const CURRENT: &str = "kubelet-client-current.pem";

/// The node's credentials (node paths; directories include what is below them): never
/// container-readable, kept out of the relabel step's shared trees, checked by the audit.
pub(crate) fn paths(settings: &crate::config::Settings) -> Vec<PathBuf> {
    vec![
        settings.bootstrap_kubeconfig.clone(),
        settings.kubeconfig.clone(),
        PathBuf::from(CERT_DIR),
        PathBuf::from("/var/lib/nodectl"),
    ]
}
