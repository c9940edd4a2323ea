//! One connection of the control plane as its operations and its watch see it: the sealed
//! session, when the other end was last heard, its beats, and the one frame the watch may read
//! before the operation that wants it.
//!
//! Why beats: a node whose link goes down mid-check closes nothing (no FIN, no RST), so NCCL
//! and the plane's reads would only end at the check's deadline, naming no one (measured on
//! emulated nodes: every rank ended ERROR, none named the node whose veth was down). Every process sends a
//! beat on each of its connections every [`Liveness::every`] (the watch thread while no
//! operation runs, the operation itself while it waits), so a connection that carries nothing
//! for [`Liveness::silence`] is a process that stopped answering. Beats are sealed frames of the
//! authenticated session like any other: nobody without the connection's keys can send one.

use super::frame::Frame;
use crate::meet::rendezvous::session::Session;
use crate::meet::rendezvous::wire::WireError;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How often beats go out, and how long a connection may carry nothing before its process
/// counts as gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    pub every: Duration,
    pub silence: Duration,
}

impl Liveness {
    /// For a check of `timeout`: silence an eighth of it, 5-15 s (well above a stopped or
    /// starved process's pauses: tests/gpu/fabric-faults.txt stops one 0.3 s of every 0.5 s;
    /// well below the budget, so the verdict names the node before the watchdog), beats six
    /// times as often.
    pub fn for_budget(timeout: Duration) -> Liveness {
        let silence = (timeout / 8).clamp(Duration::from_secs(5), Duration::from_secs(15));
        Liveness {
            every: silence / 6,
            silence,
        }
    }
}

impl Default for Liveness {
    fn default() -> Liveness {
        Liveness::for_budget(Duration::from_secs(40))
    }
}

/// Why a connection's process counts as gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// Nothing, not even a beat, for this long.
    Silent(Duration),
    /// The connection broke, or carried something it must not (the text says what).
    Broken(WireError),
}

/// Most frames one watch pass reads from one connection (beats pile up while an operation waits
/// on another process: a few a second).
const MAX_DRAIN: usize = 256;

pub struct Link {
    session: Session,
    /// When the other end was last heard; `None` until its first frame on the plane. Before
    /// that the silence does not count: right after the join the coordinator may still be
    /// welcoming the others (6.8 s of welcomes at 4,096 processes on 2 cores,
    /// bench-core/benchmarks/results/2026-11-24-control-plane-4096), and only the operation's
    /// deadline bounds the wait, as before beats existed.
    heard: Option<Instant>,
    /// A frame of an operation this process has not started yet, read by the watch.
    early: Option<Frame>,
}

/// What waiting for the next frame ended with, when it did not end with one.
pub enum Waited {
    /// The operation's own deadline passed.
    Deadline,
    Gone(Gone),
    /// The caller's `between` ended it (trouble on another connection, which it keeps).
    Stopped,
}

impl Link {
    pub fn new(session: Session) -> Link {
        Link {
            session,
            heard: None,
            early: None,
        }
    }

    pub fn peer(&self) -> &str {
        self.session.peer()
    }

    pub(super) fn send(&mut self, frame: &Frame, deadline: Instant) -> Result<(), WireError> {
        self.session.send(frame, deadline)
    }

    /// One beat, bounded by `deadline`.
    pub fn beat(&mut self, deadline: Instant) -> Result<(), WireError> {
        let beat = Frame {
            seq: u64::MAX,
            beat: true,
            ..Frame::default()
        };
        self.session.send(&beat, deadline)
    }

    /// How long the other end has been silent as of `now`, if longer than `live.silence`.
    pub fn silent(&self, now: Instant, live: &Liveness) -> Option<Duration> {
        let quiet = now.saturating_duration_since(self.heard?);
        (quiet > live.silence).then_some(quiet)
    }

