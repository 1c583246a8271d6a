//! Helpers shared by the agent's integration tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Runs the `nodectl` binary against a scratch root: (exit code, stdout, stderr).
pub fn nodectl(root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodectl"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A private dbus-daemon (standing in for the system bus), stopped on drop. Its socket lives
/// in a directory of its own, removed on drop (the session config's `unix:tmpdir=/tmp` would
/// leave a socket file in /tmp per killed daemon).
pub struct Bus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    pub fn start() -> Bus {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address=unix:dir={}", dir.path().display()))
            .stdout(Stdio::piped())
            .spawn()
            .expect("dbus-daemon (Debian package dbus) is needed for this test");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Bus {
            child,
            address: line.trim().to_string(),
            _dir: dir,
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kubelet (`rotateCertificates: true`) rotating its client certificate in the store nodectld
/// seeded under `root`, as client-go's fileStore does (util/certificate/certificate_store.go
/// `Update`): the chain and key of `kubeconfig` (a client kubeconfig with `*-data` fields) in a
/// new timestamped file, then a `kubelet-client-updated.pem` link renamed over
/// `kubelet-client-current.pem`. Returns the node path of the new file.
pub fn kubelet_rotates(root: &Path, kubeconfig: &str) -> &'static str {
    use base64::Engine as _;
    let data = |field: &str| {
        let b64 = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{field}: ")))
            .unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap()
    };
    const FILE: &str = "/var/lib/kubelet/pki/kubelet-client-2099-01-01-00-00-00.pem";
    let pki = root.join("var/lib/kubelet/pki");
    let rotated = [data("client-certificate-data"), data("client-key-data")].concat();
    std::fs::write(root.join(FILE.trim_start_matches('/')), rotated).unwrap();
    std::os::unix::fs::symlink(FILE, pki.join("kubelet-client-updated.pem")).unwrap();
    std::fs::rename(
        pki.join("kubelet-client-updated.pem"),
        pki.join("kubelet-client-current.pem"),
    )
    .unwrap();
    FILE
}

// Scratch-root nodes (cli_scratch_root.rs, crash_campaign.rs).

pub const FCOS: &str = "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=42\nVARIANT_ID=coreos\nPRETTY_NAME=\"Fedora CoreOS 42\"\n";

pub fn scratch(config: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("etc/nodectl/config.d")).unwrap();
    std::fs::write(d.path().join("etc/os-release"), FCOS).unwrap();
    // DNS configured (the node-identity step waits for it).
    std::fs::write(d.path().join("etc/resolv.conf"), "nameserver 10.0.0.2\n").unwrap();
    std::fs::write(d.path().join("etc/nodectl/config.d/10-node.toml"), config).unwrap();
    d
}

pub const TOKEN: &str = "abcdef.0123456789abcdef";

pub fn calls(root: &Path) -> serde_json::Value {
    let t = std::fs::read_to_string(root.join("run/nodectl/offline-systemd.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&t).unwrap()["calls"].clone()
}

/// A real self-signed certificate (valid to 2126; a cluster CA in a kubeconfig must parse as
/// X.509), fixed so the golden files stay byte for byte.
pub const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBnDCCAUGgAwIBAgIUSnHF85ORri4YUeh2DNUayx3SgeMwCgYIKoZIzj0EAwIw\nIjEgMB4GA1UEAwwXbm9kZWN0bC10ZXN0LWZpeHR1cmUtY2EwIBcNMjYxMjAzMTU1\nNzU2WhgPMjEyNjExMDkxNTU3NTZaMCIxIDAeBgNVBAMMF25vZGVjdGwtdGVzdC1m\naXh0dXJlLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE14jAc5gPBdfKpWz5\n6btq757FmyuqhCnFFS0zZMfjuSnyjQO85MHHAHXr/BI7vElyURvmHGlZsgNg1Vkb\nIUQbGKNTMFEwHQYDVR0OBBYEFEWyjTIXUQ9M0++DoUEspEmIz95iMB8GA1UdIwQY\nMBaAFEWyjTIXUQ9M0++DoUEspEmIz95iMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI\nzj0EAwIDSQAwRgIhANJdJs7W5lbXGfjWUTS/rRid2pLLIb48+mGDZ82dKEhpAiEA\nr+o6Kvj0E2DZmc9U4KPFjmRZitg/7QBzLAhisOT/9m4=\n-----END CERTIFICATE-----";
pub const KEY: &str = "-----BEGIN EC PRIVATE KEY-----\nMHcfake\n-----END EC PRIVATE KEY-----";

pub fn typhoon_bundle(records: &[(&str, &str)]) -> String {
    records
        .iter()
        .map(|(k, v)| format!("##### {k}\n{v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Drops a bundle into the inbox as a finished copy (modified long enough ago to be complete).
pub fn drop_bundle(root: &Path, name: &str, text: &str) {
    let inbox = root.join("var/lib/nodectl/inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let p = inbox.join(name);
    std::fs::write(&p, text).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

pub fn controller_root() -> tempfile::TempDir {
    let d = scratch("[node]\nrole = \"controller\"\nname = \"controller-0\"\n");
    std::fs::write(
        d.path().join("etc/passwd"),
        "root:x:0:0::/root:/bin/sh\netcd:x:232:232::/var/lib/etcd:/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(d.path().join("etc/group"), "root:x:0:\netcd:x:232:\n").unwrap();
    d
}

pub fn controller_bundle(bootstrap: &str) -> String {
    typhoon_bundle(&[
        ("tls/etcd/peer.crt", CERT),
        ("tls/etcd/peer.key", KEY),
        ("tls/etcd/etcd-client.key", KEY),
        ("tls/k8s/ca.crt", CERT),
        ("tls/k8s/ca.key", KEY),
        (
            "auth/admin.conf",
            "apiVersion: v1\nusers:\n- user:\n    client-key-data: Zm9v",
        ),
        (
            "static-manifests/kube-apiserver.yaml",
            "apiVersion: v1\nkind: Pod",
        ),
        (
            "manifests/coredns/service.yaml",
            "apiVersion: v1\nkind: Service",
        ),
        ("kubelet/kubeconfig", bootstrap),
    ])
}

// nodectld against a scratch root on a private bus (daemon_private_bus.rs, node_condition.rs,
// bundle_arrival.rs, api_faults.rs).

/// nodectld, killed on drop.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts nodectld on `root`, serving on `bus`, with a 50 ms debounce.
pub fn start_daemon(root: &Path, bus: &Bus) -> Daemon {
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_nodectld"))
            .arg("--root")
            .arg(root)
            .args(["--debounce-ms", "50"])
            .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .spawn()
            .unwrap(),
    )
}

/// nodectld's status over the bus (`None` while it does not answer).
pub async fn status(bus: &Bus) -> Option<serde_json::Value> {
    let conn = zbus::connection::Builder::address(bus.address.as_str())
        .build()
        .await
        .ok()?;
    let agent = nodectl::dbus::Agent1Proxy::new(&conn).await.ok()?;
    let json = agent.get_status().await.ok()?;
    serde_json::from_str(&json).ok()
}
