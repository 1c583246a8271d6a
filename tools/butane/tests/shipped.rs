//! The Butane templates nodectl ships (packaging/butane/*.bu), rendered with the example
//! values and stand-in release values, translated, checked by the upstream spec types and by
//! Debian's `ignition-validate` (spec 3.3.0), and compared field by field; and each kind of
//! breakage those checks exist for is shown to fail them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The stand-in release key: base64 of bytes that are no real key (the configs carry it as given).
const KEY_BASE64: &str = "mDMEbm9kZWN0bCB0ZXN0IGtleSwgbm90IGEgcmVhbCBvbmX/";

/// example.vars and stand-in release values, as release.sh gives them.
fn vars_text() -> String {
    let mut vars = std::fs::read_to_string(repo().join("packaging/butane/example.vars")).unwrap();
    vars.push_str(
        "nodectl_version=9.8.7\nnodectl_url=https://downloads.example.com/nodectl/9.8.7\n",
    );
    for os in ["flatcar", "fcos"] {
        vars.push_str(&format!("nodectl_sysext_{os}_sha512={}\n", "ab".repeat(64)));
    }
    vars.push_str(&format!("nodectl_release_key_base64={KEY_BASE64}\n"));
    vars.push_str("kubeconfig@10=docs/examples/bootstrap-kubeconfig\n");
    vars
}

fn render_with(template: &Path, vars: &str) -> anyhow::Result<String> {
    let vars = nodectl_butane::parse_vars_in(vars, "vars", &repo())?;
    let text = std::fs::read_to_string(template)?;
    nodectl_butane::render(&text, &vars, &template.display().to_string())
}

fn rendered(template: &Path) -> String {
    render_with(template, &vars_text()).unwrap()
}

fn templates() -> Vec<PathBuf> {
    let mut t: Vec<PathBuf> = std::fs::read_dir(repo().join("packaging/butane"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bu"))
        .collect();
    t.sort();
    t
}

fn ignition_validate(ign: &str) -> (bool, String) {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let f = std::env::temp_dir().join(format!("nodectl-butane-{}-{n}.ign", std::process::id()));
    std::fs::write(&f, ign).unwrap();
    let out = Command::new("ignition-validate")
        .arg(&f)
        .output()
        .expect("ignition-validate (Debian package ignition; tests/vm/setup-host.sh installs it)");
    let _ = std::fs::remove_file(&f);
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success() && said.trim().is_empty(), said)
}

#[test]
fn every_shipped_template_translates_checks_and_agrees_with_its_ignition() {
    let files_dir = repo().join("docs/examples");
    let names: Vec<String> = templates()
        .iter()
        .map(|t| t.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "fcos-controller.bu",
            "fcos-worker.bu",
            "flatcar-controller.bu",
            "flatcar-worker.bu"
        ]
    );
    for t in templates() {
        let name = t.display().to_string();
        let bu = rendered(&t);
        let ign = serde_json::to_string_pretty(
            &nodectl_butane::translate(&bu, &files_dir, &name).unwrap(),
        )
        .unwrap();
        let version = nodectl_butane::check(&ign, &name).unwrap();
        nodectl_butane::compare(&bu, &ign, &files_dir).unwrap();
        let want = if name.contains("flatcar") {
            "3.3.0"
        } else {
            "3.4.0"
        };
        assert_eq!(version, want, "{name}");
        if version == "3.3.0" {
            let (ok, said) = ignition_validate(&ign);
            assert!(ok, "{name}: ignition-validate: {said}");
        }
        // what every node config must carry
        for needle in [
            "nodectl-9.8.7-x86-64.raw",
            "sha512-abab",
            "/etc/nodectl/config.d/10-node.toml",
            "/etc/kubernetes/kubeconfig",
        ] {
            assert!(ign.contains(needle), "{name}: no {needle}");
        }
        for glue in [
            "kubelet.path",
            "kubelet.service",
            "chcon",
            "wait-for-dns",
            "mv tls",
        ] {
            assert!(!ign.contains(glue), "{name}: Typhoon glue left: {glue}");
        }
    }
}

