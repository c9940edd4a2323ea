//! Who may join a step's rendezvous: only a process that holds the step's credential.
//!
//! A proof covers a context built from the message, the step's label and a nonce chosen by the
//! other side, so a proof is good for one connection only (no replay from another step or a
//! recording). Two kinds of credential:
//! - [`SharedSecret`]: HMAC-SHA256 with a secret every process of the step has and nobody else
//!   has. The SPANK plugin makes a fresh 256-bit secret in srun and hands it to the tasks in
//!   their environment (`NCCL_CHECK_SECRET`; readable only by the user and root); outside Slurm
//!   the user exports one (`openssl rand -hex 32`).
//! - [`Munge`]: under Slurm without the plugin, a MUNGE credential (what Slurm itself trusts)
//!   whose payload is the context's SHA-256; the receiver accepts it only if munged says it was
//!   encoded by this same uid. MUNGE's replay cache makes each credential good once. Every
//!   credential is restricted to this uid (munge's restrict-uid: no other user, root included,
//!   can decode it), covers the connection's transcript (both nonces, both session keys, both
//!   addresses), and a member sends one only after the coordinator has proved itself. Encoding
//!   and decoding run a program each, at most [`MUNGE_AT_ONCE`] at a time in this process, so a
//!   stranger's flood of connections cannot make it start processes without bound; and before
//!   any of that, an opening proves the job's [`Ticket`] (a key only the job's user can take out
//!   of a credential), so another user's openings, from any node, cost an HMAC and no slot.
//!
//! The proofs authenticate the handshake; the connection's keys ([`super::session`]) protect
//! everything after it.

use crate::model::credential::Credential;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

/// Protocol name, the first part of every proof's context.
/// Version 6: under MUNGE, an opening proves the job's ticket before any MUNGE work
/// ([`Ticket`], `messages::TicketOffer`). 5: the coordinator tells a member it is accepted (`messages::Accepted`), so a member
/// dropped before that tries again. 4: the welcome lists the processes by columns (`messages::Welcome`); 3 brought
/// sessions (sealed frames after the handshake); 2 had proofs per message only. Two versions
/// refuse each other, and say which version the other speaks.
pub const PROTOCOL: &str = "nccl-check-rendezvous/6";

/// The bytes a proof covers: protocol, purpose, step label, the other side's nonce, the message.
pub fn context(purpose: &str, label: &str, nonce: &str, body: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(body.len() + 128);
    for part in [
        PROTOCOL.as_bytes(),
        purpose.as_bytes(),
        label.as_bytes(),
        nonce.as_bytes(),
    ] {
        c.extend_from_slice(part);
        c.push(0);
    }
    c.extend_from_slice(body);
    c
}

/// A fresh random nonce, hex (32 bytes from the kernel's CSPRNG).
pub fn nonce() -> Result<String, String> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b).map_err(|e| format!("no random numbers from the kernel: {e}"))?;
    Ok(hex::encode(b))
}

impl Credential {
    /// The authenticator for this credential; `munge_socket` is munged's socket when not the
    /// default.
    pub fn authenticator(
        &self,
        munge_socket: Option<std::path::PathBuf>,
    ) -> Result<Box<dyn Authenticator>, String> {
        match self {
            Credential::Secret(s) => Ok(Box::new(SharedSecret::new(s, "NCCL_CHECK_SECRET")?)),
            Credential::Munge => Ok(Box::new(Munge::find(munge_socket).map_err(|e| {
                format!(
                    "no way to authenticate the other processes: set NCCL_CHECK_SECRET or install MUNGE ({e})"
                )
            })?)),
            // One process: the rendezvous returns before any proof is asked for.
            Credential::None => Ok(Box::new(SharedSecret::new(
                "single-process-check",
                "nobody",
            )?)),
        }
    }
}

