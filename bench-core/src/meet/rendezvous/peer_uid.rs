//! Whose process opened a connection, when it runs on this node: the kernel lists every TCP
//! socket of this network namespace with its owner's uid (`/proc/net/tcp`, `/proc/net/tcp6`), so
//! the coordinator can refuse another user's connection before any credential work (a MUNGE
//! proof costs a program run; a stranger's flood of openings must not use those up). A peer on
//! another node, in another network namespace, or seen through another user namespace (uid
//! unmapped: the overflow uid) is unknown here and left to the handshake's proofs.

use std::net::{IpAddr, SocketAddr, TcpStream};

/// The uid the kernel shows for a uid that is not mapped into this user namespace.
const OVERFLOW_UID: u32 = 65534;

/// An address as `/proc/net/tcp{,6}` prints it: each 32-bit word of the address in host order,
/// then the port, in upper-case hex.
fn proc_form(a: SocketAddr, v6: bool) -> Option<String> {
    let b = id_bytes(a.ip(), v6)?;
    let hex: String = b[..if v6 { 16 } else { 4 }]
        .chunks_exact(4)
        .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    Some(format!("{hex}:{:04X}", a.port()))
}

/// The owner's uid of the socket at `local` connected to `remote`, from a table's text.
fn find_uid(table: &str, local: &str, remote: &str) -> Option<u32> {
    table.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let _slot = f.next()?;
        if f.next()? != local || f.next()? != remote {
            return None;
        }
        // st, tx:rx, tr:when, retrnsmt, then uid
        f.nth(4)?.parse().ok()
    })
}

/// The uid of the process at the other end of `stream` when it is on this node and its uid
/// means something here; `None` when unknown. Asks the kernel for that one socket (sock_diag
/// over netlink, exact and atomic); where that is not available, reads the tables, which may
/// miss a socket while thousands of others come and go.
pub fn local_peer_uid(stream: &TcpStream) -> Option<u32> {
    let (peer, me) = (stream.peer_addr().ok()?, stream.local_addr().ok()?);
    let uid = match sock_diag_uid(peer, me) {
        Diag::Found(uid) => Some(uid),
        Diag::NotHere => None,
        Diag::Unavailable => table_uid(peer, me),
    };
    uid.filter(|&u| u != OVERFLOW_UID)
}

fn table_uid(peer: SocketAddr, me: SocketAddr) -> Option<u32> {
    for (path, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let (Some(l), Some(r)) = (proc_form(peer, v6), proc_form(me, v6)) else {
            continue;
        };
        let Ok(table) = std::fs::read_to_string(path) else {
            continue;
        };
        if let Some(uid) = find_uid(&table, &l, &r) {
            return Some(uid);
        }
    }
    None
}

/// What the kernel said about one socket.
enum Diag {
    Found(u32),
    /// No such socket in this network namespace: the peer is elsewhere.
    NotHere,
    /// No answer (no sock_diag in this kernel, or an error).
    Unavailable,
}

/// Netlink's sock_diag protocol, `SOCK_DIAG_BY_FAMILY` and the sizes of linux/inet_diag.h.
const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_HDR: usize = 16;
const REQ_LEN: usize = NLMSG_HDR + 56;
/// Where `idiag_uid` is in a reply: the header, then family, state, timer, retrans (4), the
/// socket id (48), expires, rqueue, wqueue (12).
const UID_AT: usize = NLMSG_HDR + 64;

/// The 16 bytes of an address as the socket id carries it (network order; IPv4 in the first 4,
/// or IPv4-mapped for an IPv6 socket).
fn id_bytes(ip: IpAddr, v6: bool) -> Option<[u8; 16]> {
    let mut b = [0u8; 16];
    match (ip, v6) {
        (IpAddr::V4(a), false) => b[..4].copy_from_slice(&a.octets()),
        (IpAddr::V4(a), true) => b = a.to_ipv6_mapped().octets(),
        (IpAddr::V6(a), true) => b = a.octets(),
        (IpAddr::V6(a), false) => b[..4].copy_from_slice(&a.to_ipv4_mapped()?.octets()),
    }
    Some(b)
}

