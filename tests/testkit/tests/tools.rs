//! The testkit's small tools, as the guests run them (bench.sh's `rename-now`, controller.sh's
//! `sock-listen`). Being an integration test, this also has `cargo test --workspace --no-run`
//! build every binary of the package: run-tests.sh takes the guests' tools from that build
//! instead of building them again with another feature set.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

#[test]
fn rename_now_renames_and_prints_the_clock_read_before_the_rename() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (dir.path().join("bundle.tmp"), dir.path().join("bundle"));
    std::fs::write(&from, "x").unwrap();
    let before = now_us();
    let out = Command::new(env!("CARGO_BIN_EXE_rename-now"))
        .args([&from, &to])
        .output()
        .unwrap();
    let after = now_us();
    assert!(out.status.success(), "{out:?}");
    assert!(!from.exists());
    assert_eq!(std::fs::read_to_string(&to).unwrap(), "x");
    let at: u128 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(before <= at && at <= after, "{before} <= {at} <= {after}");
}

#[test]
fn rename_now_names_both_paths_when_the_rename_fails() {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_rename-now"))
        .args([&from, &dir.path().join("to")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing") && err.contains("to:"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "no time printed for a rename that did not happen"
    );
    let usage = Command::new(env!("CARGO_BIN_EXE_rename-now"))
        .arg("one")
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
}

#[test]
fn sock_listen_leaves_a_socket_at_each_path_and_fails_for_one_it_cannot_bind() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("reg.sock"), dir.path().join("csi.sock"));
    let out = Command::new(env!("CARGO_BIN_EXE_sock-listen"))
        .args([&a, &b])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for p in [&a, &b] {
        assert!(
            std::fs::metadata(p).unwrap().file_type().is_socket(),
            "{p:?}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_sock-listen"))
        .arg(dir.path().join("no/such/dir.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cannot bind"));
}
