//! srun (SPANK Local context): reject a bad `--nccl-check` value or a broken site config before
//! any allocation is requested, and give the step its own rendezvous secret. srun forwards the
//! value to the step itself (plugstack.c `spank_set_remote_options`).
//!
//! The secret: 256 random bits per srun, hex, in srun's environment as [`SECRET_TRANSPORT`].
//! `spank_setenv` is refused outside the remote context (plugstack.c `spank_env_access_check`),
//! so srun's own environment is the channel: srun builds every task's environment from it
//! (srun_job.c merges `environ`), and with `--export=NONE` it still passes every `SLURM_*`
//! variable (launch_slurm.c `_build_user_env` → `env_array_merge_slurm`), hence the prefix. In the
//! step, [`crate::slurmstepd`] hands it to the worker as `NCCL_CHECK_SECRET` and removes it from
//! the task's environment, so the user's program never sees it. It is never logged. A step
//! launched without it (an srun without the plugin) falls back to MUNGE in the worker.

use crate::config::{ConfigError, PluginConfig};
use crate::options::{self, Mode};
use crate::Error;

/// How the step's secret travels from srun to the step's tasks.
pub const SECRET_TRANSPORT: &str = "SLURM_NCCL_CHECK_SECRET";
/// Random bytes in one secret (256 bits).
const SECRET_BYTES: usize = 32;

/// `slurm_spank_init_post_opt` in srun: options are parsed at this point.
pub fn init_post_opt(config: &Result<PluginConfig, ConfigError>) -> Result<(), Error> {
    options::validate(config)?;
    let Ok(config) = config else { return Ok(()) };
    match options::raw().mode(&config.default_mode) {
        Ok(Some(mode)) if mode != Mode::Off => {
            let secret = fresh_secret()?;
            // srun is single-threaded in init_post_opt; Slurm itself setenv()s here too
            // (plugstack.c `_option_setenv`).
            std::env::set_var(SECRET_TRANSPORT, secret);
            Ok(())
        }
        _ => Ok(()),
    }
}

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
