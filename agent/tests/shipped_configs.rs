//! The shipped Butane templates, rendered with the variables Typhoon's modules pass (AWS's and
//! bare metal's, by Typhoon's names: docs/install.md), translated to Ignition, and the files
//! Ignition would write put in a scratch root: what nodectld then makes of that node (its name,
//! kubelet's flags, the bootstrap kubeconfig or its absence).

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The template rendered with example.vars plus `extra` (NAME=VALUE lines) and translated.
fn ignition(template: &str, extra: &str) -> serde_json::Value {
    let mut vars = std::fs::read_to_string(repo().join("packaging/butane/example.vars")).unwrap();
    vars.push_str("nodectl_version=9.8.7\nnodectl_url=https://downloads.example.com/n\n");
    vars.push_str(&format!(
        "nodectl_sysext_fcos_sha512={h}\nnodectl_sysext_flatcar_sha512={h}\n",
        h = "ab".repeat(64)
    ));
    vars.push_str(&format!("nodectl_release_key_base64={KEY_BASE64}\n"));
    vars.push_str(extra);
    let vars = nodectl_butane::parse_vars_in(&vars, "vars", &repo()).unwrap();
    let path = repo().join("packaging/butane").join(template);
    let bu =
        nodectl_butane::render(&std::fs::read_to_string(&path).unwrap(), &vars, template).unwrap();
    nodectl_butane::translate(&bu, &repo().join("docs/examples"), template).unwrap()
}

/// The stand-in release key (bytes that are no real key) and its base64, as release.sh passes it.
const KEY: &[u8] = b"\x98\x33\x04nodectl test key, not a real one\xff";
const KEY_BASE64: &str = "mDMEbm9kZWN0bCB0ZXN0IGtleSwgbm90IGEgcmVhbCBvbmX/";

/// Standard base64 (RFC 4648, padded), as Ignition decodes a `data:;base64,` URL.
fn base64(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {s}"),
        };
        acc = ((acc << 6) | u32::from(v)) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// RFC 2397 `data:` URL's bytes: percent-encoded (as the translator writes inline contents) or
/// base64 (`data:;base64,`, the release key's form in the templates).
fn data_url(u: &str) -> Vec<u8> {
    if let Some(b) = u.strip_prefix("data:;base64,") {
        return base64(b);
    }
    let s = u.strip_prefix("data:,").expect("a data: URL");
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The inline files of an Ignition config: (path, bytes).
fn files(ign: &serde_json::Value) -> Vec<(String, Vec<u8>)> {
    ign["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| {
            let src = f["contents"]["source"].as_str()?;
            src.starts_with("data:")
                .then(|| (f["path"].as_str().unwrap().to_string(), data_url(src)))
        })
        .collect()
}

/// A scratch root with what Ignition writes of `ign` under /etc (the rest, binaries and
/// sysext images, is not nodectld's input), the kernel's hostname as systemd sets it at boot
/// from /etc/hostname (or `fallback`), DNS, the OS's os-release.
fn node(ign: &serde_json::Value, fallback: &str) -> tempfile::TempDir {
    let d = scratch("");
    let r = d.path();
    for (p, bytes) in files(ign) {
        if !p.starts_with("/etc/") {
            continue;
        }
        let dest = r.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest, bytes).unwrap();
    }
    let hostname =
        std::fs::read_to_string(r.join("etc/hostname")).unwrap_or_else(|_| fallback.to_string());
    std::fs::create_dir_all(r.join("proc/sys/kernel")).unwrap();
    std::fs::write(r.join("proc/sys/kernel/hostname"), hostname).unwrap();
    d
}

/// kubelet's arguments in the unit nodectld wrote (one word per line, as rendered).
fn kubelet_words(r: &Path) -> String {
    std::fs::read_to_string(r.join("etc/systemd/system/kubelet.service")).unwrap()
}

