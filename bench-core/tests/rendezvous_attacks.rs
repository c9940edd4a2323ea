//! Another user on the coordinator's node against the rendezvous, on loopback, through the public
//! `join` only: a relay on a candidate port that forwards (and one that rewrites) what passes,
//! squatters on every candidate, listeners that never speak, and under MUNGE a collector of
//! credentials and a flood of fake ones. Each was a finding of the audit in issue 26.

use bench_core::meet::rendezvous::auth::{Authenticator, Munge, SharedSecret};
use bench_core::meet::rendezvous::{join, Joined, Member, Setup};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LABEL: &str = "slurm-4242.0";
const ID: [u8; 128] = [0xab; 128];

fn secret() -> SharedSecret {
    SharedSecret::new("the-steps-secret-0123456789", "test").expect("test setup")
}

fn member(r: u32) -> Member {
    Member {
        proc_rank: r,
        host: format!("h{r}"),
        pid: 100 + r,
        ngpus: 1,
        first_rank: 0,
    }
}

fn setup(auth: &dyn Authenticator, ports: Vec<u16>, coordinator: bool, secs: u64) -> Setup<'_> {
    Setup {
        host: "127.0.0.1".into(),
        ports,
        label: LABEL.into(),
        world: 2,
        coordinator,
        auth,
        deadline: Instant::now() + Duration::from_secs(secs),
        expected: None,
    }
}

/// Distinct ports that were free a moment ago.
fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("test setup"))
        .collect();
    ls.iter()
        .map(|l| l.local_addr().expect("test setup").port())
        .collect()
}

/// The member's (unique id, sum of [2, 1] with the coordinator's [1, 2]) or why it failed.
fn member_joins_and_sums(
    auth: &dyn Authenticator,
    ports: Vec<u16>,
    secs: u64,
) -> Result<([u8; 128], Vec<f64>), String> {
    let s = setup(auth, ports, false, secs);
    let mut j: Joined = join(&s, member(1), || Err("not the coordinator".into()))?;
    let sum = j
        .plane
        .sum(1, &[2.0, 1.0], s.deadline)
        .map_err(|e| e.to_string())?;
    Ok((j.unique_id, sum))
}

/// Runs the coordinator (rank 0) on its own thread: joins, sums [1, 2], returns the sum.
fn coordinator(
    auth: Arc<dyn Authenticator>,
    ports: Vec<u16>,
    secs: u64,
) -> std::thread::JoinHandle<Result<Vec<f64>, String>> {
    std::thread::spawn(move || {
        let s = setup(auth.as_ref(), ports, true, secs);
        let mut j = join(&s, member(0), || Ok(ID))?;
        j.plane
            .sum(1, &[1.0, 2.0], s.deadline)
            .map_err(|e| e.to_string())
    })
}

/// A relay: every connection to `listener` is forwarded to `to`, both ways; what passes is
/// recorded, and what goes to the member has `[3.0,3.0]` (the true sum) replaced with
/// `[9.0,9.0]` when `rewrite`.
fn relay(listener: TcpListener, to: u16, rewrite: bool, seen: Arc<Mutex<Vec<u8>>>) {
    std::thread::spawn(move || {
        for inbound in listener.incoming().take(64) {
            let Ok(inbound) = inbound else { continue };
            let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let pipe = |mut from: TcpStream, mut to: TcpStream, rewrite: bool| {
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let mut chunk = buf[..n].to_vec();
                        seen.lock().expect("lock").extend_from_slice(&chunk);
                        if rewrite {
                            let text = String::from_utf8_lossy(&chunk).into_owned();
                            if text.contains("[3.0,3.0]") {
                                chunk = text.replace("[3.0,3.0]", "[9.0,9.0]").into_bytes();
                            }
                        }
                        if to.write_all(&chunk).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            };
            pipe(
                inbound.try_clone().expect("test setup"),
                outbound.try_clone().expect("test setup"),
                false,
            );
            pipe(outbound, inbound, rewrite);
        }
    });
}

