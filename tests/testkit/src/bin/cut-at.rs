//! `cut-at BUNDLE INBOX WHEN ACTION DIR...`: the crash and power-cut campaigns' trigger
//! (tests/vm/suites/crash.sh, powercut.sh). Delivers BUNDLE into INBOX as an operator's copy
//! would, durably (written to a hidden name, fsynced, renamed to `assets`, the directory fsynced),
//! waits for the pass to start placing it (the first hidden entry, a temp file or directory,
//! created under any DIR, watched recursively with inotify), then does ACTION when WHEN says:
//!   `MS`        after a delay drawn uniformly from [0, MS) milliseconds
//!   `temp:N`    right after the K-th hidden entry the pass creates, K drawn uniformly from
//!               1..=N (N: `temps_before_rename` of a reference pass): while the pass writes
//!               its temp files, before it renames the first of them into place
//! ACTION:
//!   `observe`   nothing (WHEN is ignored); waits for the bundle to leave the inbox and prints,
//!               from the first temp: when the first file was renamed into place
//!               (`first_renamed_ms=`), when the burst of renames that began then ended (the
//!               last rename before the pass created another hidden entry or the bundle left:
//!               `placed_ms=`), when the last entry was renamed (`renamed_ms=`, later steps'
//!               files too), when the bundle left (`placing_ms=`), and how many hidden entries
//!               were created before the first rename (`temps_before_rename=`): the windows
//!               the campaigns draw from
//!   `kill PID`  SIGKILL to PID (nodectld's main process)
//!   `sysrq`     `b` to /proc/sysrq-trigger: an immediate reboot, no sync (a power cut to what
//!               was only in the page cache)
//! Prints `started_ms=` (rename to first temp), `delay_ms=` (first temp to the action), `seed=`
//! (the draw's: `CUT_AT_SEED` draws it again) and, with `temp:N`, `at_temp=K`, flushed and fsynced: after a kill (the share's fsync would delay it),
//! before a power cut (which loses nothing the host's share was sent). Exits 3 when placing never
//! starts within 30 s (or the K-th temp never comes).

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

struct Watch {
    ino: Inotify,
    dirs: HashMap<WatchDescriptor, PathBuf>,
}

impl Watch {
    fn tree(&mut self, dir: &Path) {
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_ONLYDIR;
        if let Ok(wd) = self.ino.add_watch(dir, flags) {
            self.dirs.insert(wd, dir.to_path_buf());
        }
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                self.tree(&e.path());
            }
        }
    }

    /// Waits until `want(dir, name)` holds for an event, at most until `deadline`.
    fn until(
        &mut self,
        deadline: Instant,
        want: &mut dyn FnMut(&Path, &str, AddWatchFlags) -> bool,
    ) -> bool {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let ms = left.as_millis().min(1000) as u16;
            let mut fds = [PollFd::new(self.ino.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::from(ms));
            let Ok(events) = self.ino.read_events() else {
                continue;
            };
            let mut hit = false;
            for ev in events {
                let (Some(dir), Some(name)) = (self.dirs.get(&ev.wd).cloned(), ev.name) else {
                    continue;
                };
                let name = name.to_string_lossy().into_owned();
                if ev.mask.contains(AddWatchFlags::IN_ISDIR)
                    && ev
                        .mask
                        .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
                {
                    self.tree(&dir.join(&name));
                }
                hit |= want(&dir, &name, ev.mask);
            }
            if hit {
                return true;
            }
        }
    }
}

/// The draw (a fraction in [0, 1)): SplitMix64 of `CUT_AT_SEED` when it is set (the campaigns
/// set it from the test command's seed and the trial's number, so `SEED=N` draws the same
/// instants again), else from /dev/urandom; and the seed, printed as `seed=`.
fn fraction() -> (f64, u64) {
    let seed = match std::env::var("CUT_AT_SEED") {
        Ok(s) => s.trim().parse::<u64>().expect("CUT_AT_SEED: a number"),
        Err(_) => {
            let mut b = [0u8; 8];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
                .expect("/dev/urandom");
            u64::from_le_bytes(b)
        }
    };
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 / (1u64 << 53) as f64, seed)
}

fn deliver(bundle: &Path, inbox: &Path) -> std::io::Result<()> {
    let tmp = inbox.join(".incoming-cut-at");
    let data = std::fs::read(bundle)?;
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, inbox.join("assets"))?;
    std::fs::File::open(inbox)?.sync_all()
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    // stdout is a file on the host's share in the VM: on the host before the cut
    let _ = nix::unistd::fsync(std::os::fd::AsRawFd::as_raw_fd(&std::io::stdout()));
}

