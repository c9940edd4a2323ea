//! The coordinator's side: listen on the rendezvous address, authenticate every member in a
//! handshake of its own (many at once, each with a short deadline, so a slow or idle stranger
//! never delays the real members), then hand everyone the NCCL unique id and the member list,
//! sealed under each connection's keys.

mod admission;
pub(super) mod handshake;
mod refusals;

use super::door::{self, Door};
use super::messages::{self, Welcome, HANDSHAKE_TIMEOUT};
use super::plane::ControlPlane;
use super::wire;
use super::{Joined, Member, Setup};
use admission::{Admission, MAX_PARALLEL_HANDSHAKES};
use handshake::Arrival;
use refusals::Refusal;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::Instant;

/// Binds the first free candidate port on the rendezvous host's address; also the candidates
/// before it that another process holds.
fn bind(setup: &Setup) -> Result<(TcpListener, u16, Vec<u16>), String> {
    let ip = bind_address(&setup.host, setup.deadline)?;
    let mut last = String::new();
    let mut held = Vec::new();
    for &port in &setup.ports {
        match TcpListener::bind(SocketAddr::new(ip, port)) {
            Ok(l) => return Ok((l, port, held)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                held.push(port);
                last = format!("port {port} is in use");
            }
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {
                return Err(format!(
                    "the rendezvous host {} ({ip}) is not an address of this machine: the coordinating process must run there",
                    setup.host
                ))
            }
            Err(e) => last = format!("port {port}: {e}"),
        }
    }
    if held.len() == setup.ports.len() {
        let ports: Vec<String> = held.iter().map(u16::to_string).collect();
        return Err(format!(
            "cannot listen on {}: every candidate port ({}) is held by another process (bound, listening or not: a squatter, or other jobs')",
            setup.host,
            ports.join(", ")
        ));
    }
    Err(format!(
        "cannot listen on {} at any of ports {:?}: {last}",
        setup.host, setup.ports
    ))
}

/// The address to listen on: the one the members will connect to. A host name that resolves to
/// a loopback address other than the one given literally (Debian maps its own name to
/// 127.0.1.1) would be unreachable from other nodes: then every interface is used, which the
/// handshake's authentication makes safe.
fn bind_address(host: &str, deadline: Instant) -> Result<IpAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip);
    }
    let ip = super::resolve::preferred(host, 0, deadline)
        .map_err(|e| format!("the rendezvous host: {e}"))?
        .ok_or_else(|| format!("the rendezvous host {host} resolves to no address"))?
        .ip();
    if ip.is_loopback() && host != "localhost" {
        return Ok(IpAddr::from([0, 0, 0, 0]));
    }
    Ok(ip)
}

impl Setup<'_> {
    /// Joins `world` processes: the coordinator serves ([`serve`]), every other process
    /// connects ([`super::member::connect`]). The coordinator calls `make_id` once everyone is
    /// in.
    pub fn join(
        &self,
        me: Member,
        make_id: impl FnOnce() -> Result<[u8; 128], String>,
    ) -> Result<Joined, String> {
        if self.world == 1 {
            return Ok(Joined {
                unique_id: make_id()?,
                members: vec![Member {
                    first_rank: 0,
                    ..me
                }],
                plane: ControlPlane::Alone,
            });
        }
        if self.coordinator {
            serve(self, me, make_id)
        } else {
            super::member::connect(self, me)
        }
    }
}

