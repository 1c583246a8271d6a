//! Who is at the other end of a loopback TCP connection: the client's socket, asked of the
//! kernel by its four addresses (`NETLINK_SOCK_DIAG`, one exact `inet_diag` request: no table
//! read, however many sockets the node has), with its state, the uid that owns it and the
//! cgroup of the process that made it. FleetLock has no authentication; this is how nodectld
//! serves Zincati only: a process's uid is not enough (a root process may `setuid` to Zincati's
//! before `socket()`), the cgroup says which unit's process made the socket, and a socket no
//! longer established (closed, in `TIME_WAIT`: uid 0, no inode) is nobody's. These are the
//! kernel's sockets, not the node's files: never through a sysroot.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP, TCP_ESTABLISHED};
use netlink_packet_sock_diag::inet::nlas::Nla;
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_packet_utils::nla::Nla as _;
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket};

/// `INET_DIAG_CGROUP_ID` (include/uapi/linux/inet_diag.h): the cgroup v2 id of the socket's
/// creator, filled by `inet_diag_msg_attrs_fill` (net/ipv4/inet_diag.c) for a full socket.
const INET_DIAG_CGROUP_ID: u16 = 21;
/// The kernel answers at once; a reply later than this is treated as none.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// The client's socket as the kernel has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    pub uid: u32,
    /// The socket is established (a `TIME_WAIT` or closing one belongs to nobody).
    pub established: bool,
    /// The cgroup (v2 id: its directory's inode number) the socket was made in.
    pub cgroup: Option<u64>,
}

/// The client socket `peer` connected to `local` (both as the server sees the connection);
/// `None` when the kernel has no such socket (it closed meanwhile).
pub(crate) fn owner(local: SocketAddr, peer: SocketAddr) -> std::io::Result<Option<Owner>> {
    let (local, peer) = (canonical(local), canonical(peer));
    // An IPv4 client's socket, or a dual-stack one that reached an IPv4 listener.
    let mut families = vec![family(&peer)];
    if let (IpAddr::V4(_), IpAddr::V4(_)) = (peer.ip(), local.ip()) {
        families.push(AF_INET6);
    }
    for f in families {
        if let Some(o) = ask(f, peer, local)? {
            return Ok(Some(o));
        }
    }
    Ok(None)
}

fn family(a: &SocketAddr) -> u8 {
    if a.is_ipv4() {
        AF_INET
    } else {
        AF_INET6
    }
}

/// IPv4-mapped IPv6 addresses as IPv4 (a dual-stack socket's view of an IPv4 peer).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// As an `AF_INET6` socket sees an IPv4 address: `::ffff:a.b.c.d`.
fn as_family(ip: IpAddr, family: u8) -> IpAddr {
    match (ip, family) {
        (IpAddr::V4(v4), f) if f == AF_INET6 => IpAddr::V6(v4.to_ipv6_mapped()),
        (ip, _) => ip,
    }
}

/// One exact `SOCK_DIAG_BY_FAMILY` request for the socket whose local address is `from` and
/// remote `to` (`inet_diag_dump_one_icsk`: looked up by its addresses, no dump).
fn ask(family: u8, from: SocketAddr, to: SocketAddr) -> std::io::Result<Option<Owner>> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&netlink_sys::SocketAddr::new(0, 0))?;
    set_timeout(&socket)?;
    let mut id = if family == AF_INET {
        SocketId::new_v4()
    } else {
        SocketId::new_v6()
    };
    id.source_port = from.port();
    id.destination_port = to.port();
    id.source_address = as_family(from.ip(), family);
    id.destination_address = as_family(to.ip(), family);
    id.cookie = [0xff; 8]; // INET_DIAG_NOCOOKIE
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut packet = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id: id,
        })
        .into(),
    );
    packet.finalize();
    let mut out = vec![0; packet.buffer_len()];
    packet.serialize(&mut out);
    socket.send(&out, 0)?;
    // One reply: the socket, or an error (ENOENT: no such socket).
    let mut buf = vec![0u8; 8192];
    let n = socket.recv(&mut &mut buf[..], 0)?;
    let reply = NetlinkMessage::<SockDiagMessage>::deserialize(&buf[..n])
        .map_err(|e| std::io::Error::other(format!("sock_diag reply: {e}")))?;
    Ok(match reply.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
            let cgroup = r.nlas.iter().find_map(|nla| match nla {
                Nla::Other(a) if a.kind() == INET_DIAG_CGROUP_ID && a.value_len() == 8 => {
                    let mut v = [0u8; 8];
                    a.emit_value(&mut v);
                    Some(u64::from_ne_bytes(v))
                }
                _ => None,
            });
            Some(Owner {
                uid: r.header.uid,
                established: r.header.state == TCP_ESTABLISHED && r.header.inode != 0,
                cgroup,
            })
        }
        _ => None,
    })
}

