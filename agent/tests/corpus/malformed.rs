//! Generated and fixed bad input for every parser that takes input from outside the process
//! (compiled into the crate as a unit-test module, `lib.rs`, so crate-private parsers are
//! reachable; kept outside `src/` so the architecture test does not count it).
//!
//! - A fixed corpus: each malformed case and the exact error it gets, in `malformed.expected`
//!   (`NODECTL_BLESS=1` rewrites it; review the diff). Every error names its file (file-based
//!   inputs) and none contains a planted secret (`SECRET`).
//! - Property-based generation (proptest): arbitrary and mutated inputs never panic, finish in
//!   bounded time, and never echo a planted secret. `PROPTEST_CASES` sets the count (CI: the
//!   default of this file; a longer run: docs/testing.md).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::root::Root;

/// A planted secret: no error may contain it.
const SECRET: &str = "SECRET-0123456789abcdef";

fn config_case(fragment: &[u8]) -> String {
    let d = tempfile::tempdir().unwrap();
    let root = Root::new(d.path());
    std::fs::create_dir_all(root.path("/etc/nodectl/config.d")).unwrap();
    std::fs::create_dir_all(root.path("/proc/sys/kernel")).unwrap();
    std::fs::write(root.path("/proc/sys/kernel/hostname"), "node-1\n").unwrap();
    std::fs::write(root.path("/etc/nodectl/config.d/10-node.toml"), fragment).unwrap();
    let host = crate::host::Host::generic();
    match crate::load::settings(&root, &host) {
        Ok(_) => "(accepted)".into(),
        Err(e) => e
            .to_string()
            .replace(&d.path().display().to_string(), "<root>"),
    }
}

fn os_release_case(text: &[u8]) -> String {
    let d = tempfile::tempdir().unwrap();
    let root = Root::new(d.path());
    std::fs::create_dir_all(root.path("/etc")).unwrap();
    std::fs::write(root.path("/etc/os-release"), text).unwrap();
    match crate::host::Host::detect(&root) {
        Ok(h) => format!("(accepted: {:?})", h.os),
        Err(e) => e
            .to_string()
            .replace(&d.path().display().to_string(), "<root>"),
    }
}

fn kubeconfig_case(text: &str) -> String {
    match crate::kubeconfig::parse(text, Path::new("/etc/kubernetes/kubeconfig")) {
        Ok(_) => "(accepted)".into(),
        Err(e) => e.to_string(),
    }
}

fn bundle_case(bytes: &[u8]) -> String {
    match crate::steps::bundle::parse(bytes, Path::new("/var/lib/nodectl/inbox/assets")) {
        Ok(r) => format!("(accepted: {} records)", r.len()),
        Err(e) => e.to_string(),
    }
}

fn pem_case(bytes: &[u8]) -> String {
    match crate::credentials::store::validity(bytes) {
        Ok(_) => "(accepted)".into(),
        Err(e) => format!("{e:#}"),
    }
}

fn fleetlock_case(method: &str, path: &str, header: Option<&str>, body: &str) -> String {
    let m = hyper::Method::from_bytes(method.as_bytes()).unwrap();
    match crate::reboot::fleetlock::check(&m, path, header, body.as_bytes()) {
        Ok((_, p)) => format!("(accepted: id {:?} group {:?})", p.id, p.group),
        Err(r) => format!("{} {}: {}", r.status.as_u16(), r.kind, r.value),
    }
}

fn window_case(s: &str) -> String {
    match crate::util::window::parse(s) {
        Ok(_) => "(accepted)".into(),
        Err(e) => e.to_string(),
    }
}

fn machine_id_case(s: &str) -> String {
    match crate::reboot::coordinator::zincati_id(s) {
        Some(_) => "(accepted)".into(),
        None => "not 32 hexadecimal digits".into(),
    }
}

fn lease_entry_case(key: &str, value: &str) -> String {
    let mut l = k8s_openapi::api::coordination::v1::Lease::default();
    l.metadata.annotations = Some([(key.to_string(), value.to_string())].into());
    let (slots, bad) = crate::reboot::lease::slots_of(&l);
    format!("{} holders, ignored: {bad:?}", slots.holders.len())
}

fn kubeconfig(user: &str) -> String {
    format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user:\n{user}\n")
}

