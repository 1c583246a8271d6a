//! Tier 1 (a process of its own: the umask is process-wide): made under nodectld's umask
//! (UMask=0077 in its unit), the pass lock's /run/nodectl is still 0755, as /run is, so other
//! users' `nodectl` can read /run/nodectl/config.d (the nspawn suite's "nobody cannot free a
//! slot" read "Permission denied" there before).

use std::os::unix::fs::PermissionsExt as _;

#[test]
fn the_directory_the_pass_lock_makes_is_readable_whatever_the_umask() {
    let d = tempfile::tempdir().unwrap();
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let l = nodectl::fsio::lock::try_pass_lock(&nodectl::root::Root::new(d.path()));
    nix::sys::stat::umask(old);
    assert!(l.unwrap().is_some());
    for dir in ["run", "run/nodectl"] {
        let mode = std::fs::metadata(d.path().join(dir))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755, "{dir}");
    }
    let lock = std::fs::metadata(d.path().join("run/nodectl/pass.lock")).unwrap();
    assert_eq!(lock.permissions().mode() & 0o777, 0o600);
}
