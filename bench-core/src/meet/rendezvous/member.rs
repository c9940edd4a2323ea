//! A member's side: find the coordinator among the candidate ports (every port tried on its own
//! thread, retrying until the deadline, since processes start seconds apart), insist on the
//! coordinator's proof before showing a credential or trusting anything it says, then wait for
//! the sealed welcome.
//!
//! A port held by something else (a squatter, a relay, another step's or version's coordinator,
//! a listener that never speaks, or, seen from the coordinator's own node, a socket bound there
//! that does not listen) is named once and left to its thread while the others go on;
//! when every candidate has been held by such a process twice in a row, the coordinator cannot
//! be on any of them and the member ends at once, not at the deadline. On another node, where a
//! port bound without listening refuses connections just as one nobody holds yet, the member
//! ends at once only on the coordinator's own proven word that it cannot listen
//! ([`super::beacon`]), never on silence: a coordinator that starts late is waited for.

use super::messages::{self, Welcome};
use super::plane::ControlPlane;
use super::wire::{self, WireError};
use super::{Joined, Member, Setup};
use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

mod attempt;

use attempt::{attempt, Admitted, Miss, TicketKey};

/// Retries before a held port counts as held for good (see [`connect`]).
const HELD_TRIES: u32 = 2;
/// First pause between two tries at a port where nothing listens (yet); each such miss doubles
/// it up to [`MAX_RETRY`]. Hundreds of members, each with a thread per candidate port, retrying
/// every 50 ms took most of a loaded 2-core host from the coordinator they were waiting for.
const RETRY: Duration = Duration::from_millis(50);
/// Longest pause between two tries at a port where nothing listens: what a coordinator that
/// starts late costs at most.
const MAX_RETRY: Duration = Duration::from_millis(250);
/// Pause after a try found the port held.
const HELD_RETRY: Duration = Duration::from_millis(300);

/// What each port's thread reports.
enum Report {
    Found(Admitted),
    Missed(u16, Miss),
}

/// Finds the coordinator: one thread per candidate port, each trying its port until it finds
/// the coordinator, the others do, or the deadline passes.
fn find(setup: &Setup, me: &Member) -> Result<Admitted, String> {
    let done = AtomicBool::new(false);
    let in_flight: Mutex<HashMap<u16, TcpStream>> = Mutex::new(HashMap::new());
    let known: TicketKey = Mutex::new(None);
    let (tx, rx) = mpsc::channel::<Report>();
    std::thread::scope(|scope| {
        for &port in &setup.ports {
            let tx = tx.clone();
            let (done, in_flight, known) = (&done, &in_flight, &known);
            scope.spawn(move || {
                let track = |s: Option<&TcpStream>| {
                    let mut f = in_flight.lock().unwrap_or_else(|p| p.into_inner());
                    // Under the lock that the finder takes to cut every try short: a try that
                    // connects after that is not started.
                    if done.load(Ordering::Relaxed) {
                        return false;
                    }
                    let _ = match s.and_then(|s| s.try_clone().ok()) {
                        Some(s) => f.insert(port, s),
                        None => f.remove(&port),
                    };
                    true
                };
                let mut asked = None;
                let mut retry = RETRY;
                while !done.load(Ordering::Relaxed) && Instant::now() < setup.deadline {
                    let report = match attempt(setup, me, port, &track, known, &mut asked) {
                        Ok(a) => Report::Found(a),
                        Err(m) => Report::Missed(port, m),
                    };
                    let pause = match &report {
                        Report::Found(_) | Report::Missed(_, Miss::Failed(_)) => None,
                        Report::Missed(_, Miss::Open(_) | Miss::Dropped(_)) => {
                            let pause = jittered(retry);
                            retry = (retry * 2).min(MAX_RETRY);
                            Some(pause)
                        }
                        // Every try at a relay costs the coordinator a handshake: slower.
                        Report::Missed(_, Miss::Held(_)) => Some(HELD_RETRY),
                    };
                    if tx.send(report).is_err() {
                        return;
                    }
                    let Some(pause) = pause else { return };
                    // In slices, so that a thread pausing after a miss ends as soon as another
                    // port found the coordinator (the join waits for every port's thread).
                    let until = setup.deadline.min(Instant::now() + pause);
                    while !done.load(Ordering::Relaxed) && Instant::now() < until {
                        let left = until.saturating_duration_since(Instant::now());
                        std::thread::sleep(left.min(Duration::from_millis(5)));
                    }
                }
            });
        }
        drop(tx);
        let result = watch(setup, &rx);
        let mut f = in_flight.lock().unwrap_or_else(|p| p.into_inner());
        done.store(true, Ordering::Relaxed);
        for (_, s) in f.drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        drop(f);
        result
    })
}

