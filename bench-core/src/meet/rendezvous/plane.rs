//! Barriers, sums and gathers after the rendezvous, over the authenticated connections (a star
//! through the coordinator: one message up and one down per process and operation), every frame
//! sealed under its connection's keys ([`super::session`]).
//!
//! - [`ControlPlane::reduce`]: every process sends a short vector, the coordinator combines them
//!   element-wise (sum or minimum) and sends the result back. For a few values per operation:
//!   votes, one time per rank's process, barriers.
//! - [`ControlPlane::gather`]: every process sends only the entries it has (index, value) of a
//!   vector of agreed length; the coordinator adds them up and turns the whole vector into one
//!   reply per process (`decide`), each sent only to its process. Bytes per operation grow with
//!   N, not N^2: what the localizer's rounds use, where the vector has one entry per node pair.
//!
//! Frames are capped (by length for `reduce`, by a constant for `gather`); a mismatch in step,
//! operation or length is an error naming the process, never a wrong result.
//!
//! Every connection also carries beats ([`link`]): a process that stops answering (its link
//! down, its node gone) is named after [`Liveness::silence`], by an operation waiting for it or,
//! while the GPUs measure and no operation runs, by [`ControlPlane::tend`] (the team's watch
//! thread; [`wait`]); the coordinator decides who is to blame ([`lost`]) and tells everyone it
//! can reach.

use super::session::Session;
use super::wire::WireError;
use super::Member;
use frame::{Frame, Op};
use link::Link;
use serde_json::Value;
use std::time::{Duration, Instant};

pub mod frame;
pub mod link;
pub mod lost;
mod wait;

pub use link::Liveness;

/// The coordinator's decision in a gather: the whole vector in, one reply per process out.
pub type Decide<'a> = &'a mut dyn FnMut(&[f64]) -> Result<Vec<Value>, String>;

/// Longest abort message passed on.
const MAX_ABORT_CHARS: usize = 500;
/// Most entries one process may send in one `gather` (the localizer's rounds send at most one
/// per GPU of the process).
pub const MAX_GATHER_ENTRIES: usize = 4096;
/// Longest vector a `gather` may describe (65,536 nodes x 64 GPUs).
pub const MAX_GATHER_LEN: u64 = 1 << 22;
/// Largest `gather` frame either way: the entries up, one process's reply down.
pub const MAX_GATHER_FRAME: usize = 1 << 20;

/// Why an operation did not complete: the kind decides the exit code, the text (complete, shown
/// as it is) says who.
#[derive(Debug, Clone, PartialEq, Eq, strum::Display)]
pub enum PlaneError {
    /// A process did not answer before the deadline.
    #[strum(to_string = "{0}")]
    Deadline(String),
    /// Another process gave up first (its reason is in the text).
    #[strum(to_string = "{0}")]
    Aborted(String),
    /// A process went away, sent something malformed, or is out of step.
    #[strum(to_string = "{0}")]
    Peer(String),
    /// Processes stopped answering (nothing, not even a beat, for the silence) or their
    /// connections broke while the check ran; the text names their nodes ([`lost`]).
    #[strum(to_string = "{0}")]
    Lost(String),
}

/// Connections for barriers, sums and gathers after the rendezvous.
pub enum ControlPlane {
    /// One process: nothing to talk to.
    Alone,
    /// The coordinator (process rank `me` on node `host`): one connection per other process,
    /// in process-rank order.
    Root {
        me: u32,
        host: String,
        peers: Vec<(Member, Link)>,
        live: Liveness,
    },
    /// Any other process: the connection to the coordinator.
    Leaf { link: Box<Link>, live: Liveness },
}

fn reduce_frame(values: usize) -> usize {
    // A JSON f64 is at most 24 characters plus a comma; the rest is the envelope and an abort text.
    4096 + values * 26
}

fn peer_error(who: &str, e: WireError) -> PlaneError {
    match e {
        WireError::Deadline => {
            PlaneError::Deadline(format!("{who}: no answer before the deadline"))
        }
        other => PlaneError::Peer(format!("{who}: {other}")),
    }
}

fn who(m: &Member) -> String {
    format!(
        "process rank {} ({})",
        m.proc_rank,
        nccl_check_host::text::escape_control(&m.host)
    )
}