/// Every case: (name, the error or outcome).
fn corpus() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |name: &str, got: String| out.push((name.to_string(), got));
    // config fragments
    for (name, frag) in [
        ("config/unknown-table", "[nodes]\nrole = \"worker\"\n"),
        ("config/unknown-key", "[node]\nrol = \"worker\"\n"),
        ("config/wrong-type", "[node]\nrole = 1\n"),
        ("config/bad-role", "[node]\nrole = \"master\"\n"),
        (
            "config/bad-name",
            "[node]\nrole = \"worker\"\nname = \"Bad_Name\"\n",
        ),
        (
            "config/bad-label",
            "[node]\nrole = \"worker\"\nlabels = [\"=x\"]\n",
        ),
        (
            "config/bad-taint",
            "[node]\nrole = \"worker\"\ntaints = [\"k=v\"]\n",
        ),
        ("config/not-toml", "[node\nrole = \"worker\"\n"),
        (
            "config/duplicate-key",
            "[node]\nrole = \"worker\"\nrole = \"controller\"\n",
        ),
        (
            "config/reboot-strategy",
            "[node]\nrole = \"worker\"\n[reboot]\nstrategy = \"sometimes\"\n",
        ),
        (
            "config/reboot-listen-not-loopback",
            "[node]\nrole = \"worker\"\n[reboot]\nlisten = \"0.0.0.0:9455\"\n",
        ),
        (
            "config/reboot-slots-zero",
            "[node]\nrole = \"worker\"\n[reboot]\ngroup_slots = 0\n",
        ),
        (
            "config/reboot-window",
            "[node]\nrole = \"worker\"\n[reboot]\nwindows = [\"Funday 25:00 60m\"]\n",
        ),
        (
            "config/reboot-time-zone",
            "[node]\nrole = \"worker\"\n[reboot]\ntime_zone = \"Mars/Olympus\"\n",
        ),
        (
            "config/credentials-check-negative",
            "[node]\nrole = \"worker\"\n[kubelet]\ncredentials_check_secs = -1\n",
        ),
        (
            "config/heartbeat-too-long",
            "[node]\nrole = \"worker\"\n[kubelet]\ncondition_heartbeat_secs = 999999\n",
        ),
        (
            "config/kubeconfig-relative",
            "[node]\nrole = \"worker\"\n[kubelet]\nkubeconfig = \"relative/kubeconfig\"\n",
        ),
        (
            "config/relabel-kubelet-tree",
            "[node]\nrole = \"worker\"\n[selinux]\nrelabel = [\"/var/lib/kubelet\"]\n",
        ),
        (
            "config/bad-image",
            "[node]\nrole = \"worker\"\n[kubelet]\nimage = \"not an image\"\n",
        ),
    ] {
        add(name, config_case(frag.as_bytes()));
    }
    add(
        "config/nul-bytes",
        config_case(b"[node]\nrole = \"wor\0ker\"\n"),
    );
    add(
        "config/not-utf8",
        config_case(b"[node]\nrole = \"\xff\xfe\"\n"),
    );
    add("config/too-large", config_case(&vec![b'#'; (1 << 20) + 1]));
    // os-release
    add("os-release/no-id", os_release_case(b"NAME=Something\n"));
    add(
        "os-release/container-linux",
        os_release_case(b"ID=coreos\nVERSION_ID=2512.3.0\n"),
    );
    add("os-release/binary", os_release_case(b"\x00\x01\x02\xff"));
    add("os-release/empty", os_release_case(b""));
    add(
        "os-release/too-large",
        os_release_case(&vec![b'#'; (64 << 10) + 1]),
    );
    // kubeconfigs
    add(
        "kubeconfig/not-yaml",
        kubeconfig_case("apiVersion: v1\nkind: [Config\n"),
    );
    add("kubeconfig/a-list", kubeconfig_case("- a\n- b\n"));
    add("kubeconfig/empty", kubeconfig_case(""));
    add(
        "kubeconfig/clusters-a-string",
        kubeconfig_case("apiVersion: v1\nkind: Config\nclusters: nope\n"),
    );
    add(
        "kubeconfig/token-wrong-type",
        kubeconfig_case(&kubeconfig(&format!("    token: [\"{SECRET}\"]"))),
    );
    add(
        "kubeconfig/token-bad-indent",
        kubeconfig_case(&kubeconfig(&format!("  token: {SECRET}\n   x: 1"))),
    );
    add(
        "kubeconfig/key-data-number",
        kubeconfig_case(&kubeconfig("    client-key-data: 12")),
    );
    add(
        "kubeconfig/tab-indent",
        kubeconfig_case("apiVersion: v1\n\tkind: Config\n"),
    );
    add("kubeconfig/alias-bomb", kubeconfig_case(&format!("a: &a [\"{SECRET}\",\"{SECRET}\"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d]\n")));
    add(
        "kubeconfig/long-line",
        kubeconfig_case(&format!("apiVersion: {}\n", "v".repeat(100_000))),
    );
    // bundles
    add("bundle/marker-without-path", bundle_case(b"#####\nx\n"));
    add("bundle/two-paths", bundle_case(b"##### a b\nx\n"));
    add(
        "bundle/dot-dot",
        bundle_case(b"##### ../../etc/shadow\nx\n"),
    );
    add("bundle/absolute", bundle_case(b"##### /etc/shadow\nx\n"));
    add(
        "bundle/duplicate",
        bundle_case(b"##### tls/k8s/ca.crt\nx\n##### tls/k8s/ca.crt\ny\n"),
    );
    add(
        "bundle/not-utf8",
        bundle_case(b"##### tls/k8s/ca.crt\n\xff\xfe\n"),
    );
    add("bundle/empty", bundle_case(b""));
    add(
        "bundle/content-before-marker",
        bundle_case(format!("{SECRET}\n##### tls/k8s/ca.crt\nx\n").as_bytes()),
    );
    add(
        "bundle/unknown-destination",
        bundle_case(b"##### nowhere/file\nx\n"),
    );
    add(
        "bundle/too-large",
        bundle_case(&vec![b'#'; crate::steps::bundle::MAX_BUNDLE_BYTES + 1]),
    );
    add(
        "bundle/nul-in-path",
        bundle_case(b"##### tls/k8s/c\0a.crt\nx\n"),
    );
    // PEM certificates (the node's certificate chain)
    add("pem/empty", pem_case(b""));
    add("pem/garbage", pem_case(SECRET.as_bytes()));
    add(
        "pem/private-key",
        pem_case(
            format!(
                "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
                "QUJD"
            )
            .as_bytes(),
        ),
    );
    add(
        "pem/truncated",
        pem_case(b"-----BEGIN CERTIFICATE-----\nMIIB"),
    );
    add(
        "pem/not-der",
        pem_case(b"-----BEGIN CERTIFICATE-----\nQUJDREVGRw==\n-----END CERTIFICATE-----\n"),
    );
    add(
        "pem/bad-base64",
        pem_case(
            format!("-----BEGIN CERTIFICATE-----\n{SECRET}!!\n-----END CERTIFICATE-----\n")
                .as_bytes(),
        ),
    );
    // machine-id (Zincati's FleetLock id is derived from it)
    for (name, s) in [
        ("machine-id/empty", ""),
        ("machine-id/31-hex", "0123456789abcdef0123456789abcde"),
        ("machine-id/not-hex", "0123456789abcdef0123456789abcdeg"),
        ("machine-id/33-hex", "0123456789abcdef0123456789abcdef0"),
    ] {
        add(name, machine_id_case(s));
    }
    // FleetLock requests
    add(
        "fleetlock/get",
        fleetlock_case("GET", "/v1/pre-reboot", Some("true"), "{}"),
    );
    add(
        "fleetlock/unknown-path",
        fleetlock_case("POST", "/v1/reboot-now", Some("true"), "{}"),
    );
    add(
        "fleetlock/no-header",
        fleetlock_case("POST", "/v1/pre-reboot", None, "{}"),
    );
    add(
        "fleetlock/header-false",
        fleetlock_case("POST", "/v1/pre-reboot", Some("false"), "{}"),
    );
    add(
        "fleetlock/body-not-json",
        fleetlock_case("POST", "/v1/pre-reboot", Some("true"), "client_params"),
    );
    add(
        "fleetlock/no-client-params",
        fleetlock_case("POST", "/v1/pre-reboot", Some("true"), "{\"id\":\"x\"}"),
    );
    add(
        "fleetlock/empty-id",
        fleetlock_case(
            "POST",
            "/v1/steady-state",
            Some("true"),
            "{\"client_params\":{\"id\":\"\",\"group\":\"default\"}}",
        ),
    );
    add(
        "fleetlock/bad-group",
        fleetlock_case(
            "POST",
            "/v1/steady-state",
            Some("true"),
            "{\"client_params\":{\"id\":\"x\",\"group\":\"a b\"}}",
        ),
    );
    add(
        "fleetlock/path-escapes",
        fleetlock_case("POST", "/v1/pre-reboot\n\u{1b}[31m", Some("true"), "{}"),
    );
    // reboot windows
    for (name, s) in [
        ("window/day", "Funday 23:30 60m"),
        ("window/hour", "Sat 24:00 60m"),
        ("window/length", "Sat 23:00 0m"),
        ("window/too-long", "Sat 23:00 100000m"),
        ("window/missing-length", "Sat 23:00"),
    ] {
        add(name, window_case(s));
    }
    // Lease entries (one annotation per holder)
    add(
        "lease/not-json",
        lease_entry_case("w1.reboot-holders.nodectl.io/slot", SECRET),
    );
    add(
        "lease/other-node",
        lease_entry_case(
            "w1.reboot-holders.nodectl.io/slot",
            "{\"id\":\"x\",\"node\":\"w2\",\"boot\":\"b\",\"since\":1,\"renewed\":1}",
        ),
    );
    add(
        "lease/negative-since",
        lease_entry_case(
            "w1.reboot-holders.nodectl.io/slot",
            "{\"id\":\"x\",\"node\":\"w1\",\"boot\":\"b\",\"since\":-1,\"renewed\":1}",
        ),
    );
    out
}

