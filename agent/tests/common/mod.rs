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
