//! Tier 1: `nodectl audit` against fixture nodes (scratch roots) with every finding planted:
//! each is reported with its id, and a clean node has none. `--fix` removes etcd credentials
//! from a worker and fixes modes.

mod common;
use common::nodectl;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const FCOS: &str = "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=42\nVARIANT_ID=coreos\n";
const SHARED: &str = "system_u:object_r:container_file_t:s0";

fn put(root: &Path, p: &str, content: &[u8], mode: u32) {
    let f = root.join(p.trim_start_matches('/'));
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, content).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chmod(root: &Path, p: &str, mode: u32) {
    std::fs::set_permissions(
        root.join(p.trim_start_matches('/')),
        std::fs::Permissions::from_mode(mode),
    )
    .unwrap();
}

fn node(config: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    put(d.path(), "/etc/os-release", FCOS.as_bytes(), 0o644);
    put(
        d.path(),
        "/etc/nodectl/config.d/10-node.toml",
        config.as_bytes(),
        0o644,
    );
    d
}

struct Ca {
    key: rcgen::KeyPair,
    params: rcgen::CertificateParams,
    pem: String,
}

fn ca(cn: &str) -> Ca {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let pem = params.self_signed(&key).unwrap().pem();
    Ca { key, params, pem }
}

/// A kubelet client certificate + key (kubelet-client-current.pem), valid for a day.
fn kubelet_pem(issuer: &Ca) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:worker-1");
    let now = std::time::SystemTime::now();
    p.not_before = (now - std::time::Duration::from_secs(60)).into();
    p.not_after = (now + std::time::Duration::from_secs(86_400)).into();
    let cert = p
        .signed_by(
            &key,
            &rcgen::Issuer::from_params(&issuer.params, &issuer.key),
        )
        .unwrap();
    format!("{}{}", cert.pem(), key.serialize_pem())
}

fn place_credentials(root: &Path, pem: &str, mode: u32) {
    put(
        root,
        "/var/lib/kubelet/pki/kubelet-client-2026-11-30-00-00-00.pem",
        pem.as_bytes(),
        mode,
    );
    std::os::unix::fs::symlink(
        "/var/lib/kubelet/pki/kubelet-client-2026-11-30-00-00-00.pem",
        root.join("var/lib/kubelet/pki/kubelet-client-current.pem"),
    )
    .unwrap();
}

