//! What a refused connection was, and the coordinator's log of them: a few lines of each kind
//! at once, then one a kind per interval that counts the rest, so a flood neither fills the
//! job's log nor hides a later squatter, relay or wrong proof.

use std::time::{Duration, Instant};

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
    /// Its opening was not made with this step's key: another user's or another step's process.
    WrongProof,
    /// Its opening was made with the key, its hello does not open: an opening recorded and
    /// played again (by a process that cannot make the hello).
    Replay,
    /// Another protocol version: a worker of another nccl-check version.
    OtherVersion,
    /// Too many handshakes were under way (a flood of connections?).
    Busy,
    /// It did not complete the handshake: silent, closed early, or not the protocol.
    Incomplete,
    /// Under MUNGE, an opening without the job's ticket: a member's first contact
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
            Refusal::Replay => "connection(s) that replayed an opening",
            Refusal::OtherVersion => "connection(s) of another version",
            Refusal::Busy => "connection(s) refused while busy",
            Refusal::Incomplete => "connection(s) that did not complete the handshake",
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
    pub(super) fn log(&mut self, kind: Refusal, why: &str) {
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
        let replay = r.note(Refusal::Replay, "its hello does not open");
        assert!(replay.is_some_and(|l| l.contains("its hello does not open")));
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
}