/// `who` gave up, for the reason it sent, as that may be printed: bounded, control characters
/// escaped.
fn gave_up(who: &str, why: Option<String>) -> PlaneError {
    let why = nccl_check_host::text::escape_clipped(&why.unwrap_or_default(), MAX_ABORT_CHARS);
    PlaneError::Aborted(format!("{who} gave up: {why}"))
}

/// Adds `entries` into `total`; an index out of range or a value that is not finite is the
/// sender's error, never a wrong sum.
fn add_entries(total: &mut [f64], entries: &[(u64, f64)]) -> Result<(), String> {
    if entries.len() > MAX_GATHER_ENTRIES {
        return Err(format!(
            "sent {} entries (at most {MAX_GATHER_ENTRIES})",
            entries.len()
        ));
    }
    let n = total.len();
    for &(i, v) in entries {
        let slot = usize::try_from(i)
            .ok()
            .and_then(|i| total.get_mut(i))
            .ok_or_else(|| format!("sent entry {i} of a vector of {n}"))?;
        if !v.is_finite() {
            return Err(format!("sent {v} at entry {i}"));
        }
        *slot += v;
    }
    Ok(())
}

/// Raises this process's soft limit of open files to `needed` (at most the hard limit): the
/// coordinator holds a connection to every other process. An error says which limit to raise.
pub(super) fn ensure_open_files(needed: u64) -> Result<(), String> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource::RLIMIT_NOFILE};
    let Ok((soft, hard)) = getrlimit(RLIMIT_NOFILE) else {
        return Ok(()); // unknown: let accept say so if it comes to that
    };
    let want = needed.min(hard);
    if soft < needed && (setrlimit(RLIMIT_NOFILE, want, hard).is_err() || want < needed) {
        return Err(format!(
            "rendezvous: coordinating this many processes needs {needed} open files, but the hard limit (ulimit -Hn) is {hard}: raise it for the job (e.g. Slurm PropagateResourceLimits or limits.conf)"
        ));
    }
    Ok(())
}

impl ControlPlane {
    /// The coordinator's plane over its authenticated connections.
    pub fn root(me: &Member, peers: Vec<(Member, Session)>) -> ControlPlane {
        ControlPlane::Root {
            me: me.proc_rank,
            host: me.host.clone(),
            peers: peers.into_iter().map(|(m, s)| (m, Link::new(s))).collect(),
            live: Liveness::default(),
        }
    }

    /// A member's plane over its connection to the coordinator.
    pub fn leaf(session: Session) -> ControlPlane {
        ControlPlane::Leaf {
            link: Box::new(Link::new(session)),
            live: Liveness::default(),
        }
    }

    /// Element-wise sum of `values` over all processes (a barrier when empty). `seq` numbers the
    /// calls so a mismatch is detected rather than mis-summed.
    pub fn sum(
        &mut self,
        seq: u64,
        values: &[f64],
        deadline: Instant,
    ) -> Result<Vec<f64>, PlaneError> {
        self.reduce(seq, Op::Sum, values, deadline)
    }

    /// Element-wise `op` (sum or minimum) of `values` over all processes.
    pub fn reduce(
        &mut self,
        seq: u64,
        op: Op,
        values: &[f64],
        deadline: Instant,
    ) -> Result<Vec<f64>, PlaneError> {
        let cap = reduce_frame(values.len());
        let up = Frame {
            seq,
            op,
            values: values.to_vec(),
            ..Frame::default()
        };
        match self {
            ControlPlane::Alone => Ok(values.to_vec()),
            ControlPlane::Leaf { link, live } => {
                let reply = Self::round_trip(link, live, &up, cap, deadline)?;
                if reply.values.len() != values.len() {
                    return Err(out_of_step(reply.seq, seq));
                }
                Ok(reply.values)
            }
            ControlPlane::Root {
                peers, live, host, ..
            } => {
                let mut total = up.values;
                let n = total.len();
                let gathered = Self::collect(peers, live, host, seq, op, cap, deadline, |msg| {
                    if msg.values.len() != n {
                        return Err(format!("sent {} values, not {n}", msg.values.len()));
                    }
                    total
                        .iter_mut()
                        .zip(msg.values)
                        .for_each(|(t, v)| op.combine(t, v));
                    Ok(())
                });
                let down = |_: &Member, total: &mut Vec<f64>| Frame {
                    seq,
                    op,
                    values: total.clone(),
                    ..Frame::default()
                };
                self.answer(gathered.map(|()| total), deadline, down)
            }
        }
    }

