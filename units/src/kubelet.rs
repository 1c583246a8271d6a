//! kubelet.service, its image drop-in, and the flannel `.link` file, rendered from a spec.
//! Pure: the agent decides what to write; this only says what the files contain.

use crate::render::{exec_quote, IniFile, Section};

/// The agent's own drop-ins carry this prefix; `00-` sorts before every operator drop-in, so an
/// operator's `kubelet.service.d/10-image-override.conf` always wins.
pub const AGENT_DROPIN_PREFIX: &str = "00-nodectl-";
pub const KUBELET_UNIT: &str = "kubelet.service";
/// The target kubelet.service's `[Install]` section wants it by (`WantedBy=`).
pub const WANTED_BY: &str = "multi-user.target";
/// The variable kubelet.service takes its image from (nodectld's drop-in, or an operator's).
pub const IMAGE_VAR: &str = "KUBELET_IMAGE";
pub const IMAGE_DROPIN: &str = "00-nodectl-image.conf";
pub const FLANNEL_LINK: &str = "50-flannel.link";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// `podman run` as the service's main process (Fedora CoreOS).
    Podman,
    /// `docker run -d` + `docker logs -f` (Flatcar): docker run is a client of a daemon, so the
    /// container is not a child of the unit.
    Docker,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Controller,
    Worker,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletSpec {
    pub runtime: Runtime,
    pub role: Role,
    /// Extra `--node-labels` values (`key=value`), after the role label.
    pub labels: Vec<String>,
    /// Extra `--register-with-taints` values (`key=value:Effect`), after the role taint.
    pub taints: Vec<String>,
    /// kubelet's `EnvironmentFile=`: `KUBELET_KUBECONFIG` is `--kubeconfig=<path>` once the node
    /// has its own credentials, empty before (standalone); `KUBELET_CONFIG` is `--config=<path>`
    /// (a controller's standalone configuration before its credentials). kubelet never gets the
    /// bootstrap kubeconfig: nodectld does the TLS bootstrap and the rotation.
    pub env_file: String,
    /// Give volumes SELinux options (`:z`); on hosts without SELinux they are left off.
    pub selinux: bool,
    /// `--hostname-override`: the node name nodectld requested the certificate for, when it is
    /// not what kubelet would take from the hostname (kubelet registers under the lowercased
    /// hostname otherwise, and the Node authorizer refuses a Node that is not the certificate's).
    pub hostname_override: Option<String>,
    /// `--cloud-provider` (`external`: a cloud controller manager initializes the Node).
    pub cloud_provider: Option<String>,
    /// `--provider-id`: the node's identity in its cloud.
    pub provider_id: Option<ProviderId>,
}

/// Where kubelet's `--provider-id` comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderId {
    /// Given as is (e.g. `aws:///us-east-1a/i-0123`).
    Literal(String),
    /// AWS, from the instance metadata a oneshot service writes before kubelet starts, as
    /// Typhoon's units take it: `aws:///${zone}/${instance}` from `env_file`.
    AwsMetadata {
        /// The metadata service kubelet requires and follows (`afterburn.service` on FCOS,
        /// `coreos-metadata.service` on Flatcar).
        service: &'static str,
        /// Its environment file (`/run/metadata/afterburn`, `/run/metadata/coreos`).
        env_file: &'static str,
        /// The variable holding the availability zone.
        zone_var: &'static str,
        /// The variable holding the instance id.
        instance_var: &'static str,
    },
}

impl ProviderId {
    /// afterburn on Fedora CoreOS (`AFTERBURN_AWS_*` in `/run/metadata/afterburn`).
    pub const AFTERBURN: ProviderId = ProviderId::AwsMetadata {
        service: "afterburn.service",
        env_file: "/run/metadata/afterburn",
        zone_var: "AFTERBURN_AWS_AVAILABILITY_ZONE",
        instance_var: "AFTERBURN_AWS_INSTANCE_ID",
    };
    /// coreos-metadata on Flatcar (`COREOS_EC2_*` in `/run/metadata/coreos`).
    pub const COREOS_METADATA: ProviderId = ProviderId::AwsMetadata {
        service: "coreos-metadata.service",
        env_file: "/run/metadata/coreos",
        zone_var: "COREOS_EC2_AVAILABILITY_ZONE",
        instance_var: "COREOS_EC2_INSTANCE_ID",
    };

