//! Typhoon's layout (its `/opt/bootstrap/layout` script), as data: where each group of bundle
//! records goes, with whose ownership, which modes and which label.

/// Where a group of records goes, with whose ownership and which label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    /// `prefix*` (one file name starting with prefix), `dir/*` (files directly in dir),
    /// `dir/**` (the subtree, subdirectories kept), or an exact path.
    pub pattern: &'static str,
    /// Destination directory on the node; `None` = the configured bootstrap kubeconfig path
    /// (only for an exact pattern).
    pub dest: Option<&'static str>,
    /// The top directory the rule owns (`dest` or a parent of it): every directory from here
    /// down to a file gets the rule's owner, mode and label.
    pub base: &'static str,
    pub owner: &'static str,
    pub dir_mode: u32,
    /// Mode of files that hold keys or credentials (always 0600 here) and of other files.
    pub secret_mode: u32,
    pub file_mode: u32,
    pub label: Option<&'static str>,
    pub controller_only: bool,
    /// etcd credentials: refused on workers with its own message.
    pub etcd: bool,
    /// kubelet starts pods from these files (its staticPodPath): they are renamed into place
    /// after every other file of the bundle, so a kubelet already running (a controller's,
    /// standalone before its bundle comes) never starts a pod before the keys, certificates and
    /// kubeconfigs it reads are in place with their final owner, mode and label.
    pub starts_pods: bool,
}

const SHARED: Option<&str> = Some("system_u:object_r:container_file_t:s0");

/// The uid the control plane's static pods run as: terraform-render-bootstrap
/// `resources/static-manifests/kube-{apiserver,controller-manager,scheduler}.yaml` have the pod
/// `securityContext: {runAsNonRoot: true, runAsUser: 65534}` and no runAsGroup, fsGroup or
/// supplementalGroups, and mount `/etc/kubernetes/pki` by hostPath. Their keys and kubeconfigs
/// belong to that uid (0600 in a 0700 directory): they read them, no other local user does
/// (Typhoon leaves them 0644 in a 0755 directory, readable by everyone). Numeric: FCOS calls
/// 65534 `nfsnobody` (its `nobody` is 99), Flatcar `nobody`.
pub const CONTROL_PLANE_UID: u32 = 65534;

/// The control plane's CA (`tls/k8s/ca.crt` placed by the rule below): once it is placed, a
/// controller awaits no bundle and its API server can run (it is one of the static pods).
pub(crate) const CONTROL_PLANE_CA: &str = "/etc/kubernetes/pki/ca.crt";

/// [`CONTROL_PLANE_UID`] as a layout owner.
pub(crate) const CONTROL_PLANE: &str = "65534";

/// Typhoon's layout (`/opt/bootstrap/layout`), as data. First match wins. Files shared by the
/// control-plane static pods get `container_file_t:s0`: no categories, readable by every
/// container, never a private pair. Files private to one container (etcd's keys, the bootstrap
/// pod's assets, both mounted `:Z`) never get a shared label: they keep the policy's default
/// (`label: None`), which containers cannot read, and podman gives them that container's
/// private pair when it starts it.
pub(crate) const TYPHOON_LAYOUT: &[Rule] = &[
    Rule {
        pattern: "tls/etcd/peer*",
        dest: Some("/etc/ssl/etcd/etcd"),
        base: "/etc/ssl/etcd",
        owner: "etcd",
        dir_mode: 0o700,
        secret_mode: 0o600,
        file_mode: 0o600,
        label: None,
        controller_only: true,
        etcd: true,
        starts_pods: false,
    },
    Rule {
        pattern: "tls/etcd/server*",
        dest: Some("/etc/ssl/etcd/etcd"),
        base: "/etc/ssl/etcd",
        owner: "etcd",
        dir_mode: 0o700,
        secret_mode: 0o600,
        file_mode: 0o600,
        label: None,
        controller_only: true,
        etcd: true,
        starts_pods: false,
    },
    Rule {
        pattern: "tls/etcd/etcd-client*",
        dest: Some("/etc/kubernetes/pki"),
        base: "/etc/kubernetes/pki",
        owner: CONTROL_PLANE,
        dir_mode: 0o700,
        secret_mode: 0o600,
        file_mode: 0o644,
        label: SHARED,
        controller_only: true,
        etcd: true,
        starts_pods: false,
    },
    Rule {
        pattern: "tls/etcd/*",
        dest: None,
        base: "/etc/ssl/etcd",
        owner: "root",
        dir_mode: 0,
        secret_mode: 0,
        file_mode: 0,
        label: None,
        controller_only: true,
        etcd: true,
        starts_pods: false,
    },
    Rule {
        pattern: "auth/*",
        dest: Some("/etc/kubernetes/pki"),
        base: "/etc/kubernetes/pki",
        owner: CONTROL_PLANE,
        dir_mode: 0o700,
        secret_mode: 0o600,
        file_mode: 0o600,
        label: SHARED,
        controller_only: true,
        etcd: false,
        starts_pods: false,
    },
    Rule {
        pattern: "tls/k8s/*",
        dest: Some("/etc/kubernetes/pki"),
        base: "/etc/kubernetes/pki",
        owner: CONTROL_PLANE,
        dir_mode: 0o700,
        secret_mode: 0o600,
        file_mode: 0o644,
        label: SHARED,
        controller_only: true,
        etcd: false,
        starts_pods: false,
    },
    Rule {
        pattern: "static-manifests/*",
        dest: Some("/etc/kubernetes/manifests"),
        base: "/etc/kubernetes/manifests",
        owner: "root",
        dir_mode: 0o755,
        secret_mode: 0o600,
        file_mode: 0o644,
        label: SHARED,
        controller_only: true,
        etcd: false,
        starts_pods: true,
    },
    Rule {
        pattern: "manifests/**",
        dest: Some("/opt/bootstrap/assets/manifests"),
        base: "/opt/bootstrap/assets",
        owner: "root",
        dir_mode: 0o700,
        secret_mode: 0o600,
        file_mode: 0o644,
        label: None,
        controller_only: true,
        etcd: false,
        starts_pods: false,
    },
    Rule {
        pattern: "kubelet/kubeconfig",
        dest: None,
        base: "/etc/kubernetes",
        owner: "root",
        dir_mode: 0o755,
        secret_mode: 0o600,
        file_mode: 0o600,
        // The bootstrap token: the policy default, never readable by containers.
        label: None,
        controller_only: false,
        etcd: false,
        starts_pods: false,
    },
];