    /// Every process's `entries` of a vector of `len` values, added up at the coordinator, which
    /// calls `decide` once with the whole vector and sends reply `p` to process rank `p` only.
    /// Returns this process's reply. Only the coordinator's `decide` is called; it must return
    /// one reply per process, each under [`MAX_GATHER_FRAME`] bytes.
    pub fn gather(
        &mut self,
        seq: u64,
        len: usize,
        entries: &[(u64, f64)],
        deadline: Instant,
        decide: Decide,
    ) -> Result<Value, PlaneError> {
        if len as u64 > MAX_GATHER_LEN {
            return Err(PlaneError::Peer(format!(
                "a gather of {len} values is over the limit of {MAX_GATHER_LEN}"
            )));
        }
        let up = Frame {
            seq,
            op: Op::Gather,
            len: len as u64,
            entries: entries.to_vec(),
            ..Frame::default()
        };
        let mut total = vec![0.0; len];
        let own = add_entries(&mut total, entries)
            .map_err(|e| PlaneError::Peer(format!("this process {e}")));
        match self {
            ControlPlane::Alone => {
                own?;
                Ok(decided(decide, &total, 1)?.swap_remove(0))
            }
            ControlPlane::Leaf { link, live } => {
                own?;
                let reply = Self::round_trip(link, live, &up, MAX_GATHER_FRAME, deadline)?;
                reply.reply.ok_or_else(|| out_of_step(reply.seq, seq))
            }
            ControlPlane::Root {
                me,
                peers,
                live,
                host,
            } => {
                let me = *me as usize;
                let world = peers.len() + 1;
                let gathered = own.and_then(|()| {
                    let take = |msg: Frame| {
                        if msg.len != len as u64 {
                            return Err(format!(
                                "is out of step (a gather of {} values, not {len})",
                                msg.len
                            ));
                        }
                        add_entries(&mut total, &msg.entries)
                    };
                    let cap = MAX_GATHER_FRAME;
                    Self::collect(peers, live, host, seq, Op::Gather, cap, deadline, take)
                });
                let down = |m: &Member, replies: &mut Vec<Value>| Frame {
                    seq,
                    op: Op::Gather,
                    len: len as u64,
                    reply: replies.get_mut(m.proc_rank as usize).map(Value::take),
                    ..Frame::default()
                };
                let replies = gathered.and_then(|()| decided(decide, &total, world));
                let mut replies = self.answer(replies, deadline, down)?;
                Ok(replies.get_mut(me).map(Value::take).unwrap_or_default())
            }
        }
    }

    /// The coordinator's end of an operation that `got` its result: each other process's `down`
    /// frame sent to it, or, where the operation failed, the reason sent to everyone instead.
    fn answer<T>(
        &mut self,
        got: Result<T, PlaneError>,
        deadline: Instant,
        mut down: impl FnMut(&Member, &mut T) -> Frame,
    ) -> Result<T, PlaneError> {
        let mut got = got.inspect_err(|why| self.abort(&why.to_string(), deadline))?;
        if let ControlPlane::Root { peers, .. } = self {
            for (m, link) in peers.iter_mut() {
                link.send(&down(m, &mut got), deadline)
                    .map_err(|e| peer_error(&who(m), e))?;
            }
        }
        Ok(got)
    }

    /// Tells the other processes to stop now (best effort, short timeout).
    pub fn abort(&mut self, why: &str, deadline: Instant) {
        let soon = (Instant::now() + Duration::from_millis(200)).min(deadline.max(Instant::now()));
        let msg = Frame {
            seq: u64::MAX,
            abort: Some(why.chars().take(MAX_ABORT_CHARS).collect()),
            ..Frame::default()
        };
        match self {
            ControlPlane::Alone => {}
            ControlPlane::Leaf { link, .. } => {
                let _ = link.send(&msg, soon);
            }
            ControlPlane::Root { peers, .. } => {
                for (_, link) in peers.iter_mut() {
                    let _ = link.send(&msg, soon);
                }
            }
        }
    }
}