    fn flag(&self) -> String {
        match self {
            ProviderId::Literal(id) => format!("--provider-id={id}"),
            ProviderId::AwsMetadata {
                zone_var,
                instance_var,
                ..
            } => format!("--provider-id=aws:///${{{zone_var}}}/${{{instance_var}}}"),
        }
    }
}

impl KubeletSpec {
    fn flags(&self) -> Vec<String> {
        let mut f =
            vec!["--container-runtime-endpoint=unix:///run/containerd/containerd.sock".to_string()];
        match self.role {
            Role::Controller => {
                f.push("--node-labels=node.kubernetes.io/controller=true".into());
            }
            Role::Worker => f.push("--node-labels=node.kubernetes.io/node".into()),
        }
        f.extend(self.labels.iter().map(|l| format!("--node-labels={l}")));
        // One flag with every taint, comma-separated: kubelet keeps only the last
        // `--register-with-taints` (pkg/kubelet/apis/config taints flag: RegisterWithTaintsVar.Set
        // replaces the value), so a second flag would drop the controller's taint.
        let mut taints: Vec<&str> = Vec::new();
        if self.role == Role::Controller {
            taints.push("node-role.kubernetes.io/controller=:NoSchedule");
        }
        taints.extend(self.taints.iter().map(String::as_str));
        if !taints.is_empty() {
            f.push(format!("--register-with-taints={}", taints.join(",")));
        }
        if let Some(name) = &self.hostname_override {
            f.push(format!("--hostname-override={name}"));
        }
        if let Some(c) = &self.cloud_provider {
            f.push(format!("--cloud-provider={c}"));
        }
        let mut words: Vec<String> = f.into_iter().map(|w| exec_quote(&w)).collect();
        // (not quoted: systemd substitutes the metadata variables inside the word)
        if let Some(p) = &self.provider_id {
            words.push(p.flag());
        }
        // From the env file, read at each start (so switching them needs no daemon-reload).
        // Unbraced: systemd splits each into words, and an empty value into none.
        // `--config` always names the webhook-authenticated configuration; the env file's
        // `KUBELET_CONFIG` comes after it and wins (kubelet's flags: the last value counts), so
        // a missing or older env file never leaves kubelet with its insecure defaults.
        words.insert(0, "--config=/etc/kubernetes/kubelet.yaml".into());
        words.insert(1, "$KUBELET_CONFIG".into());
        words.insert(3, "$KUBELET_KUBECONFIG".into());
        words
    }