    /// Whether data (or the end of the connection) is there to read within `wait` (poll(2);
    /// false on error: the read that follows says what is wrong).
    fn readable(&self, wait: Duration) -> bool {
        let fd = PollFd::new(self.session.stream().as_fd(), PollFlags::POLLIN);
        let wait = PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX);
        poll(&mut [fd], wait).is_ok_and(|n| n > 0)
    }

    /// Reads one frame that has started to arrive: its rest must come within the silence.
    fn read_one(&mut self, cap: usize, live: &Liveness, deadline: Instant) -> Result<Frame, Gone> {
        let started = Instant::now();
        let by = deadline.min(started + live.silence);
        match self.session.recv::<Frame>(cap, by) {
            Ok(f) => {
                self.heard = Some(Instant::now());
                Ok(f)
            }
            Err(WireError::Deadline) if by < deadline => Err(Gone::Silent(
                Instant::now().saturating_duration_since(self.heard.unwrap_or(started)),
            )),
            Err(e) => Err(Gone::Broken(e)),
        }
    }

    /// The next frame that is not a beat (the early one first), calling `between` with this
    /// link every `live.every` while it waits (the caller's beats, and its look at its other
    /// connections: `false` ends the wait with [`Waited::Stopped`]). On time, not only after a
    /// slice with nothing in it: the other end's own beats keep every slice busy, and a process
    /// that waits on a live one must still be heard by everyone else. Ends with
    /// [`Waited::Gone`] once nothing has come for `live.silence`, or at `deadline`.
    pub(super) fn next(
        &mut self,
        cap: usize,
        live: &Liveness,
        deadline: Instant,
        between: &mut dyn FnMut(&mut Link) -> bool,
    ) -> Result<Frame, Waited> {
        if let Some(f) = self.early.take() {
            return Ok(f);
        }
        let mut due = Instant::now() + live.every;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(Waited::Deadline);
            }
            if now >= due {
                if !between(self) {
                    return Err(Waited::Stopped);
                }
                due = now + live.every;
            }
            if self.readable(due.min(deadline).saturating_duration_since(now)) {
                match self.read_one(cap, live, deadline) {
                    Ok(f) if f.beat => continue,
                    Ok(f) => return Ok(f),
                    Err(Gone::Broken(WireError::Deadline)) => return Err(Waited::Deadline),
                    Err(g) => return Err(Waited::Gone(g)),
                }
            }
            if let Some(quiet) = self.silent(Instant::now(), live) {
                return Err(Waited::Gone(Gone::Silent(quiet)));
            }
        }
    }

    /// The watch's pass over this connection while no operation runs: reads what has arrived
    /// without waiting for more; beats only say the other end lives, a frame of an operation
    /// not yet started is kept for it (one at most: the protocol sends no second before the
    /// reply), another process's abort is returned.
    pub(super) fn drain(&mut self, cap: usize, live: &Liveness) -> Result<Option<Frame>, Gone> {
        for _ in 0..MAX_DRAIN {
            if !self.readable(Duration::ZERO) {
                break;
            }
            let f = self.read_one(cap, live, Instant::now() + live.silence)?;
            if f.beat {
                continue;
            }
            if f.abort.is_some() {
                return Ok(Some(f));
            }
            if self.early.is_some() {
                return Err(Gone::Broken(WireError::Malformed(
                    "sent a second operation before the first was answered".into(),
                )));
            }
            self.early = Some(f);
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meet::rendezvous::session::tests::pair;

    fn quick() -> Liveness {
        Liveness {
            every: Duration::from_millis(50),
            silence: Duration::from_millis(300),
        }
    }

    #[test]
    fn the_silence_is_an_eighth_of_the_budget_between_5_and_15_s() {
        let s = |t: u64| Liveness::for_budget(Duration::from_secs(t)).silence;
        assert_eq!(s(40), Duration::from_secs(5));
        assert_eq!(s(100), Duration::from_millis(12_500));
        assert_eq!(s(5), Duration::from_secs(5));
        assert_eq!(s(600), Duration::from_secs(15));
        let l = Liveness::for_budget(Duration::from_secs(100));
        assert!(l.every * 5 < l.silence);
    }

    #[test]
    fn beats_keep_a_link_alive_and_are_never_returned_as_frames() {
        let (a, b) = pair();
        let (mut a, mut b) = (Link::new(a), Link::new(b));
        let live = quick();
        let deadline = Instant::now() + Duration::from_secs(5);
        let t = std::thread::spawn(move || {
            for _ in 0..10 {
                b.beat(deadline).unwrap();
                std::thread::sleep(Duration::from_millis(60));
            }
            let last = Frame {
                seq: 3,
                ..Frame::default()
            };
            b.send(&last, deadline).unwrap();
            b
        });
        let start = Instant::now();
        let got = a.next(4096, &live, deadline, &mut |_| true).ok().unwrap();
        assert_eq!((got.seq, got.beat), (3, false));
        // 600 ms of beats, twice the silence: never taken for silence.
        assert!(start.elapsed() > Duration::from_millis(500));
        drop(t.join().unwrap());
    }

    #[test]
    fn a_link_that_carries_nothing_is_gone_after_the_silence_not_at_the_deadline() {
        let (a, b) = pair();
        let (mut a, mut b) = (Link::new(a), Link::new(b));
        b.beat(Instant::now() + Duration::from_secs(1)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(a.drain(4096, &quick()).unwrap().is_none());
        let start = Instant::now();
        let mut slices = 0;
        let r = a.next(4096, &quick(), start + Duration::from_secs(10), &mut |_| {
            slices += 1;
            true
        });
        assert!(matches!(r, Err(Waited::Gone(Gone::Silent(q))) if q >= quick().silence));
        assert!(
            start.elapsed() < Duration::from_secs(6),
            "{:?}",
            start.elapsed()
        );
        assert!(slices >= 3, "the caller beats between slices ({slices})");
    }

    #[test]
    fn a_chatty_other_end_does_not_keep_the_waiter_from_beating_on_time() {
        // The other end beats far more often than a slice: every slice has a frame in it.
        let (a, b) = pair();
        let (mut a, mut b) = (Link::new(a), Link::new(b));
        let chatty = std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_millis(600);
            while Instant::now() < until {
                let _ = b.beat(Instant::now() + Duration::from_secs(1));
                std::thread::sleep(Duration::from_millis(2));
            }
            b
        });
        let start = Instant::now();
        let (mut slices, mut stopped_at) = (0, None);
        let r = a.next(4096, &quick(), start + Duration::from_secs(5), &mut |_| {
            slices += 1;
            stopped_at = Some(start.elapsed());
            slices < 8
        });
        assert!(matches!(r, Err(Waited::Stopped)));
        // Eight calls, one per 50 ms: 400 ms; when only empty slices beat, none came before the
        // chatter stopped (600 ms) and the eighth at 1 s.
        let took = stopped_at.unwrap();
        assert!(
            took >= Duration::from_millis(390) && took < Duration::from_millis(800),
            "{took:?}"
        );
        drop(chatty.join().unwrap());
    }

    #[test]
    fn a_link_never_heard_is_bounded_by_the_deadline_not_the_silence() {
        // Right after the join: the coordinator may still be welcoming thousands of others.
        let (a, _b) = pair();
        let mut a = Link::new(a);
        let start = Instant::now();
        let r = a.next(
            4096,
            &quick(),
            start + Duration::from_millis(900),
            &mut |_| true,
        );
        assert!(matches!(r, Err(Waited::Deadline)));
        assert!(
            start.elapsed() >= Duration::from_millis(850),
            "{:?}",
            start.elapsed()
        );
        assert!(a.silent(Instant::now(), &quick()).is_none());
    }

    #[test]
    fn a_closed_link_is_gone_at_once() {
        let (a, b) = pair();
        let mut a = Link::new(a);
        drop(b);
        let start = Instant::now();
        let r = a.next(4096, &quick(), start + Duration::from_secs(10), &mut |_| {
            true
        });
        assert!(matches!(
            r,
            Err(Waited::Gone(Gone::Broken(WireError::Closed)))
        ));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_watch_keeps_an_early_frame_for_its_operation_and_refuses_a_second() {
        let (a, b) = pair();
        let (mut a, mut b) = (Link::new(a), Link::new(b));
        let live = quick();
        let deadline = Instant::now() + Duration::from_secs(5);
        b.beat(deadline).unwrap();
        b.send(
            &Frame {
                seq: 7,
                ..Frame::default()
            },
            deadline,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(a.drain(4096, &live).unwrap().is_none());
        assert_eq!(
            a.next(4096, &live, deadline, &mut |_| true)
                .ok()
                .unwrap()
                .seq,
            7
        );
        for seq in [8, 9] {
            b.send(
                &Frame {
                    seq,
                    ..Frame::default()
                },
                deadline,
            )
            .unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(matches!(
            a.drain(4096, &live),
            Err(Gone::Broken(WireError::Malformed(_)))
        ));
    }
}