fn set_timeout(socket: &Socket) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let tv = libc::timeval {
        tv_sec: REPLY_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    // SAFETY: a valid descriptor and a timeval of the size given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The id of the cgroup (v2) at `dir` (`/sys/fs/cgroup/...`), as the kernel reports a socket's
/// cgroup id: the 64-bit kernfs node id, which `name_to_handle_at` returns as the directory's
/// file handle (what systemd's `cg_path_get_cgroupid` and iproute2's `ss --cgroup` use). Not the
/// inode number: the two agree on many kernels but not all (6.18 inside systemd-nspawn on a
/// hybrid host: inode 48570, id 2837 for the same cgroup). `None` when the cgroup does not
/// exist (the unit is not running), `dir` is not on a cgroup2 filesystem, or is a symlink.
pub(crate) fn cgroup_id(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let meta = std::fs::symlink_metadata(dir).ok()?;
    if !meta.is_dir() {
        return None;
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and a statfs buffer of the right size.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 || fs.f_type as i64 != CGROUP2_SUPER_MAGIC
    {
        return None;
    }
    // struct file_handle with room for kernfs's 8-byte handle (and more, refused below).
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: libc::c_int,
        f: [u8; 64],
    }
    let mut h = Handle {
        bytes: 64,
        kind: 0,
        f: [0; 64],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `h` is a file_handle whose handle_bytes says how much room follows it.
    let rc = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            (&mut h as *mut Handle).cast(),
            &mut mount_id,
            0,
        )
    };
    (rc == 0 && h.bytes == 8).then(|| u64::from_ne_bytes(h.f[..8].try_into().expect("8 bytes")))
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`; `/sys/fs/cgroup/unified` on a
/// host in systemd's hybrid mode), from `/proc/self/mountinfo`.
pub fn cgroup2_root() -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (mount, fs) = l.split_once(" - ")?;
        (fs.split_whitespace().next() == Some("cgroup2"))
            .then(|| {
                mount
                    .split_whitespace()
                    .nth(4)
                    .map(std::path::PathBuf::from)
            })
            .flatten()
    })
}

/// The cgroup directory of a system service (`<cgroup2 root>/system.slice/<unit>`).
pub fn service_cgroup_dir(unit: &str) -> std::path::PathBuf {
    cgroup2_root()
        .unwrap_or_else(|| "/sys/fs/cgroup".into())
        .join("system.slice")
        .join(unit)
}

/// This process's cgroup directory (`0::/path` in `/proc/self/cgroup`, under the cgroup v2 root).
pub fn own_cgroup_dir() -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(cgroup2_root()?.join(path.trim_start_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 37, 4 and 5: the kernel answers for the one socket asked: its owner, that it is
    /// established, and the cgroup it was made in, which is this process's (the directory's
    /// inode number); a socket that closed (the client's end in `TIME_WAIT`: uid 0, no inode)
    /// is not established.
    #[test]
    fn a_live_connection_is_this_processs_and_a_closed_one_nobodys() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = std::net::TcpListener::bind(addr) else {
                continue; // (no IPv6 here)
            };
            let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, peer) = l.accept().unwrap();
            assert_eq!(peer, c.local_addr().unwrap());
            let me = nix::unistd::geteuid().as_raw();
            let o = owner(s.local_addr().unwrap(), peer)
                .unwrap()
                .expect("the socket");
            assert_eq!((o.uid, o.established), (me, true), "{addr}");
            let mine = own_cgroup_dir().and_then(|d| cgroup_id(&d));
            assert!(mine.is_some(), "cgroup v2 here");
            assert_eq!(
                o.cgroup, mine,
                "{addr}: the socket's cgroup is this process's"
            );
            // The client closes first: its end goes to TIME_WAIT once the server's closes too.
            drop(c);
            drop(s);
            std::thread::sleep(Duration::from_millis(50));
            let o = owner(l.local_addr().unwrap(), peer).unwrap();
            assert!(
                o.is_none_or(|o| !o.established && o.uid == 0),
                "{addr}: {o:?}"
            );
        }
    }

    /// The cgroup reported is the one the client's process made its socket in: a process moved
    /// into a cgroup of its own first (a sibling of the unit's) is told apart from this one.
    #[test]
    fn the_cgroup_is_the_clients_own() {
        let root = cgroup2_root().expect("a cgroup v2 hierarchy");
        let cg = root.join(format!("nodectl-peer-test-{}", std::process::id()));
        std::fs::create_dir(&cg).unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "echo $$ >{}/cgroup.procs && exec 3<>/dev/tcp/127.0.0.1/{port} && sleep 5",
                cg.display()
            ))
            .spawn()
            .unwrap();
        let (s, peer) = l.accept().unwrap();
        let o = owner(s.local_addr().unwrap(), peer)
            .unwrap()
            .expect("the socket");
        let theirs = cgroup_id(&cg);
        let mine = own_cgroup_dir().and_then(|d| cgroup_id(&d));
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir(&cg).unwrap();
        assert!(theirs.is_some() && theirs != mine, "{theirs:?} {mine:?}");
        assert_eq!(o.cgroup, theirs);
    }

    /// A connection accepted by a dual-stack listener from an IPv4 client is found too.
    #[test]
    fn an_ipv4_client_of_a_dual_stack_listener_is_found() {
        let Ok(l) = std::net::TcpListener::bind("[::]:0") else {
            return;
        };
        let port = l.local_addr().unwrap().port();
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, peer) = l.accept().unwrap();
        assert_eq!(canonical(peer), c.local_addr().unwrap());
        let o = owner(s.local_addr().unwrap(), peer)
            .unwrap()
            .expect("found");
        assert!(o.established);
    }

    /// A socket nobody has: none.
    #[test]
    fn no_such_socket_is_none() {
        let o = owner(
            "127.0.0.1:9".parse().unwrap(),
            "127.0.0.1:1".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(o, None);
    }
}