/// `pause` give or take a quarter, so that members that started together do not call together.
fn jittered(pause: Duration) -> Duration {
    let mut b = [0u8; 2];
    let r = getrandom::getrandom(&mut b).map_or(0, |()| u16::from_le_bytes(b));
    let quarter = pause / 4;
    pause - quarter + quarter * 2 * u32::from(r) / u32::from(u16::MAX)
}

/// Reads the ports' reports until the coordinator is found, every port is held for good, or
/// the deadline.
fn watch(setup: &Setup, rx: &mpsc::Receiver<Report>) -> Result<Admitted, String> {
    // Per port: how many tries in a row found it held, and the latest word on it.
    let mut held: HashMap<u16, u32> = HashMap::new();
    let mut latest: HashMap<u16, String> = HashMap::new();
    let mut named = std::collections::HashSet::new();
    let mut dropped = std::collections::HashSet::new();
    loop {
        let left = setup.deadline.saturating_duration_since(Instant::now());
        let (port, miss) = match rx.recv_timeout(left) {
            Ok(Report::Found(a)) => return Ok(a),
            Ok(Report::Missed(port, miss)) => (port, miss),
            Err(_) => {
                let last = setup
                    .ports
                    .iter()
                    .filter_map(|p| latest.get(p).map(|w| format!("port {p}: {w}")))
                    .next()
                    .unwrap_or_else(|| "no attempt".into());
                return Err(format!(
                    "rendezvous at {}: the coordinator never answered ({last})",
                    setup.host
                ));
            }
        };
        // Said once per port and kind: what the member does next.
        let (why, first, next) = match miss {
            Miss::Failed(why) => {
                return Err(format!(
                    "rendezvous at {}: the coordinator started and cannot listen on any candidate port, as it said (over UDP, on port {port}): {why}",
                    setup.host
                ))
            }
            Miss::Open(why) => {
                held.insert(port, 0);
                (why, false, "")
            }
            Miss::Dropped(why) => {
                held.insert(port, 0);
                (why, dropped.insert(port), "trying again")
            }
            Miss::Held(why) => {
                *held.entry(port).or_insert(0) += 1;
                (why, named.insert(port), "trying the other candidate ports")
            }
        };
        if first {
            let why = nccl_check_host::text::escape_control(&why);
            nccl_check_host::errln!(
                "nccl-check: rendezvous: port {port} on {}: {why}; {next}",
                setup.host
            );
        }
        latest.insert(port, why);
        let all_held = setup
            .ports
            .iter()
            .all(|p| held.get(p).is_some_and(|&n| n >= HELD_TRIES));
        if all_held {
            let ports: Vec<String> = setup.ports.iter().map(u16::to_string).collect();
            let first = setup.ports[0];
            return Err(format!(
                "rendezvous at {}: every candidate port ({}) is held by a process that is not this step's coordinator, so the coordinator could listen on none of them (port {first}: {})",
                setup.host,
                ports.join(", "),
                nccl_check_host::text::escape_control(latest.get(&first).map_or("", String::as_str))
            ));
        }
    }
}

