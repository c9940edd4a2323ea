//! The coordinator's door while members arrive: each opening admitted or refused, a handshake
//! thread for each admitted one (at most so many at once), the arrivals in
//! their slots, the refusals logged, and who never came.

use super::handshake::{admit, door_answer, greet, handshake_opened, Arrival};
use super::refusals::{Refusal, Refusals, REFUSAL_INTERVAL};
use crate::meet::rendezvous::door::{self, Door};
use crate::meet::rendezvous::messages::HANDSHAKE_TIMEOUT;
use crate::meet::rendezvous::{absent, auth, Member, Setup};
use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Handshakes served at once; connections beyond this are closed at once (a real member retries).
pub const MAX_PARALLEL_HANDSHAKES: usize = 256;

/// A handshake's result, by its id.
type Done = (u64, Result<Arrival, (Refusal, String)>);

/// The coordinator's side while members arrive: the slots of those in, the handshakes under
/// way (by id, with a second handle to each socket, so that the ones still running when
/// everyone is in can be cut off at once instead of holding up the welcome), and the log of
/// refusals.
pub(super) struct Admission<'a> {
    setup: &'a Setup<'a>,
    me: &'a Member,
    port: u16,
    ticket: Option<auth::Ticket>,
    /// The Noise pre-shared key every opening must be made with.
    psk: [u8; 32],
    /// What the door answers an opening it refuses ([`door_answer`]).
    answer: Vec<u8>,
    pub(super) slots: Vec<Option<Arrival>>,
    missing: u32,
    pub(super) refused: Refusals,
    pending: std::collections::HashMap<u64, TcpStream>,
    next_id: u64,
    tx: mpsc::Sender<Done>,
    rx: mpsc::Receiver<Done>,
}

impl<'a> Admission<'a> {
    pub(super) fn new(
        setup: &'a Setup<'a>,
        me: &'a Member,
        port: u16,
        ticket: Option<auth::Ticket>,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        Admission {
            setup,
            me,
            port,
            answer: door_answer(&setup.label, ticket.as_ref()),
            psk: auth::noise_psk(
                ticket.as_ref().map_or(setup.auth.psk(), |t| &t.key),
                &setup.label,
            ),
            ticket,
            slots: (0..setup.world).map(|_| None).collect(),
            missing: setup.world - 1,
            refused: Refusals::every(REFUSAL_INTERVAL),
            pending: Default::default(),
            next_id: 0,
            tx,
            rx,
        }
    }

    /// Takes every handshake that ended: a member in its slot, or a refusal logged.
    fn take_done(&mut self) {
        while let Ok((id, result)) = self.rx.try_recv() {
            self.pending.remove(&id);
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
    /// this side's greeting without a Noise message), closed when too many handshakes are under
    /// way, or greeted and handed to a thread of its
    /// own, which reports on `tx`.
    fn enter<'scope>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        stream: TcpStream,
        first: &[u8],
    ) where
        'a: 'scope,
    {
        let ticket = self.ticket.as_ref();
        let opening = match admit(first, &self.setup.label, &self.psk, ticket, &self.answer) {
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
        let opened = match greet(&stream, &self.setup.label, opening) {
            Ok(o) => o,
            Err((kind, why)) => return self.refused.log(kind, &format!("from {ip}: {why}")),
        };
        let Ok(handle) = stream.try_clone() else {
            return;
        };
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, handle);
        let tx = self.tx.clone();
        let (world, deadline) = (self.setup.world, self.setup.deadline);
        scope.spawn(move || {
            let r = handshake_opened(stream, opened, world, deadline);
            let _ = tx.send((id, r));
        });
    }

    /// Passes through the door until every other process is in, or the deadline.
    pub(super) fn run<'scope>(
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
    pub(super) fn close(&mut self) {
        if let Some(line) = self.refused.unlogged() {
            nccl_check_host::errln!("{line}");
        }
        for (_, s) in self.pending.drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}
