//! The coordinator's side of one member's handshake: the opening admitted at the door (its
//! version, and Noise's first message made with the step's key, which under MUNGE is the job's
//! ticket), the greeting, then on the handshake's own thread the member's sealed hello.

use super::refusals::Refusal;
use crate::meet::rendezvous::auth;
use crate::meet::rendezvous::messages::{
    self, addr_text, Endpoints, Greeting, Hello, Opening, Version, HANDSHAKE_TIMEOUT,
};
use crate::meet::rendezvous::session::{Handshake, Session};
use crate::meet::rendezvous::wire::{self, WireError};
use crate::meet::rendezvous::Member;
use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

/// One member that passed its handshake.
pub(in crate::meet::rendezvous) struct Arrival {
    pub(super) member: Member,
    pub(super) session: Session,
}

/// The connection's keys, and its ends as the member and as this side saw them.
type Opened = (snow::StatelessTransportState, Endpoints, Endpoints);

/// Why an opening is refused at the door: the kind, the words, and the frame to answer with
/// before closing (the job's ticket; or this side's greeting without a Noise message, so that a
/// worker of another version or another key names it).
type DoorRefusal = (Refusal, String, Option<Vec<u8>>);

/// What the coordinator answers at the door: the job's ticket under MUNGE, else its greeting
/// without a Noise message.
pub(super) fn door_answer(label: &str, ticket: Option<&auth::Ticket>) -> Vec<u8> {
    let body = match ticket {
        Some(t) => serde_json::to_vec(&messages::TicketOffer {
            protocol: auth::PROTOCOL.into(),
            label: label.into(),
            ticket: t.credential.clone(),
        }),
        None => serde_json::to_vec(&Greeting {
            protocol: auth::PROTOCOL.into(),
            label: label.into(),
            noise: None,
        }),
    }
    .unwrap_or_default();
    wire::framed(&body).unwrap_or_default()
}

/// The member's first frame, checked before the connection gets a thread (no credential work,
/// microseconds): its protocol version, and Noise's first message made with `psk` (the job's
/// ticket's under MUNGE). `answer` is [`door_answer`].
pub(super) fn admit(
    first: &[u8],
    label: &str,
    psk: &[u8; 32],
    ticket: Option<&auth::Ticket>,
    answer: &[u8],
) -> Result<(Handshake, Endpoints), DoorRefusal> {
    let bad = |e: String| (Refusal::Incomplete, e, None);
    let answered = |kind, why: String| (kind, why, Some(answer.to_vec()));
    let version: Version = wire::decode(first).map_err(|e| bad(e.to_string()))?;
    if version.protocol != auth::PROTOCOL {
        let why = format!(
            "speaks protocol '{}', this worker {} (the workers of one check must be the same version)",
            nccl_check_host::text::escape_clipped(&version.protocol, 40),
            auth::PROTOCOL
        );
        return Err(answered(Refusal::OtherVersion, why));
    }
    let opening: Opening = wire::decode(first).map_err(|e| bad(e.to_string()))?;
    let Some(noise) = opening.noise else {
        return Err(match ticket {
            Some(_) => answered(
                Refusal::NoTicket,
                "an opening without the job's ticket: answered with the ticket".into(),
            ),
            None => answered(
                Refusal::WrongProof,
                "an opening without a handshake (a worker under MUNGE, where this step has a secret)"
                    .into(),
            ),
        });
    };
    let mut handshake = Handshake::new(psk, label, false).map_err(bad)?;
    let ends: Endpoints = handshake
        .read(&noise)
        .map_err(|e| answered(Refusal::WrongProof, e))?;
    ends.check().map_err(bad)?;
    Ok((handshake, ends))
}

/// This side's greeting, written at the door as soon as the opening is admitted (no thread,
/// no credential work: Noise's second message), with the connection's keys and both sides'
/// view of it. At once, so that a member tells a silent listener on a candidate port from this
/// coordinator in a second or two ([`super::member`]'s `ANSWER_WAIT`), however many handshakes
/// are under way.
pub(super) fn greet(
    stream: &TcpStream,
    label: &str,
    (mut handshake, theirs): (Handshake, Endpoints),
) -> Result<Opened, (Refusal, String)> {
    let bad = |e: String| (Refusal::Incomplete, e);
    let seen = Endpoints {
        from: addr_text(stream.peer_addr().map_err(|e| bad(e.to_string()))?),
        to: addr_text(stream.local_addr().map_err(|e| bad(e.to_string()))?),
    };
    let greeting = Greeting {
        protocol: auth::PROTOCOL.into(),
        label: label.into(),
        noise: Some(handshake.write(&seen).map_err(bad)?),
    };
    let body = serde_json::to_vec(&greeting).map_err(|e| bad(e.to_string()))?;
    let frame = wire::framed(&body).map_err(|e| bad(e.to_string()))?;
    // A few hundred bytes to a fresh socket: never blocks, even non-blocking.
    let mut w = stream;
    w.write_all(&frame).map_err(|e| bad(e.to_string()))?;
    Ok((handshake.done().map_err(bad)?, theirs, seen))
}