/// A relay on the first candidate port, the real coordinator on the second: the member's id and
/// sum are the coordinator's, and nothing of the id passed the relay in the clear.
fn relay_cannot_read_or_change(auth: Arc<dyn Authenticator>, rewrite: bool) {
    let squat = TcpListener::bind("127.0.0.1:0").expect("test setup");
    let p1 = squat.local_addr().expect("test setup").port();
    let p2 = free_ports(1)[0];
    let seen = Arc::new(Mutex::new(Vec::new()));
    relay(squat, p2, rewrite, seen.clone());
    let c = coordinator(auth.clone(), vec![p1, p2], 20);
    // The coordinator listens before the member looks (else the relay may find nobody behind it
    // and the member go straight to the coordinator, by chance).
    std::thread::sleep(Duration::from_millis(300));
    let (id, sum) = member_joins_and_sums(auth.as_ref(), vec![p1, p2], 20).expect("test setup");
    assert_eq!(
        c.join().expect("thread").expect("test setup"),
        vec![3.0, 3.0]
    );
    assert_eq!(id, ID, "the member's NCCL unique id is the coordinator's");
    assert_eq!(sum, vec![3.0, 3.0], "the member's sum is the true one");
    let seen = seen.lock().expect("lock");
    let text = String::from_utf8_lossy(&seen);
    assert!(
        !text.contains(&"ab".repeat(32)) && !seen.windows(32).any(|w| w == &ID[..32]),
        "the relay read the NCCL unique id"
    );
}

#[test]
fn a_relay_that_forwards_reads_nothing_of_the_unique_id() {
    relay_cannot_read_or_change(Arc::new(secret()), false);
}

#[test]
fn a_relay_that_rewrites_changes_no_sum() {
    relay_cannot_read_or_change(Arc::new(secret()), true);
}

/// Plays this step's coordinator under another secret on `port` (answers every connection with
/// a real handshake it cannot prove) until the deadline.
fn squatter(port: u16, secs: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let wrong =
            SharedSecret::new("an-attackers-guess-0123456789", "squatter").expect("test setup");
        let mut s = setup(&wrong, vec![port], true, secs);
        s.world = 3; // never complete
        let _ = join(&s, member(0), || Ok([0; 128]));
    })
}

#[test]
fn a_squatter_on_every_candidate_makes_the_member_give_up_in_seconds() {
    let ports = free_ports(8);
    let squatters: Vec<_> = ports.iter().map(|&p| squatter(p, 5)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let e = member_joins_and_sums(&secret(), ports.clone(), 30).expect_err("must fail");
    let took = start.elapsed();
    assert!(took < Duration::from_secs(5), "gave up after {took:?}: {e}");
    assert!(
        e.contains("every candidate port") && e.contains(&ports[0].to_string()),
        "{e}"
    );
    for s in squatters {
        s.join().expect("thread");
    }
}

#[test]
fn silent_listeners_on_seven_of_eight_candidates_do_not_delay_the_join() {
    let silent: Vec<TcpListener> = (0..7)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("test setup"))
        .collect();
    let mut ports: Vec<u16> = silent
        .iter()
        .map(|l| l.local_addr().expect("test setup").port())
        .collect();
    ports.push(free_ports(1)[0]);
    let auth: Arc<dyn Authenticator> = Arc::new(secret());
    let c = coordinator(auth.clone(), ports.clone(), 30);
    let start = Instant::now();
    let (id, sum) = member_joins_and_sums(auth.as_ref(), ports, 30).expect("test setup");
    let took = start.elapsed();
    assert_eq!((id, sum), (ID, vec![3.0, 3.0]));
    assert!(took < Duration::from_millis(2500), "joined after {took:?}");
    c.join().expect("thread").expect("test setup");
    drop(silent);
}

// ---- MUNGE: a private munged on a socket of its own ------------------------------------------

/// A munged of this test's own (key, socket, logs in a fresh directory); None (the test then
/// says so and passes) where munged is not installed or cannot start.
struct Munged {
    child: Child,
    dir: PathBuf,
}

