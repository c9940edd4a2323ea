//! The control plane that joins processes (one per node or per task) into one job: rank 0's
//! process listens on the rendezvous address, the others connect (retrying, so they may start
//! seconds apart), everyone learns the NCCL unique id and its rank offset, and later the same
//! connections carry barriers and sums (times, wrong-element counts).
//!
//! Every read, write, accept and connect is bounded by the caller's deadline; a peer that never
//! comes or goes away ends in an error that names it. Messages are JSON lines; a token (the
//! Slurm job and step, or `--token`) keeps two jobs that pick the same port apart.

mod error;

pub use error::PlaneError;
use error::WireError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What a process says about itself when it joins.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Member {
    pub proc_rank: u32,
    pub host: String,
    pub pid: u32,
    /// GPUs this process drives; its NCCL ranks are `first_rank .. first_rank + ngpus`.
    pub ngpus: u32,
    #[serde(default)]
    pub first_rank: u32,
}

#[derive(Serialize, Deserialize)]
struct Hello {
    token: String,
    world: u32,
    member: Member,
}

#[derive(Serialize, Deserialize)]
struct Welcome {
    unique_id: Vec<u8>,
    members: Vec<Member>,
}

#[derive(Serialize, Deserialize)]
struct Sum {
    seq: u64,
    values: Vec<f64>,
    /// Set by a process that gives up, so the others stop at once instead of at their deadline.
    #[serde(default)]
    abort: Option<String>,
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

/// Connections for barriers and sums after the rendezvous.
pub enum ControlPlane {
    /// One process: nothing to talk to.
    Alone,
    /// Rank 0: one connection per other process, in process-rank order.
    Root(Vec<(Member, BufReader<TcpStream>)>),
    /// Any other rank: the connection to rank 0.
    Leaf(BufReader<TcpStream>),
}

/// Joins `world` processes at `addr`. Rank 0 listens there and calls `make_id` once everyone is in.
pub fn join(
    addr: &str,
    token: &str,
    world: u32,
    me: Member,
    deadline: Instant,
    make_id: impl FnOnce() -> Result<[u8; 128], String>,
) -> Result<Joined, String> {
    if world == 1 {
        let mut me = me;
        me.first_rank = 0;
        return Ok(Joined {
            unique_id: make_id()?,
            members: vec![me],
            plane: ControlPlane::Alone,
        });
    }
    if me.proc_rank == 0 {
        serve(addr, token, world, me, deadline, make_id)
    } else {
        connect(addr, token, world, me, deadline)
    }
}

fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

fn serve(
    addr: &str,
    token: &str,
    world: u32,
    me: Member,
    deadline: Instant,
    make_id: impl FnOnce() -> Result<[u8; 128], String>,
) -> Result<Joined, String> {
    let port = addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .ok_or_else(|| format!("rendezvous address '{addr}' has no port (expected HOST:PORT)"))?;
    // Listen on every interface: the address names this host for the others, and the host may
    // have several.
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        format!(
            "rendezvous: cannot listen on port {port} (rank 0 on {}): {e}",
            me.host
        )
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("rendezvous: {e}"))?;
    let mut joined: Vec<Option<(Member, BufReader<TcpStream>)>> =
        (1..world).map(|_| None).collect();
    while joined.iter().any(Option::is_none) {
        let Some(left) = remaining(deadline) else {
            let missing: Vec<String> = joined
                .iter()
                .enumerate()
                .filter(|(_, j)| j.is_none())
                .map(|(i, _)| (i + 1).to_string())
                .collect();
            return Err(format!(
                "rendezvous at {addr}: process rank(s) {} of {world} never joined",
                missing.join(", ")
            ));
        };
        match listener.accept() {
            Ok((stream, peer)) => {
                // A stranger (port scan, another job) must not stop the rendezvous: drop it.
                if let Ok((hello, reader)) = read_hello(stream, left.min(Duration::from_secs(5))) {
                    match check_hello(&hello, token, world, &joined) {
                        Ok(()) => {
                            let slot = hello.member.proc_rank as usize - 1;
                            joined[slot] = Some((hello.member, reader));
                        }
                        Err(why) => eprintln!("nccl-check: rendezvous: ignored {peer}: {why}"),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(format!("rendezvous: accept on port {port}: {e}")),
        }
    }
    let mut peers: Vec<(Member, BufReader<TcpStream>)> = joined.into_iter().flatten().collect();
    let mut members = vec![me];
    members.extend(peers.iter().map(|(m, _)| m.clone()));
    let mut next = 0;
    for m in members.iter_mut() {
        m.first_rank = next;
        next += m.ngpus;
    }
    let unique_id = make_id()?;
    let welcome = Welcome {
        unique_id: unique_id.to_vec(),
        members: members.clone(),
    };
    for (m, reader) in peers.iter_mut() {
        send_line(reader.get_mut(), &welcome, deadline).map_err(|e| {
            format!(
                "rendezvous: sending to process rank {} ({}): {e}",
                m.proc_rank, m.host
            )
        })?;
    }
    Ok(Joined {
        unique_id,
        members,
        plane: ControlPlane::Root(peers),
    })
}

fn read_hello(
    stream: TcpStream,
    within: Duration,
) -> Result<(Hello, BufReader<TcpStream>), String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let hello: Hello = read_line(&mut reader, Instant::now() + within)?;
    Ok((hello, reader))
}

fn check_hello(
    hello: &Hello,
    token: &str,
    world: u32,
    joined: &[Option<(Member, BufReader<TcpStream>)>],
) -> Result<(), String> {
    if hello.token != token {
        return Err(format!(
            "token '{}' is not this job's '{token}'",
            hello.token
        ));
    }
    if hello.world != world {
        return Err(format!("world size {} differs from {world}", hello.world));
    }
    let r = hello.member.proc_rank;
    if r == 0 || r >= world {
        return Err(format!("process rank {r} is outside 1..{world}"));
    }
    if joined[r as usize - 1].is_some() {
        return Err(format!("process rank {r} joined twice"));
    }
    Ok(())
}

fn connect(
    addr: &str,
    token: &str,
    world: u32,
    me: Member,
    deadline: Instant,
) -> Result<Joined, String> {
    let mut last_error = String::from("no attempt");
    let stream = loop {
        let Some(left) = remaining(deadline) else {
            return Err(format!(
                "rendezvous at {addr}: rank 0 never answered ({last_error})"
            ));
        };
        match resolve(addr) {
            Ok(sa) => match TcpStream::connect_timeout(&sa, left.min(Duration::from_secs(1))) {
                Ok(s) => break s,
                Err(e) => last_error = e.to_string(),
            },
            Err(e) => last_error = e,
        }
        // Rank 0 may start seconds later (srun starts tasks unevenly): retry until the deadline.
        std::thread::sleep(Duration::from_millis(50).min(remaining(deadline).unwrap_or_default()));
    };
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let hello = Hello {
        token: token.to_string(),
        world,
        member: me,
    };
    send_line(reader.get_mut(), &hello, deadline)
        .map_err(|e| format!("rendezvous at {addr}: {e}"))?;
    let welcome: Welcome = read_line(&mut reader, deadline)
        .map_err(|e| format!("rendezvous at {addr}: waiting for the other processes: {e}"))?;
    let unique_id: [u8; 128] = welcome
        .unique_id
        .try_into()
        .map_err(|_| format!("rendezvous at {addr}: malformed unique id"))?;
    Ok(Joined {
        unique_id,
        members: welcome.members,
        plane: ControlPlane::Leaf(reader),
    })
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .find(SocketAddr::is_ipv4)
        .or_else(|| addr.to_socket_addrs().ok()?.next())
        .ok_or_else(|| format!("{addr} resolves to no address"))
}

fn send_line<T: Serialize>(
    stream: &mut TcpStream,
    msg: &T,
    deadline: Instant,
) -> Result<(), WireError> {
    let left = remaining(deadline).ok_or(WireError::Deadline("deadline passed"))?;
    stream
        .set_write_timeout(Some(left))
        .map_err(WireError::failed)?;
    let mut line = serde_json::to_vec(msg).map_err(WireError::failed)?;
    line.push(b'\n');
    stream.write_all(&line).map_err(WireError::failed)
}

fn read_line<T: for<'de> Deserialize<'de>>(
    reader: &mut BufReader<TcpStream>,
    deadline: Instant,
) -> Result<T, WireError> {
    let left = remaining(deadline).ok_or(WireError::Deadline("deadline passed"))?;
    reader
        .get_ref()
        .set_read_timeout(Some(left))
        .map_err(WireError::failed)?;
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) => Err(WireError::failed("connection closed (the peer exited)")),
        Ok(_) => serde_json::from_str(&line)
            .map_err(|e| WireError::failed(format!("malformed message: {e}"))),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(WireError::Deadline("no answer before the deadline"))
        }
        Err(e) => Err(WireError::failed(e)),
    }
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
        match self {
            ControlPlane::Alone => Ok(values.to_vec()),
            ControlPlane::Leaf(reader) => {
                let msg = Sum {
                    seq,
                    values: values.to_vec(),
                    abort: None,
                };
                send_line(reader.get_mut(), &msg, deadline).map_err(|e| e.in_plane("to rank 0"))?;
                let reply: Sum =
                    read_line(reader, deadline).map_err(|e| e.in_plane("from rank 0"))?;
                if let Some(why) = reply.abort {
                    return Err(PlaneError::Aborted(format!(
                        "another process gave up: {why}"
                    )));
                }
                if reply.seq != seq {
                    return Err(PlaneError::Peer(format!(
                        "out of step with rank 0 (step {} vs {seq})",
                        reply.seq
                    )));
                }
                Ok(reply.values)
            }
            ControlPlane::Root(peers) => {
                let mut total = values.to_vec();
                let mut failure = None;
                for (m, reader) in peers.iter_mut() {
                    match read_line::<Sum>(reader, deadline) {
                        Ok(msg) if msg.abort.is_some() => {
                            failure = Some(PlaneError::Aborted(format!(
                                "process rank {} ({}) gave up: {}",
                                m.proc_rank,
                                m.host,
                                msg.abort.unwrap_or_default()
                            )))
                        }
                        Ok(msg) if msg.seq != seq || msg.values.len() != total.len() => {
                            failure = Some(PlaneError::Peer(format!(
                                "process rank {} ({}) is out of step",
                                m.proc_rank, m.host
                            )))
                        }
                        Ok(msg) => total.iter_mut().zip(msg.values).for_each(|(t, v)| *t += v),
                        Err(e) => {
                            failure = Some(e.in_plane(format_args!(
                                "process rank {} ({})",
                                m.proc_rank, m.host
                            )))
                        }
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
                for (m, reader) in peers.iter_mut() {
                    send_line(reader.get_mut(), &reply, deadline).map_err(|e| {
                        e.in_plane(format_args!("process rank {} ({})", m.proc_rank, m.host))
                    })?;
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
            abort: Some(why.to_string()),
        };
        match self {
            ControlPlane::Alone => {}
            ControlPlane::Leaf(r) => {
                let _ = send_line(r.get_mut(), &msg, soon);
            }
            ControlPlane::Root(peers) => {
                for (_, r) in peers.iter_mut() {
                    let _ = send_line(r.get_mut(), &msg, soon);
                }
            }
        }
    }
}

/// The first host of a Slurm hostlist expression: `node[01-04,7],gpu2` -> `node01`.
pub fn first_host(hostlist: &str) -> Option<String> {
    let s = hostlist.trim();
    let end_of_first = {
        let mut depth = 0;
        let mut end = s.len();
        for (i, c) in s.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        end
    };
    let first = &s[..end_of_first];
    let out = match first.find('[') {
        None => first.to_string(),
        Some(open) => {
            let close = first[open..].find(']')? + open;
            let inner = &first[open + 1..close];
            let range = inner.split(',').next()?;
            let lo = range.split('-').next()?;
            format!("{}{}{}", &first[..open], lo, &first[close + 1..])
        }
    };
    (!out.is_empty()).then_some(out)
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

    #[test]
    fn first_host_of_hostlists() {
        assert_eq!(first_host("node01").as_deref(), Some("node01"));
        assert_eq!(first_host("node[01-04,7]").as_deref(), Some("node01"));
        assert_eq!(first_host("gpu[3,5-6],cpu1").as_deref(), Some("gpu3"));
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(
            first_host("rack[2-3]-n[1-2]").as_deref(),
            Some("rack2-n[1-2]")
        );
        assert_eq!(first_host(""), None);
    }

    #[test]
    fn three_processes_meet_and_sum_in_any_start_order() {
        let addr = "127.0.0.1:29871";
        let deadline = Instant::now() + Duration::from_secs(10);
        let leaf = |r: u32, delay: u64| {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(delay));
                let mut j = join(addr, "t", 3, member(r, r + 1), deadline, || {
                    Err("not root".into())
                })?;
                let s = j
                    .plane
                    .sum(1, &[r as f64, 1.0], deadline)
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((j.nranks(), j.members[r as usize].first_rank, s))
            })
        };
        // rank 2 starts before rank 0, rank 1 after it
        let t2 = leaf(2, 0);
        let t1 = leaf(1, 400);
        std::thread::sleep(Duration::from_millis(200));
        let mut root = join(addr, "t", 3, member(0, 1), deadline, || Ok([7u8; 128])).unwrap();
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
    fn a_missing_process_ends_in_an_error_naming_it_by_the_deadline() {
        let addr = "127.0.0.1:29872";
        let start = Instant::now();
        let deadline = start + Duration::from_millis(800);
        let t1 = std::thread::spawn(move || {
            join(addr, "t", 3, member(1, 1), deadline, || Err("x".into())).err()
        });
        let e = join(addr, "t", 3, member(0, 1), deadline, || Ok([0; 128]))
            .err()
            .unwrap_or_default();
        assert!(e.contains("process rank(s) 2 of 3 never joined"), "{e}");
        let e1 = t1.join().unwrap().unwrap_or_default();
        assert!(e1.contains("rendezvous at 127.0.0.1:29872"), "{e1}");
        assert!(start.elapsed() < Duration::from_millis(1500));
    }

    #[test]
    fn a_leaf_without_root_gives_up_at_the_deadline() {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(500);
        let e = join("127.0.0.1:29873", "t", 2, member(1, 1), deadline, || {
            Err("x".into())
        })
        .err()
        .unwrap_or_default();
        assert!(e.contains("rank 0 never answered"), "{e}");
        assert!(start.elapsed() < Duration::from_millis(1200));
    }

    #[test]
    fn a_wrong_token_is_ignored_not_joined() {
        let addr = "127.0.0.1:29874";
        let deadline = Instant::now() + Duration::from_millis(700);
        let t = std::thread::spawn(move || {
            join(addr, "other-job", 2, member(1, 1), deadline, || {
                Err("x".into())
            })
            .err()
        });
        let e = join(addr, "t", 2, member(0, 1), deadline, || Ok([0; 128]))
            .err()
            .unwrap_or_default();
        assert!(e.contains("never joined"), "{e}");
        assert!(t.join().unwrap().is_some());
    }

    #[test]
    fn a_sum_says_whether_a_peer_gave_up_went_away_or_never_answered() {
        let addr = "127.0.0.1:29875";
        let deadline = Instant::now() + Duration::from_secs(5);
        let leaf = std::thread::spawn(move || {
            let mut j = join(addr, "t", 2, member(1, 1), deadline, || Err("x".into()))?;
            j.plane.abort("GPU 0: CUDA error", deadline);
            Ok::<_, String>(j.plane.sum(2, &[], deadline))
        });
        let mut root = join(addr, "t", 2, member(0, 1), deadline, || Ok([0; 128])).unwrap();
        let e = root.plane.sum(1, &[], deadline).unwrap_err();
        assert_eq!(
            e,
            PlaneError::Aborted("process rank 1 (h1) gave up: GPU 0: CUDA error".into())
        );
        // The root passes the abort on.
        let echoed = leaf.join().unwrap().unwrap().unwrap_err();
        assert!(matches!(echoed, PlaneError::Aborted(_)), "{echoed:?}");

        let addr = "127.0.0.1:29877";
        let leaf = std::thread::spawn(move || {
            let mut j = join(addr, "t", 2, member(1, 1), deadline, || Err("x".into()))?;
            std::thread::sleep(Duration::from_millis(200));
            Ok::<_, String>(j.plane.sum(1, &[], deadline))
        });
        let root = join(addr, "t", 2, member(0, 1), deadline, || Ok([0; 128])).unwrap();
        drop(root);
        let gone = leaf.join().unwrap().unwrap().unwrap_err();
        assert!(matches!(gone, PlaneError::Peer(_)), "{gone:?}");
        assert!(gone.to_string().starts_with("from rank 0: "), "{gone}");

        let addr = "127.0.0.1:29876";
        let soon = Instant::now() + Duration::from_millis(600);
        let quiet = std::thread::spawn(move || {
            let j = join(addr, "t", 2, member(1, 1), soon, || Err("x".into()));
            std::thread::sleep(Duration::from_millis(700));
            drop(j);
        });
        let mut root = join(addr, "t", 2, member(0, 1), soon, || Ok([0; 128])).unwrap();
        let e = root.plane.sum(1, &[], soon).unwrap_err();
        assert_eq!(
            e,
            PlaneError::Deadline("process rank 1 (h1): no answer before the deadline".into())
        );
        quiet.join().unwrap();
    }
}
