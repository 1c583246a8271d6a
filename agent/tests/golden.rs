//! Golden tests: every file nodectl renders, for an FCOS controller, an FCOS worker, a Flatcar
//! controller and a Flatcar worker, byte for byte against tests/golden/<case>/<path on the node>.
//! Each node has a hostname (`/etc/hostname`); where it is not the node name, kubelet gets
//! `--hostname-override`. The FCOS worker is an AWS one (provider id from afterburn's metadata,
//! `--cloud-provider=external`).
//!
//! A change to a rendered file fails here with a diff. If the change is intended, regenerate with
//! `NODECTL_BLESS=1 cargo test -p nodectl --test golden` and review the golden diff in the commit.

use std::path::{Path, PathBuf};
use std::process::Command;

const FCOS: &str = "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=42\nVARIANT_ID=coreos\nPRETTY_NAME=\"Fedora CoreOS 42.20250803.3.0\"\n";
const FLATCAR: &str = "NAME=\"Flatcar Container Linux by Kinvolk\"\nID=flatcar\nID_LIKE=coreos\nVERSION_ID=4230.2.1\nPRETTY_NAME=\"Flatcar Container Linux by Kinvolk 4230.2.1\"\n";

/// Every file nodectl renders from settings (not the ones it copies from a bundle).
const RENDERED: &[&str] = &[
    "/etc/systemd/system/kubelet.service",
    "/etc/systemd/system/kubelet.service.d/00-nodectl-image.conf",
    "/etc/kubernetes/kubelet.yaml",
    "/etc/kubernetes/kubelet-standalone.yaml",
    "/etc/kubernetes/kubelet.env",
    "/etc/kubernetes/ca.crt",
    "/etc/modules-load.d/nodectl.conf",
    "/etc/sysctl.d/50-nodectl.conf",
    "/etc/systemd/logind.conf.d/50-nodectl-inhibitors.conf",
    "/etc/systemd/network/50-flannel.link",
];

fn golden_dir(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden")
        .join(case)
}

/// The host's SELinux state as selinuxfs shows it: (enforce, mls).
fn render(case: &str, os_release: &str, selinux: (&str, &str), hostname: &str, config: &str) {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::write(r.join("etc/hostname"), format!("{hostname}\n")).unwrap();
    // The kernel's hostname (what kubelet names itself after): the static one, as at boot.
    std::fs::create_dir_all(r.join("proc/sys/kernel")).unwrap();
    std::fs::write(r.join("proc/sys/kernel/hostname"), format!("{hostname}\n")).unwrap();
    std::fs::write(r.join("etc/resolv.conf"), "nameserver 10.0.0.2\n").unwrap();
    // afterburn's instance metadata (the AWS worker's provider id is taken from it).
    std::fs::create_dir_all(r.join("run/metadata")).unwrap();
    std::fs::write(
        r.join("run/metadata/afterburn"),
        "AFTERBURN_AWS_AVAILABILITY_ZONE=us-east-1a\nAFTERBURN_AWS_INSTANCE_ID=i-0123\n",
    )
    .unwrap();
    std::fs::create_dir_all(r.join("sys/fs/selinux")).unwrap();
    std::fs::write(r.join("sys/fs/selinux/enforce"), selinux.0).unwrap();
    std::fs::write(r.join("sys/fs/selinux/mls"), selinux.1).unwrap();
    std::fs::create_dir_all(r.join("etc/nodectl/config.d")).unwrap();
    std::fs::create_dir_all(r.join("etc/kubernetes")).unwrap();
    std::fs::write(r.join("etc/os-release"), os_release).unwrap();
    std::fs::write(r.join("etc/nodectl/config.d/10-node.toml"), config).unwrap();
    std::fs::write(
        r.join("etc/kubernetes/kubeconfig"),
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/bootstrap-kubeconfig"),
        )
        .unwrap(),
    )
    .unwrap();
    if config.contains("controller") {
        // A controller waits for its pki; the golden is about rendered files, not the bundle.
        std::fs::create_dir_all(r.join("etc/kubernetes/pki")).unwrap();
        std::fs::write(r.join("etc/kubernetes/pki/ca.crt"), "x").unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_nodectl"))
        .arg("--root")
        .arg(r)
        .arg("apply")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let golden = golden_dir(case);
    let bless = std::env::var_os("NODECTL_BLESS").is_some();
    let mut failures = Vec::new();
    for f in RENDERED {
        let rendered = std::fs::read_to_string(r.join(&f[1..])).ok();
        let g = golden.join(&f[1..]);
        if bless {
            match &rendered {
                Some(t) => {
                    std::fs::create_dir_all(g.parent().unwrap()).unwrap();
                    std::fs::write(&g, t).unwrap();
                }
                None => {
                    let _ = std::fs::remove_file(&g);
                }
            }
            continue;
        }
        let expected = std::fs::read_to_string(&g).ok();
        if rendered != expected {
            failures.push(format!(
                "{case}{f}:\n--- golden ({})\n{}\n+++ rendered\n{}",
                g.display(),
                expected.as_deref().unwrap_or("<absent>"),
                rendered.as_deref().unwrap_or("<absent>")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "rendered files differ from the goldens (if intended: NODECTL_BLESS=1 cargo test -p nodectl --test golden, then review):\n{}",
        failures.join("\n")
    );
}

#[test]
fn fcos_controller() {
    render(
        "fcos-controller",
        FCOS,
        ("1", "1"),
        "controller-0",
        "[node]\nrole = \"controller\"\nname = \"controller-0\"\n[network]\nprovider = \"flannel\"\n",
    );
}

#[test]
fn fcos_worker() {
    render(
        "fcos-worker",
        FCOS,
        ("1", "1"),
        "ip-10-0-1-7",
        "[node]\nrole = \"worker\"\nname = \"worker-1\"\nlabels = [\"example.com/pool=blue\"]\ntaints = [\"dedicated=gpu:NoSchedule\"]\n[kubelet]\nimage = \"quay.io/poseidon/kubelet:v1.36.1\"\ncloud_provider = \"external\"\nprovider_id = \"aws\"\n[network]\nprovider = \"calico\"\n",
    );
}

#[test]
fn flatcar_worker() {
    render(
        "flatcar-worker",
        FLATCAR,
        ("0", "1"),
        "worker-2",
        "[node]\nrole = \"worker\"\nname = \"worker-2\"\n[network]\nprovider = \"flannel\"\n[kubelet]\nseccomp_default = false\ncluster_dns = \"10.8.0.10\"\n",
    );
}

#[test]
fn flatcar_controller() {
    render(
        "flatcar-controller",
        FLATCAR,
        ("0", "1"),
        "Controller-1.Example.COM",
        "[node]\nrole = \"controller\"\nname = \"controller-1.example.com\"\n[network]\nprovider = \"cilium\"\n",
    );
}
