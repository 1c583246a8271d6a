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

/// A binary with packed relative relocations (`-z pack-relative-relocs`, which would shrink
/// nodectld's RSS by ~400 KiB) needs glibc 2.36 through the `GLIBC_ABI_DT_RELR` marker, not
/// through a numbered symbol version: the check must refuse it under the 2.34 ceiling (a
/// Flatcar LTS node would not start it).
#[test]
fn a_binary_needing_glibc_abi_dt_relr_is_refused_under_the_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("relr.c");
    // Pointers in data: relative relocations in a PIE.
    std::fs::write(
        &src,
        "static const char *a[] = {\"x\", \"y\", \"z\"};\nint main(void) { return a[0][0] == 'x' ? 0 : 1; }\n",
    )
    .unwrap();
    let bin = dir.path().join("relr");
    let cc = Command::new("cc")
        .args(["-O1", "-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("cc runs (the linker Rust uses here)");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/check-elf.sh");
    let out = Command::new(script).arg(&bin).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("needs GLIBC_ABI_DT_RELR (glibc 2.36; ceiling 2.34)"),
        "{said}"
    );
    // Under a ceiling that has it, the same binary passes.
    let ok = Command::new(script)
        .env("ELF_GLIBC_MAX", "2.36")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