/// The job's ticket (MUNGE): a credential that only processes of the job's user (and root) can
/// open, and the key inside it. The coordinator makes one when it starts and hands the
/// credential to every opening that does not prove the key yet; a member opens it on its own
/// node (`unmunge`, its own cost) and proves the key over each later opening, so the
/// coordinator refuses another user's openings, from any node, at the cost of an HMAC, before
/// any MUNGE work and outside the handshake slots (a ration per address was not enough: a
/// stranger on a member's node shared that node's ration and starved the member).
#[derive(Clone)]
pub struct Ticket {
    /// The credential, as it goes on the wire.
    pub credential: String,
    /// The key inside it (32 random bytes).
    pub key: Vec<u8>,
}

/// HMAC-SHA256 of `msg` under `key` (HMAC takes keys of any length), to finish or to verify.
fn hmac(key: &[u8], msg: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(msg);
    m
}

/// An opening's proof of the ticket's key: HMAC-SHA256 over the opening's own fields, hex.
pub fn ticket_proof(key: &[u8], label: &str, opening: &[&str]) -> String {
    let m = hmac(key, &context("ticket", label, &opening.join("\n"), b""));
    hex::encode(m.finalize().into_bytes())
}

/// Whether `proof` is [`ticket_proof`] of the same key and fields (constant-time).
pub fn check_ticket_proof(
    key: &[u8],
    label: &str,
    opening: &[&str],
    proof: &str,
) -> Result<(), String> {
    let tag = hex::decode(proof).map_err(|_| "ticket proof is not hex".to_string())?;
    let m = hmac(key, &context("ticket", label, &opening.join("\n"), b""));
    m.verify_slice(&tag).map_err(|_| {
        "its proof of the job's ticket does not match (not a process of this job's user)"
            .to_string()
    })
}

/// Why a credential could not be made or checked, by what it says about the other side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// No MUNGE slot was free in time, or munge or unmunge did not answer in time: this node is
    /// busy, which says nothing about the other side (a member tries again).
    Busy(String),
    /// MUNGE's replay cache knows the credential: a recording played again.
    Replayed(String),
    /// The proof or credential is not good (another key, another uid, another connection), or
    /// none could be made.
    Refused(String),
}

impl std::fmt::Display for AuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthError::Busy(s) | AuthError::Replayed(s) | AuthError::Refused(s) => f.write_str(s),
        }
    }
}

/// Makes and checks proofs.
pub trait Authenticator: Send + Sync {
    /// The job's ticket, made once by the coordinator where proofs run programs; `None` where
    /// proofs are cheap to check (HMAC).
    fn ticket(&self, _deadline: Instant) -> Result<Option<Ticket>, AuthError> {
        Ok(None)
    }
    /// The key inside a coordinator's ticket credential, if it is one of this job's user.
    fn open_ticket(&self, _credential: &str, _deadline: Instant) -> Result<Vec<u8>, AuthError> {
        Err(AuthError::Refused(
            "a ticket where this step's proofs need none".into(),
        ))
    }
    /// A proof that this process, holding the step's credential, made `context`.
    fn prove(&self, context: &[u8], deadline: Instant) -> Result<String, AuthError>;
    /// Ok if `proof` was made for `context` by a holder of the step's credential.
    fn verify(&self, context: &[u8], proof: &str, deadline: Instant) -> Result<(), AuthError>;
    /// How peers are authenticated, for messages and the report.
    fn describe(&self) -> String;
    /// Key material every process of the step holds and nobody else does, mixed into each
    /// connection's keys; empty where there is none (MUNGE: the proofs cover the key exchange).
    fn psk(&self) -> &[u8];
    /// Whether making or checking a proof runs a program (MUNGE), so that a stranger's openings
    /// must be rationed per address; HMAC costs microseconds.
    fn proofs_run_programs(&self) -> bool {
        false
    }
}

/// HMAC-SHA256 with a shared secret.
pub struct SharedSecret {
    key: Vec<u8>,
    source: String,
}

/// Shortest secret accepted: 16 characters (128 bits as hex would be 32; a pass phrase of 16
/// characters is the floor, not the recommendation).
pub const MIN_SECRET_LEN: usize = 16;

