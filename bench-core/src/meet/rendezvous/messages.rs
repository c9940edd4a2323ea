//! The rendezvous messages and the checks every field passes before it is used.
//!
//! The handshake, per connection (protocol [`super::auth::PROTOCOL`]; Noise's `NNpsk0`,
//! [`super::session`]):
//! 1. member -> coordinator [`Opening`]: the protocol and Noise's first message (`-> psk, e`),
//!    whose payload is the connection's [`Endpoints`] as the member sees them. Under MUNGE the key is
//!    the job's ticket: before the member has it, its opening carries no Noise message, and
//!    the coordinator answers a [`TicketOffer`] and closes: the member opens the ticket and
//!    connects again;
//! 2. coordinator -> member [`Greeting`]: protocol, step label and Noise's second message
//!    (`<- e, ee`), whose payload is the [`Endpoints`] as the coordinator sees them: the member now
//!    knows it talks to a holder of its own step's key, and whether directly, before it says
//!    anything about itself;
//! 3. everything after this is sealed: member -> coordinator [`Hello`] (who it is; that it
//!    opens proves the opening was no recording), coordinator -> member [`Accepted`], then,
//!    once everyone is in, [`Welcome`] (NCCL unique id, every member).
//!
//! One round trip and a half: the member speaks first, as soon as it connects (the coordinator's
//! door holds a connection, without a thread, until that opening is in whole, and answers it
//! there). Under MUNGE a member's first contact costs one more connection.
//!
//! Counts, ranks, sizes and names from a peer are validated with checked arithmetic; a value
//! that would make this process allocate or index beyond the limits below is refused by name.

use super::Member;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// Longest one handshake may take (challenge to accepted): a real member answers in
/// milliseconds; a stranger holds a slot at most this long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// Most GPUs one process drives.
pub const MAX_GPUS_PER_PROCESS: u32 = 64;
/// Longest host name (Linux HOST_NAME_MAX is 64; DNS names reach 253).
pub const MAX_HOST_LEN: usize = 255;
/// NCCL's unique id is 128 bytes (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// The first field of either side's first message, read before the rest so that a process of
/// another protocol version is named as such (it is refused, and says which version it speaks).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Version {
    pub protocol: String,
}

/// Member -> coordinator, on connect.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Opening {
    pub protocol: String,
    /// Noise's first message, hex, its payload the member's [`Endpoints`]; absent under MUNGE on a
    /// member's first contact (it has no key yet), which is answered with a [`TicketOffer`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
}

/// Coordinator -> member, once its opening is read: Noise's second message, hex, its payload
/// the coordinator's [`Endpoints`]. Absent where the opening was not made with this step's key:
/// the connection is closed, and the member names the port held.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Greeting {
    pub protocol: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
}

/// A connection's two addresses as one side sees them (a handshake message's payload): the
/// member's own and the one it connected to, or where the coordinator saw it come from and
/// arrive. Different views are a process relaying the connection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Endpoints {
    pub from: String,
    pub to: String,
}

impl Endpoints {
    /// Both addresses, checked ([`check_addr`]).
    pub fn check(&self) -> Result<(), String> {
        check_addr(&self.from).and_then(|()| check_addr(&self.to))
    }
}

/// Coordinator -> member, under MUNGE, to an opening not made with the job's ticket, then the
/// connection is closed: the job's ticket credential, which only the job's user can
/// open ([`super::auth::Ticket`]). Costs the coordinator no MUNGE work and no handshake slot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TicketOffer {
    pub protocol: String,
    pub label: String,
    pub ticket: String,
}

/// Member -> coordinator, sealed: everything it says about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub world: u32,
    pub member: Member,
}

/// Coordinator -> member, sealed, once the member's hello is read: it is in. A connection
/// that closes before this was dropped (a busy coordinator, or a refused hello) and the member
/// tries again; after it, a close means the coordinator gave up.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Accepted {
    pub accepted: bool,
}

