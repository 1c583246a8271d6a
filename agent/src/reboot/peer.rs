//! Who is at the other end of a loopback TCP connection: the uid owning the client's socket, from
//! the running kernel's socket tables (`/proc/net/tcp` and `tcp6`: `sl local_address
//! rem_address st ... uid ...`). FleetLock has no authentication; this is how nodectld serves
//! Zincati only. These are the kernel's tables, not the node's files: read from this process's
//! /proc, never through a sysroot.

use std::io::Read as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The tables are read up to this size (a few hundred thousand sockets).
const MAX_TABLE: u64 = 64 << 20;

/// The uid owning the client socket `peer` connected to `local` (both as the server sees the
/// connection); `None` when no table has it (it closed meanwhile).
pub(crate) fn uid(local: SocketAddr, peer: SocketAddr) -> std::io::Result<Option<u32>> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let mut text = String::new();
        match std::fs::File::open(table) {
            Ok(f) => f.take(MAX_TABLE).read_to_string(&mut text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if let Some(u) = find(&text, peer, local) {
            return Ok(Some(u));
        }
    }
    Ok(None)
}

/// In a socket table, the uid of the socket whose local address is `from` and remote `to`.
fn find(table: &str, from: SocketAddr, to: SocketAddr) -> Option<u32> {
    let (from, to) = (canonical(from), canonical(to));
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() > 7 && parse(f[1]) == Some(from) && parse(f[2]) == Some(to) {
            f[7].parse().ok()
        } else {
            None
        }
    })
}

/// IPv4-mapped IPv6 addresses as IPv4 (a dual-stack socket's view of an IPv4 peer).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// `0100007F:1F90`: the address as 32-bit words in host (little-endian) byte order, one for
/// IPv4, four for IPv6, then the port, all in hex.
fn parse(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(8 * i..8 * i + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let ip = match (addr.len(), words.as_slice()) {
        (8, [w]) => IpAddr::V4(Ipv4Addr::from(w.to_le_bytes())),
        (32, ws) => {
            let mut b = [0u8; 16];
            for (i, w) in ws.iter().enumerate() {
                b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip.to_canonical(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:24EF 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:24EF 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:D431 0100007F:24EF 01 00000000:00000000 00:00000000 00000000   977        0 3 1 0000000000000000 20 4 30 10 -1
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:24EF 00000000000000000000000001000000:C350 01 00000000:00000000 00:00000000 00000000  1000        0 4 1 0000000000000000 20 4 0 10 -1
";

    #[test]
    fn the_client_sockets_owner_is_found() {
        let server: SocketAddr = "127.0.0.1:9455".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(find(TCP, client, server), Some(977));
        // (the server's own accepted socket is root's; it is not the one asked for)
        assert_eq!(find(TCP, server, client), Some(0));
        assert_eq!(find(TCP, "127.0.0.1:1".parse().unwrap(), server), None);
        let v6: SocketAddr = "[::1]:9455".parse().unwrap();
        assert_eq!(find(TCP6, v6, "[::1]:50000".parse().unwrap()), Some(1000));
        // A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.1.
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:54321".parse().unwrap();
        assert_eq!(find(TCP, mapped, server), Some(977));
        assert_eq!(parse("zz:1"), None);
        assert_eq!(parse("0100007F"), None);
    }

    #[test]
    fn a_live_connection_is_this_processs() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(uid(s.local_addr().unwrap(), peer).unwrap(), Some(me));
    }
}