#[test]
fn every_malformed_input_gets_its_exact_error_naming_the_file_and_no_secret() {
    let got = corpus();
    assert!(got.len() >= 60, "{} cases", got.len());
    let text: String = got.iter().map(|(n, e)| format!("=== {n}\n{e}\n")).collect();
    for (n, e) in &got {
        // secrets are planted where credentials go (kubeconfigs, PEM, bundle content)
        assert!(!e.contains("SECRET"), "{n} echoes the planted secret: {e}");
        let file_based = ["config/", "os-release/", "kubeconfig/", "bundle/"];
        if file_based.iter().any(|p| n.starts_with(p)) && !e.starts_with('(') {
            assert!(e.contains('/'), "{n}: the error names no file: {e}");
        }
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/malformed.expected");
    if std::env::var_os("NODECTL_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if want != text {
        let first = text
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "the corpus' errors changed (NODECTL_BLESS=1 rewrites {}); first difference at line {}:\n got: {}\nwant: {}",
            path.display(),
            first + 1,
            text.lines().nth(first).unwrap_or(""),
            want.lines().nth(first).unwrap_or("")
        );
    }
}

/// Each call ends within this (a parser that loops or blows up fails here).
const BOUND: Duration = Duration::from_millis(500);

fn bounded<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let r = f();
    assert!(start.elapsed() < BOUND, "{what} took {:?}", start.elapsed());
    r
}