impl SharedSecret {
    /// `source` names where the secret came from (never the secret itself).
    pub fn new(secret: &str, source: &str) -> Result<SharedSecret, String> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(format!(
                "the shared secret from {source} has {} characters; at least {MIN_SECRET_LEN} are needed (make one with: openssl rand -hex 32)",
                secret.len()
            ));
        }
        Ok(SharedSecret {
            key: secret.as_bytes().to_vec(),
            source: source.to_string(),
        })
    }
}

impl Authenticator for SharedSecret {
    fn prove(&self, context: &[u8], _deadline: Instant) -> Result<String, AuthError> {
        Ok(hex::encode(
            hmac(&self.key, context).finalize().into_bytes(),
        ))
    }

    fn verify(&self, context: &[u8], proof: &str, _deadline: Instant) -> Result<(), AuthError> {
        let refused = |why: &str| AuthError::Refused(why.to_string());
        let tag = hex::decode(proof).map_err(|_| refused("proof is not hex"))?;
        // Constant-time comparison.
        hmac(&self.key, context)
            .verify_slice(&tag)
            .map_err(|_| refused("proof does not match this step's secret"))
    }

    fn describe(&self) -> String {
        format!("HMAC-SHA256 with the shared secret from {}", self.source)
    }

    fn psk(&self) -> &[u8] {
        &self.key
    }
}

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
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            opened: Default::default(),
        })
    }

    /// Runs munge with `args` after `--restrict-uid` (the job's uid), `input` on its stdin; the
    /// credential, or why it failed.
    fn munge(&self, args: &[&str], input: &[u8], deadline: Instant) -> Result<String, AuthError> {
        let uid = self.uid.to_string();
        let argv = [&["--restrict-uid", uid.as_str()][..], args].concat();
        let out = self.run_output(&self.munge, &argv, input, deadline)?;
        Ok(out
            .map_err(|(_, why)| AuthError::Refused(why))?
            .trim()
            .to_string())
    }

    /// Runs unmunge on `credential` (`-k STATUS -k UID`), as [`Munge::run_output`] does.
    fn unmunge(
        &self,
        credential: &str,
        deadline: Instant,
    ) -> Result<Result<String, (String, String)>, AuthError> {
        let args = ["-k", "STATUS", "-k", "UID"];
        self.run_output(&self.unmunge, &args, credential.as_bytes(), deadline)
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

/// A credential unmunge would not take, by its STATUS (MUNGE's own words, `-k STATUS`) or,
/// where it printed none, its error line: a replay, or refused for another reason.
fn refusal(out: &str, why: String) -> AuthError {
    let status = out
        .lines()
        .find_map(|l| l.strip_prefix("STATUS:"))
        .unwrap_or(&why);
    if status.contains("Replayed credential") {
        AuthError::Replayed(why)
    } else {
        AuthError::Refused(why)
    }
}

fn digest(context: &[u8]) -> String {
    hex::encode(Sha256::digest(context))
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
    fn proofs_run_programs(&self) -> bool {
        true
    }

    fn ticket(&self, deadline: Instant) -> Result<Option<Ticket>, AuthError> {
        let mut key = vec![0u8; 32];
        getrandom::getrandom(&mut key)
            .map_err(|e| AuthError::Refused(format!("no random numbers from the kernel: {e}")))?;
        // The key on munge's stdin, never on its command line (which every user can read).
        let credential = self.munge(&[], hex::encode(&key).as_bytes(), deadline)?;
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
        let out = self.unmunge(credential, deadline)?.or_else(|(out, why)| {
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

    fn prove(&self, context: &[u8], deadline: Instant) -> Result<String, AuthError> {
        self.munge(&["--string", &digest(context)], b"", deadline)
    }

    fn verify(&self, context: &[u8], proof: &str, deadline: Instant) -> Result<(), AuthError> {
        let refused = AuthError::Refused;
        if proof.len() > 8192 || !proof.starts_with("MUNGE:") {
            return Err(refused("proof is not a MUNGE credential".into()));
        }
        let out = self
            .unmunge(proof, deadline)?
            .map_err(|(out, why)| refusal(&out, why))?;
        let (status, uid, payload) = parse_unmunge(&out).map_err(refused)?;
        if !status.starts_with("Success") {
            let status = if status.is_empty() {
                "no reason given"
            } else {
                &status
            };
            let why = format!(
                "MUNGE credential refused: {}",
                nccl_check_host::text::escape_control(status)
            );
            return Err(refusal(&out, why));
        }
        if uid != self.uid {
            return Err(refused(format!(
                "MUNGE credential of uid {uid}, not this job's uid {}",
                self.uid
            )));
        }
        if payload != digest(context) {
            return Err(refused(
                "MUNGE credential was made for another message or connection".into(),
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("MUNGE credentials of uid {}", self.uid)
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
    fn a_proof_holds_only_for_its_secret_and_its_context() {
        let a = SharedSecret::new("0123456789abcdef-a", "test").unwrap();
        let b = SharedSecret::new("0123456789abcdef-b", "test").unwrap();
        let ctx = context("hello", "slurm-7.0", "n1", b"{}");
        let proof = a.prove(&ctx, later()).unwrap();
        assert!(a.verify(&ctx, &proof, later()).is_ok());
        assert!(b.verify(&ctx, &proof, later()).is_err());
        let other_nonce = context("hello", "slurm-7.0", "n2", b"{}");
        assert!(a.verify(&other_nonce, &proof, later()).is_err());
        let other_step = context("hello", "slurm-7.1", "n1", b"{}");
        assert!(a.verify(&other_step, &proof, later()).is_err());
        assert!(a.verify(&ctx, "zz", later()).is_err());
    }

    #[test]
    fn context_parts_cannot_be_shifted_into_each_other() {
        assert_ne!(context("ab", "c", "n", b""), context("a", "bc", "n", b""));
    }

    #[test]
    fn short_secrets_are_refused_and_nonces_differ() {
        let e = SharedSecret::new("short", "NCCL_CHECK_SECRET")
            .err()
            .unwrap();
        assert!(
            e.contains("NCCL_CHECK_SECRET") && e.contains("openssl rand -hex 32"),
            "{e}"
        );
        assert_ne!(nonce().unwrap(), nonce().unwrap());
        assert_eq!(nonce().unwrap().len(), 64);
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
        let e = m
            .prove(b"ctx", Instant::now() + Duration::from_millis(300))
            .expect_err("no answer");
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

    /// unmunge gets the credential on its stdin and the socket first; its refusal is passed on,
    /// from stderr or from its STATUS line.
    #[test]
    fn unmunge_reads_the_credential_on_stdin_and_a_refusal_says_why() {
        use nccl_check_host::test_support::scratch_dir;
        let d = scratch_dir("munge-refuse");
        let m = fake_munge(
            &d,
            "echo \"$@\"",
            r#"[ "$1 $3 $4 $5 $6" = "--socket -k STATUS -k UID" ] || exit 9
               echo "refused: $(cat)" >&2; exit 1"#,
        );
        let e = m.verify(b"ctx", "MUNGE:abc", later()).expect_err("refused");
        assert_eq!(
            e,
            AuthError::Refused(format!(
                "{}: refused: MUNGE:abc",
                d.join("unmunge").display()
            ))
        );
        let cred = m.prove(b"ctx", later()).expect("munge answers");
        assert!(
            cred.starts_with(&format!(
                "--socket {} --restrict-uid 1000 --string ",
                d.join("socket").display()
            )),
            "{cred}"
        );
        let m = fake_munge(
            &d,
            "exit 0",
            "echo 'STATUS: Replayed credential (15)'; exit 15",
        );
        let e = m.verify(b"ctx", "MUNGE:abc", later()).expect_err("refused");
        assert!(
            matches!(&e, AuthError::Replayed(why) if why.ends_with(": Replayed credential (15)")),
            "{e:?}"
        );
        let m = fake_munge(&d, "exit 3", "exit 0");
        let e = m.prove(b"ctx", later()).expect_err("failed");
        assert!(
            matches!(&e, AuthError::Refused(why) if why.ends_with(": exited with exit status: 3 and said nothing")),
            "{e:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }
}
