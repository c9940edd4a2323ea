//! A member's side: find the coordinator among the candidate ports (retrying until the
//! deadline, since processes start seconds apart), prove who it is, insist on the coordinator's
//! proof before trusting anything it says, then wait for the welcome.

use super::auth;
use super::messages::{self, Accepted, Challenge, Hello, HelloBody, Welcome};
use super::plane::ControlPlane;
use super::wire;
use super::{Joined, Member, Setup};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// A connection to the step's authenticated coordinator, before the welcome.
struct Admitted {
    stream: TcpStream,
    nonce: String,
    port: u16,
}

/// The addresses of `host`, looked up on a helper thread so that a slow resolver (a name that
/// does not resolve can take 10 s per try) never holds this process past `deadline`.
pub(super) fn lookup(host: &str, port: u16, deadline: Instant) -> Result<Vec<SocketAddr>, String> {
    let left = deadline
        .checked_duration_since(Instant::now())
        .ok_or("deadline passed")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let name = host.to_string();
    std::thread::Builder::new()
        .name("resolve".into())
        .spawn(move || {
            let r = (name.as_str(), port)
                .to_socket_addrs()
                .map(|a| a.collect::<Vec<_>>());
            let _ = tx.send(r);
        })
        .map_err(|e| format!("cannot start a resolver thread: {e}"))?;
    match rx.recv_timeout(left) {
        Ok(Ok(all)) => Ok(all),
        Ok(Err(e)) => Err(format!("cannot resolve {host}: {e}")),
        Err(_) => Err(format!("cannot resolve {host} before the deadline")),
    }
}

fn resolve(host: &str, port: u16, deadline: Instant) -> Result<SocketAddr, String> {
    let all = lookup(host, port, deadline)?;
    all.iter()
        .find(|a| a.is_ipv4())
        .or(all.first())
        .copied()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

/// One attempt at one port: connect, answer the challenge, check the coordinator's proof.
fn attempt(setup: &Setup, me: &Member, port: u16) -> Result<Admitted, String> {
    let left = setup
        .deadline
        .checked_duration_since(Instant::now())
        .ok_or("deadline passed")?;
    let addr = resolve(&setup.host, port, setup.deadline)?;
    let mut stream = TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(1)))
        .map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let deadline = setup
        .deadline
        .min(Instant::now() + super::coordinator::HANDSHAKE_TIMEOUT);
    let challenge: Challenge =
        wire::recv(&mut stream, wire::MAX_HELLO_FRAME, deadline).map_err(|e| e.to_string())?;
    if challenge.protocol != auth::PROTOCOL {
        return Err(format!(
            "not an nccl-check coordinator (protocol '{}')",
            challenge.protocol.chars().take(40).collect::<String>()
        ));
    }
    if challenge.label != setup.label {
        return Err("the coordinator of another job step".into());
    }
    messages::check_nonce(&challenge.nonce)?;
    let nonce = auth::nonce()?;
    let body = HelloBody {
        world: setup.world,
        member: me.clone(),
        nonce: nonce.clone(),
    };
    let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    let proof = setup.auth.prove(
        &auth::context("hello", &setup.label, &challenge.nonce, &bytes),
        deadline,
    )?;
    wire::send(&mut stream, &Hello { body, proof }, deadline).map_err(|e| e.to_string())?;
    let accepted: Accepted =
        wire::recv(&mut stream, wire::MAX_HELLO_FRAME, deadline).map_err(|e| e.to_string())?;
    messages::check_proof(&accepted.proof)?;
    setup
        .auth
        .verify(
            &auth::context("accepted", &setup.label, &nonce, &bytes),
            &accepted.proof,
            deadline,
        )
        .map_err(|e| format!("the process on this port is not this step's coordinator: {e}"))?;
    Ok(Admitted {
        stream,
        nonce,
        port,
    })
}

/// Joins through the coordinator.
pub fn connect(setup: &Setup, me: Member) -> Result<Joined, String> {
    let mut last_error = String::from("no attempt");
    let mut admitted = None;
    'search: while admitted.is_none() {
        for &port in &setup.ports {
            if Instant::now() >= setup.deadline {
                break 'search;
            }
            match attempt(setup, &me, port) {
                Ok(a) => {
                    admitted = Some(a);
                    break;
                }
                Err(e) => last_error = format!("port {port}: {e}"),
            }
        }
        if admitted.is_none() {
            // The coordinator may start seconds later (srun starts tasks unevenly).
            let left = setup.deadline.saturating_duration_since(Instant::now());
            std::thread::sleep(Duration::from_millis(50).min(left));
        }
    }
    let Some(mut a) = admitted else {
        return Err(format!(
            "rendezvous at {}: the coordinator never answered ({last_error})",
            setup.host
        ));
    };
    let where_ = format!("rendezvous at {}:{}", setup.host, a.port);
    let welcome: Welcome = wire::recv(&mut a.stream, wire::MAX_HANDSHAKE_FRAME, setup.deadline)
        .map_err(|e| format!("{where_}: waiting for the other processes: {e}"))?;
    messages::check_proof(&welcome.proof).map_err(|e| format!("{where_}: {e}"))?;
    let bytes = serde_json::to_vec(&welcome.body).map_err(|e| e.to_string())?;
    setup
        .auth
        .verify(
            &auth::context("welcome", &setup.label, &a.nonce, &bytes),
            &welcome.proof,
            setup.deadline,
        )
        .map_err(|e| format!("{where_}: welcome refused: {e}"))?;
    let unique_id = messages::check_welcome(&welcome.body, setup.world, &me)
        .map_err(|e| format!("{where_}: welcome refused: {e}"))?;
    Ok(Joined {
        unique_id,
        members: welcome.body.members,
        plane: ControlPlane::Leaf(a.stream),
    })
}