/// The coordinator's welcome, sealed: the id and every process, by columns. Every member gets
/// the whole list (N welcomes of N processes: the join's bytes grow as N^2), so each process
/// costs a few small numbers here (its host's index, its GPU count, its pid, ~20 bytes in JSON)
/// and each host name is sent once, instead of one JSON record a process (~75 bytes: 240 KB a
/// welcome at 4,096 processes, bench-core/benchmarks/results/2026-11-24-control-plane-4096).
/// Ranks are not sent: process rank is the position, first NCCL ranks follow from the GPU counts
/// ([`assign_ranks`], which every member runs itself).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Welcome {
    /// Hex of the 128-byte NCCL unique id.
    pub unique_id: String,
    /// Every host once, in the order of its first process.
    pub hosts: Vec<String>,
    /// Per process, in process-rank order: the index of its host in `hosts`.
    pub host: Vec<u32>,
    /// Per process: the GPUs it drives.
    pub ngpus: Vec<u32>,
    /// Per process: its pid (for the report's process list).
    pub pid: Vec<u32>,
}

impl Welcome {
    /// The welcome for `members` (in process-rank order).
    pub fn new(unique_id: &[u8], members: &[Member]) -> Welcome {
        let mut hosts: Vec<String> = Vec::new();
        let mut index: std::collections::HashMap<&str, u32> = Default::default();
        let host = members
            .iter()
            .map(|m| {
                *index.entry(m.host.as_str()).or_insert_with(|| {
                    hosts.push(m.host.clone());
                    hosts.len() as u32 - 1
                })
            })
            .collect();
        Welcome {
            unique_id: hex::encode(unique_id),
            hosts,
            host,
            ngpus: members.iter().map(|m| m.ngpus).collect(),
            pid: members.iter().map(|m| m.pid).collect(),
        }
    }

    /// The member list it describes, each field checked, for a world of `world` processes.
    fn members(&self, world: u32) -> Result<Vec<Member>, String> {
        let n = world as usize;
        for (what, len) in [
            ("host indices", self.host.len()),
            ("GPU counts", self.ngpus.len()),
            ("pids", self.pid.len()),
        ] {
            if len != n {
                return Err(format!("{len} {what} listed for a world of {world}"));
            }
        }
        if self.hosts.len() > n {
            return Err(format!(
                "{} hosts listed for a world of {world}",
                self.hosts.len()
            ));
        }
        self.hosts.iter().try_for_each(|h| check_host(h))?;
        let mut members = Vec::with_capacity(n);
        for (i, ((&h, &ngpus), &pid)) in
            self.host.iter().zip(&self.ngpus).zip(&self.pid).enumerate()
        {
            let host = self.hosts.get(h as usize).ok_or_else(|| {
                format!("process rank {i} is on host {h} of {}", self.hosts.len())
            })?;
            if ngpus == 0 || ngpus > MAX_GPUS_PER_PROCESS {
                return Err(format!("process rank {i} drives {ngpus} GPUs"));
            }
            members.push(Member {
                proc_rank: i as u32,
                host: host.clone(),
                pid,
                ngpus,
                first_rank: 0,
            });
        }
        assign_ranks(&mut members)?;
        Ok(members)
    }
}

/// Longest socket address text accepted (`[v6 address%scope]:port`).
pub const MAX_ADDR_LEN: usize = 64;

/// A socket address as a peer wrote it: short printable ASCII.
pub fn check_addr(a: &str) -> Result<(), String> {
    printable("address", a, MAX_ADDR_LEN)
}

/// `text` is 1..=`max` bytes of printable ASCII without spaces; else named as `what`.
fn printable(what: &str, text: &str, max: usize) -> Result<(), String> {
    let n = text.len();
    if n == 0 || n > max || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{what} of {n} bytes is not 1..{max} printable characters"
        ));
    }
    Ok(())
}

/// A nonce is 64 hex digits.
pub fn check_nonce(n: &str) -> Result<(), String> {
    let hex = n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then_some(())
        .ok_or_else(|| "nonce is not 64 hex digits".into())
}

/// A host name: printable ASCII without spaces, 1..=255 bytes.
pub fn check_host(h: &str) -> Result<(), String> {
    printable("host name", h, MAX_HOST_LEN)
}