fn ids(json: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut ids: Vec<String> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

const WORKER: &str = "[node]\nrole = \"worker\"\nname = \"worker-1\"\n";
const BOOTSTRAP: &str =
    "apiVersion: v1\nusers:\n- name: kubelet\n  user:\n    token: abcdef.0123456789abcdef\n";

#[test]
fn a_clean_worker_has_no_findings() {
    let d = node(WORKER);
    let r = d.path();
    let k8s = ca("kubernetes-ca");
    put(r, "/etc/kubernetes/ca.crt", k8s.pem.as_bytes(), 0o644);
    place_credentials(r, &kubelet_pem(&k8s), 0o600);
    chmod(r, "/var/lib/kubelet/pki", 0o700);
    let (rc, out, err) = nodectl(r, &["audit", "--json"]);
    assert_eq!(ids(&out), Vec::<String>::new(), "{out}{err}");
    assert_eq!(rc, 0);
    let (_, human, _) = nodectl(r, &["audit"]);
    assert!(human.starts_with("No findings (14 checks)."), "{human}");
}

#[test]
fn every_worker_finding_is_reported_and_fix_repairs_what_is_safe() {
    let d = node(WORKER);
    let r = d.path();
    let etcd = ca("etcd-ca");
    // The same CA for Kubernetes and etcd, and the kubelet's certificate issued by it.
    put(r, "/etc/kubernetes/ca.crt", etcd.pem.as_bytes(), 0o644);
    put(
        r,
        "/etc/ssl/etcd/etcd-client-ca.crt",
        etcd.pem.as_bytes(),
        0o644,
    );
    // etcd client credentials left from an old flannel setup.
    put(
        r,
        "/etc/ssl/etcd/etcd-client.key",
        b"-----BEGIN EC PRIVATE KEY-----\nx\n-----END EC PRIVATE KEY-----\n",
        0o600,
    );
    // The kubelet's key readable by others, its directory open.
    place_credentials(r, &kubelet_pem(&etcd), 0o644);
    chmod(r, "/var/lib/kubelet/pki", 0o755);
    // The bootstrap token still on disk, labeled readable by containers.
    put(r, "/etc/kubernetes/kubeconfig", BOOTSTRAP.as_bytes(), 0o600);
    nodectl_selinux::relabel::set_stored_label(&r.join("etc/kubernetes/kubeconfig"), SHARED)
        .unwrap();
    // The node kubeconfig with another type containers read (not only container_file_t).
    put(
        r,
        "/var/lib/kubelet/kubeconfig",
        b"users:\n- user:\n    client-key-data: abc\n",
        0o600,
    );
    nodectl_selinux::relabel::set_stored_label(
        &r.join("var/lib/kubelet/kubeconfig"),
        "system_u:object_r:container_ro_file_t:s0",
    )
    .unwrap();

    let (rc, out, err) = nodectl(r, &["audit", "--json"]);
    assert_eq!(
        ids(&out),
        [
            "bootstrap-token-on-disk",
            "etcd-credentials-on-worker",
            "key-dir-mode",
            "key-label-container-readable",
            "key-mode",
            "shared-etcd-kubernetes-ca",
        ],
        "{out}{err}"
    );
    assert_eq!(rc, 3, "a high finding: exit 3");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let etcd_files: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "etcd-credentials-on-worker")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        etcd_files.contains(&"/etc/ssl/etcd/etcd-client.key"),
        "{etcd_files:?}"
    );
    assert!(
        !etcd_files.contains(&"/etc/kubernetes/ca.crt"),
        "the cluster CA is not an etcd credential to remove: {etcd_files:?}"
    );
    // The kubelet's certificate validates against the etcd CA (its signature, not its name).
    let kubelet_shared = v["findings"].as_array().unwrap().iter().any(|f| {
        f["id"] == "shared-etcd-kubernetes-ca"
            && f["path"] == "/var/lib/kubelet/pki/kubelet-client-current.pem"
    });
    assert!(kubelet_shared, "{out}");
    let readable: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "key-label-container-readable")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        readable,
        ["/etc/kubernetes/kubeconfig", "/var/lib/kubelet/kubeconfig"],
        "container_ro_file_t is container-readable too"
    );
    let (_, human, _) = nodectl(r, &["audit"]);
    assert!(
        human.contains("HIGH   etcd-credentials-on-worker  /etc/ssl/etcd/etcd-client.key (file)"),
        "{human}"
    );
    assert!(
        !human.contains("0123456789abcdef"),
        "a token in the audit output"
    );

    // --fix: etcd files removed, modes fixed, each logged; what needs an operator stays.
    let (rc, out, err) = nodectl(r, &["audit", "--fix"]);
    assert!(
        err.contains("fixed etcd-credentials-on-worker /etc/ssl/etcd/etcd-client.key"),
        "{err}"
    );
    assert!(!r.join("etc/ssl/etcd/etcd-client.key").exists());
    assert!(
        r.join("etc/kubernetes/ca.crt").exists(),
        "--fix removed the cluster CA"
    );
    let mode = |p: &str| std::fs::metadata(r.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("var/lib/kubelet/pki"), 0o700);
    assert_eq!(
        mode("var/lib/kubelet/pki/kubelet-client-2026-11-30-00-00-00.pem"),
        0o600
    );
    assert!(
        !out.contains("key-mode") && !out.contains("key-dir-mode"),
        "{out}"
    );
    assert!(out.contains("bootstrap-token-on-disk"), "{out}");
    assert_eq!(rc, 3);
}

