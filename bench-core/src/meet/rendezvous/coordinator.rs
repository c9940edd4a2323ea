//! The coordinator's side: listen on the rendezvous address, authenticate every member in a
//! handshake of its own (many at once, each with a short deadline, so a slow or idle stranger
//! never delays the real members), then hand everyone the NCCL unique id and the member list,
//! sealed under each connection's keys.

use super::absent;
use super::auth::{self, Authenticator};
use super::door::{self, Door};
use super::messages::{
    self, addr_text, transcript_of, Greeting, Hello, Opening, Proof, Version, Welcome,
    HANDSHAKE_TIMEOUT,
};
use super::plane::ControlPlane;
use super::session::{self, KeyPair, Keys, Role, Session};
use super::wire;
use super::{Joined, Member, Setup};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Handshakes served at once; connections beyond this are closed at once (a real member retries).
pub const MAX_PARALLEL_HANDSHAKES: usize = 256;

/// Handshakes at once from one address where proofs run programs (MUNGE): a node's processes
/// fit (a node runs one per GPU). Only openings that proved the job's ticket reach a handshake,
/// so another user's flood never counts here (it is refused at the door); this bounds what the
/// job's own user's processes of one node can take from the others'. Not applied to HMAC
/// proofs, which cost nothing to check (and where one host may run a thousand processes in a
/// test).
pub const MAX_HANDSHAKES_PER_ADDRESS: usize = 32;

/// Refused connections of one kind logged at once, one line each; after them, that kind gets one
/// line per [`REFUSAL_INTERVAL`], which counts the ones not logged since. Rate-limited by kind
/// and by time, never by a total: a stranger retrying every 50 ms neither floods the job's log
/// nor hides a later squatter, relay or wrong proof, however many refusals came before.
const REFUSALS_AT_ONCE: usize = 3;
/// Least time between two lines of one kind once [`REFUSALS_AT_ONCE`] are logged.
pub const REFUSAL_INTERVAL: Duration = Duration::from_secs(5);

/// What a refused connection was, as far as the coordinator can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// Another process holds a candidate port (bound, listening or not): the coordinator
    /// listens on the next one, and members find it there.
    Squatter,
    /// It arrived from another address than it left: a process relays connections.
    Relay,
    /// Its proof is not this step's: another user's or another step's process.
    WrongProof,
    /// Its credential was used before (MUNGE's replay cache): a recording played again.
    Replay,
    /// Another protocol version: a worker of another nccl-check version.
    OtherVersion,
    /// No credential work was free for it in time (a flood of connections?).
    Busy,
    /// It did not complete the handshake: silent, closed early, or not the protocol.
    Incomplete,
    /// It came from another user's process on this node (refused before any credential work).
    OtherUser,
    /// Under MUNGE, an opening without a proof of the job's ticket: a member's first contact
    /// (it gets the ticket and comes again) or another user's process, which cannot open it.
    /// Answered with the ticket and not logged (every member's first contact is one).
    NoTicket,
}

impl Refusal {
    fn plural(self) -> &'static str {
        match self {
            Refusal::Squatter => "candidate port(s) held by another process",
            Refusal::Relay => "relayed connection(s)",
            Refusal::WrongProof => "connection(s) with a wrong proof",
            Refusal::Replay => "connection(s) with a replayed credential",
            Refusal::OtherVersion => "connection(s) of another version",
            Refusal::Busy => "connection(s) refused while busy",
            Refusal::Incomplete => "connection(s) that did not complete the handshake",
            Refusal::OtherUser => "connection(s) from another user's process on this node",
            Refusal::NoTicket => {
                "opening(s) without the job's ticket (answered with the ticket only)"
            }
        }
    }
}

/// One kind's log: lines so far, when the last went out, and refusals since it.
#[derive(Default, Clone, Copy)]
struct KindLog {
    lines: usize,
    last: Option<Instant>,
    since: usize,
}

/// The coordinator's log of refused connections, rate-limited by kind and time.
pub struct Refusals {
    kinds: std::collections::BTreeMap<Refusal, KindLog>,
    interval: Duration,
}

impl Refusals {
    /// A log that gives each kind a line per `interval` after its first [`REFUSALS_AT_ONCE`].
    pub fn every(interval: Duration) -> Refusals {
        Refusals {
            kinds: Default::default(),
            interval,
        }
    }