    fn volumes(&self) -> Vec<String> {
        // (host, container, options) as Typhoon mounts them; `z` = shared label, s0.
        let z = |o: &str| -> String {
            if !self.selinux {
                return o
                    .split(',')
                    .filter(|p| *p != "z")
                    .collect::<Vec<_>>()
                    .join(",");
            }
            o.to_string()
        };
        let mut v = vec![
            ("/etc/cni/net.d", "/etc/cni/net.d", z("ro,z")),
            // No relabel option on /etc/kubernetes and /var/lib/kubelet: podman's `z` would
            // relabel everything below at every start, the bootstrap token and the node's key
            // included (readable by any container through a hostPath). kubelet runs privileged
            // (no SELinux confinement) and needs none; nodectld keeps the shared files at
            // container_file_t:s0 and the credentials at the policy default.
            ("/etc/kubernetes", "/etc/kubernetes", "ro".into()),
            ("/etc/machine-id", "/etc/machine-id", "ro".into()),
            ("/usr/lib/os-release", "/etc/os-release", "ro".into()),
            ("/lib/modules", "/lib/modules", "ro".into()),
            ("/run", "/run", String::new()),
            ("/sys/fs/cgroup", "/sys/fs/cgroup", String::new()),
        ];
        if self.selinux {
            v.push(("/etc/selinux", "/etc/selinux", String::new()));
            v.push(("/sys/fs/selinux", "/sys/fs/selinux", String::new()));
        }
        v.extend([
            ("/var/lib/containerd", "/var/lib/containerd", String::new()),
            ("/var/lib/kubelet", "/var/lib/kubelet", "rshared".into()),
            ("/var/log", "/var/log", String::new()),
        ]);
        // Typhoon mounts the lock directory for podman's kubelet only (FCOS).
        if self.runtime == Runtime::Podman {
            v.push(("/var/run/lock", "/var/run/lock", z("z")));
        }
        v.push(("/opt/cni/bin", "/opt/cni/bin", z("z")));
        v.into_iter()
            .map(|(h, c, o)| {
                if o.is_empty() {
                    format!("--volume {h}:{c}")
                } else {
                    format!("--volume {h}:{c}:{o}")
                }
            })
            .collect()
    }

    /// kubelet.service. The image is `${KUBELET_IMAGE}`, set by [`Self::image_dropin`] or by an
    /// operator's drop-in.
    pub fn unit(&self) -> String {
        // nodectld is Type=notify and READY only after its first pass: at boot, kubelet starts
        // after nodectld has put files, labels and credentials in place.
        let unit = Section::new("Unit")
            .set("Description", "Kubelet (System Container)")
            .set("Wants", "rpc-statd.service")
            .set("After", "nodectld.service");
        // kubelet talks to containerd's CRI socket (`--container-runtime-endpoint`): on FCOS
        // Typhoon enables containerd.service (its config.toml stays in Butane, docs/install.md);
        // on Flatcar docker.service runs both the kubelet container and containerd.
        let unit = match self.runtime {
            Runtime::Podman => unit
                .set("Wants", "containerd.service")
                .set("After", "containerd.service"),
            Runtime::Docker => unit
                .set("Requires", "docker.service")
                .set("After", "docker.service"),
        };
        let unit = match &self.provider_id {
            Some(ProviderId::AwsMetadata { service, .. }) => {
                unit.set("Requires", *service).set("After", *service)
            }
            _ => unit,
        };
        let mut run: Vec<String> = Vec::new();
        let mut service = Section::new("Service");
        match self.runtime {
            Runtime::Podman => {
                run.push("/usr/bin/podman run --name kubelet".into());
                run.push("--log-driver k8s-file".into());
                run.extend(["--privileged", "--pid host", "--network host"].map(String::from));
                run.extend(self.volumes());
                run.push("${KUBELET_IMAGE}".into());
                run.extend(self.flags());
                service = service
                    .set("ExecStartPre", "-/usr/bin/podman rm kubelet")
                    .set("ExecStart", run.join("\n"))
                    .set("ExecStop", "-/usr/bin/podman stop kubelet");
            }
            Runtime::Docker => {
                // Typhoon's Flatcar kubelet.service (poseidon/typhoon
                // aws/flatcar-linux/kubernetes/butane/controller.yaml, workers/butane/worker.yaml):
                // `docker run -d --name kubelet --privileged --pid host --network host` with these
                // mounts, then `docker logs -f`, `docker stop`, `docker rm`. Typhoon has no
                // `docker rm -f` before the run: a container left running (the unit's process
                // killed: the container is dockerd's, and ExecStopPost's `docker rm` refuses a
                // running one) keeps the name and every later `docker run --name kubelet` fails
                // with a conflict (moby/moby#6791, linked from Typhoon's worker).
                run.push("/usr/bin/docker run -d --name kubelet".into());
                run.extend(["--privileged", "--pid host", "--network host"].map(String::from));
                run.extend(
                    self.volumes()
                        .into_iter()
                        .map(|v| v.replace("--volume ", "-v ")),
                );
                run.push("${KUBELET_IMAGE}".into());
                run.extend(self.flags());
                service = service
                    .set("ExecStartPre", "-/usr/bin/docker rm -f kubelet")
                    .set("ExecStartPre", run.join("\n"))
                    .set("ExecStart", "/usr/bin/docker logs -f kubelet")
                    .set("ExecStop", "/usr/bin/docker stop kubelet")
                    .set("ExecStopPost", "-/usr/bin/docker rm kubelet");
            }
        }
        if let Some(ProviderId::AwsMetadata { env_file, .. }) = &self.provider_id {
            service = service.set("EnvironmentFile", *env_file);
        }
        let service = service
            .set("EnvironmentFile", format!("-{}", self.env_file))
            .set("Delegate", "yes")
            .set("Restart", "always")
            .set("RestartSec", "10");
        IniFile::new()
            .comment("Managed by nodectl: changes here are overwritten. Use a drop-in in")
            .comment("/etc/systemd/system/kubelet.service.d/ (e.g. 10-image-override.conf).")
            .section(unit)
            .section(service)
            .section(Section::new("Install").set("WantedBy", WANTED_BY))
            .render()
    }

