//! Barriers and sums after the rendezvous, over the authenticated connections: every member
//! sends its values to the coordinator, which adds them and sends the total back. Frames are
//! capped at what a sum of this length can take; a mismatch in step or length is an error
//! naming the process, never a wrong sum.

use super::wire::{self, WireError};
use super::Member;
use serde::{Deserialize, Serialize};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[derive(Serialize, Deserialize)]
struct Sum {
    seq: u64,
    values: Vec<f64>,
    /// Set by a process that gives up, so the others stop at once instead of at their deadline.
    #[serde(default)]
    abort: Option<String>,
}

/// Longest abort message passed on.
const MAX_ABORT_CHARS: usize = 500;

/// Why a sum did not complete: the kind decides the exit code, the text (complete, shown
/// as it is) says who.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaneError {
    /// A process did not answer before the deadline.
    Deadline(String),
    /// Another process gave up first (its reason is in the text).
    Aborted(String),
    /// A process went away, sent something malformed, or is out of step.
    Peer(String),
}

impl std::fmt::Display for PlaneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlaneError::Deadline(m) | PlaneError::Aborted(m) | PlaneError::Peer(m) => {
                f.write_str(m)
            }
        }
    }
}

/// Connections for barriers and sums after the rendezvous.
pub enum ControlPlane {
    /// One process: nothing to talk to.
    Alone,
    /// The coordinator: one connection per other process, in process-rank order.
    Root(Vec<(Member, TcpStream)>),
    /// Any other process: the connection to the coordinator.
    Leaf(TcpStream),
}

fn max_frame(values: usize) -> usize {
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
    format!("process rank {} ({})", m.proc_rank, m.host)
}

/// Raises this process's soft limit of open files to `needed` (at most the hard limit): the
/// coordinator holds a connection to every other process. An error says which limit to raise.
pub(super) fn ensure_open_files(needed: u64) -> Result<(), String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(()); // unknown: let accept say so if it comes to that
    }
    if lim.rlim_cur >= needed {
        return Ok(());
    }
    let want = needed.min(lim.rlim_max);
    let raised = libc::rlimit {
        rlim_cur: want,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 || want < needed {
        return Err(format!(
            "rendezvous: coordinating this many processes needs {needed} open files, but the hard limit (ulimit -Hn) is {}: raise it for the job (e.g. Slurm PropagateResourceLimits or limits.conf)",
            lim.rlim_max
        ));
    }
    Ok(())
}

impl ControlPlane {
    /// Element-wise sum of `values` over all processes (a barrier when empty). `seq` numbers the
    /// calls so a mismatch is detected rather than mis-summed.
    pub fn sum(
        &mut self,
        seq: u64,
        values: &[f64],
        deadline: Instant,
    ) -> Result<Vec<f64>, PlaneError> {
        let cap = max_frame(values.len());
        match self {
            ControlPlane::Alone => Ok(values.to_vec()),
            ControlPlane::Leaf(stream) => {
                let msg = Sum {
                    seq,
                    values: values.to_vec(),
                    abort: None,
                };
                wire::send(stream, &msg, deadline).map_err(|e| peer_error("the coordinator", e))?;
                let reply: Sum = wire::recv(stream, cap, deadline)
                    .map_err(|e| peer_error("the coordinator", e))?;
                if let Some(why) = reply.abort {
                    let why: String = why.chars().take(MAX_ABORT_CHARS).collect();
                    return Err(PlaneError::Aborted(format!(
                        "another process gave up: {why}"
                    )));
                }
                if reply.seq != seq || reply.values.len() != values.len() {
                    return Err(PlaneError::Peer(format!(
                        "out of step with the coordinator (step {} vs {seq})",
                        reply.seq
                    )));
                }
                Ok(reply.values)
            }
            ControlPlane::Root(peers) => {
                let mut total = values.to_vec();
                let mut failure = None;
                for (m, stream) in peers.iter_mut() {
                    match wire::recv::<Sum>(stream, cap, deadline) {
                        Ok(msg) if msg.abort.is_some() => {
                            let why: String = msg
                                .abort
                                .unwrap_or_default()
                                .chars()
                                .take(MAX_ABORT_CHARS)
                                .collect();
                            failure =
                                Some(PlaneError::Aborted(format!("{} gave up: {why}", who(m))));
                        }
                        Ok(msg) if msg.seq != seq || msg.values.len() != total.len() => {
                            failure = Some(PlaneError::Peer(format!("{} is out of step", who(m))));
                        }
                        Ok(msg) => total.iter_mut().zip(msg.values).for_each(|(t, v)| *t += v),
                        Err(e) => failure = Some(peer_error(&who(m), e)),
                    }
                    if failure.is_some() {
                        break;
                    }
                }
                if let Some(why) = failure {
                    self.abort(&why.to_string(), deadline);
                    return Err(why);
                }
                let reply = Sum {
                    seq,
                    values: total.clone(),
                    abort: None,
                };
                for (m, stream) in peers.iter_mut() {
                    wire::send(stream, &reply, deadline).map_err(|e| peer_error(&who(m), e))?;
                }
                Ok(total)
            }
        }
    }

    /// Tells the other processes to stop now (best effort, short timeout).
    pub fn abort(&mut self, why: &str, deadline: Instant) {
        let soon = (Instant::now() + Duration::from_millis(200)).min(deadline.max(Instant::now()));
        let msg = Sum {
            seq: u64::MAX,
            values: Vec::new(),
            abort: Some(why.chars().take(MAX_ABORT_CHARS).collect()),
        };
        match self {
            ControlPlane::Alone => {}
            ControlPlane::Leaf(s) => {
                let _ = wire::send(s, &msg, soon);
            }
            ControlPlane::Root(peers) => {
                for (_, s) in peers.iter_mut() {
                    let _ = wire::send(s, &msg, soon);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
