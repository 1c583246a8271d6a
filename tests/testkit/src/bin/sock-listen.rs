//! `sock-listen PATH...`: binds a listening Unix socket at each PATH and exits, leaving the
//! socket files, as a CSI driver or device plugin creates its socket. For the VM tier's
//! `/var/lib/kubelet` checks (a plugin container with its own MCS pair).

fn main() {
    let mut failed = false;
    for p in std::env::args().skip(1) {
        match std::os::unix::net::UnixListener::bind(&p) {
            Ok(_) => println!("listening on {p}"),
            Err(e) => {
                println!("cannot bind {p}: {e}");
                failed = true;
            }
        }
    }
    std::process::exit(i32::from(failed));
}