/// The coordinator's `decide` over the whole vector: one reply per process of `world`.
fn decided(decide: Decide, total: &[f64], world: usize) -> Result<Vec<Value>, PlaneError> {
    let replies = decide(total).map_err(PlaneError::Peer)?;
    if replies.len() != world {
        let es = if world == 1 { "" } else { "es" };
        return Err(PlaneError::Peer(format!(
            "the coordinator made {} replies for {world} process{es}",
            replies.len()
        )));
    }
    Ok(replies)
}

fn out_of_step(theirs: u64, ours: u64) -> PlaneError {
    PlaneError::Peer(format!(
        "out of step with the coordinator (step {theirs} vs {ours})"
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::meet::rendezvous::session::tests::keys;
    use std::net::{TcpListener, TcpStream};

    /// A coordinator (process rank `me`) and `world - 1` members on loopback, joined with keys
    /// of an in-memory handshake (the plane runs on connections the rendezvous authenticated).
    pub(crate) fn star(world: u32, me: u32) -> (ControlPlane, Vec<(u32, ControlPlane)>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut peers = Vec::new();
        let mut leaves = Vec::new();
        for r in (0..world).filter(|&r| r != me) {
            let leaf = TcpStream::connect(addr).unwrap();
            let (root_side, _) = listener.accept().unwrap();
            let m = Member {
                proc_rank: r,
                host: format!("h{r}"),
                pid: r,
                ngpus: 1,
                first_rank: r,
            };
            let (member_side, coordinator_side) = keys(&[r as u8; 32], &[r as u8; 32]).unwrap();
            peers.push((m, Session::new(root_side, coordinator_side)));
            let leaf = Session::new(leaf, member_side).named(format!("the coordinator ({addr})"));
            leaves.push((r, ControlPlane::leaf(leaf)));
        }
        let me = Member {
            proc_rank: me,
            host: format!("h{me}"),
            pid: me,
            ngpus: 1,
            first_rank: me,
        };
        (ControlPlane::root(&me, peers), leaves)
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    /// Each process's reply names it and carries the total it was computed from.
    fn replies_naming_each_process(
        world: usize,
    ) -> impl FnMut(&[f64]) -> Result<Vec<Value>, String> {
        move |total: &[f64]| {
            Ok((0..world)
                .map(|p| serde_json::json!({ "for": p, "total": total }))
                .collect())
        }
    }

    #[test]
    fn a_gather_adds_sparse_entries_and_each_process_gets_only_its_reply() {
        let (mut root, leaves) = star(4, 2);
        let deadline = soon(5000);
        let threads: Vec<_> = leaves
            .into_iter()
            .map(|(r, mut plane)| {
                std::thread::spawn(move || {
                    let entries = [(r as u64, 1.0 + r as f64), (5, 10.0)];
                    let mut never = |_: &[f64]| -> Result<Vec<Value>, String> {
                        panic!("a member's decide is never called")
                    };
                    (r, plane.gather(7, 6, &entries, deadline, &mut never))
                })
            })
            .collect();
        let mut calls = 0;
        let mut decide = |t: &[f64]| {
            calls += 1;
            replies_naming_each_process(4)(t)
        };
        let mine = root
            .gather(7, 6, &[(2, 3.0)], deadline, &mut decide)
            .unwrap();
        assert_eq!(calls, 1);
        let total = serde_json::json!([1.0, 2.0, 3.0, 4.0, 0.0, 30.0]);
        assert_eq!(mine, serde_json::json!({ "for": 2, "total": total }));
        for t in threads {
            let (r, got) = t.join().unwrap();
            assert_eq!(
                got.unwrap(),
                serde_json::json!({ "for": r, "total": total })
            );
        }
    }

    #[test]
    fn a_minimum_is_element_wise_over_every_process() {
        let (mut root, leaves) = star(3, 0);
        let deadline = soon(5000);
        let threads: Vec<_> = leaves
            .into_iter()
            .map(|(r, mut plane)| {
                std::thread::spawn(move || {
                    plane.reduce(1, Op::Min, &[r as f64, 5.0 - r as f64], deadline)
                })
            })
            .collect();
        let got = root.reduce(1, Op::Min, &[9.0, 9.0], deadline).unwrap();
        assert_eq!(got, vec![1.0, 3.0]);
        for t in threads {
            assert_eq!(t.join().unwrap().unwrap(), vec![1.0, 3.0]);
        }
    }

    #[test]
    fn a_bad_entry_or_length_names_the_sender_and_stops_everyone() {
        for (bad_entries, bad_len, want) in [
            (
                vec![(99u64, 1.0)],
                4usize,
                "process rank 1 (h1) sent entry 99 of a vector of 4",
            ),
            // JSON has no NaN: serde_json writes null, which the coordinator refuses.
            (
                vec![(0, f64::NAN)],
                4,
                "process rank 1 (h1): malformed message",
            ),
            (
                vec![],
                5,
                "process rank 1 (h1) is out of step (a gather of 5 values, not 4)",
            ),
        ] {
            let (mut root, mut leaves) = star(3, 0);
            let deadline = soon(5000);
            let (_, mut bad) = leaves.remove(0);
            let (_, mut good) = leaves.remove(0);
            // The bad process sends its frame itself: its own plane would refuse to.
            let tb = std::thread::spawn(move || {
                let ControlPlane::Leaf { link, live } = &mut bad else {
                    unreachable!()
                };
                let up = Frame {
                    seq: 3,
                    op: Op::Gather,
                    len: bad_len as u64,
                    entries: bad_entries,
                    ..Frame::default()
                };
                ControlPlane::round_trip(link, live, &up, MAX_GATHER_FRAME, deadline)
            });
            let tg = std::thread::spawn(move || {
                let mut d = |_: &[f64]| -> Result<Vec<Value>, String> { Ok(vec![]) };
                good.gather(3, 4, &[(1, 1.0)], deadline, &mut d)
            });
            let e = root
                .gather(3, 4, &[], deadline, &mut replies_naming_each_process(3))
                .unwrap_err();
            assert!(
                matches!(&e, PlaneError::Peer(m) if m.starts_with(want)),
                "{e:?}"
            );
            let eg = tg.join().unwrap().unwrap_err();
            assert!(
                matches!(&eg, PlaneError::Aborted(m) if m.contains(want)),
                "{eg:?}"
            );
            assert!(tb.join().unwrap().is_err());
        }
    }

    #[test]
    fn a_coordinator_that_dies_is_named_with_its_address() {
        let (root, mut leaves) = star(2, 0);
        drop(root);
        let (_, mut plane) = leaves.remove(0);
        let e = plane.sum(1, &[1.0], soon(2000)).unwrap_err();
        let PlaneError::Peer(m) = &e else {
            panic!("{e:?}")
        };
        assert!(m.starts_with("the coordinator (127.0.0.1:"), "{m}");
        assert!(m.contains("the connection was closed (the process at the other end exited, was killed, or refused it)"), "{m}");
    }

    #[test]
    fn a_silent_member_is_named_at_the_deadline() {
        let (mut root, leaves) = star(2, 0);
        let start = Instant::now();
        let e = root
            .gather(1, 2, &[], soon(300), &mut replies_naming_each_process(2))
            .unwrap_err();
        assert_eq!(
            e,
            PlaneError::Deadline("process rank 1 (h1): no answer before the deadline".into())
        );
        assert!(start.elapsed() < Duration::from_secs(3));
        drop(leaves);
    }

    /// What a gather costs a member does not grow with the vector's length: a round of 4,096
    /// node pairs is as cheap to take part in as one of 4.
    #[test]
    fn a_members_gather_frame_does_not_grow_with_the_vector() {
        let frame = |len: u64| Frame {
            seq: 12,
            op: Op::Gather,
            len,
            entries: vec![(len - 1, 47.123456789)],
            ..Frame::default()
        };
        let small = serde_json::to_vec(&frame(4)).unwrap().len();
        let large = serde_json::to_vec(&frame(MAX_GATHER_LEN)).unwrap().len();
        assert!(large <= small + 16, "{small} vs {large} bytes");
        assert!(large < 200, "{large} bytes");
    }

    fn limits() -> (u64, u64) {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid resource, live pointer.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        (lim.rlim_cur, lim.rlim_max)
    }

    #[test]
    fn the_open_file_limit_is_raised_up_to_the_hard_limit_and_no_further() {
        let (soft, hard) = limits();
        if hard > soft {
            ensure_open_files(soft + 1).unwrap();
            assert!(limits().0 > soft);
        }
        let (soft, hard) = limits();
        ensure_open_files(soft).unwrap();
        if hard < u64::MAX / 2 {
            let e = ensure_open_files(hard + 1).unwrap_err();
            assert!(e.contains("hard limit (ulimit -Hn)"), "{e}");
        }
    }
}
