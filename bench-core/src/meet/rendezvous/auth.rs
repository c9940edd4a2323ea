//! Who may join a step's rendezvous: only a process that holds the step's credential.
//!
//! A proof covers a context built from the message, the step's label and a nonce chosen by the
//! other side, so a proof is good for one connection only (no replay from another step or a
//! recording). Two kinds of credential:
//! - [`SharedSecret`]: HMAC-SHA256 with a secret every process of the step has and nobody else
//!   has. The SPANK plugin makes a fresh 256-bit secret in srun and hands it to the tasks in
//!   their environment (`NCCL_CHECK_SECRET`; readable only by the user and root); outside Slurm
//!   the user exports one (`openssl rand -hex 32`).
//! - [`super::munge::Munge`]: under Slurm without the plugin, a MUNGE credential (what Slurm itself trusts)
//!   whose payload is the context's SHA-256; the receiver accepts it only if munged says it was
//!   encoded by this same uid. MUNGE's replay cache makes each credential good once. Every
//!   credential is restricted to this uid (munge's restrict-uid: no other user, root included,
//!   can decode it), covers the connection's transcript (both nonces, both session keys, both
//!   addresses), and a member sends one only after the coordinator has proved itself. Encoding
//!   and decoding run a program each, at most [`super::munge::MUNGE_AT_ONCE`] at a time in this process, so a
//!   stranger's flood of connections cannot make it start processes without bound; and before
//!   any of that, an opening proves the job's [`Ticket`] (a key only the job's user can take out
//!   of a credential), so another user's openings, from any node, cost an HMAC and no slot.
//!
//! The proofs authenticate the handshake; the connection's keys ([`super::session`]) protect
//! everything after it.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Instant;

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

    fn psk(&self) -> &[u8] {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
