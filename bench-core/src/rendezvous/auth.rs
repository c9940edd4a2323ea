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
//!   stranger's flood of connections cannot make it start processes without bound.
//!
//! The proofs authenticate the handshake; the connection's keys ([`super::session`]) protect
//! everything after it.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Protocol name, the first part of every proof's context.
/// Version 4: the welcome lists the processes by columns (`messages::Welcome`); 3 brought
/// sessions (sealed frames after the handshake); 2 had proofs per message only. Two versions
/// refuse each other, and say which version the other speaks.
pub const PROTOCOL: &str = "nccl-check-rendezvous/4";

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

/// How the processes of one check prove to each other that they belong to it.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// `NCCL_CHECK_SECRET` (set per step by the srun plugin, or by the user).
    Secret(String),
    /// MUNGE credentials of this uid (under Slurm, when no secret is given).
    Munge,
    /// One process: nobody to prove anything to.
    None,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        match self {
            Credential::Secret(_) => write!(f, "Secret(..)"),
            Credential::Munge => write!(f, "Munge"),
            Credential::None => write!(f, "None"),
        }
    }
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

/// Makes and checks proofs.
pub trait Authenticator: Send + Sync {
    /// A proof that this process, holding the step's credential, made `context`.
    fn prove(&self, context: &[u8], deadline: Instant) -> Result<String, String>;
    /// Ok if `proof` was made for `context` by a holder of the step's credential.
    fn verify(&self, context: &[u8], proof: &str, deadline: Instant) -> Result<(), String>;
    /// How peers are authenticated, for messages and the report.
    fn describe(&self) -> String;
    /// Key material every process of the step holds and nobody else does, mixed into each
    /// connection's keys; empty where there is none (MUNGE: the proofs cover the key exchange).
    fn psk(&self) -> &[u8];
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

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC accepts any key length")
    }
}

impl Authenticator for SharedSecret {
    fn prove(&self, context: &[u8], _deadline: Instant) -> Result<String, String> {
        let mut m = self.mac();
        m.update(context);
        Ok(hex::encode(m.finalize().into_bytes()))
    }

    fn verify(&self, context: &[u8], proof: &str, _deadline: Instant) -> Result<(), String> {
        let tag = hex::decode(proof).map_err(|_| "proof is not hex".to_string())?;
        let mut m = self.mac();
        m.update(context);
        // Constant-time comparison.
        m.verify_slice(&tag)
            .map_err(|_| "proof does not match this step's secret".to_string())
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
}

/// Where the MUNGE programs are looked for: root-owned system directories only, never `$PATH`.
const MUNGE_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/local/bin"];
/// Longest a single munge or unmunge run may take.
const MUNGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest credential or unmunge output accepted.
const MAX_MUNGE_OUTPUT: u64 = 64 * 1024;
/// Most munge or unmunge programs this process runs at once; a handshake that finds none free
/// before its deadline is refused (a real member retries).
pub const MUNGE_AT_ONCE: usize = 4;

/// Slots for [`MUNGE_AT_ONCE`] programs at a time.
static MUNGE_SLOTS: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
static MUNGE_FREED: std::sync::Condvar = std::sync::Condvar::new();

/// One of the slots, given back when dropped.
struct MungeSlot;

impl MungeSlot {
    fn take(until: Instant) -> Result<MungeSlot, String> {
        let mut busy = MUNGE_SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        while *busy >= MUNGE_AT_ONCE {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                return Err(format!(
                    "MUNGE is busy: {MUNGE_AT_ONCE} credentials are being made or checked already (a flood of connections?)"
                ));
            };
            busy = MUNGE_FREED
                .wait_timeout(busy, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *busy += 1;
        Ok(MungeSlot)
    }
}

impl Drop for MungeSlot {
    fn drop(&mut self) {
        let mut busy = MUNGE_SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        *busy = busy.saturating_sub(1);
        MUNGE_FREED.notify_one();
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
        })
    }

    fn run(
        &self,
        program: &std::path::Path,
        args: &[&str],
        input: &[u8],
        deadline: Instant,
    ) -> Result<String, String> {
        let until = deadline.min(Instant::now() + MUNGE_TIMEOUT);
        let _slot = MungeSlot::take(until)?;
        let mut cmd = Command::new(program);
        if let Some(s) = &self.socket {
            cmd.arg("--socket").arg(s);
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        // Inputs and outputs are a few hundred bytes: far below a pipe's buffer, so writing all of
        // the input before reading cannot deadlock.
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input);
        }
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() >= until => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{} did not answer in time", program.display()));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => return Err(format!("{}: {e}", program.display())),
            }
        };
        let mut out = String::new();
        if let Some(o) = child.stdout.take() {
            let _ = o.take(MAX_MUNGE_OUTPUT).read_to_string(&mut out);
        }
        if !status.success() {
            let mut err = String::new();
            if let Some(e) = child.stderr.take() {
                let _ = e.take(4096).read_to_string(&mut err);
            }
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
            return Err(format!(
                "{}: {}",
                program.display(),
                crate::text::escape_control(&why)
            ));
        }
        Ok(out)
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
    fn prove(&self, context: &[u8], deadline: Instant) -> Result<String, String> {
        let uid = self.uid.to_string();
        let cred = self.run(
            &self.munge,
            &["--restrict-uid", &uid, "--string", &digest(context)],
            b"",
            deadline,
        )?;
        Ok(cred.trim().to_string())
    }

    fn verify(&self, context: &[u8], proof: &str, deadline: Instant) -> Result<(), String> {
        if proof.len() > 8192 || !proof.starts_with("MUNGE:") {
            return Err("proof is not a MUNGE credential".into());
        }
        let out = self.run(
            &self.unmunge,
            &["-k", "STATUS", "-k", "UID"],
            proof.as_bytes(),
            deadline,
        )?;
        let (status, uid, payload) = parse_unmunge(&out)?;
        if !status.starts_with("Success") {
            let status = if status.is_empty() {
                "no reason given"
            } else {
                &status
            };
            return Err(format!(
                "MUNGE credential refused: {}",
                crate::text::escape_control(status)
            ));
        }
        if uid != self.uid {
            return Err(format!(
                "MUNGE credential of uid {uid}, not this job's uid {}",
                self.uid
            ));
        }
        if payload != digest(context) {
            return Err("MUNGE credential was made for another message or connection".into());
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
}
