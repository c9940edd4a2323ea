//! The step's rendezvous secret: who may join a check. 256 random bits per step, hex, made by
//! srun for every step it launches ([`crate::srun`]) and by the batch step for its allocation
//! check ([`crate::batch`]); the worker gets it as [`SECRET_VAR`] and peers prove it with HMAC
//! over per-connection nonces. It is never logged. A step launched without it (an srun without
//! the plugin) falls back to MUNGE in the worker.
//!
//! From srun to the step it travels in srun's own environment as [`SECRET_TRANSPORT`]:
//! `spank_setenv` is refused outside the remote context (plugstack.c `spank_env_access_check`),
//! srun builds every task's environment from its own (srun_job.c merges `environ`), and with
//! `--export=NONE` it still passes every `SLURM_*` variable (launch_slurm.c `_build_user_env` →
//! `env_array_merge_slurm`), hence the prefix. In the step, [`crate::slurmstepd`] takes it out of
//! the task's environment, so the user's program never sees it.

use crate::callback_error::Error;

/// How the step's secret travels from srun to the step's tasks.
pub const SECRET_TRANSPORT: &str = "SLURM_NCCL_CHECK_SECRET";
/// The worker's variable for the secret.
pub const SECRET_VAR: &str = "NCCL_CHECK_SECRET";
/// Random bytes in one secret (256 bits).
const SECRET_BYTES: usize = 32;

/// A new secret from the kernel's random numbers, hex-encoded.
pub fn fresh_secret() -> Result<String, Error> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| Error::Check(format!("no random numbers for the step's secret: {e}")))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_secret_is_new_and_256_bits_of_hex() {
        let (a, b) = (fresh_secret().expect("a"), fresh_secret().expect("b"));
        assert_ne!(a, b);
        assert_eq!(a.len(), 2 * SECRET_BYTES);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        // Slurm passes every SLURM_* variable even with --export=NONE.
        assert!(SECRET_TRANSPORT.starts_with("SLURM_"));
    }
}