/// One member's handshake after its opening was admitted and greeted, on its own thread; a
/// refusal says what the connection was.
pub(super) fn handshake_opened(
    stream: TcpStream,
    (keys, theirs, seen): Opened,
    world: u32,
    deadline: Instant,
) -> Result<Arrival, (Refusal, String)> {
    let deadline = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
    let local = |e: String| (Refusal::Incomplete, e);
    stream
        .set_nonblocking(false)
        .map_err(|e| local(e.to_string()))?;
    stream.set_nodelay(true).map_err(|e| local(e.to_string()))?;
    let from = &seen.from;
    let kind = |k: Refusal| move |e: String| (k, format!("from {from}: {e}"));
    if theirs != seen {
        // The member sees it too, in the greeting, and looks elsewhere; this side names it.
        return Err((
            Refusal::Relay,
            format!(
                "a connection relayed by another process: it left {} for {}, and arrived from {} at {}",
                nccl_check_host::text::escape_control(&theirs.from),
                nccl_check_host::text::escape_control(&theirs.to),
                seen.from,
                seen.to
            ),
        ));
    }
    let mut session = Session::new(stream, keys);
    // Its hello opens only under this connection's keys, which need the opening's ephemeral
    // private key: an opening played again by whoever recorded it stops here.
    let hello: Hello = session
        .recv(wire::MAX_HELLO_FRAME, deadline)
        .map_err(|e| match e {
            WireError::Forged | WireError::Replayed => kind(Refusal::Replay)(format!(
                "its hello does not open: an opening recorded and played again ({e})"
            )),
            e => kind(Refusal::Incomplete)(e.to_string()),
        })?;
    messages::check_hello(&hello, world).map_err(kind(Refusal::Incomplete))?;
    // Sealed: the member knows from it that it is in, and that a close before it was a drop.
    session
        .send(&messages::Accepted { accepted: true }, deadline)
        .map_err(|e| kind(Refusal::Incomplete)(e.to_string()))?;
    Ok(Arrival {
        member: hello.member,
        session,
    })
}

/// Whole handshakes on the caller's thread, for the tests of the coordinator, the member and
/// the rendezvous.
#[cfg(test)]
pub(in crate::meet::rendezvous) mod test_handshakes {
    use super::*;

    /// One member's handshake on a connection as accepted (its opening not read yet), with no
    /// ticket: the tests' squatters and coordinators of one connection.
    pub fn handshake(
        mut stream: TcpStream,
        world: u32,
        label: &str,
        auth: &dyn auth::Authenticator,
        deadline: Instant,
    ) -> Result<Arrival, (Refusal, String)> {
        let until = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
        let first = wire::recv_frame(&mut stream, wire::MAX_HELLO_FRAME, until)
            .map_err(|e| (Refusal::Incomplete, e.to_string()))?;
        let answer = door_answer(label, None);
        let psk = auth::noise_psk(auth.psk(), label);
        let opening = admit(&first, label, &psk, None, &answer).map_err(|(k, e, _)| (k, e))?;
        let opened = greet(&stream, label, opening)?;
        handshake_opened(stream, opened, world, deadline)
    }

    /// [`handshake`] of a world of 2 that greets at once and runs `busy` before the rest (a
    /// coordinator slow to accept).
    pub fn handshake_late(
        mut stream: TcpStream,
        label: &str,
        auth: &dyn auth::Authenticator,
        deadline: Instant,
        busy: impl FnOnce(),
    ) -> Result<(), String> {
        let first = wire::recv_frame(&mut stream, wire::MAX_HELLO_FRAME, deadline)
            .map_err(|e| e.to_string())?;
        let answer = door_answer(label, None);
        let psk = auth::noise_psk(auth.psk(), label);
        let opening = admit(&first, label, &psk, None, &answer).map_err(|(_, e, _)| e)?;
        let opened = greet(&stream, label, opening).map_err(|(_, e)| e)?;
        busy();
        handshake_opened(stream, opened, 2, deadline)
            .map(|_| ())
            .map_err(|(_, e)| e)
    }
}
