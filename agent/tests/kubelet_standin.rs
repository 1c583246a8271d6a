//! Tier 1: the kubelet stand-in (`tests/kubelet-standin/kubelet`, the one the VM tier runs with
//! podman) against what nodectl renders for a controller, as systemd and podman would hand it
//! over: the words after `${KUBELET_IMAGE}` in the golden kubelet.service, with `$KUBELET_CONFIG`
//! and `$KUBELET_KUBECONFIG` from the golden env file. The stand-in models kubelet's refusal of
//! webhook authentication without an API client (cmd/kubelet/app/auth.go BuildAuthn), so a
//! controller whose kubelet must run before the node has a certificate (its static pods serve the
//! API) is checked against it: the rendering before this one (kubelet.yaml, no kubeconfig) is
//! refused, today's (the standalone configuration) runs. Its static pods' file source (listed at
//! start and every fileCheckFrequency, watched by inotify in between) runs under busybox sh with
//! perl, as in its image: those tests need both and fail, saying so, without them.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// busybox (the shell of the stand-in's image: Debian's busybox-static, as the VM's; installed
/// by tests/vm/setup-host.sh) and perl (the inotify watch's, copied into the image): the
/// file-source tests fail here without them rather than pass untried.
fn busybox() -> &'static str {
    let have = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(
        have("busybox", &["sh", "-c", "exit 0"]),
        "the kubelet stand-in runs under busybox sh and this host has no busybox: install \
         Debian's busybox-static (tests/vm/setup-host.sh does)"
    );
    assert!(
        have("perl", &["-e", "exit 0"]),
        "the kubelet stand-in watches staticPodPath with perl and this host has none (perl-base)"
    );
    "busybox"
}

/// The kubelet stand-in running (`KUBELET_STANDIN_DRY_RUN=1`: the podman commands printed, not
/// run) in a process group of its own, its stdout and stderr lines gathered as they come.
struct Standin {
    child: Child,
    out: Arc<Mutex<String>>,
}

