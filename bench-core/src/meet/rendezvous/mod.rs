//! The control plane that joins processes (one per node or per task) into one check: the
//! coordinating process listens on the rendezvous address, the others connect (retrying, so they
//! may start seconds apart), everyone proves it belongs to the same job step, learns the NCCL
//! unique id and its rank offset, and later the same connections carry barriers and sums.
//!
//! - [`auth`]: the step's key (a per-step shared secret, or under MUNGE the job's ticket:
//!   [`munge`]); `Credential::authenticator` (here) picks one;
//! - [`session`]: each connection's Noise handshake (`NNpsk0` under the step's key), and every
//!   frame after it sealed;
//! - [`wire`]: length-prefixed frames with size caps and one deadline per message;
//! - [`messages`]: the handshake's messages and the validation of every field;
//! - [`coordinator`] and [`member`]: the two sides of the handshake (`Setup::join`, in
//!   `coordinator.rs`, picks one); [`door`]: where the coordinator's connections wait, without a
//!   thread, until they speak;
//! - [`resolve`]: a host's addresses within the deadline;
//! - [`beacon`]: a coordinator that can listen on no candidate port says so to the members on
//!   other nodes (over UDP, proven), so they end at once instead of at the deadline;
//! - [`absent`]: the coordinator's word on the processes that never came (nodes, then ranks);
//! - [`plane`]: sums and barriers afterwards.
//!
//! Every read, write, accept and connect is bounded by the caller's deadline; a peer that never
//! comes or goes away ends in an error that names it.

pub mod absent;
pub mod auth;
pub mod beacon;
pub mod coordinator;
pub mod door;
pub mod member;
pub mod messages;
pub mod munge;
pub mod plane;
pub mod resolve;
pub mod session;
pub mod wire;

pub use plane::{ControlPlane, PlaneError};

use crate::model::credential::Credential;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// What a process says about itself when it joins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub proc_rank: u32,
    pub host: String,
    pub pid: u32,
    /// GPUs this process drives; its NCCL ranks are `first_rank .. first_rank + ngpus`.
    pub ngpus: u32,
    #[serde(default)]
    pub first_rank: u32,
}

/// What the rendezvous gives a process.
pub struct Joined {
    pub unique_id: [u8; 128],
    /// Every process, in process-rank order, with its first NCCL rank.
    pub members: Vec<Member>,
    pub plane: ControlPlane,
}

impl Joined {
    pub fn nranks(&self) -> u32 {
        self.members.iter().map(|m| m.ngpus).sum()
    }
}

/// How this process meets the others.
pub struct Setup<'a> {
    /// The coordinator's host: it listens there, the others connect there.
    pub host: String,
    /// Candidate ports, tried in order (the coordinator binds the first free one).
    pub ports: Vec<u16>,
    /// The job step (`slurm-<job>.<step>`, or `manual`): part of every proof, so a process of
    /// another step is never taken for a member.
    pub label: String,
    pub world: u32,
    /// True in the one process that coordinates (under Slurm: the first task on the step's
    /// first node, whatever its rank; otherwise rank 0).
    pub coordinator: bool,
    pub auth: &'a dyn auth::Authenticator,
    pub deadline: Instant,
    /// Every node of the step with the number of its processes (under Slurm:
    /// [`crate::meet::slurm_layout::expected`]), so the coordinator can name the node whose processes
    /// never joined; `None` outside Slurm. Member hosts are compared with these names.
    pub expected: Option<Vec<(String, u32)>>,
}