/// Joins through the coordinator.
pub fn connect(setup: &Setup, me: Member) -> Result<Joined, String> {
    if setup.ports.is_empty() {
        return Err(format!("rendezvous at {}: no candidate port", setup.host));
    }
    let mut a = find(setup, &me)?;
    let where_ = format!("rendezvous at {}:{}", setup.host, a.port);
    let welcome: Welcome = match a.session.recv(wire::MAX_HANDSHAKE_FRAME, setup.deadline) {
        Ok(w) => w,
        Err(WireError::Closed) => return Err(format!(
            "{where_}: the coordinator closed the connection before everyone had joined: it exited, was killed, or gave up (its own output says why)"
        )),
        Err(e @ (WireError::Forged | WireError::Replayed)) => {
            // The other direction may still pass: the coordinator then names the tampering
            // too, instead of finding this process gone.
            let why = format!("the welcome it received: {e}");
            ControlPlane::leaf(a.session).abort(&why, setup.deadline);
            return Err(format!("{where_}: {why}"));
        }
        Err(e) => return Err(format!("{where_}: waiting for the other processes: {e}")),
    };
    let (unique_id, members) = messages::check_welcome(&welcome, setup.world, &me)
        .map_err(|e| format!("{where_}: welcome refused: {e}"))?;
    Ok(Joined {
        unique_id,
        members,
        plane: ControlPlane::leaf(
            a.session
                .named(format!("the coordinator ({}:{})", setup.host, a.port)),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meet::rendezvous::auth::SharedSecret;
    use std::net::TcpListener;

    fn secret() -> SharedSecret {
        SharedSecret::new("test-secret-0123456789", "test").unwrap()
    }

    /// Process rank 1 of 2, a member, looking for its coordinator on `port` of this host.
    fn member_setup(a: &SharedSecret, port: u16, deadline: Instant) -> Setup<'_> {
        Setup {
            host: "127.0.0.1".into(),
            ports: vec![port],
            label: "slurm-7.0".into(),
            world: 2,
            coordinator: false,
            auth: a,
            deadline,
            expected: None,
        }
    }

    fn member_one() -> Member {
        Member {
            proc_rank: 1,
            host: "h1".into(),
            pid: 1,
            ngpus: 1,
            first_rank: 0,
        }
    }

    /// Regression: a member hung up when the coordinator had not answered 3 s after accepting,
    /// and called again. A coordinator behind on its connections (128 members on a loaded
    /// 2-core host) then read only dead ones: 38 of 128 joined in 20 s, and CI's 64-node run
    /// ended in ERROR. The coordinator now greets at its door at once; a coordinator whose
    /// proof then comes 2.5 s late (busy with proofs) must get its member on the first
    /// connection.
    #[test]
    fn a_coordinator_that_proves_itself_late_is_joined_on_the_first_connection() {
        use super::super::coordinator;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let deadline = Instant::now() + Duration::from_secs(12);
        let coordinator = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let a = secret();
            let r = coordinator::handshake::test_handshakes::handshake_late(
                stream,
                "slurm-7.0",
                &a,
                deadline,
                || std::thread::sleep(Duration::from_millis(2500)),
            );
            // Any second connection is a member that gave up on the first.
            listener.set_nonblocking(true).unwrap();
            (r, listener.accept().is_ok())
        });
        let a = secret();
        let (setup, me) = (member_setup(&a, port, deadline), member_one());
        let joined = find(&setup, &me);
        let (served, called_again) = coordinator.join().unwrap();
        served.unwrap();
        assert!(!called_again, "the member hung up and called again");
        assert_eq!(joined.map(|a| a.port).unwrap(), port);
    }

    /// A process that relays the connection (a candidate port it holds, forwarding to the real
    /// coordinator) cannot break the handshake, but both ends see it in the addresses the other
    /// side's handshake message carries: the coordinator refuses it as a relay, the member
    /// names it with the coordinator's port (and looks elsewhere).
    #[test]
    fn a_relayed_connection_is_named_by_both_ends() {
        use super::super::coordinator::handshake::test_handshakes::handshake;
        use std::io::{Read, Write};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let relay = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay_port = relay.local_addr().unwrap().port();
        let deadline = Instant::now() + Duration::from_secs(5);
        std::thread::spawn(move || {
            let (inbound, _) = relay.accept().unwrap();
            let outbound = TcpStream::connect(("127.0.0.1", port)).unwrap();
            for (mut from, mut to) in [
                (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                (outbound, inbound),
            ] {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        let coordinator = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let a = secret();
            handshake(stream, 2, "slurm-7.0", &a, deadline).map(|_| ())
        });
        let a = secret();
        let (setup, me) = (member_setup(&a, relay_port, deadline), member_one());
        let known = TicketKey::default();
        let r = attempt(&setup, &me, relay_port, &|_| true, &known, &mut None);
        let Err(Miss::Held(why)) = r.map(|_| ()) else {
            panic!("a relayed connection was not named held");
        };
        let at = format!("relays connections to this step's coordinator at 127.0.0.1:{port}");
        assert!(why.contains(&at), "{why}");
        let Err((_, why)) = coordinator.join().unwrap() else {
            panic!("the coordinator accepted a relayed connection");
        };
        assert!(
            why.contains("a connection relayed by another process"),
            "{why}"
        );
    }

    #[test]
    fn retries_are_spread_around_their_pause() {
        let pause = Duration::from_millis(200);
        let all: Vec<Duration> = (0..200).map(|_| jittered(pause)).collect();
        assert!(all
            .iter()
            .all(|p| *p >= pause * 3 / 4 && *p <= pause * 5 / 4));
        assert!(all.iter().any(|p| *p < pause) && all.iter().any(|p| *p > pause));
    }
}