/// An AWS worker as Typhoon's workers module calls its template: the bootstrap kubeconfig
/// inline (indent(10, ...)), node_labels and node_taints joined with commas, cloud_provider,
/// and nodectl's provider_id "aws"; no domain_name. The node takes its name from the kernel,
/// starts afterburn for the provider id, and kubelet gets every label and taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_worker_from_typhoons_variables_comes_up_as_typhoons_would() {
    let api = nodectl_apiserver_double::Double::start(Default::default())
        .await
        .unwrap();
    let kc = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kc.path(), api.bootstrap_kubeconfig(TOKEN)).unwrap();
    let ign = ignition(
        "fcos-worker.bu",
        &format!(
            "kubeconfig@10={}\nnode_labels=example.com/pool=blue,node.kubernetes.io/tier=gold\n\
             node_taints=dedicated=gpu:NoSchedule,spot:PreferNoSchedule\n\
             cloud_provider=external\nprovider_id=aws\ncluster_dns_service_ip=10.9.0.10\n",
            kc.path().display()
        ),
    );
    let paths: Vec<String> = files(&ign).into_iter().map(|(p, _)| p).collect();
    assert!(paths.contains(&"/etc/kubernetes/kubeconfig".to_string()));
    assert!(!paths.contains(&"/etc/hostname".to_string()), "{paths:?}");
    let d = node(&ign, "ip-10-0-1-7.ec2.internal");
    let r = d.path();
    // afterburn's file, as the service nodectld starts writes it
    std::fs::create_dir_all(r.join("run/metadata")).unwrap();
    std::fs::write(
        r.join("run/metadata/afterburn"),
        "AFTERBURN_AWS_AVAILABILITY_ZONE=us-east-1a\nAFTERBURN_AWS_INSTANCE_ID=i-0123\n",
    )
    .unwrap();
    let (rc, out, err) = nodectl(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    let unit = kubelet_words(r);
    for want in [
        "--node-labels=example.com/pool=blue",
        "--node-labels=node.kubernetes.io/tier=gold",
        "--register-with-taints=dedicated=gpu:NoSchedule,spot:PreferNoSchedule",
        "--cloud-provider=external",
        "--provider-id=aws:///${AFTERBURN_AWS_AVAILABILITY_ZONE}/${AFTERBURN_AWS_INSTANCE_ID}",
    ] {
        assert!(unit.contains(want), "{want}:\n{unit}");
    }
    assert!(!unit.contains("--hostname-override"), "{unit}");
    let yaml = std::fs::read_to_string(r.join("etc/kubernetes/kubelet.yaml")).unwrap();
    assert!(yaml.contains("clusterDNS:\n  - 10.9.0.10\n"), "{yaml}");
    let (_, st, _) = nodectl(r, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&st).unwrap();
    assert_eq!(
        v["settings"]["node_name"], "ip-10-0-1-7.ec2.internal",
        "{st}"
    );
}

/// A bare-metal controller as Typhoon's bare-metal module calls its template: domain_name, no
/// kubeconfig (it comes over SSH), no cloud. The node is named after domain_name (and the
/// kernel has that name from /etc/hostname), and it waits for the bootstrap kubeconfig.
#[test]
fn a_bare_metal_controller_from_typhoons_variables_waits_for_its_kubeconfig_over_ssh() {
    let ign = ignition(
        "flatcar-controller.bu",
        "domain_name=node1.example.com\netcd_domain=node1.example.com\n",
    );
    let paths: Vec<String> = files(&ign).into_iter().map(|(p, _)| p).collect();
    assert!(
        !paths.contains(&"/etc/kubernetes/kubeconfig".to_string()),
        "{paths:?}"
    );
    let d = node(&ign, "localhost");
    let r = d.path();
    assert_eq!(
        std::fs::read_to_string(r.join("etc/hostname")).unwrap(),
        "node1.example.com"
    );
    let (_, out, _) = nodectl(r, &["plan", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let step = |id: &str| {
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    let identity = step("node-identity");
    assert_eq!(identity["state"], "converged", "{identity}");
    assert!(
        identity["detail"]
            .as_str()
            .unwrap()
            .contains("node name node1.example.com"),
        "{identity}"
    );
    let bootstrap = step("bootstrap-kubeconfig");
    assert_eq!(bootstrap["state"], "waiting", "{bootstrap}");
}

/// Every config writes the release's key, byte for byte once Ignition decodes it, where
/// systemd-pull reads the keyring it checks `SHA256SUMS.gpg` with, and a transfer file that
/// requires that check (`Verify=yes`; issue 37, 6).
#[test]
fn every_config_writes_the_release_key_and_a_transfer_file_that_requires_it() {
    assert_eq!(base64(KEY_BASE64), KEY);
    for t in [
        "fcos-controller.bu",
        "fcos-worker.bu",
        "flatcar-controller.bu",
        "flatcar-worker.bu",
    ] {
        let files = files(&ignition(t, ""));
        let file = |p: &str| files.iter().find(|(q, _)| q == p).map(|(_, b)| b.clone());
        assert_eq!(
            file("/etc/systemd/import-pubring.gpg").as_deref(),
            Some(KEY),
            "{t}"
        );
        let conf =
            String::from_utf8(file("/etc/sysupdate.nodectl.d/nodectl.conf").unwrap()).unwrap();
        let verify: Vec<&str> = conf.lines().filter(|l| l.starts_with("Verify")).collect();
        assert_eq!(verify, ["Verify=yes"], "{t}: {conf}");
    }
}
