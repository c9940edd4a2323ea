//! One try at one candidate port: connect (the name resolved within the deadline), the opening
//! (made with the step's key, which under MUNGE is the job's ticket once it is known, else the
//! offer taken), the coordinator's greeting insisted on before this process says who it is,
//! the hello, the sealed acceptance; what a holder that is not the coordinator was (a [`Miss`]).

use crate::meet::rendezvous::auth;
use crate::meet::rendezvous::messages::{
    self, addr_text, Endpoints, Greeting, Hello, Opening, TicketOffer, Version, HANDSHAKE_TIMEOUT,
};
use crate::meet::rendezvous::session::{Handshake, Session};
use crate::meet::rendezvous::wire::{self, WireError};
use crate::meet::rendezvous::{Member, Setup};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A session with the step's authenticated coordinator, before the welcome.
pub(super) struct Admitted {
    pub(super) session: Session,
    pub(super) port: u16,
}

/// Why one try at a candidate port did not reach the coordinator.
#[derive(Debug, Clone)]
pub(super) enum Miss {
    /// Nothing listens there (yet), or it closed at once: the coordinator may be starting, or
    /// busy with others; worth trying again.
    Open(String),
    /// Something holds the port and is not this step's coordinator: it answered and could not
    /// prove itself, relays the connection, or said nothing for [`ANSWER_WAIT`] (or, after
    /// its greeting, for a handshake's time).
    Held(String),
    /// The coordinator proved itself and then closed the connection before accepting this
    /// process (busy with a flood of connections, or it refused this hello): said once, and
    /// tried again.
    Dropped(String),
    /// The coordinator said, proven over UDP ([`crate::meet::rendezvous::beacon`]), that it can listen on no
    /// candidate port: the member ends at once.
    Failed(String),
}

/// Least time between two asks at one port's UDP twin while its connections are refused: a
/// datagram of 1 KiB a second per candidate port and member while the coordinator is not up
/// (about what its refused TCP tries send), and an ERROR a second after the coordinator fails.
const ASK_EVERY: Duration = Duration::from_secs(1);
/// Longest wait for an answer to one ask.
const ASK_WAIT: Duration = Duration::from_millis(100);

/// Longest wait for the coordinator's first answer (its greeting) on a connection it accepted.
/// The coordinator greets at its door, on the thread that accepts, as soon as the opening is in
/// (Noise's answer: no credential work), however many handshakes are under way; the rest comes
/// after, within [`HANDSHAKE_TIMEOUT`]. So a port where nothing
/// answers within this is held by a listener that is not this step's coordinator: a silent
/// holder of every candidate ends the member in about twice this ([`super::HELD_TRIES`]), not
/// 20 s as when the greeting waited for a handshake thread (and the member 10 s for it).
const ANSWER_WAIT: Duration = Duration::from_millis(1500);

/// A wire error while the port's holder is expected to speak, after waiting `waited`;
/// `greeted`: it had sent a greeting.
fn silence(e: WireError, waited: Duration, greeted: bool) -> Miss {
    match e {
        WireError::Deadline if greeted => Miss::Held(format!(
            "greeted, then said nothing for {:.1} s (not this step's coordinator, or one too busy to prove itself)",
            waited.as_secs_f64()
        )),
        WireError::Deadline => Miss::Held(format!(
            "accepted the connection and said nothing for {:.1} s (a silent listener, not this step's coordinator)",
            waited.as_secs_f64()
        )),
        WireError::Closed | WireError::Io(_) => Miss::Open(e.to_string()),
        other => Miss::Held(format!("not an nccl-check coordinator: {other}")),
    }
}

/// What a refused connection to `addr` means: on the coordinator's node, whether the port is
/// bound by a process that does not listen; elsewhere, whether the coordinator says (proven,
/// over UDP, asked at most every [`ASK_EVERY`]) that it can listen on no candidate. Otherwise
/// nothing listens there yet, which is no reason to give up.
fn refused(
    setup: &Setup,
    addr: SocketAddr,
    e: std::io::Error,
    asked: &mut Option<Instant>,
) -> Miss {
    if e.kind() != std::io::ErrorKind::ConnectionRefused {
        return Miss::Open(e.to_string());
    }
    if bound_without_listener(addr) {
        return Miss::Held(
            "bound by another process that does not listen on it (so the coordinator cannot listen there)"
                .into(),
        );
    }
    if asked.is_none_or(|t| t.elapsed() >= ASK_EVERY) {
        *asked = Some(Instant::now());
        let wait = ASK_WAIT.min(setup.deadline.saturating_duration_since(Instant::now()));
        let until = setup.deadline.min(Instant::now() + Duration::from_secs(2));
        // The first candidate's thread asks at the step's spread ports too (a stranger may
        // hold the twins as well).
        let mut at = vec![addr];
        if setup.ports.first() == Some(&addr.port()) {
            let spread = crate::meet::rendezvous::beacon::beacon_ports(&setup.label, setup.auth);
            at.extend(spread.into_iter().map(|p| SocketAddr::new(addr.ip(), p)));
        }
        if let Some(why) =
            crate::meet::rendezvous::beacon::inquire(&at, &setup.label, setup.auth, wait, until)
        {
            return Miss::Failed(why);
        }
    }
    Miss::Open(e.to_string())
}