/// When the action comes.
enum When {
    /// After a delay drawn from [0, ms).
    Within(f64),
    /// Right after the K-th hidden entry, K drawn from 1..=N.
    Temp(u64),
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: cut-at BUNDLE INBOX (MS|temp:N) (observe|kill PID|sysrq) DIR...");
        std::process::exit(2)
    };
    if args.len() < 5 {
        usage();
    }
    let (bundle, inbox) = (PathBuf::from(&args[0]), PathBuf::from(&args[1]));
    let when = match args[2].strip_prefix("temp:") {
        Some(n) => match n.parse() {
            Ok(n) if n > 0 => When::Temp(n),
            _ => usage(),
        },
        None => When::Within(args[2].parse().unwrap_or_else(|_| usage())),
    };
    let (action, pid, dirs) = match args[3].as_str() {
        "kill" => {
            let pid: i32 = args[4].parse().unwrap_or_else(|_| usage());
            ("kill", pid, &args[5..])
        }
        a @ ("observe" | "sysrq") => (a, 0, &args[4..]),
        _ => usage(),
    };
    let ino = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).expect("inotify");
    let mut w = Watch {
        ino,
        dirs: HashMap::new(),
    };
    for d in dirs {
        w.tree(Path::new(d));
    }
    w.tree(&inbox);
    let inbox_c = inbox.clone();
    if let Err(e) = deliver(&bundle, &inbox) {
        eprintln!(
            "cut-at: delivering {} into {}: {e}",
            bundle.display(),
            inbox.display()
        );
        std::process::exit(1);
    }
    let t0 = Instant::now();
    // a hidden entry of the pass (a temp file or directory), not the inbox's
    let hidden = |d: &Path, n: &str, m: AddWatchFlags| {
        n.starts_with('.') && d != inbox_c.as_path() && m.contains(AddWatchFlags::IN_CREATE)
    };
    // a file renamed into place (a directory the pass made under a temp name is renamed in
    // before the files it holds are written: not the end of the writes)
    let renamed = |d: &Path, n: &str, m: AddWatchFlags| {
        d != inbox_c.as_path()
            && !n.starts_with('.')
            && m.contains(AddWatchFlags::IN_MOVED_TO)
            && !m.contains(AddWatchFlags::IN_ISDIR)
    };
    let mut temps = 0u64;
    let mut first_temp = PathBuf::new();
    let mut first = |d: &Path, n: &str, m: AddWatchFlags| {
        let h = hidden(d, n, m);
        if h && temps == 0 {
            first_temp = d.join(n);
        }
        temps += h as u64;
        h
    };
    if !w.until(t0 + Duration::from_secs(30), &mut first) {
        say("cut-at: placing did not start within 30 s");
        std::process::exit(3);
    }
    let t1 = Instant::now();
    let started = format!(
        "started_ms={:.1} first_temp={}",
        (t1 - t0).as_secs_f64() * 1e3,
        first_temp.display()
    );
    let ms = |t: Instant| (t - t1).as_secs_f64() * 1e3;
    if action == "observe" {
        // first rename, the end of its burst, the last rename, before the bundle leaves
        let (mut first_renamed, mut placed, mut last) = (None::<Instant>, None::<Instant>, t1);
        let mut first_name = PathBuf::new();
        let mut gone = |d: &Path, n: &str, m: AddWatchFlags| {
            let now = Instant::now();
            if renamed(d, n, m) {
                if first_renamed.is_none() {
                    first_name = d.join(n);
                }
                first_renamed.get_or_insert(now);
                last = now;
            } else if hidden(d, n, m) {
                if first_renamed.is_none() {
                    temps += 1;
                } else if placed.is_none() {
                    placed = Some(last); // the burst ended with the last rename before this
                }
            }
            d == inbox_c.as_path()
                && n == "assets"
                && !m.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
        };
        let done = w.until(t1 + Duration::from_secs(60), &mut gone);
        let first_renamed = first_renamed.unwrap_or(last);
        let placed = placed.unwrap_or(last);
        say(&format!(
            "{started} first_renamed_ms={:.1} first_renamed={} placed_ms={:.1} renamed_ms={:.1} placing_ms={:.1} temps_before_rename={temps} bundle_gone={}",
            ms(first_renamed),
            first_name.display(),
            ms(placed),
            ms(last),
            ms(Instant::now()),
            done as u8
        ));
        std::process::exit(if done { 0 } else { 4 });
    }
    let at = match when {
        When::Within(window) => {
            let (f, seed) = fraction();
            let delay = Duration::from_secs_f64(f * window / 1e3);
            std::thread::sleep((t1 + delay).saturating_duration_since(Instant::now()));
            format!(" seed={seed}")
        }
        When::Temp(n) => {
            // K in 1..=n; the batch that held the first may have held more
            let (f, seed) = fraction();
            let k = 1 + ((f * n as f64) as u64).min(n - 1);
            if temps < k {
                let mut nth = |d: &Path, n: &str, m: AddWatchFlags| {
                    temps += hidden(d, n, m) as u64;
                    temps >= k
                };
                if !w.until(t1 + Duration::from_secs(30), &mut nth) {
                    say(&format!("{started} cut-at: only {temps} of {k} temps came"));
                    std::process::exit(3);
                }
            }
            format!(" at_temp={k} temps_seen={temps} seed={seed}")
        }
    };
    let said = format!("{started} delay_ms={:.1}{at}", ms(Instant::now()));
    if action == "kill" {
        let r = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        // said after the kill: the fsync of the host's share would delay it
        say(&said);
        if let Err(e) = r {
            eprintln!("cut-at: kill {pid}: {e}");
            std::process::exit(1);
        }
    } else {
        // said before the cut, which loses nothing the host's share was sent
        say(&said);
        let r = std::fs::write("/proc/sysrq-trigger", b"b");
        eprintln!("cut-at: the reboot did not come: {r:?}");
        std::process::exit(1);
    }
}