impl Standin {
    /// Standalone, with a configuration of `staticPodPath: DIR` and the `extra` lines.
    fn start(tmp: &Path, dir: &Path, extra: &str) -> Standin {
        let bb = busybox();
        let config = tmp.join("kubelet-config.yaml");
        std::fs::write(
            &config,
            format!(
                "kind: KubeletConfiguration\nenableServer: false\nstaticPodPath: {}\n{extra}",
                dir.display()
            ),
        )
        .unwrap();
        let mut child = Command::new(bb)
            .arg("sh")
            .arg(repo().join("tests/kubelet-standin/kubelet"))
            .arg(format!("--config={}", config.display()))
            .env("KUBELET_STANDIN_DRY_RUN", "1")
            .env("STANDIN_NO_LISTEN", "1")
            .env("TMPDIR", tmp)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for pipe in pipes {
            let out = out.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    let mut o = out.lock().unwrap();
                    o.push_str(&line);
                    o.push('\n');
                }
            });
        }
        Standin { child, out }
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Waits until the output has `n` lines containing `what`: how long that took.
    fn wait_for_n(&self, what: &str, n: usize, within: Duration) -> Duration {
        let t0 = Instant::now();
        loop {
            let out = self.output();
            if out.lines().filter(|l| l.contains(what)).count() >= n {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < within,
                "no {n} line(s) with {what:?} within {within:?}:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_for(&self, what: &str, within: Duration) -> Duration {
        self.wait_for_n(what, 1, within)
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        // SIGTERM as podman stop sends it (the stand-in stops its watch), then the whole group.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        std::thread::sleep(Duration::from_millis(300));
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

fn pod_manifest(name: &str, file_flag: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  securityContext:\n    runAsUser: 1000\n  containers:\n  - name: c\n    image: x\n    command: [\"x\", \"{file_flag}\"]\n"
    )
}

/// The name of the last container started for pod `pod` (its container is `c`).
fn last_run(out: &str, pod: &str) -> String {
    let prefix = format!("k8s_c_{pod}_");
    out.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("podman run -d --name "))
        .filter_map(|l| l.split_whitespace().next())
        .find(|n| n.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no container started for {pod}:\n{out}"))
        .to_string()
}

/// kubelet's file source watches staticPodPath (pkg/kubelet/config/file_linux.go): a manifest
/// renamed in after kubelet started runs at once, not at the next list (fileCheckFrequency is an
/// hour here); a dot file is never a pod; a changed manifest replaces the pod's container, a
/// removed one removes it.
#[test]
fn a_manifest_placed_after_start_runs_at_once_and_changes_and_removal_follow() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("manifests");
    std::fs::create_dir(&dir).unwrap();
    let k = Standin::start(tmp.path(), &dir, "fileCheckFrequency: 1h\n");
    let watching = format!("watching {} (inotify)", dir.display());
    k.wait_for(&watching, Duration::from_secs(10));

    std::fs::write(
        dir.join(".hidden.yaml"),
        pod_manifest("hidden", "--kubeconfig=/h"),
    )
    .unwrap();
    std::fs::write(
        dir.join(".a.yaml.new"),
        pod_manifest("a", "--kubeconfig=/k1"),
    )
    .unwrap();
    std::fs::rename(dir.join(".a.yaml.new"), dir.join("a.yaml")).unwrap();
    let took = k.wait_for(
        "static pod a/c: started as uid 1000",
        Duration::from_secs(3),
    );
    let out = k.output();
    assert!(
        out.contains(&format!(
            "static pod a: from {}/a.yaml (inotify add)",
            dir.display()
        )),
        "{out}"
    );
    eprintln!("a manifest renamed into staticPodPath ran after {took:?}");
    let first = last_run(&out, "a");

    // changed in place (IN_MODIFY): the old container goes, a new one runs
    std::fs::write(dir.join("a.yaml"), pod_manifest("a", "--kubeconfig=/k2")).unwrap();
    k.wait_for_n(
        "static pod a/c: started as uid 1000",
        2,
        Duration::from_secs(5),
    );
    k.wait_for(&format!("podman rm -f {first}"), Duration::from_secs(2));
    let out = k.output();
    let second = last_run(&out, "a");
    assert_ne!(first, second, "{out}");
    assert!(out.contains("STANDIN_FILES=/k2"), "{out}");

    // the same bytes again, and a relabel or chmod (IN_ATTRIB): kept, nothing run
    std::fs::write(dir.join("a.yaml"), pod_manifest("a", "--kubeconfig=/k2")).unwrap();
    let mut perm = std::fs::metadata(dir.join("a.yaml")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
    std::fs::set_permissions(dir.join("a.yaml"), perm).unwrap();

    std::fs::remove_file(dir.join("a.yaml")).unwrap();
    k.wait_for(
        "static pod a: removed (its manifest",
        Duration::from_secs(5),
    );
    k.wait_for(&format!("podman rm -f {second}"), Duration::from_secs(2));
    let out = k.output();
    assert_eq!(out.matches("podman run -d").count(), 2, "{out}");
    assert!(!out.contains("hidden"), "a dot file is no pod:\n{out}");
}

/// A staticPodPath that does not exist yet (a node before its bundle) is logged, tried again
/// every second (file_linux.go startWatch: a retryableError, retryPeriod 1 s) and watched once
/// it appears.
#[test]
fn a_static_pod_path_that_appears_later_is_watched_from_then_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("manifests");
    let k = Standin::start(tmp.path(), &dir, "fileCheckFrequency: 1h\n");
    k.wait_for(
        &format!(
            "unable to read config path {}: path does not exist, ignoring",
            dir.display()
        ),
        Duration::from_secs(10),
    );
    std::fs::create_dir(&dir).unwrap();
    k.wait_for(
        &format!("watching {} (inotify)", dir.display()),
        Duration::from_secs(3),
    );
    std::fs::write(dir.join("b.yaml"), pod_manifest("b", "--kubeconfig=/k")).unwrap();
    k.wait_for(
        "static pod b/c: started as uid 1000",
        Duration::from_secs(3),
    );
}

/// Manifests already in the directory when the watch is set up raise no event: kubelet's doWatch
/// lists nothing, so they run at the next list, up to fileCheckFrequency (here 2 s, as a
/// KubeletConfiguration sets it) later; no inotify event ever names them.
#[test]
fn manifests_in_a_directory_that_appears_whole_wait_for_the_next_list() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("manifests");
    let k = Standin::start(tmp.path(), &dir, "fileCheckFrequency: \"2s\"\n");
    k.wait_for("path does not exist, ignoring", Duration::from_secs(10));
    let staged = tmp.path().join("staged");
    std::fs::create_dir(&staged).unwrap();
    std::fs::write(staged.join("c.yaml"), pod_manifest("c", "--kubeconfig=/k")).unwrap();
    std::fs::rename(&staged, &dir).unwrap();
    k.wait_for(
        "static pod c/c: started as uid 1000",
        Duration::from_secs(8),
    );
    let out = k.output();
    assert!(
        out.contains(&format!(
            "static pod c: from {}/c.yaml (list)",
            dir.display()
        )),
        "{out}"
    );
    assert!(!out.contains("(inotify add)"), "{out}");
}

/// fileCheckFrequency is a Go duration; unset or zero is kubelet's default, 20 s (defaults.go).
#[test]
fn file_check_frequency_is_read_as_kubelet_reads_it() {
    let bb = busybox();
    let tmp = tempfile::tempdir().unwrap();
    for (line, want) in [
        ("", "20"),
        ("fileCheckFrequency: 20s", "20"),
        ("fileCheckFrequency: 1m30s", "90"),
        ("fileCheckFrequency: \"500ms\"", "0.5"),
        ("fileCheckFrequency: 0s", "20"),
        ("fileCheckFrequency: soon", ""),
    ] {
        let config = tmp.path().join("c.yaml");
        std::fs::write(&config, format!("kind: KubeletConfiguration\n{line}\n")).unwrap();
        let o = Command::new(bb)
            .args(["sh", "-c", ". \"$1\"; file_check_frequency \"$2\"", "sh"])
            .arg(repo().join("tests/kubelet-standin/static-pods"))
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want, "{line}");
    }
}

