//! Tier 1: the kubelet stand-in (`tests/kubelet-standin/kubelet`, the one the VM tier runs with
//! podman) against what nodectl renders for a controller, as systemd and podman would hand it
//! over: the words after `${KUBELET_IMAGE}` in the golden kubelet.service, with `$KUBELET_CONFIG`
//! and `$KUBELET_KUBECONFIG` from the golden env file. The stand-in models kubelet's refusal of
//! webhook authentication without an API client (cmd/kubelet/app/auth.go BuildAuthn), so a
//! controller whose kubelet must run before the node has a certificate (its static pods serve the
//! API) is checked against it: the rendering before this one (kubelet.yaml, no kubeconfig) is
//! refused, today's (the standalone configuration) runs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// kubelet's arguments as systemd and podman pass them, node paths mapped into `golden`.
fn kubelet_args(golden: &Path) -> Vec<String> {
    let unit = std::fs::read_to_string(golden.join("etc/systemd/system/kubelet.service")).unwrap();
    let env = std::fs::read_to_string(golden.join("etc/kubernetes/kubelet.env")).unwrap();
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or("")
            .to_string()
    };
    let exec: String = unit
        .split("ExecStart=")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| !l.starts_with("ExecStop"))
        .map(|l| l.trim_end_matches('\\'))
        .collect::<Vec<_>>()
        .join(" ");
    let after_image = exec.split("${KUBELET_IMAGE}").nth(1).unwrap();
    let golden = golden.display().to_string();
    after_image
        .split_whitespace()
        .flat_map(|w| match w {
            // systemd splits an unbraced variable into words, an empty one into none.
            "$KUBELET_CONFIG" => var("KUBELET_CONFIG")
                .split_whitespace()
                .map(String::from)
                .collect(),
            "$KUBELET_KUBECONFIG" => var("KUBELET_KUBECONFIG")
                .split_whitespace()
                .map(String::from)
                .collect(),
            w => vec![w.to_string()],
        })
        .map(|w| w.replace("=/etc/kubernetes/", &format!("={golden}/etc/kubernetes/")))
        .collect()
}

/// Runs the stand-in until it says it runs (then stops it) or exits: (ran, its output).
fn run_standin(args: &[String]) -> (bool, String) {
    let mut child = Command::new("sh")
        .arg(repo().join("tests/kubelet-standin/kubelet"))
        .args(args)
        .env("STANDIN_NO_LISTEN", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut out = String::new();
    let mut ran = false;
    for line in stdout.lines() {
        let line = line.unwrap();
        out.push_str(&line);
        out.push('\n');
        if line.contains("; running") {
            ran = true;
            break;
        }
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    out.push_str(&String::from_utf8_lossy(&o.stderr));
    (ran, out)
}

#[test]
fn a_controller_kubelet_runs_standalone_before_the_node_has_its_certificate() {
    let golden = repo().join("tests/golden/fcos-controller");
    let args = kubelet_args(&golden);
    assert!(
        args.iter()
            .any(|a| a.ends_with("/etc/kubernetes/kubelet-standalone.yaml")),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--kubeconfig")),
        "{args:?}"
    );
    let (ran, out) = run_standin(&args);
    assert!(
        ran,
        "the stand-in refused today's controller rendering:\n{out}"
    );
    assert!(out.contains("kubeconfig (none: standalone)"), "{out}");
    // Issue 37, 2: standalone, kubelet authorizes AlwaysAllow: it must serve no API at all.
    assert!(
        out.contains("no kubelet API (enableServer: false)") && !out.contains(":10250"),
        "{out}"
    );
}

#[test]
fn the_previous_controller_rendering_is_refused_as_kubelet_refuses_it() {
    // Before the standalone configuration: kubelet.yaml (webhook authn/authz) and no kubeconfig.
    let golden = repo().join("tests/golden/fcos-controller");
    let args: Vec<String> = kubelet_args(&golden)
        .into_iter()
        .map(|a| a.replace("kubelet-standalone.yaml", "kubelet.yaml"))
        .collect();
    let (ran, out) = run_standin(&args);
    assert!(!ran, "{out}");
    assert!(
        out.contains("no client provided, cannot use webhook authentication"),
        "{out}"
    );
}

#[test]
fn the_standin_refuses_what_kubelet_refuses_and_takes_the_node_name_given() {
    let golden = repo().join("tests/golden/fcos-worker");
    let mut args = kubelet_args(&golden);
    // A worker starts only with its kubeconfig; the stand-in reads it and its certificate.
    let d = tempfile::tempdir().unwrap();
    let cert = d.path().join("client.pem");
    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let kc = d.path().join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "users:\n- user:\n    client-certificate: {}\n",
            cert.display()
        ),
    )
    .unwrap();
    args.push(format!("--kubeconfig={}", kc.display()));
    let (ran, out) = run_standin(&args);
    assert!(ran, "{out}");
    assert!(
        out.contains("node worker-1,"),
        "--hostname-override is the node's name: {out}"
    );
    assert!(
        out.contains("serving the kubelet API on :10250"),
        "with credentials (webhook authorization) kubelet serves its API: {out}"
    );
    let (ran, out) = run_standin(&[args.clone(), vec!["--no-such-flag".into()]].concat());
    assert!(
        !ran && out.contains("unknown flag: --no-such-flag"),
        "{out}"
    );
    std::fs::remove_file(&cert).unwrap();
    let (ran, out) = run_standin(&args);
    assert!(
        !ran && out.contains("cannot read the client certificate"),
        "{out}"
    );
}