impl Munged {
    fn start(name: &str) -> Option<Munged> {
        let daemon = ["/usr/sbin/munged", "/sbin/munged"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())?;
        let dir =
            std::env::temp_dir().join(format!("nccl-check-munged-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).ok()?;
        // The socket's directory must be searchable by the other uid of the collector test.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).ok()?;
        let key = dir.join("key");
        let mut k = [0u8; 1024];
        getrandom::getrandom(&mut k).ok()?;
        std::fs::write(&key, k).ok()?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).ok()?;
        let sock = dir.join("sock");
        let child = Command::new(daemon)
            .args(["-F", "--force", "--num-threads=4"])
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--log-file={}", dir.join("log").display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .arg(format!("--seed-file={}", dir.join("seed").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let m = Munged { child, dir };
        let until = Instant::now() + Duration::from_secs(30);
        while !sock.exists() {
            if Instant::now() > until {
                eprintln!("munged did not start: {}", m.dir.display());
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(m)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("sock")
    }

    fn auth(&self) -> Arc<dyn Authenticator> {
        Arc::new(Munge::find(Some(self.socket())).expect("munge and unmunge installed"))
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

macro_rules! munged_or_skip {
    ($name:expr) => {
        match Munged::start($name) {
            Some(m) => m,
            None => {
                panic!("no munged on this machine: install munge (CI has it)")
            }
        }
    };
}

#[test]
fn under_munge_a_relay_that_rewrites_reads_and_changes_nothing() {
    let m = munged_or_skip!("relay");
    relay_cannot_read_or_change(m.auth(), true);
}

/// Every `MUNGE:...` credential in `bytes`.
fn credentials(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    text.match_indices("MUNGE:")
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "+/=:".contains(*c))
                .collect()
        })
        .collect()
}

/// Reads whatever arrives on `s` for `ms` milliseconds.
fn drain(s: &mut TcpStream, ms: u64) -> Vec<u8> {
    let mut all = Vec::new();
    let until = Instant::now() + Duration::from_millis(ms);
    let mut buf = [0u8; 8192];
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        let _ = s.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
    all
}

/// A frame of JSON as the rendezvous writes it.
fn frame(v: &serde_json::Value) -> Vec<u8> {
    let body = serde_json::to_vec(v).expect("test setup");
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&body);
    f
}

#[test]
fn under_munge_a_credential_a_stranger_collects_is_useless_to_another_uid() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        panic!("needs root: decoding as another uid switches to it (CI runs the tests as root)");
    }
    let m = munged_or_skip!("collect");
    let auth = m.auth();
    let squat = TcpListener::bind("127.0.0.1:0").expect("test setup");
    let p1 = squat.local_addr().expect("test setup").port();
    let p2 = free_ports(1)[0];
    let collected = Arc::new(Mutex::new(Vec::new()));
    // On the first candidate: a squatter that talks like a coordinator and keeps what it gets.
    let keep = collected.clone();
    std::thread::spawn(move || {
        for s in squat.incoming().take(20) {
            let Ok(mut s) = s else { continue };
            let greeting = serde_json::json!({
                "protocol": "nccl-check-rendezvous/2", "label": LABEL, "nonce": "ab".repeat(32)
            });
            let _ = s.write_all(&frame(&greeting));
            let got = drain(&mut s, 300);
            keep.lock().expect("lock").extend_from_slice(&got);
        }
    });
    let c = coordinator(auth.clone(), vec![p1, p2], 20);
    std::thread::sleep(Duration::from_millis(300));
    // A stranger at the real coordinator's port, opening a handshake it cannot finish.
    let mut at_coordinator = TcpStream::connect(("127.0.0.1", p2)).expect("test setup");
    let local = at_coordinator.local_addr().expect("test setup").to_string();
    let opening = serde_json::json!({
        "protocol": "nccl-check-rendezvous/4", "nonce": "cd".repeat(32),
        "key": "09".repeat(32), "from": local, "to": format!("127.0.0.1:{p2}")
    });
    at_coordinator
        .write_all(&frame(&opening))
        .expect("test setup");
    let from_coordinator = drain(&mut at_coordinator, 1500);
    let (id, _) = member_joins_and_sums(auth.as_ref(), vec![p1, p2], 20).expect("test setup");
    assert_eq!(id, ID);
    c.join().expect("thread").expect("test setup");
    let mut creds = credentials(&collected.lock().expect("lock"));
    creds.extend(credentials(&from_coordinator));
    assert!(
        !creds.is_empty(),
        "the stranger collected no credential to try"
    );
    for cred in creds {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "unmunge",
            ])
            .arg(format!("--socket={}", m.socket().display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut ch| {
                ch.stdin
                    .take()
                    .expect("test setup")
                    .write_all(cred.as_bytes())?;
                ch.wait_with_output()
            })
            .expect("test setup");
        assert!(
            !out.status.success(),
            "uid 65534 decoded a credential: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// munge and unmunge processes whose parent is this test process.
fn munge_children() -> usize {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid ...
            let Some((head, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let comm = head.split_once('(').map_or("", |(_, c)| c);
            let ppid = rest.split_whitespace().nth(1).unwrap_or("");
            (comm == "munge" || comm == "unmunge") && ppid == me
        })
        .count()
}

#[test]
fn under_munge_a_flood_of_fake_credentials_runs_a_bounded_number_of_processes() {
    let m = munged_or_skip!("flood");
    let auth = m.auth();
    let port = free_ports(1)[0];
    let c = coordinator(auth.clone(), vec![port], 25);
    std::thread::sleep(Duration::from_millis(200));
    let most = Arc::new(Mutex::new(0usize));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (most, stop) = (most.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n = munge_children();
                let mut m = most.lock().expect("lock");
                *m = (*m).max(n);
                drop(m);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    // 200 strangers at once, each opening a handshake and answering with a fake credential.
    let strangers: Vec<_> = (0..200)
        .map(|i| {
            std::thread::spawn(move || {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                let local = s.local_addr().expect("test setup").to_string();
                let fake = format!("MUNGE:AwQFAAD{}", "x".repeat(100));
                // Whatever the coordinator's version, the shortest way to make it check a
                // credential: version 2 took a hello at once, version 3 after an opening.
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut len = [0u8; 4];
                if s.read_exact(&mut len).is_err() {
                    return;
                }
                let mut first = vec![0u8; (u32::from_be_bytes(len) as usize).min(4096)];
                let _ = s.read_exact(&mut first);
                if String::from_utf8_lossy(&first).contains("rendezvous/2") {
                    let hello = serde_json::json!({
                        "body": { "world": 2, "member": member(1), "nonce": format!("{:064x}", i + 1) },
                        "proof": fake
                    });
                    let _ = s.write_all(&frame(&hello));
                } else {
                    let opening = serde_json::json!({
                        "protocol": "nccl-check-rendezvous/4", "nonce": format!("{:064x}", i + 1),
                        "key": "09".repeat(32), "from": local, "to": format!("127.0.0.1:{port}")
                    });
                    let _ = s.write_all(&frame(&opening));
                    let _ = drain(&mut s, 300);
                    let hello = serde_json::json!({
                        "body": { "world": 2, "member": member(1) }, "proof": fake
                    });
                    let _ = s.write_all(&frame(&hello));
                }
                let _ = drain(&mut s, 500);
            })
        })
        .collect();
    for s in strangers {
        s.join().expect("thread");
    }
    // The real member still joins afterwards.
    let (id, sum) = member_joins_and_sums(auth.as_ref(), vec![port], 20).expect("test setup");
    assert_eq!((id, sum), (ID, vec![3.0, 3.0]));
    c.join().expect("thread").expect("test setup");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.join().expect("thread");
    let most = *most.lock().expect("lock");
    assert!(
        most <= bench_core::meet::rendezvous::auth::MUNGE_AT_ONCE,
        "{most} munge/unmunge processes at once"
    );
    assert!(most >= 1, "the flood ran no MUNGE program at all");
}

#[test]
fn under_munge_a_replayed_credential_is_refused_with_its_reason() {
    let m = munged_or_skip!("replay");
    let auth = m.auth();
    let soon = Instant::now() + Duration::from_secs(5);
    let proof = auth.prove(b"a context", soon).expect("munge");
    auth.verify(b"a context", &proof, soon).expect("first use");
    let e = auth
        .verify(b"a context", &proof, soon)
        .expect_err("a replay is refused");
    assert!(e.contains("Replayed credential"), "{e}");
    let e = auth
        .verify(b"another context", "MUNGE:garbage:", soon)
        .expect_err("garbage is refused");
    assert!(e.len() > "unmunge: ".len() + 20, "a reason is given: {e}");
}