/// The pod script counts the rounds (one a second) that failed before the line it prints, so a
/// benchmark can tell how many reads failed before every file was in place: a line only when
/// what it reads changes, ending in "(K failed reads before)".
#[test]
fn a_static_pod_reports_its_failed_reads_before_it_reads_every_file() {
    let bb = busybox();
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("key");
    let kubeconfig = tmp.path().join("kubeconfig");
    std::fs::write(&key, "k").unwrap();
    let mut child = Command::new(bb)
        .args([
            "sh",
            "-c",
            ". \"$1\"; exec busybox sh -c \"$POD_SCRIPT\"",
            "sh",
        ])
        .arg(repo().join("tests/kubelet-standin/static-pods"))
        .env("STANDIN_ID", "static pod p/c")
        .env(
            "STANDIN_FILES",
            format!("{} {}", key.display(), kubeconfig.display()),
        )
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(
        first.contains(&format!(
            "cannot read {}: No such file or directory;",
            kubeconfig.display()
        )) && first.ends_with(" (0 failed reads before)"),
        "{first}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    std::fs::write(tmp.path().join("client.crt"), "c").unwrap();
    std::fs::write(
        &kubeconfig,
        "users:\n- user:\n    client-certificate: client.crt\n",
    )
    .unwrap();
    let second = lines.next().unwrap().unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", child.id())])
        .status();
    let _ = child.wait();
    assert!(
        second.contains("uid ") && second.contains(": read 3 files: key kubeconfig client.crt ("),
        "{second}"
    );
    let failed: u32 = second
        .strip_suffix(" failed reads before)")
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{second}"));
    // the rounds at 0, 1 and 2 s failed (one fewer or more on a loaded machine), on one line
    assert!((2..=5).contains(&failed), "{second}");
}