    /// The agent's drop-in that sets the image; an operator's later drop-in overrides it.
    pub fn image_dropin(image: &str) -> String {
        IniFile::new()
            .comment("Managed by nodectl (kubelet image from its settings). To pin another image,")
            .comment(
                "write your own drop-in, e.g. 10-image-override.conf: it sorts later and wins.",
            )
            .section(Section::new("Service").set("Environment", format!("{IMAGE_VAR}={image}")))
            .render()
    }
}

/// `50-flannel.link`: let flannel's vxlan device keep the MAC flannel gave it (udev's
/// `MACAddressPolicy=persistent` would otherwise replace it and break pod traffic on FCOS).
pub fn flannel_link() -> String {
    IniFile::new()
        .comment("Managed by nodectl: flannel picks its own MAC address (FCOS).")
        .section(Section::new("Match").set("OriginalName", "flannel*"))
        .section(Section::new("Link").set("MACAddressPolicy", "none"))
        .render()
}

/// The first line of every file nodectl writes whole; a file that does not start with it is an
/// operator's, never removed.
pub const MANAGED_HEADER: &str = "# Managed by nodectl";

/// Where [`modules_load_conf`] and [`sysctl_conf`] go: systemd applies them at boot
/// (systemd-modules-load.service, systemd-sysctl.service). The Butane configs nodectl ships
/// write both (Ignition, before the first boot's oneshots run), with exactly this content, so a
/// fresh node has them applied at boot and nodectld's first pass owes no restart; nodectld
/// keeps them so afterwards (tools/butane/tests/shipped.rs checks the two agree).
pub const MODULES_LOAD_FILE: &str = "/etc/modules-load.d/nodectl.conf";
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/50-nodectl.conf";

/// The kernel modules kubelet's network needs: `br_netfilter` (flannel, bridged traffic through
/// iptables) and `nf_conntrack` (kube-proxy); Typhoon's `/etc/modules-load.d/typhoon.conf`.
pub fn modules_load_conf() -> String {
    format!("{MANAGED_HEADER}\nbr_netfilter\nnf_conntrack\n")
}

