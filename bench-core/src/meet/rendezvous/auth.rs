//! Who may join a step's rendezvous: only a process that holds the step's key.
//!
//! The key makes the Noise pre-shared key of every connection ([`noise_psk`],
//! [`super::session`]): only a holder can open a handshake or answer one. Two kinds of key:
//! - [`SharedSecret`]: a secret every process of the step has and nobody else has. The SPANK
//!   plugin makes a fresh 256-bit secret in srun and hands it to the tasks in their environment
//!   (`NCCL_CHECK_SECRET`; readable only by the user and root); outside Slurm the user exports
//!   one (`openssl rand -hex 32`).
//! - [`super::munge::Munge`]: under Slurm without the plugin, the job's [`Ticket`]: a key of 32
//!   random bytes that the coordinator makes when it starts and hands out inside a MUNGE
//!   credential (what Slurm itself trusts) restricted to this uid (munge's restrict-uid: no
//!   other user, root excepted, can decode it); a member takes the key only if munged says the
//!   credential was encoded by this same uid. An opening without the ticket's key is answered
//!   with the ticket and closed, so another user's openings, from any node, cost the
//!   coordinator a hash and no MUNGE work, thread or slot. Encoding and decoding run a program
//!   each, at most [`super::munge::MUNGE_AT_ONCE`] at a time in this process.
//!
//! The same key proves the UDP beacon's answers ([`ticket_proof`], HMAC-SHA256).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Instant;

/// Protocol name: the first field of every first message, the Noise prologue's first part, the
/// first part of every proof's context.
/// Version 7: the handshake is Noise's `NNpsk0` ([`super::session::NOISE`]) under the step's
/// key, which under MUNGE is the job's ticket (no credential per connection). 6: under MUNGE,
/// an opening proves the job's ticket before any MUNGE work ([`Ticket`],
/// `messages::TicketOffer`). 5: the coordinator tells a member it is accepted (`messages::Accepted`), so a member
/// dropped before that tries again. 4: the welcome lists the processes by columns (`messages::Welcome`); 3 brought
/// sessions (sealed frames after the handshake); 2 had proofs per message only. Two versions
/// refuse each other, and say which version the other speaks.
pub const PROTOCOL: &str = "nccl-check-rendezvous/7";

/// The bytes a key derivation or proof covers: protocol, purpose, step label and its fields,
/// each ended by a NUL (so no part can shift into the next).
fn context(purpose: &str, label: &str, fields: &str) -> Vec<u8> {
    [PROTOCOL, purpose, label, fields]
        .iter()
        .flat_map(|part| part.bytes().chain([0]))
        .collect()
}

/// A fresh random nonce, hex (32 bytes from the kernel's CSPRNG).
pub fn nonce() -> Result<String, String> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b).map_err(|e| format!("no random numbers from the kernel: {e}"))?;
    Ok(hex::encode(b))
}

/// The job's ticket (MUNGE): a credential that only processes of the job's user (and root) can
/// open, and the key inside it. The coordinator makes one when it starts and hands the
/// credential to every opening not made with the key yet; a member opens it on its own node
/// (`unmunge`, its own cost) and makes each later opening with it ([`noise_psk`]), so the
/// coordinator refuses another user's openings, from any node, in microseconds, before
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

/// The Noise pre-shared key of the step `label` under `key` (the shared secret, or the ticket's
/// key): HMAC-SHA256, so that a secret of any length makes 32 bytes, and one secret's steps
/// each a key of their own.
pub fn noise_psk(key: &[u8], label: &str) -> [u8; 32] {
    hmac(key, &context("noise psk", label, ""))
        .finalize()
        .into_bytes()
        .into()
}

/// The MAC of a proof of the step's key over `fields`.
fn ticket_mac(key: &[u8], label: &str, fields: &[&str]) -> Hmac<Sha256> {
    hmac(key, &context("ticket", label, &fields.join("\n")))
}

/// A proof of the step's key (the beacon's answers): HMAC-SHA256 over `fields`, hex.
pub fn ticket_proof(key: &[u8], label: &str, fields: &[&str]) -> String {
    hex::encode(ticket_mac(key, label, fields).finalize().into_bytes())
}

/// Whether `proof` is [`ticket_proof`] of the same key and fields (constant-time).
pub fn check_ticket_proof(
    key: &[u8],
    label: &str,
    fields: &[&str],
    proof: &str,
) -> Result<(), String> {
    let tag = hex::decode(proof).map_err(|_| "ticket proof is not hex".to_string())?;
    ticket_mac(key, label, fields)
        .verify_slice(&tag)
        .map_err(|_| {
            "its proof of the job's ticket does not match (not a process of this job's user)"
                .to_string()
        })
}

/// Why a credential could not be made or checked, by what it says about the other side.
#[derive(Debug, Clone, PartialEq, Eq, strum::Display)]
pub enum AuthError {
    /// No MUNGE slot was free in time, or munge or unmunge did not answer in time: this node is
    /// busy, which says nothing about the other side (a member tries again).
    #[strum(to_string = "{0}")]
    Busy(String),
    /// The credential is not good (another uid, not MUNGE's), or none could be made.
    #[strum(to_string = "{0}")]
    Refused(String),
}

/// The step's key, and under MUNGE the ticket that carries it.
pub trait Authenticator: Send + Sync {
    /// The job's ticket, made once by the coordinator where the key comes in one (MUNGE);
    /// `None` where every process holds the key already (a shared secret).
    fn ticket(&self, _deadline: Instant) -> Result<Option<Ticket>, AuthError> {
        Ok(None)
    }
    /// The key inside a coordinator's ticket credential, if it is one of this job's user.
    fn open_ticket(&self, _credential: &str, _deadline: Instant) -> Result<Vec<u8>, AuthError> {
        Err(AuthError::Refused(
            "a ticket where this step's key needs none".into(),
        ))
    }
    /// Key material every process of the step holds and nobody else does; empty where it
    /// comes in the job's ticket (MUNGE).
    fn psk(&self) -> &[u8];
}

/// A secret every process of the step holds.
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
    fn psk(&self) -> &[u8] {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_only_for_its_key_and_its_fields_and_each_step_has_its_own_psk() {
        let (a, b) = (b"0123456789abcdef-a", b"0123456789abcdef-b");
        let proof = ticket_proof(a, "slurm-7.0", &["n1", "why"]);
        assert!(check_ticket_proof(a, "slurm-7.0", &["n1", "why"], &proof).is_ok());
        assert!(check_ticket_proof(b, "slurm-7.0", &["n1", "why"], &proof).is_err());
        assert!(check_ticket_proof(a, "slurm-7.0", &["n2", "why"], &proof).is_err());
        assert!(check_ticket_proof(a, "slurm-7.1", &["n1", "why"], &proof).is_err());
        assert!(check_ticket_proof(a, "slurm-7.0", &["n1", "why"], "zz").is_err());
        let psk = noise_psk(a, "slurm-7.0");
        assert_ne!(psk, noise_psk(b, "slurm-7.0"));
        assert_ne!(psk, noise_psk(a, "slurm-7.1"));
    }

    #[test]
    fn context_parts_cannot_be_shifted_into_each_other() {
        assert_ne!(context("ab", "c", "n"), context("a", "bc", "n"));
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
