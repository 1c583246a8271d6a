//! relabel-bench [FILES] [DIR]: nodectl's relabel against `chcon -R` on the same tree, on a host
//! with SELinux. Builds DIR (default /var/tmp/relabel-bench) with FILES files (default 20000) in
//! directories of 200, then times, best of 3 rounds:
//!   changed:   every entry carries another label; `chcon -R -u system_u -t container_file_t -l s0`
//!              vs nodectl's relabel_tree to system_u:object_r:container_file_t:s0
//!   unchanged: the tree is already right; the same two again
//! nodectl's side is what nodectld runs: a relabel Tracker per tree. "changed" is a fresh
//! tracker's first check (a full scan that writes every label); "unchanged" is the same tracker's
//! next check with nothing changed in between (it reads only entries inotify saw change: none).
//! A full scan of an already-right tree (what `nodectl apply` from the command line does) is
//! timed too.
//! Prints the ratios, unrounded, with their targets (>= 4x changed, >= 8x unchanged, >= 8x for a
//! full scan of an unchanged tree), met or not, and table rows for docs/testing.md. The exit
//! status says whether it ran and relabeled right (every check's counts asserted), never whether
//! a target was met: targets are judged in the benchmark's report (issue 50).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nodectl_selinux::relabel::{relabel_tree, Tracker};
use nodectl_selinux::{Context, HostSelinux, Labeler};

fn build_tree(dir: &Path, files: usize) -> usize {
    let _ = std::fs::remove_dir_all(dir);
    let mut entries = 1;
    for i in 0..files {
        let sub = dir.join(format!("d{:04}", i / 200));
        if i % 200 == 0 {
            std::fs::create_dir_all(&sub).expect("mkdir");
            entries += 1;
        }
        std::fs::write(sub.join(format!("f{i:06}")), b"x").expect("write");
        entries += 1;
    }
    entries
}

fn set_all(labeler: &Labeler, dir: &Path, ctx: &Context) {
    let r = relabel_tree(labeler, dir, ctx, false);
    assert!(r.errors.is_empty(), "{:?}", r.errors.first());
}

fn chcon(dir: &Path) -> Duration {
    let t = Instant::now();
    let st = Command::new("chcon")
        .args(["-R", "-u", "system_u", "-t", "container_file_t", "-l", "s0"])
        .arg(dir)
        .status()
        .expect("run chcon");
    assert!(st.success(), "chcon failed");
    t.elapsed()
}

fn timed(t: &mut Tracker, labeler: &Labeler, entries: usize, changed: bool) -> Duration {
    let start = Instant::now();
    let r = t.check(labeler, false);
    let d = start.elapsed();
    assert!(r.errors.is_empty(), "{:?}", r.errors.first());
    if changed {
        assert_eq!(
            (r.changed as usize, r.full_scan),
            (entries, true),
            "first check"
        );
    } else {
        assert_eq!(
            (r.changed, r.full_scan),
            (0, false),
            "next check, nothing changed"
        );
    }
    d
}

fn main() {
    let mut args = std::env::args().skip(1);
    let files: usize = args
        .next()
        .map(|a| a.parse().expect("FILES"))
        .unwrap_or(20_000);
    let dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "/var/tmp/relabel-bench".into()),
    );
    let host = HostSelinux::detect(Path::new("/")).expect("selinuxfs");
    let labeler = Labeler::new(Path::new("/"), &host);
    if let Some(why) = labeler.skipped() {
        eprintln!("relabel-bench needs SELinux: {why}");
        std::process::exit(2);
    }
    let entries = build_tree(&dir, files);
    let want = Context::shared_container_file();
    let wrong: Context = "system_u:object_r:var_t:s0".parse().expect("ctx");
    let (mut cc, mut oc, mut cs, mut os, mut full) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        set_all(&labeler, &dir, &wrong);
        cc.push(chcon(&dir));
        cs.push(chcon(&dir));
        set_all(&labeler, &dir, &wrong);
        let mut t = Tracker::new(&dir, &want).expect("inotify");
        oc.push(timed(&mut t, &labeler, entries, true));
        os.push(timed(&mut t, &labeler, entries, false));
        let start = Instant::now();
        let r = relabel_tree(&labeler, &dir, &want, false);
        full.push(start.elapsed());
        assert_eq!(r.changed, 0);
    }
    let best = |v: &[Duration]| v.iter().min().copied().expect("rounds");
    let (cc, oc, cs, os) = (best(&cc), best(&oc), best(&cs), best(&os));
    // Targets (docs/testing.md): changed >= 4x, unchanged >= 8x, a full scan of an unchanged
    // tree >= 8x, each reported met or not. Ratios are printed unrounded (6 significant digits)
    // and judged as computed.
    let met = |ok: bool| if ok { "met" } else { "not met" };
    let mut table = Vec::new();
    let f = best(&full);
    for (case, c, o, target) in [
        ("changed", cc, oc, 4.0),
        ("unchanged", cs, os, 8.0),
        ("full scan of an unchanged tree", cs, f, 8.0),
    ] {
        let ratio = c.as_secs_f64() / o.as_secs_f64();
        println!(
            "FIGURE relabel {entries} entries, {case:9}: chcon -R {:.3} s, nodectl {:.3} s -> {ratio:.6}x faster than chcon -R (target >= {target}x: {})",
            c.as_secs_f64(),
            o.as_secs_f64(),
            met(ratio >= target),
        );
        table.push(format!(
            "| relabel {entries} entries, {case} | nodectl {:.3} s | chcon -R {:.3} s | {ratio:.6}x, target >= {target}x: {} |",
            o.as_secs_f64(),
            c.as_secs_f64(),
            met(ratio >= target)
        ));
    }
    for row in table {
        println!("{row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("relabel-bench: ran, every check's counts as expected");
}