impl Credential {
    /// The authenticator for this credential; `munge_socket` is munged's socket when not the
    /// default.
    pub fn authenticator(
        &self,
        munge_socket: Option<std::path::PathBuf>,
    ) -> Result<Box<dyn auth::Authenticator>, String> {
        match self {
            Credential::Secret(s) => Ok(Box::new(auth::SharedSecret::new(s, "NCCL_CHECK_SECRET")?)),
            Credential::Munge => Ok(Box::new(munge::Munge::find(munge_socket).map_err(|e| {
                format!(
                    "no way to authenticate the other processes: set NCCL_CHECK_SECRET or install MUNGE ({e})"
                )
            })?)),
            // One process: the rendezvous returns before any proof is asked for.
            Credential::None => Ok(Box::new(auth::SharedSecret::new(
                "single-process-check",
                "nobody",
            )?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(r: u32, g: u32) -> Member {
        Member {
            proc_rank: r,
            host: format!("h{r}"),
            pid: r,
            ngpus: g,
            first_rank: 0,
        }
    }

    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    const SECRET: &str = "test-secret-0123456789";

    fn secret() -> auth::SharedSecret {
        auth::SharedSecret::new(SECRET, "test").unwrap()
    }

    /// A port that was free a moment ago.
    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn setup<'a>(
        auth: &'a dyn auth::Authenticator,
        ports: Vec<u16>,
        world: u32,
        coordinator: bool,
        deadline: Instant,
    ) -> Setup<'a> {
        Setup {
            host: "127.0.0.1".into(),
            ports,
            label: "slurm-7.0".into(),
            world,
            coordinator,
            auth,
            deadline,
            expected: None,
        }
    }

    /// A member's (NCCL ranks, first rank, sum) or why it failed.
    type MemberThread = std::thread::JoinHandle<Result<(u32, u32, Vec<f64>), String>>;

    /// Runs a member on its own thread: joins, then sums [rank, 1].
    fn spawn_member(
        r: u32,
        ngpus: u32,
        ports: Vec<u16>,
        world: u32,
        delay_ms: u64,
        deadline: Instant,
    ) -> MemberThread {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            let a = secret();
            let s = setup(&a, ports, world, false, deadline);
            let mut j = s.join(member(r, ngpus), || Err("not the coordinator".into()))?;
            let sum = j
                .plane
                .sum(1, &[r as f64, 1.0], deadline)
                .map_err(|e| e.to_string())?;
            Ok((j.nranks(), j.members[r as usize].first_rank, sum))
        })
    }

    #[test]
    fn three_processes_meet_and_sum_in_any_start_order() {
        let port = free_port();
        let deadline = Instant::now() + Duration::from_secs(10);
        // rank 2 starts before the coordinator (rank 0), rank 1 after it
        let t2 = spawn_member(2, 3, vec![port], 3, 0, deadline);
        let t1 = spawn_member(1, 2, vec![port], 3, 400, deadline);
        std::thread::sleep(Duration::from_millis(200));
        let a = secret();
        let mut root = setup(&a, vec![port], 3, true, deadline)
            .join(member(0, 1), || Ok([7u8; 128]))
            .unwrap();
        assert_eq!(root.unique_id, [7u8; 128]);
        let s = root.plane.sum(1, &[0.0, 1.0], deadline).unwrap();
        assert_eq!(s, vec![3.0, 3.0]);
        let (n1, f1, s1) = t1.join().unwrap().unwrap();
        let (n2, f2, s2) = t2.join().unwrap().unwrap();
        assert_eq!((n1, n2), (6, 6)); // 1 + 2 + 3 GPUs
        assert_eq!((f1, f2), (1, 3));
        assert_eq!((s1, s2), (vec![3.0, 3.0], vec![3.0, 3.0]));
    }

    #[test]
    fn the_coordinator_need_not_be_rank_zero() {
        // -m arbitrary: rank 0 runs elsewhere; the first task of the first node coordinates.
        let port = free_port();
        let deadline = Instant::now() + Duration::from_secs(10);
        let t0 = spawn_member(0, 1, vec![port], 2, 0, deadline);
        let a = secret();
        let mut c = setup(&a, vec![port], 2, true, deadline)
            .join(member(1, 2), || Ok([1u8; 128]))
            .unwrap();
        assert_eq!(
            c.plane.sum(1, &[1.0, 1.0], deadline).unwrap(),
            vec![1.0, 2.0]
        );
        let (n0, f0, _) = t0.join().unwrap().unwrap();
        assert_eq!((n0, f0), (3, 0));
        assert_eq!(c.members[1].first_rank, 1);
    }

