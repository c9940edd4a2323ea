//! The coordinator's word, when it can listen on no candidate port, to the members on other
//! nodes: over UDP, on the ports of the same numbers.
//!
//! Seen from another node, a coordinator that has not started yet and one that started and found
//! every candidate port bound by a process that does not listen look the same: each connection is
//! refused. Time cannot tell them apart (one node may start the step a minute after the others:
//! its prolog, its container image), so a member never gives up on silence alone. Instead the
//! coordinator, when it can listen on no candidate, stays up to [`LINGER`] answering on the UDP
//! ports of the same numbers; a member whose connection is refused asks there now and then
//! ([`inquire`]), and an answer proven with the step's key (the shared secret; under MUNGE the job's
//! ticket key, with the ticket itself in the answer, which only the job's user can open) ends it
//! at once, naming what the coordinator found. No answer, or one that does not prove itself,
//! changes nothing: the member waits on as before. A process that holds the UDP ports too, or a
//! firewall that drops UDP, brings back the wait until the deadline, never a wrong verdict.
//!
//! The ports of the same numbers alone are easy to hold too (a stranger who binds the 8 TCP
//! ports binds the 8 UDP ones beside them: then a member on another node waited for the whole
//! `--timeout`). So the coordinator also answers on [`SPREAD`] more UDP ports drawn from the
//! step's secret over 10000-65535 ([`beacon_ports`]), which the first candidate's thread asks too:
//! with a secret, a stranger must hold every UDP port of the node to silence it. Under MUNGE
//! (no secret before the handshake) those ports follow from the public step label, and a
//! stranger who holds them as well brings back the wait until the deadline.
//!
//! An ask is padded to [`MIN_ASK`] bytes, more than any answer, so the coordinator never sends
//! more to a forged source address than it received from it.

use super::auth::{self, Authenticator, Ticket};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// How long a coordinator that cannot listen answers members before it gives up: members that
/// start later than this wait until their deadline, as they would for a coordinator never started.
pub const LINGER: Duration = Duration::from_secs(15);
/// Smallest ask answered (and the size a member pads its asks to).
pub const MIN_ASK: usize = 1024;
/// Largest datagram read.
const MAX_DATAGRAM: usize = 2048;
/// Longest reason sent.
const MAX_WHY: usize = 300;

/// Member -> coordinator: is this step's coordinator there?
#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    protocol: String,
    label: String,
    nonce: String,
    #[serde(default)]
    pad: String,
}

/// Coordinator -> member: it cannot listen, and why; proven over the ask's nonce.
#[derive(Debug, Serialize, Deserialize)]
struct Told {
    protocol: String,
    label: String,
    nonce: String,
    why: String,
    /// Under MUNGE, the job's ticket, whose key proves the answer.
    #[serde(default)]
    ticket: Option<String>,
    proof: String,
}

/// UDP ports beyond the candidates' twins that a coordinator which cannot listen answers on.
pub const SPREAD: usize = 2;

/// The [`SPREAD`] ports of the step `label`: drawn from the step's secret (`auth.psk()`; the
/// label alone under MUNGE) over 10000-65535, the candidate range 29500-29999 left out (its
/// ports are the twins').
pub fn beacon_ports(label: &str, auth: &dyn Authenticator) -> Vec<u16> {
    (0..SPREAD)
        .map(|k| {
            let h = auth::ticket_proof(auth.psk(), label, &["beacon-spread", &k.to_string()]);
            let n = u32::from_str_radix(&h[..8], 16).unwrap_or(0);
            let p = 10_000 + n % (65_536 - 10_000 - 500);
            // Past the candidate range: the 500 ports skipped are added back above it.
            (if p >= 29_500 { p + 500 } else { p }) as u16
        })
        .collect()
}

/// What an answer's proof covers.
fn fields<'a>(nonce: &'a str, why: &'a str) -> [&'a str; 3] {
    ["beacon", nonce, why]
}

