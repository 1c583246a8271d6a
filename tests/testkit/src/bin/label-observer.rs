//! label-observer OUT ROOT...: watches ROOTs recursively (inotify) and, for every entry that
//! appears, reads its SELinux label at once (first sight) and appends `label<TAB>path` to OUT.
//! New directories are watched as they appear and their existing entries read. Writes OUT.ready
//! once the initial watches are in place; stops when OUT.stop exists.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

struct Observer {
    ino: Inotify,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    out: std::fs::File,
    labeler: nodectl_selinux::Labeler,
}

impl Observer {
    /// The entry's own label (lgetfilecon), read the moment it is seen.
    fn record(&mut self, p: &Path) {
        let l = match self.labeler.get(p) {
            Ok(Some(c)) => c.to_string(),
            Ok(None) => "<none>".into(),
            // Gone before it could be read (a temp file already renamed): nothing was seen.
            Err(_) if std::fs::symlink_metadata(p).is_err() => "<gone>".into(),
            Err(e) => format!("<error: {e}>"),
        };
        let _ = writeln!(self.out, "{l}\t{}", p.display());
    }

    fn watch_tree(&mut self, dir: &Path, record: bool) {
        let flags =
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_ONLYDIR;
        if let Ok(wd) = self.ino.add_watch(dir, flags) {
            self.dirs.insert(wd, dir.to_path_buf());
        }
        // Entries created before the watch: read them now (still their first sight here).
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let p = e.path();
                if record {
                    self.record(&p);
                }
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    self.watch_tree(&p, record);
                }
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: label-observer OUT ROOT...");
        std::process::exit(2);
    }
    let out_path = PathBuf::from(&args[0]);
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out_path)
        .expect("open OUT");
    let ino = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).expect("inotify");
    let host = nodectl_selinux::HostSelinux::detect(Path::new("/")).expect("selinuxfs");
    let labeler = nodectl_selinux::Labeler::new(Path::new("/"), &host);
    if let Some(why) = labeler.skipped() {
        eprintln!("label-observer: labels cannot be read here: {why}");
        std::process::exit(2);
    }
    let mut o = Observer {
        ino,
        dirs: HashMap::new(),
        out,
        labeler,
    };
    for r in &args[1..] {
        o.watch_tree(Path::new(r), false);
    }
    std::fs::write(format!("{}.ready", out_path.display()), "").expect("ready file");
    let stop = PathBuf::from(format!("{}.stop", out_path.display()));
    while !stop.exists() {
        let fd = o.ino.as_fd();
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(200u16));
        let events = match o.ino.read_events() {
            Ok(ev) => ev,
            Err(_) => continue,
        };
        for ev in events {
            let (Some(dir), Some(name)) = (o.dirs.get(&ev.wd).cloned(), ev.name) else {
                continue;
            };
            let p = dir.join(name);
            o.record(&p);
            if ev.mask.contains(AddWatchFlags::IN_ISDIR) {
                o.watch_tree(&p, true);
            }
        }
    }
}