/// The sysctls: inotify watches for kubelet and pods (Typhoon's `max-user-watches.conf`); on
/// Fedora CoreOS (`rp_filter_off`) reverse-path filtering off, as Typhoon's FCOS configs set it
/// (`reverse-path-filter.conf`).
pub fn sysctl_conf(rp_filter_off: bool) -> String {
    let mut s = format!("{MANAGED_HEADER}\nfs.inotify.max_user_watches=16184\n");
    if rp_filter_off {
        s.push_str("net.ipv4.conf.default.rp_filter=0\nnet.ipv4.conf.*.rp_filter=0\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(runtime: Runtime, role: Role) -> KubeletSpec {
        KubeletSpec {
            runtime,
            role,
            labels: vec!["pool=blue".into()],
            taints: vec!["gpu=true:NoSchedule".into()],
            env_file: "/etc/kubernetes/kubelet.env".into(),
            selinux: true,
            hostname_override: None,
            cloud_provider: None,
            provider_id: None,
        }
    }

    #[test]
    fn the_provider_id_comes_from_the_instance_metadata_as_typhoon_takes_it() {
        let mut s = spec(Runtime::Docker, Role::Worker);
        s.provider_id = Some(ProviderId::COREOS_METADATA);
        s.cloud_provider = Some("external".into());
        let u = s.unit();
        assert!(
            u.contains("Requires=coreos-metadata.service\nAfter=coreos-metadata.service"),
            "{u}"
        );
        assert!(u.contains("EnvironmentFile=/run/metadata/coreos\n"), "{u}");
        assert!(u.contains(" --cloud-provider=external"), "{u}");
        assert!(
            u.contains(
                " --provider-id=aws:///${COREOS_EC2_AVAILABILITY_ZONE}/${COREOS_EC2_INSTANCE_ID}"
            ),
            "{u}"
        );
        s.provider_id = Some(ProviderId::Literal("aws:///us-east-1a/i-0123".into()));
        let u = s.unit();
        assert!(
            u.contains(" --provider-id=aws:///us-east-1a/i-0123") && !u.contains("metadata"),
            "{u}"
        );
    }

    #[test]
    fn kubelet_is_ordered_after_its_runtime_and_named_when_asked() {
        let u = spec(Runtime::Podman, Role::Worker).unit();
        assert!(
            u.contains("Wants=containerd.service\nAfter=containerd.service"),
            "{u}"
        );
        assert!(!u.contains("--hostname-override"));
        let u = spec(Runtime::Docker, Role::Worker).unit();
        assert!(
            u.contains("Requires=docker.service\nAfter=docker.service"),
            "{u}"
        );
        let mut s = spec(Runtime::Podman, Role::Worker);
        s.hostname_override = Some("worker-1.example".into());
        assert!(s.unit().contains(" --hostname-override=worker-1.example"));
    }

    #[test]
    fn controller_gets_controller_label_and_taint_never_master() {
        let u = spec(Runtime::Podman, Role::Controller).unit();
        assert!(u.contains("--node-labels=node.kubernetes.io/controller=true"));
        assert!(u.contains("--register-with-taints=node-role.kubernetes.io/controller=:NoSchedule"));
        assert!(!u.contains("master"));
        assert!(!u.contains("--lock-file") && !u.contains("exit-on-lock-contention"));
    }

    #[test]
    fn kubelet_gets_its_kubeconfig_from_the_env_file_never_the_bootstrap_one() {
        for rt in [Runtime::Podman, Runtime::Docker] {
            let u = spec(rt, Role::Worker).unit();
            assert!(
                u.contains("EnvironmentFile=-/etc/kubernetes/kubelet.env\n"),
                "{u}"
            );
            assert!(u.contains("  $KUBELET_KUBECONFIG \\\n"), "{u}");
            assert!(!u.contains("bootstrap-kubeconfig") && !u.contains("--kubeconfig"));
        }
    }

    /// The taints kubelet registers with, read as kubelet reads its flags: the last
    /// `--register-with-taints` wins (RegisterWithTaintsVar.Set replaces), its value split at
    /// commas (pkg/kubelet/apis/config: `[]v1.Taint` from a comma-separated list).
    fn taints_kubelet_registers(unit: &str) -> Vec<String> {
        unit.split_whitespace()
            .rev()
            .find_map(|w| w.strip_prefix("--register-with-taints="))
            .map(|v| v.split(',').map(String::from).collect())
            .unwrap_or_default()
    }

    #[test]
    fn every_taint_reaches_kubelet_in_one_flag_as_it_keeps_the_last() {
        let mut s = spec(Runtime::Podman, Role::Controller);
        s.taints = vec!["dedicated=infra:NoExecute".into()];
        assert_eq!(
            taints_kubelet_registers(&s.unit()),
            [
                "node-role.kubernetes.io/controller=:NoSchedule",
                "dedicated=infra:NoExecute"
            ]
        );
        let mut s = spec(Runtime::Docker, Role::Worker);
        s.taints = vec!["gpu=true:NoSchedule".into(), "spot:PreferNoSchedule".into()];
        assert_eq!(
            taints_kubelet_registers(&s.unit()),
            ["gpu=true:NoSchedule", "spot:PreferNoSchedule"]
        );
        s.taints.clear();
        assert!(!s.unit().contains("--register-with-taints"));
    }

    #[test]
    fn worker_gets_node_label_and_configured_labels_and_taints() {
        let u = spec(Runtime::Podman, Role::Worker).unit();
        assert!(u.contains("--node-labels=node.kubernetes.io/node \\"));
        assert!(u.contains("--node-labels=pool=blue"));
        assert!(u.contains("--register-with-taints=gpu=true:NoSchedule"));
        assert!(!u.contains("controller"));
    }

    #[test]
    fn podman_runs_kubelet_as_main_process_with_shared_labels() {
        let u = spec(Runtime::Podman, Role::Worker).unit();
        assert!(u.contains("ExecStart=/usr/bin/podman run --name kubelet \\"));
        // Never a relabel of the trees that hold credentials (it would undo their labels).
        assert!(u.contains("--volume /etc/kubernetes:/etc/kubernetes:ro \\"));
        assert!(u.contains("--volume /var/lib/kubelet:/var/lib/kubelet:rshared \\"));
        assert!(u.contains("--volume /etc/cni/net.d:/etc/cni/net.d:ro,z"));
        assert!(u.contains("Delegate=yes") && u.contains("Restart=always"));
        assert!(
            u.contains("After=nodectld.service"),
            "kubelet must wait for nodectld at boot"
        );
        let mut s = spec(Runtime::Podman, Role::Worker);
        s.selinux = false;
        let u = s.unit();
        assert!(u.contains("--volume /etc/kubernetes:/etc/kubernetes:ro \\"));
        assert!(!u.contains(":z") && !u.contains("/sys/fs/selinux"));
    }

    #[test]
    fn docker_uses_run_d_and_logs_f() {
        let u = spec(Runtime::Docker, Role::Worker).unit();
        assert!(u.contains("ExecStartPre=/usr/bin/docker run -d --name kubelet \\"));
        assert!(u.contains("ExecStart=/usr/bin/docker logs -f kubelet"));
        assert!(u.contains("Requires=docker.service"));
    }

    #[test]
    fn image_dropin_and_link() {
        assert!(
            KubeletSpec::image_dropin("quay.io/poseidon/kubelet:v1.36.1")
                .contains("Environment=KUBELET_IMAGE=quay.io/poseidon/kubelet:v1.36.1\n")
        );
        let l = flannel_link();
        assert!(l.contains("[Match]\nOriginalName=flannel*\n"));
        assert!(l.contains("[Link]\nMACAddressPolicy=none\n"));
    }
}

/// `/etc/kubernetes/kubelet.yaml`: the KubeletConfiguration Typhoon writes, with `seccompDefault`
/// as a setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletConfig {
    pub cluster_dns: String,
    pub cluster_domain: String,
    pub seccomp_default: bool,
    /// Where kubelet finds the cluster CA it verifies clients against.
    pub client_ca_file: String,
    /// A controller's kubelet before the node has its own credentials: no API client, so no
    /// webhook authentication or authorization (a real kubelet refuses to start with them and
    /// no client: cmd/kubelet/app/auth.go BuildAuthn, "no client provided, cannot use webhook
    /// authentication"). Clients are authenticated by certificate (the cluster CA) only.
    pub standalone: bool,
}