/// The coordinator's side: answers asks on the candidate ports' UDP twins and the step's
/// [`beacon_ports`] at `ip` until `until` (a port held too is skipped), proving each answer with
/// the ticket's key, or the shared secret where there is no ticket. Returns at once where it
/// has no key or no port.
pub fn announce(
    ip: IpAddr,
    ports: &[u16],
    label: &str,
    auth: &dyn Authenticator,
    ticket: Option<&Ticket>,
    why: &str,
    until: Instant,
) {
    let key = ticket.map_or_else(|| auth.psk().to_vec(), |t| t.key.clone());
    let sockets: Vec<UdpSocket> = (ports.iter().copied())
        .chain(beacon_ports(label, auth))
        .filter_map(|p| UdpSocket::bind(SocketAddr::new(ip, p)).ok())
        .filter(|s| s.set_nonblocking(true).is_ok())
        .collect();
    if key.is_empty() || sockets.is_empty() {
        return;
    }
    let why: String = why.chars().take(MAX_WHY).collect();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while Instant::now() < until {
        let mut any = false;
        for s in &sockets {
            // The time is checked per datagram too: a stranger's unbroken stream of them must
            // not keep this loop (and the coordinator's exit) past `until`.
            while Instant::now() < until {
                let Ok((n, from)) = s.recv_from(&mut buf) else {
                    break;
                };
                any = true;
                if let Some(reply) = reply_to(&buf[..n], label, &key, ticket, &why) {
                    let _ = s.send_to(&reply, from);
                }
            }
        }
        if !any {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The answer to one datagram, if it is an ask of this step big enough to answer.
fn reply_to(
    datagram: &[u8],
    label: &str,
    key: &[u8],
    ticket: Option<&Ticket>,
    why: &str,
) -> Option<Vec<u8>> {
    if datagram.len() < MIN_ASK {
        return None;
    }
    let ask: Ask = serde_json::from_slice(datagram).ok()?;
    if ask.protocol != auth::PROTOCOL || ask.label != label {
        return None;
    }
    super::messages::check_nonce(&ask.nonce).ok()?;
    let told = Told {
        protocol: auth::PROTOCOL.into(),
        label: label.into(),
        proof: auth::ticket_proof(key, label, &fields(&ask.nonce, why)),
        nonce: ask.nonce,
        why: why.into(),
        ticket: ticket.map(|t| t.credential.clone()),
    };
    serde_json::to_vec(&told).ok().filter(|r| r.len() < MIN_ASK)
}

/// A member's side: asks at each of `addrs` (one host's ports) whether this step's coordinator
/// is there and cannot listen; its reason when an answer proves itself within `wait`, else
/// `None`. Opening a ticket in an answer (unmunge) may take until `deadline`.
pub fn inquire(
    addrs: &[SocketAddr],
    label: &str,
    auth: &dyn Authenticator,
    wait: Duration,
    deadline: Instant,
) -> Option<String> {
    let addr = *addrs.first()?;
    let any: SocketAddr = match addr {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(any).ok()?;
    let nonce = auth::nonce().ok()?;
    let mut ask = Ask {
        protocol: auth::PROTOCOL.into(),
        label: label.into(),
        nonce: nonce.clone(),
        pad: String::new(),
    };
    let len = serde_json::to_vec(&ask).ok()?.len();
    ask.pad = "-".repeat(MIN_ASK.saturating_sub(len));
    let datagram = serde_json::to_vec(&ask).ok()?;
    for a in addrs {
        let _ = s.send_to(&datagram, a);
    }
    let until = Instant::now() + wait;
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        let Ok((n, from)) = s.recv_from(&mut buf) else {
            return None;
        };
        if from.ip().to_canonical() != addr.ip().to_canonical() {
            continue;
        }
        if let Some(why) = proven(&buf[..n], label, &nonce, auth, deadline) {
            return Some(why);
        }
    }
    None
}

/// The reason in an answer, if it is to this ask and proves itself.
fn proven(
    datagram: &[u8],
    label: &str,
    nonce: &str,
    auth: &dyn Authenticator,
    deadline: Instant,
) -> Option<String> {
    let told: Told = serde_json::from_slice(datagram).ok()?;
    if told.protocol != auth::PROTOCOL || told.label != label || told.nonce != nonce {
        return None;
    }
    let key = match &told.ticket {
        Some(c) => auth.open_ticket(c, deadline).ok()?,
        None => auth.psk().to_vec(),
    };
    if key.is_empty() {
        return None;
    }
    auth::check_ticket_proof(&key, label, &fields(nonce, &told.why), &told.proof).ok()?;
    Some(nccl_check_host::text::escape_control(&told.why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meet::rendezvous::auth::SharedSecret;

    fn free_udp_port() -> u16 {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// A coordinator's answer is taken when it proves itself with the step's key; one made
    /// with another key, or a small ask (a forged source's reflection), gets nothing.
    #[test]
    fn an_answer_counts_only_with_the_steps_key_and_only_to_a_full_size_ask() {
        let port = free_udp_port();
        let ip: IpAddr = [127, 0, 0, 1].into();
        let addr = SocketAddr::new(ip, port);
        for (secret, want) in [
            ("the-steps-secret-0123456789", true),
            ("a-strangers-secret-0123456", false),
        ] {
            let coordinator = std::thread::spawn(move || {
                let a = SharedSecret::new(secret, "test").unwrap();
                let until = Instant::now() + Duration::from_millis(1500);
                announce(ip, &[port], "slurm-1.0", &a, None, "every port held", until);
            });
            std::thread::sleep(Duration::from_millis(100));
            let a = SharedSecret::new("the-steps-secret-0123456789", "test").unwrap();
            let soon = Instant::now() + Duration::from_secs(2);
            let got = inquire(&[addr], "slurm-1.0", &a, Duration::from_millis(800), soon);
            assert_eq!(got.is_some(), want, "{secret}: {got:?}");
            if want {
                assert_eq!(got.as_deref(), Some("every port held"));
                // Another step's member gets no answer.
                assert!(
                    inquire(&[addr], "slurm-1.1", &a, Duration::from_millis(300), soon).is_none()
                );
                let small = UdpSocket::bind("127.0.0.1:0").unwrap();
                let short = Ask {
                    protocol: auth::PROTOCOL.into(),
                    label: "slurm-1.0".into(),
                    nonce: "ab".repeat(32),
                    pad: String::new(),
                };
                small
                    .send_to(&serde_json::to_vec(&short).unwrap(), addr)
                    .unwrap();
                small
                    .set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                assert!(
                    small.recv_from(&mut [0u8; 64]).is_err(),
                    "answered a small ask"
                );
            }
            coordinator.join().unwrap();
        }
    }
}