#[test]
fn every_controller_finding_is_reported() {
    let d = node("[node]\nrole = \"controller\"\nname = \"controller-0\"\n");
    let r = d.path();
    put(
        r,
        "/etc/kubernetes/manifests/kube-apiserver.yaml",
        b"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n    command:\n    - kube-apiserver\n    - --authorization-mode=RBAC\n    - --enable-admission-plugins=NamespaceLifecycle\n    - --enable-bootstrap-token-auth=true\n",
        0o644,
    );
    put(
        r,
        "/opt/bootstrap/assets/manifests/bootstrap-token.yaml",
        b"apiVersion: v1\nkind: Secret\nstringData:\n  token-id: abcdef\n",
        0o600,
    );
    put(
        r,
        "/etc/etcd/etcd.env",
        b"ETCD_NAME=controller-0\nETCD_LISTEN_CLIENT_URLS=https://0.0.0.0:2379\nETCD_CLIENT_CERT_AUTH=false\n",
        0o644,
    );
    let (rc, out, err) = nodectl(r, &["audit", "--json"]);
    assert_eq!(
        ids(&out),
        [
            "apiserver-admission",
            "apiserver-authorization",
            "bootstrap-token-unbounded",
            "etcd-client-cert-auth",
            "etcd-listens-everywhere",
        ],
        "{out}{err}"
    );
    assert_eq!(rc, 3);
    // Typhoon's own settings pass (token bounded, etcd certificate auth, Node,RBAC).
    put(
        r,
        "/etc/kubernetes/manifests/kube-apiserver.yaml",
        b"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n    command:\n    - kube-apiserver\n    - --authorization-mode=Node,RBAC\n    - --enable-admission-plugins=NodeRestriction\n    - --enable-bootstrap-token-auth=true\n",
        0o644,
    );
    put(
        r,
        "/opt/bootstrap/assets/manifests/bootstrap-token.yaml",
        b"apiVersion: v1\nkind: Secret\nstringData:\n  token-id: abcdef\n  expiration: 2026-12-01T00:00:00Z\n",
        0o600,
    );
    put(
        r,
        "/etc/etcd/etcd.env",
        b"ETCD_LISTEN_CLIENT_URLS=https://10.0.0.10:2379\nETCD_CLIENT_CERT_AUTH=true\n",
        0o644,
    );
    let (rc, out, _) = nodectl(r, &["audit", "--json"]);
    assert_eq!(ids(&out), Vec::<String>::new(), "{out}");
    assert_eq!(rc, 0);
}

/// A controller laid out as Typhoon's script does (keys 0644 in a 0755 directory, readable by
/// every local user) is reported; `--fix` gives the keys to the control plane's uid (65534, the
/// static pods' `runAsUser` in terraform-render-bootstrap's manifests) with 0600/0700, so the
/// pods still read them and nobody else does; nodectld's own layout has no finding.
#[test]
fn a_typhoon_controller_is_fixed_without_locking_out_its_control_plane() {
    let d = node("[node]\nrole = \"controller\"\nname = \"controller-0\"\n");
    let r = d.path();
    put(
        r,
        "/etc/kubernetes/pki/apiserver.key",
        b"-----BEGIN EC PRIVATE KEY-----\nMHc=\n-----END EC PRIVATE KEY-----\n",
        0o644,
    );
    put(
        r,
        "/etc/kubernetes/pki/admin.conf",
        b"users:\n- user:\n    client-key-data: abc\n",
        0o644,
    );
    chmod(r, "/etc/kubernetes/pki", 0o755);
    let (rc, out, err) = nodectl(r, &["audit", "--json"]);
    assert_eq!(ids(&out), ["key-dir-mode", "key-mode"], "{out}{err}");
    assert_eq!(rc, 3);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for f in v["findings"].as_array().unwrap() {
        assert_eq!(f["remedy"]["action"], "own", "{f}");
        assert_eq!(f["remedy"]["uid"], 65534, "{f}");
    }
    if !nix::unistd::geteuid().is_root() {
        return; // chown needs root (CI runs as root)
    }
    fixed_for_the_control_plane(
        r,
        &[
            ("etc/kubernetes/pki", 0o700),
            ("etc/kubernetes/pki/apiserver.key", 0o600),
            ("etc/kubernetes/pki/admin.conf", 0o600),
        ],
    );
}

