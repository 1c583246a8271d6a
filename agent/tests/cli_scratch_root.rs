//! Tier 1: the `nodectl` binary against a scratch root (no root, no systemd: the offline
//! stand-in records what systemd would be asked).

use std::path::Path;
use std::process::Command;

const FCOS: &str = "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=42\nVARIANT_ID=coreos\nPRETTY_NAME=\"Fedora CoreOS 42\"\n";

fn scratch(config: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("etc/nodectl/config.d")).unwrap();
    std::fs::write(d.path().join("etc/os-release"), FCOS).unwrap();
    std::fs::write(d.path().join("etc/nodectl/config.d/10-node.toml"), config).unwrap();
    d
}

fn nodectl(root: &Path, args: &[&str]) -> (i32, String, String) {
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

fn example_worker() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/worker.toml"
    ))
    .unwrap()
}

fn calls(root: &Path) -> serde_json::Value {
    let t = std::fs::read_to_string(root.join("run/nodectl/offline-systemd.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&t).unwrap()["calls"].clone()
}

#[test]
fn plan_lists_steps_and_second_plan_after_apply_is_empty() {
    let d = scratch(&example_worker());
    let (rc, out, err) = nodectl(d.path(), &["plan", "--detailed-exitcode"]);
    assert_eq!(rc, 2, "changes pending: {out}{err}");
    for id in [
        "node-files",
        "kubelet-unit",
        "bootstrap-kubeconfig",
        "kubelet-running",
    ] {
        assert!(out.contains(id), "plan does not list {id}:\n{out}");
    }
    assert!(
        out.contains("+ write /etc/systemd/network/50-flannel.link"),
        "{out}"
    );
    assert!(
        out.contains("bootstrap-kubeconfig: waiting for /etc/kubernetes/kubeconfig"),
        "{out}"
    );
    // Planning changed nothing.
    assert!(!d.path().join("etc/kubernetes").exists());
    assert!(!d.path().join("run/nodectl/offline-systemd.json").exists());

    let (rc, out, err) = nodectl(d.path(), &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    for _ in 0..2 {
        let (rc, out, _) = nodectl(d.path(), &["plan", "--detailed-exitcode"]);
        assert_eq!(rc, 0, "second plan must be empty:\n{out}");
        assert!(out.contains("No changes."), "{out}");
    }
    // The unit was rendered for a worker with the configured labels and taints.
    let unit =
        std::fs::read_to_string(d.path().join("etc/systemd/system/kubelet.service")).unwrap();
    assert!(
        unit.contains("--node-labels=example.com/pool=blue"),
        "{unit}"
    );
    assert!(
        unit.contains("--register-with-taints=dedicated=gpu:NoSchedule"),
        "{unit}"
    );
}

#[test]
fn kubelet_starts_only_after_bootstrap_kubeconfig_and_reruns_make_no_calls() {
    let d = scratch(&example_worker());
    assert_eq!(nodectl(d.path(), &["apply"]).0, 0);
    let c = calls(d.path());
    assert_eq!(
        (c["start"].as_u64(), c["reload"].as_u64()),
        (Some(0), Some(1)),
        "{c}"
    );

    std::fs::write(
        d.path().join("etc/kubernetes/kubeconfig"),
        "apiVersion: v1\n",
    )
    .unwrap();
    let (rc, out, _) = nodectl(d.path(), &["apply"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("kubelet-running: start kubelet.service"),
        "{out}"
    );
    let before = calls(d.path());
    assert_eq!(before["start"].as_u64(), Some(1));

    // A re-run with nothing changed asks systemd for nothing.
    let (rc, out, _) = nodectl(d.path(), &["apply"]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(
        calls(d.path()),
        before,
        "a converged re-run made systemd calls"
    );

    // A changed image: one reload, one restart of the running kubelet.
    std::fs::write(
        d.path().join("etc/nodectl/config.d/20-image.toml"),
        "[kubelet]\nimage = \"quay.io/poseidon/kubelet:v1.36.2\"\n",
    )
    .unwrap();
    assert_eq!(nodectl(d.path(), &["apply"]).0, 0);
    let after = calls(d.path());
    assert_eq!(
        after["reload"].as_u64().unwrap(),
        before["reload"].as_u64().unwrap() + 1
    );
    assert_eq!(
        after["restart"].as_u64().unwrap(),
        before["restart"].as_u64().unwrap() + 1
    );
    let dropin = std::fs::read_to_string(
        d.path()
            .join("etc/systemd/system/kubelet.service.d/00-nodectl-image.conf"),
    )
    .unwrap();
    assert!(dropin.contains("KUBELET_IMAGE=quay.io/poseidon/kubelet:v1.36.2"));
    assert!(!d
        .path()
        .join("run/nodectl/kubelet.restart-pending")
        .exists());
}

#[test]
fn typo_in_a_key_names_file_key_and_near_keys() {
    let d = scratch("[node]\nrole = \"worker\"\ntaint = [\"a:NoSchedule\"]\n");
    let (rc, out, err) = nodectl(d.path(), &["plan"]);
    assert_eq!(rc, 1, "{out}");
    let file = d.path().join("etc/nodectl/config.d/10-node.toml");
    assert!(
        err.contains(&format!(
            "{}: key `node.taint`: unknown key; did you mean `taints`?",
            file.display()
        )),
        "{err}"
    );
    assert!(err.contains("known: role, name, labels, taints"), "{err}");
}

#[test]
fn status_without_daemon_reads_disk_and_says_so() {
    let d = scratch(&example_worker());
    let (rc, out, _) = nodectl(d.path(), &["status", "--json"]);
    assert_eq!(rc, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["source"], "disk");
    assert_eq!(v["daemon"]["running"], false);
    assert_eq!(v["host"]["os"], "fedora-coreos");
    assert_eq!(v["host"]["selinux"]["mode"], "absent");
    assert_eq!(v["host"]["labels_applied"], false);
    assert_eq!(v["settings"]["role"], "worker");
    assert_eq!(v["steps"].as_array().unwrap().len(), 4);
    let (_, human, _) = nodectl(d.path(), &["status"]);
    assert!(human.contains("nodectld: not running"), "{human}");
    assert!(
        human.contains("labels skipped: no SELinux on this host"),
        "{human}"
    );
}

#[test]
fn container_linux_is_refused() {
    let d = scratch(&example_worker());
    std::fs::write(
        d.path().join("etc/os-release"),
        "ID=coreos\nVERSION_ID=2512.3.0\n",
    )
    .unwrap();
    let (rc, _, err) = nodectl(d.path(), &["plan"]);
    assert_eq!(rc, 1);
    assert!(
        err.contains("end-of-life") && err.contains("Flatcar"),
        "{err}"
    );
}