/// Checks what a member says about itself against this step's world size.
pub fn check_hello(body: &Hello, world: u32) -> Result<(), String> {
    if body.world != world {
        return Err(format!("world size {} differs from {world}", body.world));
    }
    let m = &body.member;
    if m.proc_rank >= world {
        return Err(format!(
            "process rank {} is outside 0..{world}",
            m.proc_rank
        ));
    }
    if m.ngpus == 0 || m.ngpus > MAX_GPUS_PER_PROCESS {
        return Err(format!(
            "process rank {} drives {} GPUs (1..{MAX_GPUS_PER_PROCESS} allowed)",
            m.proc_rank, m.ngpus
        ));
    }
    check_host(&m.host)
}

/// Gives every member its first NCCL rank, in process-rank order; the total must fit.
pub fn assign_ranks(members: &mut [Member]) -> Result<u32, String> {
    let mut next: u32 = 0;
    for m in members.iter_mut() {
        m.first_rank = next;
        next = next
            .checked_add(m.ngpus)
            .ok_or("the GPU count of all processes overflows")?;
    }
    Ok(next)
}

/// Checks the coordinator's welcome as seen by process `me` of `world`; returns the unique id
/// and every process, in process-rank order, with its first NCCL rank.
pub fn check_welcome(
    body: &Welcome,
    world: u32,
    me: &Member,
) -> Result<([u8; UNIQUE_ID_BYTES], Vec<Member>), String> {
    let id = hex::decode(&body.unique_id).map_err(|_| "unique id is not hex".to_string())?;
    let id: [u8; UNIQUE_ID_BYTES] = id
        .try_into()
        .map_err(|_| format!("unique id is not {UNIQUE_ID_BYTES} bytes"))?;
    let members = body.members(world)?;
    let mine = members
        .get(me.proc_rank as usize)
        .ok_or("the member list does not include this process")?;
    if mine.ngpus != me.ngpus || mine.host != me.host || mine.pid != me.pid {
        return Err("the member list does not describe this process as it joined".into());
    }
    Ok((id, members))
}