/// nodectl's controller layout before issue 13 (keys and kubeconfigs root's, 0600 in a 0700
/// directory) locks the control plane's static pods (uid 65534) out: the audit says so, and
/// `--fix` gives them to that uid without opening them to anyone else.
#[test]
fn a_control_plane_locked_out_of_its_keys_is_reported_and_fixed() {
    let d = node("[node]\nrole = \"controller\"\nname = \"controller-0\"\n");
    let r = d.path();
    put(
        r,
        "/etc/kubernetes/pki/apiserver.key",
        b"-----BEGIN EC PRIVATE KEY-----\nMHc=\n-----END EC PRIVATE KEY-----\n",
        0o600,
    );
    put(
        r,
        "/etc/kubernetes/pki/scheduler.conf",
        b"users:\n- user:\n    client-key-data: abc\n",
        0o600,
    );
    chmod(r, "/etc/kubernetes/pki", 0o700);
    let (rc, out, err) = nodectl(r, &["audit", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let found: Vec<(String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_string(),
                f["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            (
                "control-plane-key-owner".to_string(),
                "/etc/kubernetes/pki".to_string()
            ),
            (
                "control-plane-key-owner".to_string(),
                "/etc/kubernetes/pki/apiserver.key".to_string()
            ),
            (
                "control-plane-key-owner".to_string(),
                "/etc/kubernetes/pki/scheduler.conf".to_string()
            ),
        ],
        "{out}{err}"
    );
    assert_eq!(rc, 3);
    if !nix::unistd::geteuid().is_root() {
        return; // chown needs root (CI runs as root)
    }
    fixed_for_the_control_plane(
        r,
        &[
            ("etc/kubernetes/pki", 0o700),
            ("etc/kubernetes/pki/apiserver.key", 0o600),
            ("etc/kubernetes/pki/scheduler.conf", 0o600),
        ],
    );
}

/// `nodectl audit --fix` (as root) gives each of `want` to the control plane's uid and gid
/// (65534, its static pods' `runAsUser`) with its mode, and the audit then finds nothing.
fn fixed_for_the_control_plane(r: &Path, want: &[(&str, u32)]) {
    use std::os::unix::fs::MetadataExt;
    let (_, _, err) = nodectl(r, &["audit", "--fix"]);
    for (p, mode) in want {
        let m = std::fs::metadata(r.join(p)).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o777),
            (65534, 65534, *mode),
            "{p}: {err}"
        );
    }
    let (rc, out, _) = nodectl(r, &["audit", "--json"]);
    assert_eq!(ids(&out), Vec::<String>::new(), "{out}");
    assert_eq!(rc, 0);
}

#[test]
fn container_linux_is_reported_end_of_life() {
    let d = node(WORKER);
    put(
        d.path(),
        "/etc/os-release",
        b"NAME=\"Container Linux by CoreOS\"\nID=coreos\nVERSION=2512.3.0\n",
        0o644,
    );
    let (rc, out, err) = nodectl(d.path(), &["audit", "--json"]);
    assert_eq!(ids(&out), ["end-of-life-os"], "{out}{err}");
    assert_eq!(rc, 3);
}

