//! packaging/release.sh's checks and signing (issue 37, 6), without its build: the URL and key
//! checks run before the build (shown by running release.sh itself, which stops there), and its
//! signing functions (sourced from release.sh) give a `SHA256SUMS.gpg` that gpg, called as
//! systemd-pull 254 calls it, accepts with the exported key and refuses for a changed
//! `SHA256SUMS` or another key. systemd-sysupdate itself checks a signed release in the VM
//! (tests/vm/suites/sysext.sh S4).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A private gpg home with two signing keys (no passphrase), `a@example.com` and
/// `b@example.com`; its agent is stopped when dropped.
struct Gpg(tempfile::TempDir);

impl Gpg {
    fn new() -> Gpg {
        let d = tempfile::Builder::new().prefix("gpg").tempdir().unwrap();
        let g = Gpg(d);
        for uid in ["release a <a@example.com>", "other b <b@example.com>"] {
            let out = g
                .cmd("gpg")
                .args(["--batch", "--passphrase", "", "--quick-gen-key", uid])
                .args(["ed25519", "sign", "never"])
                .output()
                .expect("gpg (Debian package gpg; tests/vm/setup-host.sh installs it)");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        g
    }

    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("GNUPGHOME", self.0.path());
        c
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = self.cmd("gpgconf").args(["--kill", "gpg-agent"]).status();
    }
}

