//! The job's ticket as a MUNGE credential (`auth`'s second kind of key): through the `munge`
//! and `unmunge` programs of root-owned system directories, each run supervised and bounded, at most
//! [`MUNGE_AT_ONCE`] at a time in this process (one queue, first come first served), the job's
//! [`Ticket`] made and opened, and unmunge's output read.

use super::auth::{AuthError, Authenticator, Ticket};
use std::time::{Duration, Instant};

/// MUNGE credentials through the `munge` and `unmunge` programs.
pub struct Munge {
    munge: std::path::PathBuf,
    unmunge: std::path::PathBuf,
    socket: Option<std::path::PathBuf>,
    uid: u32,
    /// The last ticket opened and its key: every try at the same coordinator shows the same.
    opened: std::sync::Mutex<Option<(String, Vec<u8>)>>,
}

/// Where the MUNGE programs are looked for: root-owned system directories only, never `$PATH`.
const MUNGE_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/local/bin"];
/// Longest a single munge or unmunge run may take.
const MUNGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest credential or unmunge output accepted.
const MAX_MUNGE_OUTPUT: usize = 64 * 1024;
/// Most munge or unmunge programs this process runs at once; a handshake that finds none free
/// before its deadline is refused (a real member retries).
pub const MUNGE_AT_ONCE: usize = 4;

/// How a refusal for want of a free slot begins.
pub const MUNGE_BUSY: &str = "MUNGE is busy";

/// The slots for [`MUNGE_AT_ONCE`] programs at a time, given in the order asked for, so that a
/// real member's credential waits behind the requests already queued, never behind every
/// request that comes after it.
struct MungeQueue {
    busy: usize,
    next: u64,
    waiting: std::collections::VecDeque<u64>,
}

/// Static because the limit is the process's: every handshake of the coordinator's door and of
/// a member, on whatever thread, takes its slot from this one queue.
static MUNGE_SLOTS: std::sync::Mutex<MungeQueue> = std::sync::Mutex::new(MungeQueue {
    busy: 0,
    next: 0,
    waiting: std::collections::VecDeque::new(),
});
/// Woken when a slot of [`MUNGE_SLOTS`] is given back (static with it).
static MUNGE_FREED: std::sync::Condvar = std::sync::Condvar::new();

/// One of the slots, given back when dropped.
struct MungeSlot;

impl MungeSlot {
    fn take(until: Instant) -> Result<MungeSlot, AuthError> {
        let mut q = MUNGE_SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        let ticket = q.next;
        q.next += 1;
        q.waiting.push_back(ticket);
        while q.busy >= MUNGE_AT_ONCE || q.waiting.front() != Some(&ticket) {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                q.waiting.retain(|&t| t != ticket);
                drop(q);
                MUNGE_FREED.notify_all();
                return Err(AuthError::Busy(format!(
                    "{MUNGE_BUSY}: {MUNGE_AT_ONCE} credentials are being made or checked already (a flood of connections?)"
                )));
            };
            q = MUNGE_FREED
                .wait_timeout(q, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        q.waiting.pop_front();
        q.busy += 1;
        drop(q);
        // The next in line may take a slot that is still free.
        MUNGE_FREED.notify_all();
        Ok(MungeSlot)
    }
}

impl Drop for MungeSlot {
    fn drop(&mut self) {
        let mut q = MUNGE_SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        q.busy = q.busy.saturating_sub(1);
        drop(q);
        MUNGE_FREED.notify_all();
    }
}

impl Munge {
    /// Finds the programs; `socket` is munged's socket when not the default.
    pub fn find(socket: Option<std::path::PathBuf>) -> Result<Munge, String> {
        let find = |name: &str| {
            MUNGE_DIRS
                .iter()
                .map(|d| std::path::Path::new(d).join(name))
                .find(|p| p.is_file())
                .ok_or_else(|| format!("{name} not found in {}", MUNGE_DIRS.join(", ")))
        };
        Ok(Munge {
            munge: find("munge")?,
            unmunge: find("unmunge")?,
            socket,
            uid: nix::unistd::geteuid().as_raw(),
            opened: Default::default(),
        })
    }