/// What a real cluster runs is not a finding: nodectl's own shipped etcd.env (every interface,
/// as Typhoon's, with client certificates required), root-owned keys where the control plane's
/// manifests run as root (a kubeadm-style controller); and the bootstrap token's advice does
/// not break workers that join later.
#[test]
fn a_real_clusters_own_choices_are_not_findings() {
    let d = node("[node]\nrole = \"controller\"\nname = \"controller-0\"\n");
    let r = d.path();
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/butane/fcos-controller.bu"),
    )
    .unwrap();
    let env: String = shipped
        .lines()
        .skip_while(|l| !l.contains("path: /etc/etcd/etcd.env"))
        .filter_map(|l| l.trim().strip_prefix("ETCD_"))
        .map(|l| format!("ETCD_{l}\n"))
        .collect();
    assert!(
        env.contains("ETCD_LISTEN_CLIENT_URLS=https://0.0.0.0:2379"),
        "{env}"
    );
    put(r, "/etc/etcd/etcd.env", env.as_bytes(), 0o644);
    // kubeadm-style: no runAsUser anywhere, keys root's 0600 in a 0700 directory
    let kubeadm = b"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n    command:\n    - kube-apiserver\n    - --authorization-mode=Node,RBAC\n    - --enable-admission-plugins=NodeRestriction\n";
    put(
        r,
        "/etc/kubernetes/manifests/kube-apiserver.yaml",
        kubeadm,
        0o600,
    );
    put(
        r,
        "/etc/kubernetes/pki/apiserver.key",
        b"-----BEGIN EC PRIVATE KEY-----\nMHc=\n-----END EC PRIVATE KEY-----\n",
        0o600,
    );
    chmod(r, "/etc/kubernetes/pki", 0o700);
    let (rc, out, err) = nodectl(r, &["audit", "--json"]);
    assert_eq!(ids(&out), Vec::<String>::new(), "{out}{err}");
    assert_eq!(rc, 0);
    // Typhoon's manifests run as 65534: the same key, owned by another uid, locks them out.
    let typhoon = String::from_utf8_lossy(kubeadm).replace(
        "spec:\n",
        "spec:\n  securityContext:\n    runAsNonRoot: true\n    runAsUser: 65534\n",
    );
    put(
        r,
        "/etc/kubernetes/manifests/kube-apiserver.yaml",
        typhoon.as_bytes(),
        0o600,
    );
    let (_, out, _) = nodectl(r, &["audit", "--json"]);
    assert_eq!(ids(&out), ["control-plane-key-owner"], "{out}");
    // An unbounded bootstrap token: the advice names the workers that join later.
    put(
        r,
        "/etc/kubernetes/manifests/kube-apiserver.yaml",
        b"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n    command:\n    - kube-apiserver\n    - --authorization-mode=Node,RBAC\n    - --enable-admission-plugins=NodeRestriction\n    - --enable-bootstrap-token-auth=true\n",
        0o600,
    );
    put(
        r,
        "/opt/bootstrap/assets/manifests/bootstrap-token.yaml",
        b"apiVersion: v1\nkind: Secret\nstringData:\n  token-id: abcdef\n",
        0o600,
    );
    let (_, out, _) = nodectl(r, &["audit", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "bootstrap-token-unbounded")
        .unwrap()
        .clone();
    let fix = f["fix"].as_str().unwrap();
    assert!(fix.contains("join later") && fix.contains("rotated"), "{f}");
}

/// Issue 51, 3: the audit runs inside nodectld's pass, in trees others can write (a
/// controller's `pki` belongs to uid 65534). A FIFO where it reads a CA, the bootstrap
/// kubeconfig or the kubelet's certificate blocked it for good (an open for reading waits for
/// a writer), and a link to `/dev/zero` read until memory ran out. Now each is refused: the
/// audit ends, with the same findings as with the files absent. (Run under a 1 GiB address
/// space limit and a 60 s hang bound, so the unfixed code fails rather than hangs or floods.)
#[test]
fn a_fifo_or_a_device_where_the_audit_reads_neither_hangs_nor_floods_it() {
    use nix::sys::stat::Mode;
    use std::os::unix::fs::symlink;
    let d = node(WORKER);
    let r = d.path();
    let fifo = |p: &str| {
        let f = r.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        nix::unistd::mkfifo(&f, Mode::from_bits_truncate(0o644)).unwrap();
    };
    fifo("/etc/kubernetes/ca.crt");
    fifo("/etc/kubernetes/kubeconfig");
    fifo("/var/lib/kubelet/pki/kubelet-client-current.pem");
    std::fs::create_dir_all(r.join("etc/kubernetes/pki/etcd")).unwrap();
    symlink("/dev/zero", r.join("etc/kubernetes/pki/ca.crt")).unwrap();
    symlink("/dev/zero", r.join("etc/kubernetes/pki/etcd/ca.crt")).unwrap();
    std::fs::create_dir_all(r.join("etc/etcd")).unwrap();
    symlink("/dev/zero", r.join("etc/etcd/etcd.env")).unwrap();
    let mut child = std::process::Command::new("sh")
        .args(["-c", "ulimit -v 1048576; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_nodectl"))
        .arg("--root")
        .arg(r)
        .args(["audit", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("nodectl audit still running after 60 s (blocked on a FIFO?)");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        status.code().is_some(),
        "killed by a signal ({status}): {stderr}"
    );
    // What a worker with none of these files has: the bootstrap kubeconfig and the kubelet's
    // certificate absent are no findings, nor are CAs it cannot read.
    assert_eq!(ids(&stdout), Vec::<String>::new(), "{stdout}{stderr}");
}
