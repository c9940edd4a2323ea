//! The coordinator's side of one member's handshake: the opening admitted at the door (its
//! version, fields and, under MUNGE, its proof of the job's ticket), the greeting, then on the
//! handshake's own thread the proofs both ways, the member's hello and the connection's keys.

use super::refusals::{refusal_of_verify, Refusal};
use crate::meet::rendezvous::auth::{self, Authenticator};
use crate::meet::rendezvous::messages::{
    self, addr_text, transcript_of, Greeting, Hello, Opening, Proof, Version, HANDSHAKE_TIMEOUT,
};
use crate::meet::rendezvous::session::{self, KeyPair, Keys, Role, Session};
use crate::meet::rendezvous::{wire, Member};
use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

/// One member that passed its handshake.
pub(in crate::meet::rendezvous) struct Arrival {
    pub(super) member: Member,
    pub(super) session: Session,
}

/// This side's key pair, its greeting, the member's opening and its public key.
type Opened = (KeyPair, Greeting, Opening, [u8; 32]);

/// Why an opening is refused at the door: the kind, the words, and the frame to answer with
/// before closing (the job's ticket; or this side's version, so that a worker of another
/// version names it).
type DoorRefusal = (Refusal, String, Option<Vec<u8>>);

/// What the coordinator answers at the door: the job's ticket under MUNGE, else its version.
pub(super) fn door_answer(label: &str, ticket: Option<&auth::Ticket>) -> Vec<u8> {
    let body = match ticket {
        Some(t) => serde_json::to_vec(&messages::TicketOffer {
            protocol: auth::PROTOCOL.into(),
            label: label.into(),
            ticket: t.credential.clone(),
        }),
        None => serde_json::to_vec(&Version {
            protocol: auth::PROTOCOL.into(),
        }),
    }
    .unwrap_or_default();
    [&(body.len() as u32).to_be_bytes()[..], &body].concat()
}

/// The member's first frame, checked before the connection gets a thread (no credential work,
/// microseconds): its protocol version, its fields, and under MUNGE its proof of the job's
/// ticket. `answer` is [`door_answer`].
pub(super) fn admit(
    first: &[u8],
    label: &str,
    ticket: Option<&auth::Ticket>,
    answer: &[u8],
) -> Result<Opening, DoorRefusal> {
    let bad = |e: String| (Refusal::Incomplete, e, None);
    let version: Version = wire::decode(first).map_err(|e| bad(e.to_string()))?;
    if version.protocol != auth::PROTOCOL {
        return Err((
            Refusal::OtherVersion,
            format!(
                "speaks protocol '{}', this worker {} (the workers of one check must be the same version)",
                nccl_check_host::text::escape_clipped(&version.protocol, 40),
                auth::PROTOCOL
            ),
            Some(answer.to_vec()),
        ));
    }
    let opening: Opening = wire::decode(first).map_err(|e| bad(e.to_string()))?;
    messages::check_nonce(&opening.nonce).map_err(bad)?;
    session::check_key(&opening.key).map_err(bad)?;
    messages::check_addr(&opening.from).map_err(bad)?;
    messages::check_addr(&opening.to).map_err(bad)?;
    let Some(t) = ticket else {
        return Ok(opening);
    };
    let offer = || Some(answer.to_vec());
    match opening.ticket.as_deref() {
        None => Err((
            Refusal::NoTicket,
            "an opening without a proof of the job's ticket: answered with the ticket".into(),
            offer(),
        )),
        Some(p) => match auth::check_ticket_proof(&t.key, label, &opening.ticket_fields(), p) {
            Ok(()) => Ok(opening),
            Err(e) => Err((Refusal::WrongProof, e, offer())),
        },
    }
}

/// This side's greeting, written at the door as soon as the opening is admitted (no thread,
/// no credential work: a key pair and a nonce), with its key pair and the member's public key.
/// At once, so that a member tells a silent listener on a candidate port from this coordinator
/// in a second or two ([`super::member`]'s `ANSWER_WAIT`), however many handshakes are under
/// way: the slow part (proofs, MUNGE) comes after, on the handshake's own thread and clock.
pub(super) fn greet(
    stream: &TcpStream,
    label: &str,
    opening: Opening,
) -> Result<Opened, (Refusal, String)> {
    let bad = |e: String| (Refusal::Incomplete, e);
    let keys = KeyPair::new().map_err(bad)?;
    let greeting = Greeting {
        protocol: auth::PROTOCOL.into(),
        label: label.into(),
        nonce: auth::nonce().map_err(bad)?,
        key: keys.public_hex(),
    };
    let their_key = session::check_key(&opening.key).map_err(bad)?;
    let body = serde_json::to_vec(&greeting).map_err(|e| bad(e.to_string()))?;
    // A few hundred bytes to a fresh socket: never blocks, even non-blocking.
    let mut w = stream;
    w.write_all(&[&(body.len() as u32).to_be_bytes()[..], &body].concat())
        .map_err(|e| bad(e.to_string()))?;
    Ok((keys, greeting, opening, their_key))
}

