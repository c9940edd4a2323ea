//! sbatch and salloc (SPANK Allocator context): reject a bad `--nccl-check` value before the job
//! is submitted. Slurm itself carries the value to every step of the job: it exports
//! `SLURM_SPANK__SLURM_SPANK_OPTION_nccl_check_nccl_check` into the job's environment
//! (sbatch.c "Propagate SPANK environment"), which each inner srun reads back as if given on its
//! own command line, and an explicit `--nccl-check=off` on that srun wins.

use crate::config::{Config, ConfigError};
use crate::{options, Error};

/// `slurm_spank_init_post_opt` in sbatch/salloc.
pub fn init_post_opt(config: &Result<Config, ConfigError>) -> Result<(), Error> {
    options::validate(config)
}