mod generated {
    use super::*;
    use proptest::prelude::*;

    fn planted() -> impl Strategy<Value = String> {
        // text that mixes the parsers' own syntax with a planted secret
        let pieces = prop::sample::select(vec![
            "#####",
            " ",
            "\n",
            "\t",
            "..",
            "/",
            "tls/k8s/ca.crt",
            ":",
            "- ",
            "  ",
            "{",
            "}",
            "[",
            "]",
            "\"",
            "=",
            "apiVersion: v1",
            "kind: Config",
            "users:",
            "token: ",
            SECRET,
            "-----BEGIN CERTIFICATE-----",
            "-----END CERTIFICATE-----",
            "&a",
            "*a",
            "\u{0}",
            "client_params",
            "id",
            "group",
            "60m",
            "Sat",
            "23:30",
        ]);
        prop::collection::vec(pieces, 0..64).prop_map(|v| v.concat())
    }

    proptest! {
        // 512 cases, or PROPTEST_CASES where it asks for more (`tests/run-tests.sh --full`); the
        // seed is PROPTEST_RNG_SEED, which the test command sets from its printed SEED.
        #![proptest_config(ProptestConfig { cases: ProptestConfig::default().cases.max(512), ..ProptestConfig::default() })]

        #[test]
        fn kubeconfigs_never_panic_nor_echo_a_secret(s in planted()) {
            let e = bounded("kubeconfig::parse", || kubeconfig_case(&s));
            prop_assert!(!e.contains("SECRET"), "{}", e);
        }

        #[test]
        fn bundles_never_panic_nor_echo_content(s in planted(), raw in prop::collection::vec(any::<u8>(), 0..4096)) {
            let e = bounded("bundle::parse", || bundle_case(s.as_bytes()));
            // an error may quote a record's path, never its content
            let in_a_path = s.lines().any(|l| l.starts_with("#####") && l.contains(SECRET));
            prop_assert!(in_a_path || !e.contains(SECRET), "{}", e);
            bounded("bundle::parse (bytes)", || bundle_case(&raw));
        }

        #[test]
        fn pem_fleetlock_windows_and_machine_ids_never_panic(s in planted(), raw in prop::collection::vec(any::<u8>(), 0..4096)) {
            let e = bounded("validity", || pem_case(s.as_bytes()));
            prop_assert!(!e.contains("SECRET"), "{}", e);
            bounded("validity (bytes)", || pem_case(&raw));
            bounded("fleetlock::check", || fleetlock_case("POST", "/v1/pre-reboot", Some("true"), &s));
            bounded("window::parse", || window_case(&s));
            bounded("zincati_id", || machine_id_case(&s));
            bounded("lease entry", || lease_entry_case("w1.reboot-holders.nodectl.io/slot", &s));
        }

        #[test]
        fn config_fragments_and_os_release_never_panic(s in planted()) {
            // (config values are not credentials: an error may quote the bad value)
            bounded("config", || config_case(s.as_bytes()));
            bounded("os-release", || os_release_case(s.as_bytes()));
        }
    }
}