/// One try at one port: connect, open, read the greeting (which proves the coordinator holds
/// the step's key), and only then say who this process is. `track` keeps a handle on the socket
/// so that another thread can cut the try short once the coordinator is found elsewhere (false:
/// it was found already).
pub(super) fn attempt(
    setup: &Setup,
    me: &Member,
    port: u16,
    track: &dyn Fn(Option<&TcpStream>) -> bool,
    known: &TicketKey,
    asked: &mut Option<Instant>,
) -> Result<Admitted, Miss> {
    let left = setup
        .deadline
        .checked_duration_since(Instant::now())
        .ok_or_else(|| Miss::Open("deadline passed".into()))?;
    let host = &setup.host;
    let addr = crate::meet::rendezvous::resolve::preferred(host, port, setup.deadline)
        .and_then(|a| a.ok_or_else(|| format!("{host} resolves to no address")))
        .map_err(Miss::Open)?;
    let mut stream = TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(1)))
        .map_err(|e| refused(setup, addr, e, asked))?;
    if !track(Some(&stream)) {
        return Err(Miss::Open(
            "the coordinator was found on another port".into(),
        ));
    }
    let r = attempt_on(setup, &mut stream, known).and_then(|keys| {
        let mut session = Session::new(stream, keys);
        accepted(setup, me, &mut session)?;
        Ok(session)
    });
    let _ = track(None);
    r.map(|session| Admitted { session, port })
}

/// Says who this process is, sealed, and waits for the coordinator's word that it is in (within
/// the coordinator's handshake's time, on a loaded host).
fn accepted(setup: &Setup, me: &Member, session: &mut Session) -> Result<(), Miss> {
    let deadline = setup
        .deadline
        .min(Instant::now() + HANDSHAKE_TIMEOUT + Duration::from_secs(1));
    let hello = Hello {
        world: setup.world,
        member: me.clone(),
    };
    session
        .send(&hello, deadline)
        .map_err(|e| silence(e, HANDSHAKE_TIMEOUT, true))?;
    match session.recv::<messages::Accepted>(wire::MAX_HELLO_FRAME, deadline) {
        Ok(a) if a.accepted => Ok(()),
        Ok(_) => Err(Miss::Held("the coordinator did not accept this process".into())),
        Err(WireError::Closed | WireError::Io(_)) => Err(Miss::Dropped(
            "the coordinator closed the connection before accepting this process (busy with other connections, or it refused this process's hello: its own output says which)".into(),
        )),
        Err(WireError::Deadline) => Err(Miss::Dropped(
            "the coordinator did not accept this process in time (busy with other connections?)"
                .into(),
        )),
        Err(e) => Err(Miss::Held(format!("after the handshake: {e}"))),
    }
}

/// Whether `addr`, which refused a connection, is bound by a socket that does not listen: tried
/// as the coordinator binds (SO_REUSEADDR, the same address), so it fails exactly where the
/// coordinator could not listen. Answers only on the coordinator's own node (elsewhere the
/// address is not this machine's, and a refused connection may be a coordinator not started
/// yet); the probe socket never listens and is closed at once, so it never keeps the
/// coordinator from binding (two SO_REUSEADDR sockets that do not listen may share a port).
fn bound_without_listener(addr: SocketAddr) -> bool {
    use nix::sys::socket::{self, sockopt::ReuseAddr, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsRawFd;
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let Ok(fd) = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None) else {
        return false;
    };
    let _ = socket::setsockopt(&fd, ReuseAddr, &true);
    let at = socket::SockaddrStorage::from(addr);
    socket::bind(fd.as_raw_fd(), &at) == Err(nix::errno::Errno::EADDRINUSE)
}

/// A port held by the coordinator of the step labelled `label`.
fn other_step(label: &str) -> Miss {
    Miss::Held(format!(
        "the coordinator of another job step ('{}')",
        nccl_check_host::text::escape_clipped(label, 60)
    ))
}

/// The coordinator's first message, if it is this step's coordinator's greeting: the same
/// protocol version (else named: another nccl-check version, or not nccl-check), this step's
/// label (else the coordinator of another step holds the port) and Noise's answer (else it
/// could not open this process's opening: another key's).
fn greeting_of(setup: &Setup, first: &[u8]) -> Result<String, Miss> {
    let foreign = |e| Miss::Held(format!("not an nccl-check coordinator ({e})"));
    let version: Version = wire::decode(first).map_err(foreign)?;
    if version.protocol != auth::PROTOCOL {
        return Err(Miss::Held(format!(
            "a process speaking protocol '{}', not {} (a worker of another nccl-check version, or not nccl-check)",
            nccl_check_host::text::escape_clipped(&version.protocol, 40),
            auth::PROTOCOL
        )));
    }
    let greeting: Greeting = wire::decode(first).map_err(foreign)?;
    if greeting.label != setup.label {
        return Err(other_step(&greeting.label));
    }
    greeting.noise.ok_or_else(|| {
        Miss::Held(
            "answers like a coordinator of this step and cannot open this process's handshake (another key's: a squatter)"
                .into(),
        )
    })
}