    /// Runs `program` under the contract's supervision (own process group, killed with all it
    /// started at the deadline, reaped), `input` on its stdin: its stdout; a program that ran
    /// and exited non-zero gives `Ok(Err((its stdout, why)))`, so that unmunge's output for a
    /// replayed credential can still be read.
    fn run_output(
        &self,
        program: &std::path::Path,
        args: &[&str],
        input: &[u8],
        deadline: Instant,
    ) -> Result<Result<String, (String, String)>, AuthError> {
        use nccl_check_host::supervise::{self, Ending, Output, Spec};
        let until = deadline.min(Instant::now() + MUNGE_TIMEOUT);
        let _slot = MungeSlot::take(until)?;
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        if let Some(s) = &self.socket {
            argv.extend(["--socket".into(), s.clone().into_os_string()]);
        }
        argv.extend(args.iter().map(|a| (*a).into()));
        let spec = Spec {
            program: program.to_path_buf(),
            args: argv,
            env: None,
            cwd: None,
            stdin: Some(input.to_vec()),
            stdout: Output::Tail {
                max_bytes: MAX_MUNGE_OUTPUT,
            },
            stderr: Output::Tail { max_bytes: 4096 },
            deadline: until.saturating_duration_since(Instant::now()),
        };
        let done = supervise::run(spec).map_err(|e| {
            AuthError::Refused(format!("cannot run {}: {}", program.display(), e.error))
        })?;
        let out = String::from_utf8_lossy(&done.stdout).into_owned();
        let status = match done.ending {
            Ending::Exited(0) => return Ok(Ok(out)),
            Ending::KilledAtDeadline => {
                return Err(AuthError::Busy(format!(
                    "{} did not answer in time",
                    program.display()
                )))
            }
            Ending::Exited(code) => format!("exit status: {code}"),
            Ending::Signaled(sig) => format!("signal: {sig}"),
        };
        let err = String::from_utf8_lossy(&done.stderr);
        // unmunge names a refused credential on stderr, or as its STATUS on stdout; say
        // something either way.
        let status_line = out
            .lines()
            .find_map(|l| l.strip_prefix("STATUS:"))
            .map(str::trim);
        let why = match (err.trim(), status_line) {
            ("", Some(s)) => s.to_string(),
            ("", None) => format!("exited with {status} and said nothing"),
            (e, _) => e.to_string(),
        };
        let why = format!(
            "{}: {}",
            program.display(),
            nccl_check_host::text::escape_control(&why)
        );
        Ok(Err((out, why)))
    }
}

/// Reads `unmunge -k STATUS -k UID` output: (status text, uid, payload).
pub fn parse_unmunge(out: &str) -> Result<(String, u32, String), String> {
    let (head, payload) = out
        .split_once("\n\n")
        .ok_or("unmunge output has no payload")?;
    let mut status = None;
    let mut uid = None;
    for line in head.lines() {
        if let Some(v) = line.strip_prefix("STATUS:") {
            status = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("UID:") {
            // "name (1000)"
            uid = v
                .trim()
                .rsplit_once('(')
                .and_then(|(_, n)| n.trim_end_matches(')').parse::<u32>().ok());
        }
    }
    Ok((
        status.ok_or("unmunge output has no STATUS")?,
        uid.ok_or("unmunge output has no UID")?,
        payload.trim().to_string(),
    ))
}

impl Authenticator for Munge {
    fn ticket(&self, deadline: Instant) -> Result<Option<Ticket>, AuthError> {
        let mut key = vec![0u8; 32];
        getrandom::getrandom(&mut key)
            .map_err(|e| AuthError::Refused(format!("no random numbers from the kernel: {e}")))?;
        // The key on munge's stdin, never on its command line (which every user can read); the
        // credential only the job's uid can open.
        let uid = self.uid.to_string();
        let args = ["--restrict-uid", uid.as_str()];
        let credential = self
            .run_output(&self.munge, &args, hex::encode(&key).as_bytes(), deadline)?
            .map_err(|(_, why)| AuthError::Refused(why))?
            .trim()
            .to_string();
        Ok(Some(Ticket { credential, key }))
    }

    fn open_ticket(&self, credential: &str, deadline: Instant) -> Result<Vec<u8>, AuthError> {
        let refused = AuthError::Refused;
        if credential.len() > 8192 || !credential.starts_with("MUNGE:") {
            return Err(refused("its ticket is not a MUNGE credential".into()));
        }
        let mut known = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, key)) = known.as_ref().filter(|(c, _)| c == credential) {
            return Ok(key.clone());
        }
        let args = ["-k", "STATUS", "-k", "UID"];
        let opened = self.run_output(&self.unmunge, &args, credential.as_bytes(), deadline)?;
        let out = opened.or_else(|(out, why)| {
            if out.contains("\n\n") {
                Ok(out)
            } else {
                Err(refused(why))
            }
        })?;
        let (status, uid, payload) = parse_unmunge(&out).map_err(refused)?;
        // Every process of the job opens the same ticket: a replay (a second process on this
        // node) or an expired one still shows whose it is and what it holds; the key's
        // freshness is the coordinator's, which checks it against its own.
        let usable = ["Success", "Replayed credential", "Expired credential"];
        if !usable.iter().any(|u| status.starts_with(u)) {
            return Err(refused(format!(
                "its ticket does not open: {}",
                nccl_check_host::text::escape_control(&status)
            )));
        }
        if uid != self.uid {
            return Err(refused(format!(
                "its ticket is a credential of uid {uid}, not this job's uid {}",
                self.uid
            )));
        }
        let key = hex::decode(&payload)
            .ok()
            .filter(|k| k.len() == 32)
            .ok_or_else(|| refused("its ticket holds no key".into()))?;
        *known = Some((credential.to_string(), key.clone()));
        Ok(key)
    }

