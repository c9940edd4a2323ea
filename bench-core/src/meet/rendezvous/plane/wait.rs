//! How the plane waits for the other processes: a member's round trip, the coordinator's
//! collection, and the watch's pass while no operation runs; beats go out meanwhile, and a
//! process that stops answering is named ([`super::lost`]).

use super::frame::{Frame, Op};
use super::link::{Gone, Link, Liveness, Waited};
use super::MAX_GATHER_FRAME;
use super::{gave_up, lost, out_of_step, peer_error, who, ControlPlane, PlaneError};
use crate::meet::rendezvous::wire::WireError;
use crate::meet::rendezvous::Member;
use std::time::{Duration, Instant};

impl ControlPlane {
    /// How often beats go out and how long a silence names a process (the check's budget
    /// decides: [`Liveness::for_budget`]).
    pub fn set_liveness(&mut self, to: Liveness) {
        match self {
            ControlPlane::Alone => {}
            ControlPlane::Root { live, .. } | ControlPlane::Leaf { live, .. } => *live = to,
        }
    }

    /// A member's half of an operation: send, then wait for the coordinator's answer, beating
    /// while it waits (the coordinator may be waiting for a slower process).
    pub(super) fn round_trip(
        link: &mut Link,
        live: &Liveness,
        up: &Frame,
        cap: usize,
        deadline: Instant,
    ) -> Result<Frame, PlaneError> {
        link.send(up, deadline)
            .map_err(|e| peer_error(link.peer(), e))?;
        let every = live.every;
        let reply = link
            .next(cap, live, deadline, &mut |l: &mut Link| {
                let _ = l.beat(Instant::now() + every);
                true
            })
            .map_err(|w| match w {
                Waited::Deadline | Waited::Stopped => peer_error(link.peer(), WireError::Deadline),
                Waited::Gone(Gone::Broken(e)) => peer_error(link.peer(), e),
                Waited::Gone(g) => PlaneError::Lost(lost::at_member(link.peer(), &g)),
            })?;
        if reply.abort.is_some() {
            return Err(gave_up("another process", reply.abort));
        }
        if reply.seq != up.seq || reply.op != up.op {
            return Err(out_of_step(reply.seq, up.seq));
        }
        Ok(reply)
    }

