//! The real Prometheus tools on a real nodectld's metrics file (Debian's `prometheus` package
//! for `promtool`, `prometheus-node-exporter` for node_exporter; tests/vm/setup-host.sh installs
//! both). Missing tools fail the test, naming the package: a tier never skips silently.

#![allow(dead_code)] // (each test crate uses a part)

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `promtool check metrics` on the file: its exit status and what it said.
pub fn promtool_check(file: &Path) -> (bool, String) {
    let mut c = Command::new("promtool");
    c.args(["check", "metrics"])
        .stdin(std::fs::File::open(file).unwrap());
    promtool(c)
}

/// `promtool check rules` on the rules file: its exit status and what it said.
pub fn promtool_check_rules(file: &Path) -> (bool, String) {
    let mut c = Command::new("promtool");
    c.args(["check", "rules"]).arg(file);
    promtool(c)
}

/// Runs a promtool command: its exit status and what it said (stdout, then stderr).
fn promtool(mut c: Command) -> (bool, String) {
    let out = c
        .output()
        .expect("promtool (Debian package prometheus; tests/vm/setup-host.sh installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// A process of the test, killed when dropped.
pub struct Running {
    pub child: std::process::Child,
    pub addr: std::net::SocketAddr,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// node_exporter with only its textfile collector on `dir`, serving until dropped. Its socket
/// is made here and handed over as systemd would (`--web.systemd-socket`: fd 3, `LISTEN_FDS`,
/// `LISTEN_PID` set by the shell that execs it), so no port is chosen, dropped and bound again.
pub fn node_exporter(dir: &Path) -> Running {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let fd = l.as_raw_fd();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(
            "LISTEN_PID=$$ LISTEN_FDS=1 exec prometheus-node-exporter --web.systemd-socket \
             --collector.disable-defaults --collector.textfile \
             --collector.textfile.directory=\"$0\"",
        )
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec (dup2, fcntl).
    unsafe {
        cmd.pre_exec(move || {
            if fd == 3 {
                let flags = libc::fcntl(3, libc::F_GETFD);
                libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            } else if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    assert!(
        Path::new("/usr/bin/prometheus-node-exporter").exists(),
        "prometheus-node-exporter (Debian package; tests/vm/setup-host.sh installs it)"
    );
    let child = cmd.spawn().unwrap();
    drop(l);
    Running { child, addr }
}

/// The real Prometheus (Debian's package), scraping `target` every second and evaluating
/// `rules` (a rules file's YAML) every second, its data in `dir`; serving on loopback until
/// dropped. Prometheus 2.42 takes no systemd socket: a free port is chosen and bound again.
pub fn prometheus(dir: &Path, target: std::net::SocketAddr, rules: &str) -> Running {
    assert!(
        Path::new("/usr/bin/prometheus").exists(),
        "prometheus (Debian package prometheus; tests/vm/setup-host.sh installs it)"
    );
    std::fs::write(dir.join("rules.yml"), rules).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [rules.yml]\n\
             scrape_configs:\n  - job_name: node\n    static_configs: [{{targets: [\"{target}\"]}}]\n"
        ),
    )
    .unwrap();
    let (ok, said) = promtool_check_rules(&dir.join("rules.yml"));
    assert!(ok, "promtool check rules: {said}");
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("prometheus");
    Running { child, addr }
}

/// GET `path` of `addr` over HTTP/1.0: the status line's code and the body.
pub fn get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())?;
    let mut r = String::new();
    s.read_to_string(&mut r)?;
    let code = r.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = r
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Ok((code, body))
}

/// node_exporter with only its textfile collector on `dir`, scraped once: the exposition.
pub fn node_exporter_scrape(dir: &Path) -> String {
    let mut ne = node_exporter(dir);
    let addr = ne.addr;
    let start = Instant::now();
    let body = loop {
        // (the socket listens from here: a connection waits in its backlog until node_exporter
        // accepts it)
        let mut s = match std::net::TcpStream::connect(addr) {
            Ok(s) => s,
            Err(e) => {
                let _ = ne.child.kill();
                let mut err = String::new();
                let _ = ne
                    .child
                    .stderr
                    .take()
                    .map(|mut e| e.read_to_string(&mut err));
                panic!("node_exporter's socket: {e}; it said: {}", err);
            }
        };
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        if r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200") {
            break r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "node_exporter did not answer: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(ne);
    body
}