/// Serves the rendezvous until every other process has joined, or the deadline.
pub fn serve(
    setup: &Setup,
    me: Member,
    make_id: impl FnOnce() -> Result<[u8; 128], String>,
) -> Result<Joined, String> {
    // One socket per member, plus each handshake's second handle: over the common soft limit
    // of 1,024 open files at 1,024 processes (measured: "Too many open files" on accept).
    // Room for the door's idle connections too where the hard limit allows; without it the
    // door closes its oldest when accept runs out of descriptors.
    let needed = setup.world as u64 + MAX_PARALLEL_HANDSHAKES as u64 + 64;
    if super::plane::ensure_open_files(needed + door::MAX_WAITING as u64).is_err() {
        super::plane::ensure_open_files(needed)?;
    }
    // Made once (one munge run under MUNGE), shown to every opening that cannot prove it yet.
    let ticket = setup
        .auth
        .ticket(setup.deadline)
        .map_err(|e| format!("rendezvous: cannot make the job's ticket: {e}"))?;
    let (listener, port, held) = bind(setup).inspect_err(|e| {
        // Members on other nodes cannot tell this from a coordinator not started yet: tell
        // them (beacon), for a while, before giving up.
        if let Ok(ip) = bind_address(&setup.host, setup.deadline) {
            let until = setup.deadline.min(Instant::now() + super::beacon::LINGER);
            let a = setup.auth;
            super::beacon::announce(ip, &setup.ports, &setup.label, a, ticket.as_ref(), e, until);
        }
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("rendezvous: {e}"))?;
    let mut door = Door::new(
        listener,
        HANDSHAKE_TIMEOUT,
        door::MAX_WAITING,
        wire::MAX_HELLO_FRAME,
    );
    let mut admission = Admission::new(setup, &me, port, ticket);
    for p in held {
        let why = format!(
            "candidate port {p} on {} is held by another process (bound, listening or not): a squatter, or another job's; listening on port {port} instead",
            setup.host
        );
        admission.refused.log(Refusal::Squatter, &why);
    }
    std::thread::scope(|scope| {
        let result = admission.run(scope, &mut door);
        admission.close();
        result
    })?;
    let slots = std::mem::take(&mut admission.slots);
    drop(admission);
    welcome(setup, me, slots, make_id)
}

/// Numbers the ranks, makes the NCCL id and sends everyone the welcome.
fn welcome(
    setup: &Setup,
    me: Member,
    slots: Vec<Option<Arrival>>,
    make_id: impl FnOnce() -> Result<[u8; 128], String>,
) -> Result<Joined, String> {
    let my_rank = me.proc_rank as usize;
    let mut members = Vec::with_capacity(slots.len());
    let mut peers = Vec::with_capacity(slots.len());
    for (r, slot) in slots.into_iter().enumerate() {
        match slot {
            Some(a) => {
                members.push(a.member.clone());
                peers.push((a.member, a.session));
            }
            None if r == my_rank => members.push(me.clone()),
            None => return Err(format!("process rank {r} has no connection")),
        }
    }
    messages::assign_ranks(&mut members)?;
    let unique_id = make_id()?;
    // Made and serialized once; only the sealing differs from one member to the next.
    let msg = serde_json::to_vec(&Welcome::new(&unique_id, &members))
        .map_err(|e| format!("rendezvous: the welcome: {e}"))?;
    let mut plane = Vec::with_capacity(peers.len());
    for (m, mut session) in peers {
        session.send_json(&msg, setup.deadline).map_err(|e| {
            format!(
                "rendezvous: sending to process rank {} ({}): {e}",
                m.proc_rank, m.host
            )
        })?;
        let m = members[m.proc_rank as usize].clone();
        plane.push((m, session));
    }
    Ok(Joined {
        unique_id,
        members,
        plane: ControlPlane::root(&me, plane),
    })
}

#[cfg(test)]
mod tests {
    use super::handshake::test_handshakes::handshake;
    use super::*;
    use crate::meet::rendezvous::auth;
    use std::time::Duration;

    /// Regression: a tampered welcome was "changed on the way (a process relaying the
    /// connection?)" at the member, which then left without a word, and the coordinator blamed
    /// its own network. The member now names tampering and tells the coordinator.
    #[test]
    fn a_tampered_welcome_is_named_tampering_and_the_coordinator_is_told() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let deadline = Instant::now() + Duration::from_secs(8);
        let secret = || auth::SharedSecret::new("test-secret-0123456789", "test").unwrap();
        let member = std::thread::spawn(move || {
            let a = secret();
            let s = Setup {
                host: "127.0.0.1".into(),
                ports: vec![port],
                label: "slurm-7.0".into(),
                world: 2,
                coordinator: false,
                auth: &a,
                deadline,
                expected: None,
            };
            let me = Member {
                proc_rank: 1,
                host: "h1".into(),
                pid: 1,
                ngpus: 1,
                first_rank: 0,
            };
            s.join(me, || Err("not the coordinator".into())).err()
        });
        let (stream, _) = l.accept().unwrap();
        let a = secret();
        let mut arrival = handshake(stream, 2, "slurm-7.0", &a, deadline)
            .map_err(|(_, e)| e)
            .unwrap();
        // In place of the welcome, a sealed frame that does not open: what a process on the
        // path that changes bytes delivers.
        let mut raw = arrival.session.stream().try_clone().unwrap();
        raw.write_all(&40u32.to_be_bytes()).unwrap();
        raw.write_all(&[7u8; 40]).unwrap();
        let e = member.join().unwrap().unwrap_or_default();
        assert!(e.contains("the welcome it received: a message failed its integrity check: it was tampered with on the way"), "{e}");
        assert!(!e.contains("lost its network"), "{e}");
        let told: serde_json::Value = arrival.session.recv(4096, deadline).unwrap();
        let abort = told["abort"].as_str().unwrap_or_default();
        assert!(abort.contains("tampered with on the way"), "{told}");
    }

    /// Noise's psk0 opening can be played again by whoever recorded it. Played from the very
    /// addresses of the recording (so the coordinator sees no relay), its greeting is answered,
    /// and the recorded hello does not open under the new connection's keys: refused as a
    /// replay, never accepted.
    #[test]
    fn a_recorded_opening_played_again_is_refused_as_a_replay() {
        use super::handshake::{admit, door_answer, greet, handshake_opened};
        use crate::meet::rendezvous::messages::{Endpoints, Greeting, Hello, Opening};
        use crate::meet::rendezvous::session::{Handshake, Session};
        use crate::meet::rendezvous::wire;
        let label = "slurm-7.0";
        let psk = auth::noise_psk(b"test-secret-0123456789", label);
        let deadline = Instant::now() + Duration::from_secs(5);
        let answer = door_answer(label, None);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let connect = || {
            let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (c, l.accept().unwrap().0)
        };
        // The recording: a member's opening and its sealed hello, read off the wire.
        let (mut a, mut coordinator_a) = connect();
        let mut member = Handshake::new(&psk, label, true).unwrap();
        let ends = Endpoints {
            from: "127.0.0.1:1".into(),
            to: "127.0.0.1:2".into(),
        };
        let opening = Opening {
            protocol: auth::PROTOCOL.into(),
            noise: Some(member.write(&ends).unwrap()),
        };
        wire::send(&mut a, &opening, deadline).unwrap();
        let first = wire::recv_frame(&mut coordinator_a, 4096, deadline).unwrap();
        let admitted = admit(&first, label, &psk, None, &answer).map_err(|e| e.1);
        greet(&coordinator_a, label, admitted.unwrap()).unwrap();
        let greeting: Greeting = wire::tests::recv(&mut a, 4096, deadline).unwrap();
        let _: Endpoints = member.read(&greeting.noise.unwrap()).unwrap();
        let hello = Hello {
            world: 2,
            member: Member {
                proc_rank: 1,
                host: "h1".into(),
                pid: 1,
                ngpus: 1,
                first_rank: 0,
            },
        };
        let mut session = Session::new(a, member.done().unwrap());
        session.send(&hello, deadline).unwrap();
        let sealed_hello = wire::recv_frame(&mut coordinator_a, 4096, deadline).unwrap();
        // Played again on another connection, as if from the same addresses.
        let (mut b, coordinator_b) = connect();
        wire::send_frame(&mut b, &first, deadline).unwrap();
        let admitted = admit(&first, label, &psk, None, &answer).map_err(|e| e.1);
        let (keys, _, seen) = greet(&coordinator_b, label, admitted.unwrap()).unwrap();
        wire::send_frame(&mut b, &sealed_hello, deadline).unwrap();
        let opened = (keys, seen.clone(), seen);
        let Err((kind, why)) = handshake_opened(coordinator_b, opened, 2, deadline) else {
            panic!("a recorded opening was accepted");
        };
        assert_eq!(kind, Refusal::Replay, "{why}");
        assert!(why.contains("recorded and played again"), "{why}");
    }

    /// A held candidate port is passed over and reported (logged as a squatter); when every
    /// one is held the error says so.
    #[test]
    fn held_candidate_ports_are_reported_and_all_held_is_named() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p1 = held.local_addr().unwrap().port();
        let p2 = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let a = auth::SharedSecret::new("test-secret-0123456789", "test").unwrap();
        let mut s = Setup {
            host: "127.0.0.1".into(),
            ports: vec![p1, p2],
            label: "slurm-7.0".into(),
            world: 2,
            coordinator: true,
            auth: &a,
            deadline: Instant::now() + Duration::from_secs(5),
            expected: None,
        };
        let (_l, port, squatted) = bind(&s).unwrap();
        assert_eq!((port, squatted), (p2, vec![p1]));
        s.ports = vec![p1];
        let e = bind(&s).err().unwrap_or_default();
        assert!(
            e.contains(&format!(
                "every candidate port ({p1}) is held by another process"
            )),
            "{e}"
        );
    }
}
