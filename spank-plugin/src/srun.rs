//! srun (SPANK Local context): reject a bad `--nccl-check` value or a broken site config before
//! any allocation is requested. srun forwards the value to the step itself (plugstack.c
//! `spank_set_remote_options`); nothing else happens here.

use crate::config::{Config, ConfigError};
use crate::{options, Error};

/// `slurm_spank_init_post_opt` in srun: options are parsed at this point.
pub fn init_post_opt(config: &Result<Config, ConfigError>) -> Result<(), Error> {
    options::validate(config)
}