/// `--config` in the unit names the webhook-authenticated configuration and the env file's
/// `KUBELET_CONFIG` follows it (the last value counts): an env file without it (an older one, or
/// none yet) leaves kubelet with the secure configuration, never with kubelet's own defaults
/// (anonymous access, every request allowed).
#[test]
fn without_the_env_files_config_kubelet_gets_the_secure_one() {
    let golden = repo().join("tests/golden/fcos-controller");
    let args: Vec<String> = kubelet_args(&golden)
        .into_iter()
        .filter(|a| !a.ends_with("kubelet-standalone.yaml"))
        .collect();
    assert!(
        args.iter()
            .any(|a| a.ends_with("/etc/kubernetes/kubelet.yaml")),
        "{args:?}"
    );
    let (ran, out) = run_standin(&args);
    assert!(
        !ran && out.contains("cannot use webhook authentication"),
        "{out}"
    );
}

/// The stand-in's static pods, as it would run them (`KUBELET_STANDIN_DRY_RUN=1`: the podman
/// commands, not run): (stdout, stderr).
fn static_pods_plan(manifests: &Path) -> (String, String) {
    let d = tempfile::tempdir().unwrap();
    let config = d.path().join("kubelet.yaml");
    std::fs::write(
        &config,
        format!(
            "kind: KubeletConfiguration\nstaticPodPath: {}\n",
            manifests.display()
        ),
    )
    .unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(". \"$1\"; static_pods \"$2\"")
        .arg("sh")
        .arg(repo().join("tests/kubelet-standin/static-pods"))
        .arg(&config)
        .env("KUBELET_STANDIN_DRY_RUN", "1")
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_standin_runs_the_control_plane_manifests_as_they_ask() {
    let (out, cmds) = static_pods_plan(&repo().join("tests/kubelet-standin/fixtures"));
    for pod in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        assert!(
            out.contains(&format!("static pod {pod}/{pod}: started as uid 65534")),
            "{out}\n{cmds}"
        );
    }
    let run = |pod: &str| {
        cmds.lines()
            .find(|l| l.starts_with("podman run") && l.contains(&format!("k8s_{pod}_{pod}_")))
            .unwrap_or_else(|| panic!("{pod}: {cmds}"))
            .to_string()
    };
    let api = run("kube-apiserver");
    assert!(api.contains("--user 65534 "), "{api}");
    assert!(
        api.contains("-v /etc/kubernetes/pki:/etc/kubernetes/pki:ro"),
        "{api}"
    );
    assert!(api.contains("--network host"), "{api}");
    assert!(
        !api.contains("--privileged") && !api.contains("label="),
        "{api}"
    );
    assert!(
        api.contains(
            "STANDIN_FILES=/etc/kubernetes/pki/ca.crt /etc/kubernetes/pki/etcd-client-ca.crt"
        ),
        "{api}"
    );
    assert!(api.contains("/etc/kubernetes/pki/apiserver.key"), "{api}");
    let sched = run("kube-scheduler");
    assert!(
        sched.contains(
            "-v /etc/kubernetes/pki/scheduler.conf:/etc/kubernetes/pki/scheduler.conf:ro"
        ),
        "{sched}"
    );
    // DirectoryOrCreate: created by the runtime when missing.
    assert!(
        cmds.contains("mkdir -p /var/lib/kubelet/volumeplugins"),
        "{cmds}"
    );
}

#[test]
fn the_standin_refuses_run_as_non_root_without_a_uid_and_reads_security_contexts() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("a.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: rootish\nspec:\n  securityContext:\n    runAsNonRoot: true\n  containers:\n  - name: c\n    image: x\n    command: [\"x\", \"--kubeconfig=/etc/k.conf\"]\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("b.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: grouped\nspec:\n  securityContext:\n    runAsUser: 1000\n    runAsGroup: 3000\n    supplementalGroups: [4000, 5000]\n  containers:\n  - name: one\n    image: x\n    args:\n    - --tls-private-key-file=/k/key\n    volumeMounts:\n    - name: k\n      mountPath: /k\n  - name: two\n    image: x\n    securityContext:\n      runAsUser: 2000\n  volumes:\n  - name: k\n    hostPath:\n      path: /srv/k\n",
    )
    .unwrap();
    std::fs::write(d.path().join(".hidden.yaml"), "not: a pod\n").unwrap();
    let (out, cmds) = static_pods_plan(d.path());
    assert!(
        cmds.contains("rootish/c: container has runAsNonRoot and image will run as root"),
        "{cmds}"
    );
    assert!(!cmds.contains("run -d --name k8s_c_rootish"), "{cmds}");
    let one = cmds
        .lines()
        .find(|l| l.starts_with("podman run") && l.contains("k8s_one_grouped"))
        .unwrap();
    assert!(
        one.contains("--user 1000:3000 --group-add 4000 --group-add 5000"),
        "{one}"
    );
    assert!(
        one.contains("-v /srv/k:/k ") && one.contains("STANDIN_FILES=/k/key"),
        "{one}"
    );
    let two = cmds
        .lines()
        .find(|l| l.starts_with("podman run") && l.contains("k8s_two_grouped"))
        .unwrap();
    assert!(two.contains("--user 2000:3000"), "{two}");
    assert!(
        !out.contains("hidden") && !cmds.contains("hidden"),
        "{out}{cmds}"
    );
}