    /// The coordinator's half: one frame from every other process, in rank order, each handed
    /// to `take` once its step and operation are checked. While it waits for one, it beats to
    /// all and looks at the others as the watch does ([`pass`]): the one it waits for may live
    /// but be stuck with one that is gone (a GPU pair's partner), and the gone one is to be
    /// named, not the one waiting on it. The first failure names the process.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn collect(
        peers: &mut [(Member, Link)],
        live: &Liveness,
        host: &str,
        seq: u64,
        op: Op,
        cap: usize,
        deadline: Instant,
        mut take: impl FnMut(Frame) -> Result<(), String>,
    ) -> Result<(), PlaneError> {
        for k in 0..peers.len() {
            let (before, rest) = peers.split_at_mut(k);
            let Some(((m, link), after)) = rest.split_first_mut() else {
                break;
            };
            let mut trouble = None;
            let waited = link.next(cap, live, deadline, &mut |l: &mut Link| {
                let _ = l.beat(Instant::now() + live.every);
                let others = before.iter_mut().enumerate();
                let others =
                    others.chain(after.iter_mut().enumerate().map(|(j, p)| (k + 1 + j, p)));
                trouble = pass(others.map(|(i, (_, l))| (i, l)), live, cap);
                trouble.is_none()
            });
            let msg = match waited {
                Ok(msg) => msg,
                Err(Waited::Deadline) => return Err(peer_error(&who(m), WireError::Deadline)),
                Err(Waited::Gone(Gone::Broken(e))) => return Err(peer_error(&who(m), e)),
                Err(Waited::Gone(g)) => return Err(Self::survey(peers, live, host, k, g)),
                Err(Waited::Stopped) => match trouble {
                    Some(t) => return Err(Self::blame(peers, live, host, t)),
                    None => return Err(peer_error(&who(m), WireError::Deadline)),
                },
            };
            let m = &peers[k].0;
            if msg.abort.is_some() {
                return Err(gave_up(&who(m), msg.abort));
            }
            if msg.seq != seq || msg.op != op {
                return Err(PlaneError::Peer(format!("{} is out of step", who(m))));
            }
            take(msg).map_err(|e| PlaneError::Peer(format!("{} {e}", who(m))))?;
        }
        Ok(())
    }

    /// Process `first` is gone (`why`): which others are too (read what they sent; silent
    /// for the silence, or broken), and the coordinator's sentence naming them.
    fn survey(
        peers: &mut [(Member, Link)],
        live: &Liveness,
        host: &str,
        first: usize,
        why: Gone,
    ) -> PlaneError {
        let mut gone: Vec<(usize, Gone)> = vec![(first, why)];
        for (i, (_, link)) in peers.iter_mut().enumerate() {
            if i == first {
                continue;
            }
            let drained = link.drain(MAX_GATHER_FRAME, live).err();
            let silent = link.silent(Instant::now(), live).map(Gone::Silent);
            if let Some(g) = drained.or(silent) {
                gone.push((i, g));
            }
        }
        gone.sort_by_key(|(i, _)| *i);
        let lost: Vec<(&Member, &Gone)> = gone.iter().map(|(i, g)| (&peers[*i].0, g)).collect();
        PlaneError::Lost(lost::at_coordinator(host, &lost, peers.len()))
    }

    /// The watch's pass while no operation runs (the team's watch thread, every
    /// [`Liveness::every`]): a beat on every connection, then what has arrived read without
    /// waiting. An error when a process stopped answering, its connection broke or another
    /// process gave up; the coordinator then tells every process it can reach.
    pub fn tend(&mut self, deadline: Instant) -> Result<(), PlaneError> {
        let result = match self {
            ControlPlane::Alone => Ok(()),
            ControlPlane::Leaf { link, live } => {
                let beat = link.beat(Instant::now() + live.every);
                let got = beat.map_err(Gone::Broken).and_then(|()| {
                    let f = link.drain(MAX_GATHER_FRAME, live)?;
                    match link.silent(Instant::now(), live) {
                        Some(q) if f.is_none() => Err(Gone::Silent(q)),
                        _ => Ok(f),
                    }
                });
                return match got {
                    Ok(Some(abort)) => Err(gave_up("another process", abort.abort)),
                    Ok(None) => Ok(()),
                    Err(g) => Err(PlaneError::Lost(lost::at_member(link.peer(), &g))),
                };
            }
            ControlPlane::Root {
                peers, live, host, ..
            } => Self::tend_root(peers, live, host),
        };
        if let Err(why) = &result {
            self.abort(&why.to_string(), deadline);
        }
        result
    }

    /// Another process's reason to stop, if it arrives within `within`; read only, nothing
    /// sent. A member asks when its own GPU work failed, because that failure may follow from the
    /// reason: the coordinator named a dead node, told everyone and exited, and NCCL saw its
    /// sockets close before the watch read the word (one H200, 16 emulated nodes, link-down:
    /// bench-core/benchmarks/results/2026-12-03-h200x1-gpu-rows).
    pub fn last_word(&mut self, within: Duration) -> Option<PlaneError> {
        let ControlPlane::Leaf { link, live } = self else {
            return None;
        };
        let until = Instant::now() + within;
        loop {
            match link.drain(MAX_GATHER_FRAME, live) {
                Ok(Some(abort)) => return Some(gave_up("another process", abort.abort)),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                _ => return None,
            }
        }
    }

    fn tend_root(
        peers: &mut [(Member, Link)],
        live: &Liveness,
        host: &str,
    ) -> Result<(), PlaneError> {
        let links = peers.iter_mut().enumerate().map(|(i, (_, l))| (i, l));
        match pass(links, live, MAX_GATHER_FRAME) {
            None => Ok(()),
            Some(t) => Err(Self::blame(peers, live, host, t)),
        }
    }

    /// The coordinator's sentence for what a [`pass`] found.
    fn blame(peers: &mut [(Member, Link)], live: &Liveness, host: &str, t: Trouble) -> PlaneError {
        match t {
            Trouble::Abort(i, f) => gave_up(&who(&peers[i].0), f.abort),
            Trouble::Gone(i, g) => Self::survey(peers, live, host, i, g),
        }
    }
}

/// What a [`pass`] found wrong on a connection (by its index among the coordinator's).
enum Trouble {
    /// The process gave up and said why.
    Abort(usize, Frame),
    Gone(usize, Gone),
}

/// One look at `links`: a beat on each, what has arrived read without waiting, then who has
/// been silent too long. Another process's abort first, then the first broken connection, then
/// the first silent one.
fn pass<'a>(
    links: impl Iterator<Item = (usize, &'a mut Link)>,
    live: &Liveness,
    cap: usize,
) -> Option<Trouble> {
    let soon = Instant::now() + live.every;
    let (mut broken, mut silent) = (None, None);
    for (i, link) in links {
        if let Err(e) = link.beat(soon) {
            broken.get_or_insert((i, Gone::Broken(e)));
        }
        match link.drain(cap, live) {
            Ok(Some(abort)) => return Some(Trouble::Abort(i, abort)),
            Ok(None) => {}
            Err(g) => {
                broken.get_or_insert((i, g));
            }
        }
        if let Some(q) = link.silent(Instant::now(), live) {
            silent.get_or_insert((i, Gone::Silent(q)));
        }
    }
    broken.or(silent).map(|(i, g)| Trouble::Gone(i, g))
}