/// The key of the job's ticket, once a coordinator's offer was opened (MUNGE).
pub(super) type TicketKey = Mutex<Option<Vec<u8>>>;

/// A coordinator's [`TicketOffer`] in `first`, if that is what it is: the key inside is kept
/// for the next try (the connection is closed after an offer). Another step's label, a ticket
/// that does not open as this job's user's, or one that changes nothing is a held port.
fn take_offer(
    setup: &Setup,
    first: &[u8],
    known: &TicketKey,
    deadline: Instant,
    proved: bool,
) -> Option<Miss> {
    let offer: TicketOffer = wire::decode(first).ok()?;
    if offer.label != setup.label {
        return Some(other_step(&offer.label));
    }
    let key = match setup.auth.open_ticket(&offer.ticket, deadline) {
        Ok(k) => k,
        // This node's MUNGE busy or slow: nothing said about the port's holder yet.
        Err(e @ auth::AuthError::Busy(_)) => {
            return Some(Miss::Open(format!("opening the coordinator's ticket: {e}")))
        }
        Err(e) => {
            return Some(Miss::Held(format!(
                "not this step's coordinator: {}: a squatter",
                nccl_check_host::text::escape_control(&e.to_string())
            )))
        }
    };
    let mut k = known.lock().unwrap_or_else(|p| p.into_inner());
    // The same key again, after an opening made with it: refused for another reason. (An
    // opening sent before another port's thread learnt the key had none.)
    if proved && k.as_ref() == Some(&key) {
        return Some(Miss::Held(
            "the coordinator refused an opening made with its own ticket".into(),
        ));
    }
    *k = Some(key);
    Some(Miss::Open(
        "the coordinator answered with the job's ticket; trying again with it".into(),
    ))
}

/// This process's opening and its side of the handshake: made with the step's key (under MUNGE
/// the job's ticket's, once known; before that, no Noise message, which gets the ticket).
fn opening_of(
    setup: &Setup,
    ends: &Endpoints,
    known: &TicketKey,
) -> Result<(Opening, Option<Handshake>), String> {
    let ticket = known.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let key = ticket.as_deref().unwrap_or(setup.auth.psk());
    let psk = (!key.is_empty()).then(|| auth::noise_psk(key, &setup.label));
    let mut handshake = (psk.as_ref())
        .map(|psk| Handshake::new(psk, &setup.label, true))
        .transpose()?;
    let noise = handshake.as_mut().map(|h| h.write(ends)).transpose()?;
    let protocol = auth::PROTOCOL.into();
    Ok((Opening { protocol, noise }, handshake))
}

fn attempt_on(
    setup: &Setup,
    stream: &mut TcpStream,
    known: &TicketKey,
) -> Result<snow::StatelessTransportState, Miss> {
    let open = |e: String| Miss::Open(e);
    stream.set_nodelay(true).map_err(|e| open(e.to_string()))?;
    let answer_by = setup.deadline.min(Instant::now() + ANSWER_WAIT);
    // The connection's two ends, as this side sees them.
    let mine = Endpoints {
        from: addr_text(stream.local_addr().map_err(|e| open(e.to_string()))?),
        to: addr_text(stream.peer_addr().map_err(|e| open(e.to_string()))?),
    };
    // Sent at once: the coordinator answers it with its greeting.
    let (opening, handshake) = opening_of(setup, &mine, known).map_err(open)?;
    let quiet = |e| silence(e, ANSWER_WAIT, false);
    wire::send(stream, &opening, answer_by).map_err(quiet)?;
    let first = wire::recv_frame(stream, wire::MAX_HELLO_FRAME, answer_by).map_err(quiet)?;
    let deadline = setup.deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
    if let Some(miss) = take_offer(setup, &first, known, deadline, handshake.is_some()) {
        return Err(miss);
    }
    let noise = greeting_of(setup, &first)?;
    let Some(mut handshake) = handshake else {
        return Err(Miss::Held(
            "greeted an opening without the job's ticket: not this step's coordinator".into(),
        ));
    };
    // Only a holder of the step's key can answer so: a squatter's answer does not open. Then
    // whether it saw the same connection says whether anything sits between the two.
    let theirs: Endpoints = handshake.read(&noise).map_err(|e| {
        Miss::Held(format!(
            "answers like a coordinator but cannot prove it is this step's ({e}): a squatter"
        ))
    })?;
    theirs
        .check()
        .map_err(|e| Miss::Held(format!("not this step's coordinator: {e}")))?;
    if theirs != mine {
        return Err(Miss::Held(format!(
            "held by a process that relays connections to this step's coordinator at {} (it sees this connection arrive from {}, this process left {} for {})",
            theirs.to, theirs.from, mine.from, mine.to
        )));
    }
    handshake.done().map_err(open)
}