impl KubeletConfig {
    pub fn render(&self) -> String {
        format!(
            "# Managed by nodectl: changes here are overwritten (see nodectl's kubelet.* settings).
{standalone}apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: {webhook}
  x509:
    clientCAFile: {ca}
authorization:
  mode: {authz}
cgroupDriver: systemd
clusterDNS:
  - {dns}
clusterDomain: {domain}
{server}healthzPort: 0
rotateCertificates: {rotate}
seccompDefault: {seccomp}
serializeImagePulls: false
shutdownGracePeriod: 45s
shutdownGracePeriodCriticalPods: 30s
staticPodPath: /etc/kubernetes/manifests
readOnlyPort: 0
resolvConf: /run/systemd/resolve/resolv.conf
volumePluginDir: /var/lib/kubelet/volumeplugins
",
            ca = self.client_ca_file,
            dns = self.cluster_dns,
            domain = self.cluster_domain,
            seccomp = self.seccomp_default,
            webhook = !self.standalone,
            // kubelet rotates its client certificate in the store nodectld seeded (same
            // layout: /var/lib/kubelet/pki/kubelet-client-current.pem), so the node stays Ready
            // while nodectld is down; nodectld renews only if kubelet has not, later in the
            // certificate's life. Without an API client (standalone) there is nothing to rotate.
            rotate = !self.standalone,
            authz = if self.standalone {
                "AlwaysAllow"
            } else {
                "Webhook"
            },
            standalone = if self.standalone {
                "# Standalone (a controller before its certificate): no API client, so no webhook\n\
                 # authentication or authorization, and so no kubelet API served at all (every\n\
                 # kubelet client certificate is signed by the cluster CA: with AlwaysAllow any of\n\
                 # them could exec into the control plane's pods). Static pods only. Replaced by\n\
                 # kubelet.yaml once the node has credentials.\n"
            } else {
                ""
            },
            // kubelet serves its API (10250) only `if kubeCfg.EnableServer`
            // (cmd/kubelet/app/server.go startKubelet); static pods run either way.
            server = if self.standalone {
                "enableServer: false\n"
            } else {
                ""
            },
        )
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn kubelet_yaml_has_typhoons_settings_and_seccomp_default() {
        let c = KubeletConfig {
            cluster_dns: "10.3.0.10".into(),
            cluster_domain: "cluster.local".into(),
            seccomp_default: true,
            client_ca_file: "/etc/kubernetes/ca.crt".into(),
            standalone: false,
        };
        let y = c.render();
        assert!(y.contains("  webhook:\n    enabled: true\n") && y.contains("mode: Webhook"));
        let sa = KubeletConfig {
            standalone: true,
            ..c.clone()
        }
        .render();
        assert!(
            sa.contains("  webhook:\n    enabled: false\n") && sa.contains("mode: AlwaysAllow")
        );
        assert!(sa.contains("rotateCertificates: false"), "{sa}");
        // Issue 37, 2: a standalone kubelet authorizes AlwaysAllow, so it serves no API at all
        // (any worker's client certificate is signed by the same CA); with credentials it does.
        assert!(sa.contains("\nenableServer: false\n"), "{sa}");
        assert!(!y.contains("enableServer"), "{y}");
        assert!(sa.contains("anonymous:\n    enabled: false"));
        for want in [
            "kind: KubeletConfiguration",
            "cgroupDriver: systemd",
            "clusterDNS:\n  - 10.3.0.10\n",
            "seccompDefault: true",
            "clientCAFile: /etc/kubernetes/ca.crt",
            // kubelet rotates the client certificate nodectld seeded.
            "rotateCertificates: true",
            "shutdownGracePeriod: 45s",
        ] {
            assert!(y.contains(want), "{want:?} missing:\n{y}");
        }
        let off = KubeletConfig {
            seccomp_default: false,
            ..c
        }
        .render();
        assert!(off.contains("seccompDefault: false"));
    }
}