    #[test]
    fn a_missing_process_ends_in_an_error_naming_it_by_the_deadline() {
        let port = free_port();
        let start = Instant::now();
        let deadline = start + Duration::from_millis(800);
        let t1 = spawn_member(1, 1, vec![port], 3, 0, deadline);
        let a = secret();
        let e = setup(&a, vec![port], 3, true, deadline)
            .join(member(0, 1), || Ok([0; 128]))
            .err()
            .unwrap_or_default();
        assert!(e.contains("process rank(s) 2 of 3 never joined"), "{e}");
        let e1 = t1.join().unwrap().err().unwrap_or_default();
        assert!(e1.contains("rendezvous at 127.0.0.1"), "{e1}");
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    /// The coordinator's error at its deadline when only `joiners` (and itself, rank 0 on `h0`)
    /// come, every rank r on node `h{r}` of the fake Slurm layout `expected`.
    fn deadline_error(world: u32, expected: Option<Vec<(String, u32)>>, joiners: &[u32]) -> String {
        let port = free_port();
        let start = Instant::now();
        let deadline = start + Duration::from_millis(700);
        let members: Vec<MemberThread> = joiners
            .iter()
            .map(|&r| spawn_member(r, 1, vec![port], world, 0, deadline))
            .collect();
        let a = secret();
        let mut s = setup(&a, vec![port], world, true, deadline);
        s.expected = expected;
        let e = s
            .join(member(0, 1), || Ok([0; 128]))
            .err()
            .unwrap_or_default();
        for m in members {
            assert!(
                m.join().unwrap().is_err(),
                "a member got through without everyone"
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        e
    }

    /// One process per node `h0`, `h1`, ...
    fn one_per_node(world: u32) -> Option<Vec<(String, u32)>> {
        Some((0..world).map(|r| (format!("h{r}"), 1)).collect())
    }

    #[test]
    fn the_coordinator_names_the_node_whose_process_never_joined() {
        let e = deadline_error(3, one_per_node(3), &[1]);
        assert!(
            e.ends_with(
                ": no process of node h2 joined (0 of 1), process rank(s) 2 of 3 never joined"
            ),
            "{e}"
        );
        // A node of two processes (h0 runs ranks 0 and 2) with one of them in.
        let layout = vec![("h0".to_string(), 2), ("h1".to_string(), 1)];
        let e = deadline_error(3, Some(layout), &[1]);
        assert!(
            e.ends_with(": not every process of node h0 joined (1 of 2), process rank(s) 2 of 3 never joined"),
            "{e}"
        );
    }

    #[test]
    fn the_coordinator_names_eight_missing_nodes_and_counts_the_rest() {
        let e = deadline_error(40, one_per_node(40), &[1, 2]);
        let nodes: Vec<String> = (3..11).map(|r| format!("h{r} (0 of 1)")).collect();
        let ranks: Vec<String> = (3..19).map(|r| r.to_string()).collect();
        let want = format!(
            ": processes of 37 nodes never joined: {} and 29 more, process rank(s) {} and 21 more of 40 never joined",
            nodes.join(", "),
            ranks.join(", ")
        );
        assert!(e.ends_with(&want), "{e}\nwanted {want}");
    }

    #[test]
    fn the_coordinators_error_stays_short_with_1024_processes_missing() {
        // Short enough for the plugin's one line (400 characters), nodes named first.
        let e = deadline_error(1025, one_per_node(1025), &[]);
        assert!(e.len() < 400, "{} bytes: {e}", e.len());
        assert!(
            e.contains(": processes of 1024 nodes never joined: h1 (0 of 1), h2"),
            "{e}"
        );
        assert!(e.ends_with(" 16 and 1008 more of 1025 never joined"), "{e}");
        // Without a layout: the ranks alone, as bounded (this was 5 KB before).
        let e = deadline_error(1025, None, &[]);
        assert!(e.len() < 200, "{} bytes: {e}", e.len());
        assert!(e.contains(": process rank(s) 1, 2, 3, "), "{e}");
    }

    #[test]
    fn name_lookups_answer_within_the_deadline() {
        let soon = Instant::now() + Duration::from_secs(5);
        assert!(resolve::resolve_host("localhost", 1, soon).is_ok_and(|a| !a.is_empty()));
        let e = resolve::resolve_host("localhost", 1, Instant::now()).unwrap_err();
        assert!(e.contains("deadline"), "{e}");
    }

    #[test]
    fn a_member_without_coordinator_gives_up_at_the_deadline() {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(500);
        let e = spawn_member(1, 1, vec![free_port()], 2, 0, deadline)
            .join()
            .unwrap()
            .err()
            .unwrap_or_default();
        assert!(e.contains("the coordinator never answered"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    /// Plays rank 1 with the wrong secret, as another user's process would.
    fn impostor(port: u16, deadline: Instant) -> Result<Joined, String> {
        let wrong = auth::SharedSecret::new("slurm-7.0-guessed-secret", "attacker").unwrap();
        setup(&wrong, vec![port], 2, false, deadline).join(member(1, 1), || Err("x".into()))
    }

    #[test]
    fn a_process_without_the_secret_cannot_join_and_the_real_member_still_does() {
        let port = free_port();
        let deadline = Instant::now() + Duration::from_secs(5);
        let a = secret();
        let coordinator = std::thread::spawn(move || {
            let a = secret();
            setup(&a, vec![port], 2, true, deadline)
                .join(member(0, 1), || Ok([9; 128]))
                .map(|j| j.members)
        });
        // The impostor comes first and gets nothing, not even an answer it could trust.
        let bad = impostor(port, Instant::now() + Duration::from_millis(600));
        assert!(bad.is_err());
        let real = setup(&a, vec![port], 2, false, deadline)
            .join(member(1, 1), || Err("x".into()))
            .unwrap();
        assert_eq!(real.unique_id, [9; 128]);
        let members = coordinator.join().unwrap().unwrap();
        assert_eq!(members[1].pid, 1, "the real rank 1 is the member");
    }

    #[test]
    fn a_squatter_on_the_port_is_passed_over() {
        // Another user's process holds the first candidate port and answers like a coordinator,
        // without the secret; the coordinator binds the next port; the member finds it there.
        let squat = TcpListener::bind("127.0.0.1:0").unwrap();
        let p1 = squat.local_addr().unwrap().port();
        let p2 = free_port();
        let squatter = std::thread::spawn(move || {
            let wrong = auth::SharedSecret::new("not-the-step-secret", "squatter").unwrap();
            let deadline = Instant::now() + Duration::from_millis(1500);
            let s = Setup {
                host: "127.0.0.1".into(),
                ports: vec![],
                label: "slurm-7.0".into(),
                world: 2,
                coordinator: true,
                auth: &wrong,
                deadline,
                expected: None,
            };
            // Answers connections with a real handshake under the wrong secret, until its
            // deadline (the member tries every port at once, and may find the coordinator on
            // the other before it ever comes here).
            squat.set_nonblocking(true).unwrap();
            while Instant::now() < deadline {
                match squat.accept() {
                    Ok((stream, _)) => {
                        let _ = coordinator_handshake_for_test(stream, &s);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(6);
        let m = spawn_member(1, 1, vec![p1, p2], 2, 0, deadline);
        let a = secret();
        let mut c = setup(&a, vec![p1, p2], 2, true, deadline)
            .join(member(0, 1), || Ok([3; 128]))
            .unwrap();
        c.plane.sum(1, &[0.0, 0.0], deadline).unwrap();
        let (n, _, _) = m.join().unwrap().unwrap();
        assert_eq!(n, 2);
        squatter.join().unwrap();
    }

    fn coordinator_handshake_for_test(stream: TcpStream, s: &Setup) -> Result<(), String> {
        coordinator::handshake::test_handshakes::handshake(
            stream, s.world, &s.label, s.auth, s.deadline,
        )
        .map(|_| ())
        .map_err(|(_, e)| e)
    }

    #[test]
    fn floods_drips_and_idle_connections_do_not_stop_the_real_member() {
        let port = free_port();
        let start = Instant::now();
        let deadline = start + Duration::from_secs(8);
        let coordinator = std::thread::spawn(move || {
            let a = secret();
            let mut j =
                setup(&a, vec![port], 2, true, deadline).join(member(0, 1), || Ok([5; 128]))?;
            j.plane
                .sum(1, &[0.0, 1.0], deadline)
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(j.members.len())
        });
        std::thread::sleep(Duration::from_millis(100));
        let addr = ("127.0.0.1", port);
        // Three idle connections, one that announces 3 GiB, one that drips a byte at a time.
        let idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut flood = TcpStream::connect(addr).unwrap();
        let _ = flood.write_all(&(3u32 << 30).to_be_bytes());
        let _ = flood.write_all(&[b'x'; 4096]);
        let mut drip = TcpStream::connect(addr).unwrap();
        let dripper = std::thread::spawn(move || {
            let _ = drip.write_all(&100u32.to_be_bytes());
            for _ in 0..20 {
                if drip.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let joined_at = Instant::now();
        let (n, _, _) = spawn_member(1, 1, vec![port], 2, 0, deadline)
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(n, 2);
        assert!(
            joined_at.elapsed() < Duration::from_secs(3),
            "the real member waited {:?}",
            joined_at.elapsed()
        );
        assert_eq!(coordinator.join().unwrap().unwrap(), 2);
        drop(idle);
        dripper.join().unwrap();
    }

    #[test]
    fn the_coordinator_listens_only_on_the_rendezvous_address() {
        let port = free_port();
        let deadline = Instant::now() + Duration::from_millis(900);
        let c = std::thread::spawn(move || {
            let a = secret();
            setup(&a, vec![port], 2, true, deadline)
                .join(member(0, 1), || Ok([0; 128]))
                .err()
        });
        std::thread::sleep(Duration::from_millis(200));
        // 127.0.0.2 is this machine too, but not the address given.
        assert!(TcpStream::connect(("127.0.0.2", port)).is_err());
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
        assert!(c.join().unwrap().is_some());
    }
}