/// One member's handshake on a connection as accepted (its opening not read yet), with no
/// ticket: the tests' squatters and coordinators of one connection.
#[cfg(test)]
pub(in crate::meet::rendezvous) fn handshake(
    mut stream: TcpStream,
    world: u32,
    label: &str,
    auth: &dyn Authenticator,
    deadline: Instant,
) -> Result<Arrival, (Refusal, String)> {
    let until = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
    let first = wire::recv_frame(&mut stream, wire::MAX_HELLO_FRAME, until)
        .map_err(|e| (Refusal::Incomplete, e.to_string()))?;
    let answer = door_answer(label, None);
    let opening = admit(&first, label, None, &answer).map_err(|(k, e, _)| (k, e))?;
    let opened = greet(&stream, label, opening)?;
    handshake_opened(stream, opened, world, label, auth, deadline)
}

/// [`handshake`] of a world of 2 that greets at once and runs `busy` before the rest (a
/// coordinator slow to prove itself).
#[cfg(test)]
pub(in crate::meet::rendezvous) fn handshake_late(
    mut stream: TcpStream,
    label: &str,
    auth: &dyn Authenticator,
    deadline: Instant,
    busy: impl FnOnce(),
) -> Result<(), String> {
    let first = wire::recv_frame(&mut stream, wire::MAX_HELLO_FRAME, deadline)
        .map_err(|e| e.to_string())?;
    let answer = door_answer(label, None);
    let opening = admit(&first, label, None, &answer).map_err(|(_, e, _)| e)?;
    let opened = greet(&stream, label, opening).map_err(|(_, e)| e)?;
    busy();
    handshake_opened(stream, opened, 2, label, auth, deadline)
        .map(|_| ())
        .map_err(|(_, e)| e)
}

/// One member's handshake after its opening was admitted and greeted, on its own thread; a
/// refusal says what the connection was.
pub(super) fn handshake_opened(
    mut stream: TcpStream,
    opened: Opened,
    world: u32,
    label: &str,
    auth: &dyn Authenticator,
    deadline: Instant,
) -> Result<Arrival, (Refusal, String)> {
    let deadline = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
    let local = |e: String| (Refusal::Incomplete, e);
    stream
        .set_nonblocking(false)
        .map_err(|e| local(e.to_string()))?;
    stream.set_nodelay(true).map_err(|e| local(e.to_string()))?;
    let from = stream.peer_addr().map_err(|e| local(e.to_string()))?;
    let seen_from = addr_text(from);
    let seen_to = addr_text(stream.local_addr().map_err(|e| local(e.to_string()))?);
    let kind = |k: Refusal| move |e: String| (k, format!("from {from}: {e}"));
    // The one cheap proof there is: a process on this node shows its uid to the kernel. Checked
    // before any credential work, so that another user cannot use up the MUNGE slots.
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if let Some(uid) =
        crate::meet::rendezvous::peer_uid::local_peer_uid(&stream).filter(|&u| u != me)
    {
        return Err(kind(Refusal::OtherUser)(format!(
            "a process of uid {uid} on this node (this check runs as uid {me})"
        )));
    }
    let who = kind(Refusal::Incomplete);
    let wire_err = |e: wire::WireError| who(e.to_string());
    let (keys, greeting, opening, their_key) = opened;
    let transcript = transcript_of(label, &greeting, &opening, &seen_from, &seen_to);
    let t_hex = hex::encode(transcript);
    let proof = Proof {
        from: seen_from.clone(),
        to: seen_to.clone(),
        proof: auth
            .prove(&auth::context("coordinator", label, &t_hex, b""), deadline)
            .map_err(|e| kind(Refusal::Busy)(e.to_string()))?,
    };
    wire::send(&mut stream, &proof, deadline).map_err(wire_err)?;
    if opening.from != seen_from || opening.to != seen_to {
        // The member will see it too and look elsewhere; this side just names it.
        return Err((
            Refusal::Relay,
            format!(
                "a connection relayed by another process: it left {} for {}, and arrived from {seen_from} at {seen_to}",
                nccl_check_host::text::escape_control(&opening.from),
                nccl_check_host::text::escape_control(&opening.to)
            ),
        ));
    }
    let hello: Hello =
        wire::recv(&mut stream, wire::MAX_HELLO_FRAME, deadline).map_err(wire_err)?;
    messages::check_proof(&hello.proof).map_err(who)?;
    messages::check_hello(&hello.body, world).map_err(who)?;
    let body = serde_json::to_vec(&hello.body).map_err(|e| local(e.to_string()))?;
    auth.verify(
        &auth::context("member", label, &t_hex, &body),
        &hello.proof,
        deadline,
    )
    .map_err(|e| {
        let k = refusal_of_verify(&e);
        kind(k)(format!(
            "claiming process rank {}: {e}",
            hello.body.member.proc_rank
        ))
    })?;
    let keys = Keys::derive(
        &keys,
        &their_key,
        auth.psk(),
        &transcript,
        Role::Coordinator,
    )
    .map_err(who)?;
    let mut session = Session::new(stream, keys);
    // Sealed: the member knows from it that it is in, and that a close before it was a drop.
    session
        .send(&messages::Accepted { accepted: true }, deadline)
        .map_err(wire_err)?;
    Ok(Arrival {
        member: hello.body.member,
        session,
    })
}