    /// Counts one refusal; the line to print when its kind may print one now.
    pub fn note(&mut self, kind: Refusal, why: &str) -> Option<String> {
        let now = Instant::now();
        let k = self.kinds.entry(kind).or_default();
        let due = k.lines < REFUSALS_AT_ONCE
            || k.last
                .is_none_or(|t| now.duration_since(t) >= self.interval);
        if !due {
            k.since += 1;
            return None;
        }
        let more = match k.since {
            0 => String::new(),
            n => format!(" ({n} more of this kind not logged since the last)"),
        };
        k.lines += 1;
        k.last = Some(now);
        k.since = 0;
        Some(format!(
            "nccl-check: rendezvous: refused a connection: {}{more}",
            nccl_check_host::text::escape_control(why)
        ))
    }

    /// Counts one refusal and prints its line when its kind may print one now.
    fn log(&mut self, kind: Refusal, why: &str) {
        if let Some(line) = self.note(kind, why) {
            nccl_check_host::errln!("{line}");
        }
    }

    /// The refusals not printed since their kind's last line, by kind, in one line; `None`
    /// when every one was.
    pub fn unlogged(&self) -> Option<String> {
        let parts: Vec<String> = self
            .kinds
            .iter()
            .filter(|(_, k)| k.since > 0)
            .map(|(kind, k)| format!("{} {}", k.since, kind.plural()))
            .collect();
        (!parts.is_empty()).then(|| {
            format!(
                "nccl-check: rendezvous: also refused, not logged one by one: {}",
                parts.join(", ")
            )
        })
    }
}

/// One member that passed its handshake.
pub(super) struct Arrival {
    member: Member,
    session: Session,
}

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
    let ips: Vec<IpAddr> = super::resolve::resolve_host(host, 0, deadline)
        .map_err(|e| format!("the rendezvous host: {e}"))?
        .into_iter()
        .map(|a| a.ip())
        .collect();
    let ip = ips
        .iter()
        .find(|i| i.is_ipv4())
        .or(ips.first())
        .copied()
        .ok_or_else(|| format!("the rendezvous host {host} resolves to no address"))?;
    if ip.is_loopback() && host != "localhost" {
        return Ok(IpAddr::from([0, 0, 0, 0]));
    }
    Ok(ip)
}

/// This side's key pair, its greeting, the member's opening and its public key.
type Opened = (KeyPair, Greeting, Opening, [u8; 32]);

/// Why an opening is refused at the door: the kind, the words, and the frame to answer with
/// before closing (the job's ticket; or this side's version, so that a worker of another
/// version names it).
type DoorRefusal = (Refusal, String, Option<Vec<u8>>);

