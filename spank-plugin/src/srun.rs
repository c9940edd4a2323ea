//! srun (SPANK Local context): reject a bad `--nccl-check` value or a broken site config before
//! any allocation is requested, and give the step its own rendezvous secret ([`crate::secret`],
//! which says how it reaches the step). srun forwards the value to the step itself (plugstack.c
//! `spank_set_remote_options`).

use crate::callback_error::Error;
use crate::config::LoadedConfig;
use crate::options;
use crate::secret::{fresh_secret, SECRET_TRANSPORT};

/// `slurm_spank_init_post_opt` in srun: options are parsed at this point.
pub fn init_post_opt(config: &LoadedConfig) -> Result<(), Error> {
    options::validate(config)?;
    if options::requested(config, &options::raw())?.is_some() {
        // srun is single-threaded in init_post_opt; Slurm itself setenv()s here too
        // (plugstack.c `_option_setenv`).
        std::env::set_var(SECRET_TRANSPORT, fresh_secret()?);
    }
    Ok(())
}
