//! The binaries as built here must run on Fedora CoreOS and Flatcar: packaging/check-elf.sh
//! (libraries both ship, glibc symbol-version ceiling) passes on nodectld and nodectl, so a
//! dependency that links a new library or needs a newer glibc fails here, not on a node.
//! (packaging/release.sh runs the same check on the stripped release binaries.)

use std::process::Command;

#[test]
fn nodectld_and_nodectl_link_only_what_fcos_and_flatcar_ship() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/check-elf.sh");
    let out = Command::new(script)
        .args([
            env!("CARGO_BIN_EXE_nodectld"),
            env!("CARGO_BIN_EXE_nodectl"),
        ])
        .output()
        .expect("packaging/check-elf.sh runs (needs readelf, Debian binutils)");
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(said.matches(": ok (GLIBC_").count(), 2, "{said}");
}