/// A socket address as both sides write it into their [`Endpoints`] (IPv4-mapped IPv6 as IPv4).
pub fn addr_text(a: SocketAddr) -> String {
    SocketAddr::new(a.ip().to_canonical(), a.port()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(r: u32, g: u32) -> Member {
        Member {
            proc_rank: r,
            host: format!("n{r}"),
            pid: 100 + r,
            ngpus: g,
            first_rank: 0,
        }
    }

    fn hello(r: u32, g: u32, world: u32) -> Hello {
        Hello {
            world,
            member: member(r, g),
        }
    }

    #[test]
    fn hello_fields_out_of_range_are_refused_by_name() {
        assert!(check_hello(&hello(1, 4, 2), 2).is_ok());
        let bad = [
            (hello(1, u32::MAX, 2), "drives 4294967295 GPUs"),
            (hello(1, 300_000_000, 2), "drives 300000000 GPUs"),
            (hello(1, 0, 2), "drives 0 GPUs"),
            (hello(2, 1, 2), "outside 0..2"),
            (hello(1, 1, 3), "world size 3 differs"),
        ];
        for (h, want) in bad {
            let e = check_hello(&h, 2).unwrap_err();
            assert!(e.contains(want), "{e} lacks {want}");
        }
        let mut long = hello(1, 1, 2);
        long.member.host = "x".repeat(300);
        assert!(check_hello(&long, 2).is_err());
        assert!(check_nonce("ab").is_err());
        assert!(check_addr("127.0.0.1:29501").is_ok());
        assert!(check_addr("a\x1b[2Jb").is_err());
    }

    fn welcome(members: Vec<Member>) -> Welcome {
        Welcome::new(&[0; 128], &members)
    }

    #[test]
    fn a_welcome_that_would_index_or_overflow_is_refused() {
        let mut ok = vec![member(0, 2), member(1, 2)];
        assert_eq!(assign_ranks(&mut ok).unwrap(), 4);
        let (_, got) = check_welcome(&welcome(ok.clone()), 2, &member(1, 2)).unwrap();
        assert_eq!(got, ok);
        // members = [] (a panic at an index before)
        assert!(check_welcome(&welcome(vec![]), 2, &member(1, 2)).is_err());
        // a host index past the host list
        let mut far = welcome(ok.clone());
        far.host[1] = 4_000_000_000;
        let e = check_welcome(&far, 2, &member(1, 2)).unwrap_err();
        assert_eq!(e, "process rank 1 is on host 4000000000 of 2");
        // columns of different lengths
        let mut short = welcome(ok.clone());
        short.pid.pop();
        let e = check_welcome(&short, 2, &member(1, 2)).unwrap_err();
        assert_eq!(e, "1 pids listed for a world of 2");
        // a short unique id
        let mut w = welcome(ok.clone());
        w.unique_id = "00".into();
        assert!(check_welcome(&w, 2, &member(1, 2)).is_err());
        // someone else's description of me
        assert!(check_welcome(&welcome(ok), 2, &member(1, 3)).is_err());
        // u32 sums that would wrap
        let mut huge: Vec<Member> = (0..3).map(|r| member(r, MAX_GPUS_PER_PROCESS)).collect();
        assert!(assign_ranks(&mut huge).is_ok());
        let mut wrap = vec![member(0, u32::MAX), member(1, 2)];
        assert!(assign_ranks(&mut wrap).is_err());
        let mut many = welcome(vec![member(0, 1), member(1, 0)]);
        many.ngpus[1] = 0;
        let e = check_welcome(&many, 2, &member(0, 1)).unwrap_err();
        assert_eq!(e, "process rank 1 drives 0 GPUs");
    }

    /// A welcome costs each process a few small numbers, and each
    /// node's name once; the member list comes back whole, first ranks included.
    #[test]
    fn a_welcome_sends_each_host_once_and_a_few_bytes_a_process() {
        // 512 nodes of 8 processes (one a GPU), as `srun --ntasks-per-node 8`.
        let mut members: Vec<Member> = (0..4096u32)
            .map(|r| Member {
                proc_rank: r,
                host: format!("gpu-node-{:04}", r / 8),
                pid: 4_000_000 + r,
                ngpus: 1,
                first_rank: 0,
            })
            .collect();
        assign_ranks(&mut members).unwrap();
        let w = welcome(members.clone());
        assert_eq!(w.hosts.len(), 512);
        let bytes = serde_json::to_vec(&w).unwrap().len();
        let records = serde_json::to_vec(&members).unwrap().len();
        assert!(bytes * 3 < records, "{bytes} vs {records} bytes");
        assert!(bytes < 4096 * 20, "{bytes} bytes");
        let (_, back) = check_welcome(&w, 4096, &members[4095]).unwrap();
        assert_eq!(back, members);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        /// Whatever bytes arrive, parsing and checking end in Ok or Err, never a panic.
        #[test]
        fn any_bytes_are_parsed_and_checked_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(h) = super::super::wire::decode::<Hello>(&bytes) {
                let _ = check_hello(&h, 4);
            }
            if let Ok(w) = super::super::wire::decode::<Welcome>(&bytes) {
                let _ = check_welcome(&w, 4, &member(1, 1));
            }
            if let Ok(e) = super::super::wire::decode::<Endpoints>(&bytes) {
                let _ = e.check();
            }
            let _ = super::super::wire::decode::<Opening>(&bytes);
            let _ = super::super::wire::decode::<Greeting>(&bytes);
        }

        /// Well-formed messages with arbitrary numbers: checks never panic, and a welcome that
        /// passes has a member list this process can index.
        #[test]
        fn arbitrary_fields_never_panic(world in 0u32..10, ranks in proptest::collection::vec((any::<u32>(), any::<u32>(), any::<u32>()), 0..10)) {
            let members: Vec<Member> = ranks.iter().map(|&(r, g, f)| Member { proc_rank: r, host: format!("h{}", f % 3), pid: 1, ngpus: g, first_rank: f }).collect();
            let me = member(1, 1);
            if let Ok((_, got)) = check_welcome(&welcome(members.clone()), world, &me) {
                prop_assert!(got.len() == world as usize && (me.proc_rank as usize) < got.len());
            }
            for m in members {
                let _ = check_hello(&Hello { world, member: m }, world);
            }
        }
    }
}