/// The entry of the list `doc[section][list]` of a rendered Butane config whose `key` is
/// `value` (a file by its path, a unit by its name).
fn entry(
    bu: &str,
    (section, list): (&str, &str),
    key: &str,
    value: &str,
) -> Option<serde_yaml::Value> {
    let doc: serde_yaml::Value = serde_yaml::from_str(bu).unwrap();
    doc[section][list]
        .as_sequence()?
        .iter()
        .find(|e| e[key].as_str() == Some(value))
        .cloned()
}

/// The inline contents of the file at `path` in a rendered Butane config, if it has one.
fn inline_file(bu: &str, path: &str) -> Option<String> {
    entry(bu, ("storage", "files"), "path", path)
        .map(|f| f["contents"]["inline"].as_str().unwrap().to_string())
}

/// Updates are verified (issue 37, 6): every transfer file, full config and snippet, says
/// `Verify=yes` in `[Transfer]` and nothing else of Verify, its source is the release's https
/// URL, and the config ships the release's key as given where systemd-pull reads the keyring it
/// verifies `SHA256SUMS.gpg` with (`/etc/systemd/import-pubring.gpg`: systemd 254
/// `src/import/pull-common.c`, `verify_gpg()`), in Butane and in the Ignition it translates
/// to; a template rendered without the key fails rather than shipping none.
#[test]
fn every_shipped_transfer_file_verifies_with_the_shipped_key() {
    let mut all = templates();
    let snippets = repo().join("packaging/butane/snippets");
    all.extend(
        std::fs::read_dir(&snippets)
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    assert_eq!(all.len(), 8);
    for t in all {
        let name = t.display().to_string();
        let bu = rendered(&t);
        let conf = inline_file(&bu, "/etc/sysupdate.nodectl.d/nodectl.conf")
            .unwrap_or_else(|| panic!("{name}: no transfer file"));
        let mut section = "";
        let mut verify = Vec::new();
        let mut source_path = None;
        for l in conf.lines().map(str::trim) {
            if l.starts_with('[') {
                section = l;
            } else if l.starts_with("Verify") {
                verify.push((section, l));
            } else if section == "[Source]" && l.starts_with("Path=") {
                source_path = Some(l.to_string());
            }
        }
        assert_eq!(verify, [("[Transfer]", "Verify=yes")], "{name}:\n{conf}");
        let os = if name.contains("flatcar") {
            "flatcar"
        } else {
            "fcos"
        };
        assert_eq!(
            source_path.as_deref(),
            Some(format!("Path=https://downloads.example.com/nodectl/9.8.7/{os}").as_str()),
            "{name}"
        );
        let key = entry(
            &bu,
            ("storage", "files"),
            "path",
            "/etc/systemd/import-pubring.gpg",
        )
        .unwrap_or_else(|| panic!("{name}: no /etc/systemd/import-pubring.gpg"));
        let source = format!("data:;base64,{KEY_BASE64}");
        assert_eq!(
            key["contents"]["source"].as_str(),
            Some(source.as_str()),
            "{name}"
        );
        let ign = nodectl_butane::translate(&bu, &repo().join("docs/examples"), &name).unwrap();
        let file = ign["storage"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == "/etc/systemd/import-pubring.gpg")
            .unwrap();
        assert_eq!(file["contents"]["source"], source.as_str(), "{name}");
        assert_eq!(file["mode"], 0o644, "{name}");
        let without =
            vars_text().replace(&format!("nodectl_release_key_base64={KEY_BASE64}\n"), "");
        let e = render_with(&t, &without).unwrap_err().to_string();
        assert!(
            e.contains("unknown variable 'nodectl_release_key_base64'"),
            "{name}: {e}"
        );
    }
}

/// The kernel modules and sysctls ship in Ignition, so the first boot's systemd-modules-load and
/// systemd-sysctl apply them before nodectld starts, and they must be byte for byte what
/// nodectld's node-files step keeps there: otherwise its first pass rewrites them and restarts
/// both oneshots (the wait issue 18 removed from a fresh node's first pass).
#[test]
fn the_files_systemd_applies_at_boot_ship_as_nodectld_writes_them() {
    use nodectl_units::kubelet::{modules_load_conf, sysctl_conf, MODULES_LOAD_FILE, SYSCTL_FILE};
    for t in templates() {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        let bu = rendered(&t);
        let fcos = name.starts_with("fcos");
        assert_eq!(
            inline_file(&bu, MODULES_LOAD_FILE).as_deref(),
            Some(modules_load_conf().as_str()),
            "{name}: {MODULES_LOAD_FILE}"
        );
        assert_eq!(
            inline_file(&bu, SYSCTL_FILE).as_deref(),
            Some(sysctl_conf(fcos).as_str()),
            "{name}: {SYSCTL_FILE}"
        );
        // Ignition fails its files stage on a file that exists unless told to overwrite it
        let doc: serde_yaml::Value = serde_yaml::from_str(&bu).unwrap();
        for path in [MODULES_LOAD_FILE, SYSCTL_FILE] {
            let entry = doc["storage"]["files"]
                .as_sequence()
                .unwrap()
                .iter()
                .find(|f| f["path"].as_str() == Some(path))
                .unwrap();
            assert_eq!(entry["overwrite"].as_bool(), Some(true), "{name}: {path}");
        }
    }
    // and a difference is caught: FCOS's sysctls are not Flatcar's
    let bu = rendered(&repo().join("packaging/butane/flatcar-worker.bu"));
    assert_ne!(
        inline_file(&bu, SYSCTL_FILE).as_deref(),
        Some(sysctl_conf(true).as_str())
    );
}

/// The snippets for Typhoon's own configs (packaging/butane/snippets/): each renders with the
/// same variables, translates, checks (and, for Flatcar's spec 3.3.0, passes Ignition's own
/// validator), keeps Typhoon's kubelet.service from starting on its own and masks kubelet.path,
/// and carries what nodectld needs that Typhoon's config lacks; a controller's also the layout
/// script that hands the bundle to nodectld.
#[test]
fn every_snippet_translates_and_leaves_kubelet_to_nodectld() {
    let dir = repo().join("packaging/butane/snippets");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    for t in names {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        let bu = rendered(&t);
        let ign = serde_json::to_string_pretty(
            &nodectl_butane::translate(&bu, &repo().join("docs/examples"), &name).unwrap(),
        )
        .unwrap();
        let version = nodectl_butane::check(&ign, &name).unwrap();
        nodectl_butane::compare(&bu, &ign, &repo().join("docs/examples")).unwrap();
        if version == "3.3.0" {
            let (ok, said) = ignition_validate(&ign);
            assert!(ok, "{name}: ignition-validate: {said}");
        }
        // A snippet's files and units are its full config's, entry for entry (the snippets
        // were cut from them): a change to one that misses the other fails here.
        let full = rendered(&repo().join("packaging/butane").join(&name));
        let doc: serde_yaml::Value = serde_yaml::from_str(&bu).unwrap();
        for (list, key) in [
            (("storage", "files"), "path"),
            (("systemd", "units"), "name"),
        ] {
            for e in doc[list.0][list.1].as_sequence().unwrap() {
                let k = e[key].as_str().unwrap();
                if let Some(twin) = entry(&full, list, key, k) {
                    assert_eq!(e, &twin, "{name}: {k} differs from ../{name}'s");
                }
            }
        }
        let units = doc["systemd"]["units"].as_sequence().unwrap();
        let unit = |n: &str| units.iter().find(|u| u["name"] == n).unwrap().clone();
        assert_eq!(
            unit("kubelet.service")["enabled"].as_bool(),
            Some(false),
            "{name}"
        );
        assert_eq!(unit("kubelet.path")["mask"].as_bool(), Some(true), "{name}");
        assert!(
            doc.get("passwd").is_none(),
            "{name}: Typhoon's config has the users"
        );
        let node = inline_file(&bu, "/etc/nodectl/config.d/10-node.toml").unwrap();
        assert!(
            node.contains("cluster_dns = \"10.3.0.10\""),
            "{name}: {node}"
        );
        let layout = inline_file(&bu, "/opt/bootstrap/layout");
        assert_eq!(
            layout.is_some(),
            name.contains("controller"),
            "{name}: the layout script"
        );
        assert_eq!(
            inline_file(&bu, "/etc/zincati/config.d/55-nodectl-fleetlock.toml").is_some(),
            name.starts_with("fcos"),
            "{name}: Zincati's fragment"
        );
    }
}

/// The Typhoon-shaped base the VM merges a snippet over (tests/typhoon/, sysext.sh S1)
/// renders, translates and passes Ignition's validator, so the VM tier fails on the merge, not
/// on its fixture.
#[test]
fn the_typhoon_shaped_base_for_the_merge_test_is_valid_ignition() {
    let t = repo().join("tests/typhoon/flatcar-worker.bu");
    let bu = rendered(&t);
    let ign = serde_json::to_string_pretty(
        &nodectl_butane::translate(&bu, &repo().join("docs/examples"), "base").unwrap(),
    )
    .unwrap();
    assert_eq!(nodectl_butane::check(&ign, "base").unwrap(), "3.3.0");
    let (ok, said) = ignition_validate(&ign);
    assert!(ok, "ignition-validate: {said}");
    assert!(unit(&bu, "kubelet.service")
        .unwrap()
        .contains("--bootstrap-kubeconfig"));
}

/// A unit's contents in a rendered Butane config.
fn unit(bu: &str, name: &str) -> Option<String> {
    entry(bu, ("systemd", "units"), "name", name)
        .and_then(|u| u["contents"].as_str().map(String::from))
}

/// What Typhoon's Terraform flow and the cluster need of a controller config: the layout script
/// its `ssh.tf` runs hands the bundle to nodectld (no `mv`, no `chcon`); etcd waits for the
/// node's name and DNS and for the secrets; bootstrap.service applies nodectl's manifests (the
/// reboot RBAC and Lease policy, the FlowSchema, byte for byte packaging/kubernetes/) after the
/// bundle's.
#[test]
fn a_controller_config_takes_typhoons_bundle_and_ships_the_reboot_manifests() {
    for t in templates() {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        let bu = rendered(&t);
        let layout = inline_file(&bu, "/opt/bootstrap/layout");
        if !name.contains("controller") {
            assert_eq!(layout, None, "{name}");
            assert_eq!(inline_file(&bu, "/opt/bootstrap/nodectl/rbac.yaml"), None);
            continue;
        }
        assert_eq!(
            layout.as_deref(),
            Some("#!/bin/bash -e\nexec /usr/bin/nodectl import assets\n"),
            "{name}"
        );
        for m in ["flowcontrol.yaml", "rbac.yaml", "reboot-lease-policy.yaml"] {
            let shipped =
                std::fs::read_to_string(repo().join("packaging/kubernetes").join(m)).unwrap();
            assert_eq!(
                inline_file(&bu, &format!("/opt/bootstrap/nodectl/{m}")).as_deref(),
                Some(shipped.as_str()),
                "{name}: {m}"
            );
        }
        let apply = inline_file(&bu, "/opt/bootstrap/apply").unwrap();
        assert!(apply.contains("kubectl apply -f /nodectl -R"), "{name}");
        let bootstrap = unit(&bu, "bootstrap.service").unwrap();
        assert!(
            bootstrap.contains("/opt/bootstrap/nodectl:/nodectl:ro"),
            "{name}: {bootstrap}"
        );
        let etcd = unit(&bu, "etcd-member.service").unwrap();
        assert!(
            etcd.contains("ExecStartPre=/usr/bin/nodectl wait node-identity secrets"),
            "{name}: {etcd}"
        );
    }
}

/// Reboots for updates are coordinated by default in what ships: on Fedora CoreOS Zincati is
/// pointed at nodectld's FleetLock endpoint with its role's group (nodectl's reboot.group
/// default: only that group is served), on Flatcar locksmithd is masked (nodectld follows
/// update_engine); no config turns nodectl's reboot strategy off.
#[test]
fn the_shipped_configs_coordinate_reboots_by_default() {
    for t in templates() {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        let bu = rendered(&t);
        let node = inline_file(&bu, "/etc/nodectl/config.d/10-node.toml").unwrap();
        assert!(!node.contains("strategy"), "{name}: {node}");
        let group = if name.contains("controller") {
            "controllers"
        } else {
            "workers"
        };
        if name.starts_with("fcos") {
            let z: toml::Table =
                inline_file(&bu, "/etc/zincati/config.d/55-nodectl-fleetlock.toml")
                    .unwrap_or_else(|| panic!("{name}: no Zincati fragment"))
                    .parse()
                    .unwrap();
            assert_eq!(
                z["updates"]["strategy"].as_str(),
                Some("fleet_lock"),
                "{name}"
            );
            // nodectl's reboot.listen default
            assert_eq!(
                z["updates"]["fleet_lock"]["base_url"].as_str(),
                Some("http://127.0.0.1:9455/"),
                "{name}"
            );
            assert_eq!(z["identity"]["group"].as_str(), Some(group), "{name}");
        } else {
            let doc: serde_yaml::Value = serde_yaml::from_str(&bu).unwrap();
            let masked = doc["systemd"]["units"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(|u| u["name"] == "locksmithd.service" && u["mask"] == true);
            assert!(masked, "{name}: locksmithd not masked");
        }
    }
}

/// containerd's effective configuration for `config` (a config.toml's text), as the real
/// containerd computes it (`containerd --config FILE config dump`; Debian's containerd 1.6).
fn containerd_dump(config: &str) -> toml::Table {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let f = std::env::temp_dir().join(format!(
        "nodectl-containerd-{}-{n}.toml",
        std::process::id()
    ));
    std::fs::write(&f, config).unwrap();
    let out = Command::new("containerd")
        .arg("--config")
        .arg(&f)
        .args(["config", "dump"])
        .output()
        .expect("containerd (Debian package containerd; tests/vm/setup-host.sh installs it)");
    let _ = std::fs::remove_file(&f);
    assert!(
        out.status.success(),
        "containerd config dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().parse().unwrap()
}

/// What kubelet needs of containerd's CRI, from its effective config: the runc runtime with
/// its type (a config that names only `runtimes.runc.options` replaces the whole runc entry
/// and leaves `runtime_type = ""`: containerd#6964, Flatcar's coreos-overlay#1214), the
/// systemd cgroup driver kubelet.yaml names, SELinux labels for containers, and the socket
/// kubelet's `--container-runtime-endpoint` names.
fn cri_problems(dump: &toml::Table) -> Vec<String> {
    let cri = &dump["plugins"]["io.containerd.grpc.v1.cri"];
    let ctd = &cri["containerd"];
    let mut bad = Vec::new();
    let mut want = |what: &str, got: Option<&toml::Value>, v: toml::Value| {
        if got != Some(&v) {
            bad.push(format!("{what} = {got:?}, want {v}"));
        }
    };
    let runc = ctd.get("runtimes").and_then(|r| r.get("runc"));
    want(
        "default_runtime_name",
        ctd.get("default_runtime_name"),
        "runc".into(),
    );
    want(
        "runtimes.runc.runtime_type",
        runc.and_then(|r| r.get("runtime_type")),
        "io.containerd.runc.v2".into(),
    );
    want(
        "runtimes.runc.options.SystemdCgroup",
        runc.and_then(|r| r.get("options"))
            .and_then(|o| o.get("SystemdCgroup")),
        true.into(),
    );
    want("enable_selinux", cri.get("enable_selinux"), true.into());
    want(
        "grpc.address",
        dump.get("grpc").and_then(|g| g.get("address")),
        "/run/containerd/containerd.sock".into(),
    );
    bad
}

/// The FCOS configs' containerd config, as the real containerd reads it, runs pods: runc v2,
/// the systemd cgroup driver, SELinux, kubelet's socket. And the config that shipped before
/// (only `runtimes.runc.options`) is caught.
#[test]
fn containerd_reads_the_shipped_config_as_a_runtime_kubelet_can_use() {
    for t in templates() {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        let bu = rendered(&t);
        let Some(config) = inline_file(&bu, "/etc/containerd/config.toml") else {
            // Flatcar: docker's containerd with its defaults, as Typhoon's Flatcar configs
            assert!(name.starts_with("flatcar"), "{name}: no containerd config");
            continue;
        };
        let bad = cri_problems(&containerd_dump(&config));
        assert!(bad.is_empty(), "{name}: {bad:?}");
    }
    let before = "version = 2\nroot = \"/var/lib/containerd\"\nstate = \"/run/containerd\"\n\
        [plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_selinux = true\n\
        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n";
    let bad = cri_problems(&containerd_dump(before));
    assert!(
        bad.iter()
            .any(|b| b.starts_with("runtimes.runc.runtime_type = Some(String(\"\"))")),
        "{bad:?}"
    );
}

#[test]
fn an_unknown_key_or_a_wrong_spec_version_fails_the_checks() {
    let t = repo().join("packaging/butane/flatcar-worker.bu");
    let bu = rendered(&t);
    let files_dir = repo().join("docs/examples");
    let ign =
        serde_json::to_string_pretty(&nodectl_butane::translate(&bu, &files_dir, "w").unwrap())
            .unwrap();
    let unknown = ign.replacen("\"mode\": 420", "\"mode\": 420, \"modee\": 420", 1);
    let e = nodectl_butane::check(&unknown, "w.ign")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("w.ign: UnusedKey(\"$.storage.files."), "{e}");
    let (ok, said) = ignition_validate(&unknown);
    assert!(!ok && said.contains("Unused key modee"), "{said}");
    for bad in ["3.9.0", "3.2.0"] {
        let wrong = ign.replace("\"3.3.0\"", &format!("\"{bad}\""));
        assert!(
            nodectl_butane::check(&wrong, "w.ign").is_err(),
            "{bad} accepted"
        );
    }
    let (ok, _) = ignition_validate(&ign.replace("\"3.3.0\"", "\"3.9.0\""));
    assert!(!ok);
    // a Butane key the subset does not know is refused, not dropped
    let e = nodectl_butane::translate(
        &bu.replace("      mask: true", "      mask: true\n      enable: true"),
        &files_dir,
        "w.bu",
    );
    assert_eq!(
        e.unwrap_err().to_string(),
        "w.bu: systemd.units[1]: unknown or unsupported key 'enable'"
    );
}

#[test]
fn the_elf_check_refuses_a_library_or_glibc_version_the_oses_lack() {
    let script = repo().join("packaging/check-elf.sh");
    let curl = Command::new(&script).arg("/usr/bin/gpgv").output().unwrap();
    assert!(!curl.status.success());
    let said = String::from_utf8_lossy(&curl.stderr);
    assert!(said.contains("needs lib"), "{said}");
    let me = std::env::current_exe().unwrap();
    let ceiling = Command::new(&script)
        .arg(&me)
        .env("ELF_GLIBC_MAX", "2.2.5")
        .output()
        .unwrap();
    assert!(!ceiling.status.success());
    assert!(String::from_utf8_lossy(&ceiling.stderr).contains("(ceiling 2.2.5)"));
}
