//! What nodectld writes in the Kubernetes API, by name: one definition for the agent that writes
//! it and the plugin that reads it.

/// The condition type nodectld owns on its Node.
pub const CONDITION_TYPE: &str = "NodectlReady";

/// Annotation keys on a Node (docs/status.md maps them to kured's and FLUO's).
pub const ANNOTATION_REBOOT: &str = "nodectl.io/reboot-state";
pub const ANNOTATION_VERSION: &str = "nodectl.io/agent-version";
pub const ANNOTATION_AUDIT: &str = "nodectl.io/audit";
pub const ANNOTATION_CERT_EXPIRY: &str = "nodectl.io/certificate-not-after";

/// The suffix of a reboot slot holder's annotation key on its group's Lease; the key is
/// `<node>` followed by it, the value the holder as JSON (`node`, `since`, `renewed`: unix
/// seconds).
pub const ENTRY_SUFFIX: &str = ".reboot-holders.nodectl.io/slot";

/// A group's Lease is named `reboot-<group>` (docs/reboot.md).
pub const LEASE_PREFIX: &str = "reboot-";

/// The namespace of the reboot Leases unless `reboot.namespace` says another.
pub const REBOOT_NAMESPACE: &str = "nodectl-reboot";

/// The `source.component` of the Events nodectld writes about its Node (in namespace
/// `default`, as kubelet's about its Node).
pub const EVENT_COMPONENT: &str = "nodectld";

/// The Lease annotation an operator sets to hold a group to its members (an RE2 pattern).
pub const ANNOTATION_MEMBERS: &str = "nodectl.io/reboot-members";