    fn psk(&self) -> &[u8] {
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn unmunge_output_is_read() {
        let out = "STATUS:          Success (0)\nUID:             alice (1000)\n\nabc123\n";
        assert_eq!(
            parse_unmunge(out).unwrap(),
            ("Success (0)".to_string(), 1000, "abc123".to_string())
        );
        let replayed =
            "STATUS:          Replayed credential (15)\nUID:             alice (1000)\n\nabc\n";
        assert!(parse_unmunge(replayed).unwrap().0.starts_with("Replayed"));
        assert!(parse_unmunge("garbage").is_err());
    }

    /// A Munge whose programs are these two scripts.
    fn fake_munge(dir: &std::path::Path, munge: &str, unmunge: &str) -> Munge {
        use nccl_check_host::test_support::write_executable;
        let (m, u) = (dir.join("munge"), dir.join("unmunge"));
        write_executable(&m, &format!("#!/bin/sh\n{munge}\n"));
        write_executable(&u, &format!("#!/bin/sh\n{unmunge}\n"));
        Munge {
            munge: m,
            unmunge: u,
            socket: Some(dir.join("socket")),
            uid: 1000,
            opened: Default::default(),
        }
    }

    /// A munge that hangs is killed at the handshake's deadline with all it started, and named.
    #[test]
    fn a_munge_program_past_the_deadline_is_killed_with_its_children_and_named() {
        use nccl_check_host::test_support::{assert_process_gone, scratch_dir};
        let d = scratch_dir("munge-hang");
        let pid = d.join("child.pid");
        let m = fake_munge(
            &d,
            &format!("sleep 30 & echo $! > {}; wait", pid.display()),
            "exit 0",
        );
        let started = Instant::now();
        let Err(e) = m.ticket(Instant::now() + Duration::from_millis(300)) else {
            panic!("a ticket from a munge that never answers");
        };
        assert!(started.elapsed() < Duration::from_secs(10), "{e}");
        assert_eq!(
            e,
            AuthError::Busy(format!(
                "{} did not answer in time",
                d.join("munge").display()
            ))
        );
        assert_process_gone(&pid, Duration::from_secs(2));
        std::fs::remove_dir_all(&d).ok();
    }

    /// munge gets the ticket's key on its stdin (never its command line, which every user
    /// reads), unmunge the credential; a refusal is passed on, a replayed ticket (a second
    /// process on one node) still opens, and one of another uid does not.
    #[test]
    fn the_ticket_key_goes_on_stdin_and_only_this_uids_ticket_opens() {
        use nccl_check_host::test_support::scratch_dir;
        let d = scratch_dir("munge-refuse");
        let m = fake_munge(
            &d,
            "echo \"$@\"; cat >&2",
            r#"[ "$1 $3 $4 $5 $6" = "--socket -k STATUS -k UID" ] || exit 9
               echo "refused: $(cat)" >&2; exit 1"#,
        );
        let e = m.open_ticket("MUNGE:abc", later()).expect_err("refused");
        assert_eq!(
            e,
            AuthError::Refused(format!(
                "{}: refused: MUNGE:abc",
                d.join("unmunge").display()
            ))
        );
        let t = m.ticket(later()).expect("munge answers").expect("a ticket");
        assert_eq!(
            t.credential,
            format!(
                "--socket {} --restrict-uid 1000",
                d.join("socket").display()
            )
        );
        assert_eq!(t.key.len(), 32);
        let key = "ab".repeat(32);
        let answer = |uid: u32| {
            format!("echo 'STATUS: Replayed credential (15)'; echo 'UID: u ({uid})'; echo; echo {key}; exit 15")
        };
        let m = fake_munge(&d, "exit 0", &answer(1000));
        assert_eq!(m.open_ticket("MUNGE:abc", later()), Ok(vec![0xab; 32]));
        let m = fake_munge(&d, "exit 0", &answer(1001));
        let e = m.open_ticket("MUNGE:abc", later()).expect_err("refused");
        assert!(
            matches!(&e, AuthError::Refused(why) if why.contains("uid 1001, not this job's uid 1000")),
            "{e:?}"
        );
        let m = fake_munge(&d, "exit 3", "exit 0");
        let Err(e) = m.ticket(later()) else {
            panic!("a ticket from a munge that failed");
        };
        assert!(
            matches!(&e, AuthError::Refused(why) if why.ends_with(": exited with exit status: 3 and said nothing")),
            "{e:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }
}
