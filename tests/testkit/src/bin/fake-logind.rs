//! fake-logind LOG: owns `org.freedesktop.login1` on the system bus in place of systemd-logind
//! (the nspawn tier stops that one), so a test sees the reboot nodectld asks for without the
//! machine rebooting. `Manager.Reboot(interactive)` appends `reboot interactive=<b>` to LOG;
//! `Manager.ListInhibitors` answers the lines of LOG.inhibitors (`what|who|why|mode`, read at
//! each call: a test adds and removes inhibitors while it runs), as logind does.

use std::io::Write as _;
use std::path::PathBuf;

struct Manager {
    log: PathBuf,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    fn reboot(&self, interactive: bool) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        writeln!(f, "reboot interactive={interactive}").expect("log");
    }

    #[allow(clippy::type_complexity)]
    fn list_inhibitors(&self) -> Vec<(String, String, String, String, u32, u32)> {
        let path = self.log.with_extension("inhibitors");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f.len() == 4).then(|| (f[0].into(), f[1].into(), f[2].into(), f[3].into(), 0, 1))
            })
            .collect()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> zbus::Result<()> {
    let log = PathBuf::from(std::env::args().nth(1).expect("usage: fake-logind LOG"));
    let _conn = zbus::connection::Builder::system()
        .name("org.freedesktop.login1")
        .serve_at("/org/freedesktop/login1", Manager { log })
        .build()
        .await?;
    println!("fake-logind: serving org.freedesktop.login1");
    std::future::pending::<()>().await;
    Ok(())
}