/// The request for the socket at `src` connected to `dst`.
fn diag_request(src: SocketAddr, dst: SocketAddr, v6: bool) -> Option<[u8; REQ_LEN]> {
    let mut r = [0u8; REQ_LEN];
    r[0..4].copy_from_slice(&(REQ_LEN as u32).to_ne_bytes());
    r[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    r[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    r[8..12].copy_from_slice(&1u32.to_ne_bytes());
    let q = NLMSG_HDR;
    r[q] = if v6 { libc::AF_INET6 } else { libc::AF_INET } as u8;
    r[q + 1] = libc::IPPROTO_TCP as u8;
    r[q + 4..q + 8].copy_from_slice(&u32::MAX.to_ne_bytes());
    let id = q + 8;
    r[id..id + 2].copy_from_slice(&src.port().to_be_bytes());
    r[id + 2..id + 4].copy_from_slice(&dst.port().to_be_bytes());
    r[id + 4..id + 20].copy_from_slice(&id_bytes(src.ip(), v6)?);
    r[id + 20..id + 36].copy_from_slice(&id_bytes(dst.ip(), v6)?);
    // interface 0, then the cookie "none" (all ones).
    r[id + 40..id + 48].copy_from_slice(&[0xff; 8]);
    Some(r)
}

fn sock_diag_uid(peer: SocketAddr, me: SocketAddr) -> Diag {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket(2) with constant arguments; the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Diag::Unavailable;
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let wait = libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    // SAFETY: a valid descriptor and a live timeval of the size given.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &wait as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    // The peer's socket may be IPv4, or IPv6 carrying IPv4-mapped addresses.
    let families: &[bool] = if peer.is_ipv4() {
        &[false, true]
    } else {
        &[true]
    };
    let mut answered = false;
    for &v6 in families {
        let Some(req) = diag_request(peer, me, v6) else {
            continue;
        };
        // SAFETY: the kernel's netlink socket as destination (a zeroed sockaddr_nl), the
        // request buffer and its length.
        let sent = unsafe {
            let mut to: libc::sockaddr_nl = std::mem::zeroed();
            to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
            libc::sendto(
                fd.as_raw_fd(),
                req.as_ptr() as *const libc::c_void,
                req.len(),
                0,
                &to as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent != req.len() as isize {
            return Diag::Unavailable;
        }
        let mut buf = [0u8; 8192];
        // SAFETY: a valid descriptor and a buffer of the length given.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        let Ok(n) = usize::try_from(n) else {
            return Diag::Unavailable;
        };
        match read_reply(&buf[..n]) {
            Diag::Found(uid) => return Diag::Found(uid),
            Diag::NotHere => answered = true,
            Diag::Unavailable => return Diag::Unavailable,
        }
    }
    if answered {
        Diag::NotHere
    } else {
        Diag::Unavailable
    }
}

/// One reply: a socket (its uid), or an error (ENOENT: no such socket here).
fn read_reply(b: &[u8]) -> Diag {
    let u16_at = |i: usize| b.get(i..i + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]));
    let i32_at = |i: usize| {
        b.get(i..i + 4)
            .map(|s| i32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
    };
    match u16_at(4) {
        Some(SOCK_DIAG_BY_FAMILY) => {
            i32_at(UID_AT).map_or(Diag::Unavailable, |u| Diag::Found(u as u32))
        }
        Some(t) if t == libc::NLMSG_ERROR as u16 => match i32_at(NLMSG_HDR) {
            Some(e) if e == -libc::ENOENT => Diag::NotHere,
            _ => Diag::Unavailable,
        },
        _ => Diag::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn addresses_are_written_as_the_kernel_writes_them() {
        let a: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let want4 = if cfg!(target_endian = "little") {
            "0100007F:1F90"
        } else {
            "7F000001:1F90"
        };
        assert_eq!(proc_form(a, false).as_deref(), Some(want4));
        let mapped = proc_form(a, true).unwrap_or_default();
        assert_eq!(mapped.len(), 32 + 5, "{mapped}");
        assert!(mapped.ends_with(":1F90"), "{mapped}");
        let v6: SocketAddr = "[2001:db8::1]:1".parse().unwrap();
        assert_eq!(proc_form(v6, false), None);
    }

    #[test]
    fn the_uid_is_read_from_the_peers_own_line() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
             0: 0100007F:AD25 0100007F:9E52 01 00000000:00000000 00:00000000 00000000     0        0 1 1 0\n   \
             1: 0100007F:9E52 0100007F:AD25 01 00000000:00000000 00:00000000 00000000  1001        0 2 1 0\n";
        assert_eq!(
            find_uid(table, "0100007F:9E52", "0100007F:AD25"),
            Some(1001)
        );
        assert_eq!(find_uid(table, "0100007F:AD25", "0100007F:9E52"), Some(0));
        assert_eq!(find_uid(table, "0100007F:0001", "0100007F:AD25"), None);
    }

    #[test]
    fn a_connection_of_this_process_shows_this_uid_and_a_stranger_none() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        assert_eq!(local_peer_uid(&s), Some(me));
        assert!(matches!(
            sock_diag_uid(s.peer_addr().unwrap(), s.local_addr().unwrap()),
            Diag::Found(u) if u == me
        ));
        // Both tables agree with the kernel's answer.
        assert_eq!(
            table_uid(s.peer_addr().unwrap(), s.local_addr().unwrap()),
            Some(me)
        );
        // No socket at that address pair: nobody here.
        let nowhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(matches!(
            sock_diag_uid(nowhere, s.local_addr().unwrap()),
            Diag::NotHere
        ));
    }
}