/// What the coordinator answers at the door: the job's ticket under MUNGE, else its version.
fn door_answer(label: &str, ticket: Option<&auth::Ticket>) -> Vec<u8> {
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
fn admit(
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
fn greet(stream: &TcpStream, label: &str, opening: Opening) -> Result<Opened, (Refusal, String)> {
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
pub(super) fn handshake(
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
pub(super) fn handshake_late(
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
fn handshake_opened(
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
    if let Some(uid) = super::peer_uid::local_peer_uid(&stream).filter(|&u| u != me) {
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

/// The kind of a proof that did not verify.
fn refusal_of_verify(why: &auth::AuthError) -> Refusal {
    match why {
        auth::AuthError::Replayed(_) => Refusal::Replay,
        auth::AuthError::Busy(_) => Refusal::Busy,
        auth::AuthError::Refused(_) => Refusal::WrongProof,
    }
}

/// A handshake's result, by its id.
type Done = (u64, Result<Arrival, (Refusal, String)>);

/// The coordinator's side while members arrive: the slots of those in, the handshakes under
/// way (by id, with a second handle to each socket, so that the ones still running when
/// everyone is in can be cut off at once instead of holding up the welcome), how many come
/// from each address (one address, a stranger's node, cannot take them all), and the log of
/// refusals.
struct Admission<'a> {
    setup: &'a Setup<'a>,
    me: &'a Member,
    port: u16,
    ticket: Option<auth::Ticket>,
    /// What the door answers an opening it refuses ([`door_answer`]).
    answer: Vec<u8>,
    slots: Vec<Option<Arrival>>,
    missing: u32,
    refused: Refusals,
    pending: std::collections::HashMap<u64, (TcpStream, IpAddr)>,
    per_address: std::collections::HashMap<IpAddr, usize>,
    next_id: u64,
    tx: mpsc::Sender<Done>,
    rx: mpsc::Receiver<Done>,
}

impl<'a> Admission<'a> {
    fn new(setup: &'a Setup<'a>, me: &'a Member, port: u16, ticket: Option<auth::Ticket>) -> Self {
        let (tx, rx) = mpsc::channel();
        Admission {
            setup,
            me,
            port,
            answer: door_answer(&setup.label, ticket.as_ref()),
            ticket,
            slots: (0..setup.world).map(|_| None).collect(),
            missing: setup.world - 1,
            refused: Refusals::every(REFUSAL_INTERVAL),
            pending: Default::default(),
            per_address: Default::default(),
            next_id: 0,
            tx,
            rx,
        }
    }

    /// Takes every handshake that ended: a member in its slot, or a refusal logged.
    fn take_done(&mut self) {
        while let Ok((id, result)) = self.rx.try_recv() {
            // The address as taken at the door: a closed socket no longer has one.
            if let Some((_, ip)) = self.pending.remove(&id) {
                if let Some(n) = self.per_address.get_mut(&ip) {
                    *n -= 1;
                    if *n == 0 {
                        self.per_address.remove(&ip);
                    }
                }
            }
            match result {
                Ok(a) => {
                    let r = a.member.proc_rank as usize;
                    if r == self.me.proc_rank as usize || self.slots[r].is_some() {
                        nccl_check_host::errln!(
                            "nccl-check: rendezvous: process rank {r} joined twice; the second ({}) is ignored",
                            nccl_check_host::text::escape_control(&a.member.host)
                        );
                    } else {
                        self.slots[r] = Some(a);
                        self.missing -= 1;
                    }
                }
                Err((kind, why)) => self.refused.log(kind, &why),
            }
        }
    }

    /// The error at the deadline: who never came (nodes, then ranks).
    fn absent(&self) -> String {
        let world = self.setup.world;
        let absent: Vec<u32> = (0..world)
            .filter(|&r| r != self.me.proc_rank && self.slots[r as usize].is_none())
            .collect();
        let joined: Vec<&str> = (self.slots.iter().flatten())
            .map(|a| a.member.host.as_str())
            .chain([self.me.host.as_str()])
            .collect();
        format!(
            "rendezvous at {}:{}: {}",
            self.setup.host,
            self.port,
            absent::describe(self.setup.expected.as_deref(), &joined, &absent, world)
        )
    }

    /// Logs the connections the door closed in its last pass.
    fn log_door(&mut self, pass: &door::Pass) {
        let silent = format!(
            "a connection that did not send its opening within {} s (or was pushed out by newer ones)",
            HANDSHAKE_TIMEOUT.as_secs()
        );
        let broken = "a connection that closed before its opening was whole, or announced one over the size limit";
        for why in std::iter::repeat_n(silent.as_str(), pass.silent)
            .chain(std::iter::repeat_n(broken, pass.broken))
        {
            self.refused.log(Refusal::Incomplete, why);
        }
    }

    /// One connection whose opening is in: refused at the door (answered with the ticket or
    /// this side's version), closed when too many handshakes are under way (from anywhere, or
    /// from its address where proofs run programs), or greeted and handed to a thread of its
    /// own, which reports on `tx`.
    fn enter<'scope>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        stream: TcpStream,
        first: &[u8],
    ) where
        'a: 'scope,
    {
        let opening = match admit(first, &self.setup.label, self.ticket.as_ref(), &self.answer) {
            Ok(o) => o,
            Err((kind, why, reply)) => {
                let from = stream
                    .peer_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                // A ticketless opening is every member's first contact: not logged.
                if kind != Refusal::NoTicket {
                    self.refused.log(kind, &format!("from {from}: {why}"));
                }
                // A few hundred bytes to a fresh socket: never blocks. Then closed.
                if let Some(r) = reply {
                    let _ = (&stream).write_all(&r);
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                }
                return;
            }
        };
        if self.pending.len() >= MAX_PARALLEL_HANDSHAKES {
            // Closed: a real member says so and retries.
            let why = format!(
                "{MAX_PARALLEL_HANDSHAKES} handshakes under way already (a flood of connections?)"
            );
            self.refused.log(Refusal::Busy, &why);
            return;
        }
        let Some(ip) = stream.peer_addr().ok().map(|a| a.ip().to_canonical()) else {
            return;
        };
        let here = self.per_address.get(&ip).copied().unwrap_or(0);
        if here >= MAX_HANDSHAKES_PER_ADDRESS && self.setup.auth.proofs_run_programs() {
            let why = format!(
                "from {ip}: {MAX_HANDSHAKES_PER_ADDRESS} handshakes from that address under way already (a flood of connections?)"
            );
            self.refused.log(Refusal::Busy, &why);
            return;
        }
        let opened = match greet(&stream, &self.setup.label, opening) {
            Ok(o) => o,
            Err((kind, why)) => return self.refused.log(kind, &format!("from {ip}: {why}")),
        };
        let Ok(handle) = stream.try_clone() else {
            return;
        };
        self.per_address.insert(ip, here + 1);
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, (handle, ip));
        let tx = self.tx.clone();
        let (world, label, auth) = (self.setup.world, &self.setup.label, self.setup.auth);
        let deadline = self.setup.deadline;
        scope.spawn(move || {
            let r = handshake_opened(stream, opened, world, label, auth, deadline);
            let _ = tx.send((id, r));
        });
    }

    /// Passes through the door until every other process is in, or the deadline.
    fn run<'scope>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        door: &mut Door,
    ) -> Result<(), String>
    where
        'a: 'scope,
    {
        loop {
            self.take_done();
            if self.missing == 0 {
                return Ok(());
            }
            let Some(left) = self.setup.deadline.checked_duration_since(Instant::now()) else {
                return Err(self.absent());
            };
            let pass = door
                .pass(left.min(Duration::from_millis(20)))
                .map_err(|e| format!("rendezvous: accept on port {}: {e}", self.port))?;
            self.log_door(&pass);
            for (stream, first) in pass.ready {
                self.enter(scope, stream, &first);
            }
        }
    }

    /// Whoever is still in a handshake is not needed (or it is too late): cut off, so that the
    /// scope's threads end now; the refusals not logged yet, counted.
    fn close(&mut self) {
        if let Some(line) = self.refused.unlogged() {
            nccl_check_host::errln!("{line}");
        }
        for (_, (s, _)) in self.pending.drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
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
    use super::*;

    /// Regression: after three refusals of any kind only a count was logged, so an early stranger
    /// hid a later relay; then each kind had three lines and a count for good, so a hundred
    /// strangers' wrong proofs hid a later one. Now each kind has three lines at once, then a
    /// line per interval that counts the ones not logged; a held candidate port is a kind.
    #[test]
    fn refusals_are_rate_limited_by_kind_and_time_not_by_count() {
        let interval = Duration::from_millis(500);
        let mut r = Refusals::every(interval);
        let logged = (0..100)
            .filter(|i| {
                r.note(Refusal::WrongProof, &format!("stranger {i}"))
                    .is_some()
            })
            .count();
        assert_eq!(logged, REFUSALS_AT_ONCE);
        let relay = r.note(Refusal::Relay, "a connection relayed by another process");
        assert!(relay.is_some_and(|l| l.contains("relayed by another process")));
        let squat = r.note(Refusal::Squatter, "candidate port 29501 is held");
        assert!(squat.is_some_and(|l| l.ends_with("candidate port 29501 is held")));
        let replay = r.note(Refusal::Replay, "unmunge: Replayed credential");
        assert!(replay.is_some_and(|l| l.contains("Replayed credential")));
        assert_eq!(
            r.unlogged().as_deref(),
            Some("nccl-check: rendezvous: also refused, not logged one by one: 97 connection(s) with a wrong proof")
        );
        // After the interval, the next wrong proof is logged, with the count since the last line.
        std::thread::sleep(interval + Duration::from_millis(100));
        let later = r.note(
            Refusal::WrongProof,
            "from 10.0.0.9:4000: the squatter's proof",
        );
        assert_eq!(
            later.as_deref(),
            Some("nccl-check: rendezvous: refused a connection: from 10.0.0.9:4000: the squatter's proof (97 more of this kind not logged since the last)")
        );
        assert_eq!(r.unlogged(), None);
        assert!(r.note(Refusal::WrongProof, "at once again").is_none());
        for _ in 0..5 {
            let _ = r.note(Refusal::Relay, "again");
        }
        let u = r.unlogged().unwrap_or_default();
        assert!(
            u.ends_with(": 3 relayed connection(s), 1 connection(s) with a wrong proof"),
            "{u}"
        );
    }

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

    #[test]
    fn a_proof_that_does_not_verify_is_classified_by_its_reason() {
        use auth::AuthError;
        let why = || "unmunge: Replayed credential".to_string();
        assert_eq!(
            refusal_of_verify(&AuthError::Replayed(why())),
            Refusal::Replay
        );
        assert_eq!(refusal_of_verify(&AuthError::Busy(why())), Refusal::Busy);
        assert_eq!(
            refusal_of_verify(&AuthError::Refused(why())),
            Refusal::WrongProof
        );
    }
}