/// release.sh ARGS (OUTDIR a scratch directory) with only the given NODECTL_* variables (and
/// GNUPGHOME if `gpg`), a `cargo` first in PATH that records being run and fails: release.sh
/// reaching its build shows as `built` (and costs nothing).
fn release(args: &[&str], env: &[(&str, &str)], gpg: Option<&Gpg>) -> (i32, String, String) {
    let scratch = tempfile::tempdir().unwrap();
    let bin = scratch.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let marker = scratch.path().join("cargo-ran");
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        format!("#!/bin/sh\ntouch '{}'\nexit 99\n", marker.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = match gpg {
        Some(g) => g.cmd("bash"),
        None => {
            let mut c = Command::new("bash");
            c.env_remove("GNUPGHOME");
            c
        }
    };
    let outdir = scratch.path().join("dist");
    let mut all: Vec<&str> = args.to_vec();
    if all.is_empty() || all == ["--check"] {
        all.extend(["", outdir.to_str().unwrap()]);
    }
    c.arg(repo().join("packaging/release.sh")).args(&all);
    for v in ["NODECTL_URL", "NODECTL_SIGNING_KEY", "NODECTL_UNSIGNED"] {
        c.env_remove(v);
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    c.env("PATH", path).envs(env.iter().copied());
    let Output {
        status,
        stdout,
        mut stderr,
    } = c.output().unwrap();
    if marker.exists() {
        stderr.extend_from_slice(b"\n(built)");
    }
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[test]
fn release_sh_refuses_a_url_not_https_and_a_release_without_a_key_before_building() {
    // refused by release.sh itself, before its first step (the build)
    for url in [
        "http://downloads.example.com/nodectl/1",
        "ftp://x/y",
        "https://",
        "https://a b/c",
    ] {
        let (rc, out, err) = release(
            &[],
            &[("NODECTL_URL", url), ("NODECTL_UNSIGNED", "1")],
            None,
        );
        assert_eq!(rc, 2, "{url}: {out}{err}");
        assert!(
            err.contains(&format!("NODECTL_URL='{url}' is not an https:// URL")),
            "{url}: {err}"
        );
        assert!(!err.contains("(built)"), "{url}: {err}");
    }
    let (rc, out, err) = release(&[], &[], None);
    assert_eq!(rc, 2, "{out}{err}");
    assert!(
        err.contains("no signing key: set NODECTL_SIGNING_KEY=")
            && err.contains("NODECTL_UNSIGNED=1"),
        "{err}"
    );
    assert!(!err.contains("(built)"), "{err}");
    // and with a key it goes on to the build (here a cargo that fails)
    let gpg = Gpg::new();
    let (rc, _, err) = release(&[], &[("NODECTL_SIGNING_KEY", "a@example.com")], Some(&gpg));
    assert!(rc != 0 && err.contains("(built)"), "{err}");
    // --check runs the same checks and stops: an unsigned test build is allowed, and says what
    // it means; a key must name exactly one secret key
    let (rc, out, err) = release(&["--check"], &[("NODECTL_UNSIGNED", "1")], None);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        err.contains("systemd-sysupdate installs nothing from it"),
        "{err}"
    );
    let (rc, out, err) = release(
        &["--check"],
        &[("NODECTL_SIGNING_KEY", "a@example.com")],
        Some(&gpg),
    );
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("checks passed"), "{out}");
    let (rc, _, err) = release(
        &["--check"],
        &[("NODECTL_SIGNING_KEY", "example.com")],
        Some(&gpg),
    );
    assert_eq!(rc, 2);
    assert!(err.contains("names 2 secret keys"), "{err}");
    let (rc, _, err) = release(
        &["--check"],
        &[("NODECTL_SIGNING_KEY", "c@example.com")],
        Some(&gpg),
    );
    assert_eq!(rc, 2);
    assert!(err.contains("no such secret key"), "{err}");
    let (rc, _, err) = release(
        &["--check"],
        &[
            ("NODECTL_SIGNING_KEY", "a@example.com"),
            ("NODECTL_URL", "http://x/y"),
        ],
        Some(&gpg),
    );
    assert_eq!(rc, 2);
    assert!(err.contains("NODECTL_URL='http://x/y'"), "{err}");
}

#[test]
fn release_sh_signs_sha256sums_so_gpg_as_systemd_pull_runs_it_accepts_only_that() {
    let gpg = Gpg::new();
    let d = tempfile::tempdir().unwrap();
    let script = r#"
set -u
. "$RELEASE_SH"
cd "$DIR"
printf 'abc  nodectl-1.0.0-x86-64.raw\n' >SHA256SUMS
NODECTL_SIGNING_KEY=a@example.com release_check_key || exit 10
release_export_key key.gpg || exit 11
release_sign . || exit 12
# binary, as systemd-pull fetches it (SHA256SUMS.gpg): an OpenPGP signature packet, no armor
od -An -tx1 -N1 SHA256SUMS.gpg | grep -qE '^ (88|89|c2)$' || exit 13
release_verify . key.gpg || exit 14
cp SHA256SUMS good && printf 'abd  nodectl-1.0.0-x86-64.raw\n' >SHA256SUMS
release_verify . key.gpg 2>/dev/null && exit 15
cp good SHA256SUMS
NODECTL_SIGNING_KEY=b@example.com release_check_key || exit 16
release_sign . || exit 17
release_verify . key.gpg 2>/dev/null && exit 18
rm SHA256SUMS.gpg
release_verify . key.gpg 2>/dev/null && exit 19
# a rotation: the keyring ships a's and b's keys, and a release signed by b verifies with it
NODECTL_SIGNING_KEY=a@example.com NODECTL_RELEASE_KEYS=b@example.com release_check_key || exit 20
NODECTL_RELEASE_KEYS=b@example.com release_export_key both.gpg || exit 21
NODECTL_SIGNING_KEY=b@example.com release_check_key && release_sign . || exit 22
release_verify . both.gpg || exit 23
NODECTL_SIGNING_KEY=a@example.com NODECTL_RELEASE_KEYS=c@example.com release_check_key 2>/dev/null && exit 24
echo ok
"#;
    let out = gpg
        .cmd("bash")
        .arg("-c")
        .arg(script)
        .env("RELEASE_SH", repo().join("packaging/release.sh"))
        .env("DIR", d.path())
        .output()
        .unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "ok"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
