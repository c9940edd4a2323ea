//! sbatch and salloc (SPANK Allocator context): reject a bad `--nccl-check` value before the job
//! is submitted. Slurm itself carries the value to every step of the job: it exports
//! `SLURM_SPANK__SLURM_SPANK_OPTION_nccl_check_nccl_check` into the job's environment
//! (sbatch.c "Propagate SPANK environment"), which each inner srun reads back as if given on its
//! own command line, and an explicit `--nccl-check=off` on that srun wins.
//!
//! sbatch checks the whole allocation before the script (`batch.rs`, in the batch step). salloc
//! starts no step on its nodes (its command runs here, on the login node), so nothing can check
//! the allocation itself: salloc says so once, and what is checked instead (every srun inside).

use crate::callback_error::Error;
use crate::config::LoadedConfig;
use crate::options;

/// `slurm_spank_init_post_opt` in sbatch/salloc.
pub fn init_post_opt(config: &LoadedConfig) -> Result<(), Error> {
    options::validate(config)?;
    if let Some(line) = salloc_note(&options::own_argv(), config) {
        nccl_check_host::errln!("{line}");
    }
    Ok(())
}

/// The line salloc prints when a check was asked for; None in sbatch, or without a check.
fn salloc_note(argv: &[String], config: &LoadedConfig) -> Option<String> {
    // The process's own program (a fact of this process, not of the user's input).
    let prog = argv.first()?.rsplit('/').next()?;
    if prog != "salloc" {
        return None;
    }
    let default = config.as_ref().ok()?.default_mode.clone();
    let mode = options::raw().mode(&default).ok()??;
    Some(format!(
        "nccl-check: salloc does not check the allocation itself (salloc starts nothing on its \
         nodes): every srun inside it checks its step's nodes before its tasks (--nccl-check={mode}; \
         srun --nccl-check=off skips one). To check the whole allocation before anything runs: \
         sbatch --nccl-check, or salloc ... srun --nccl-check hostname first"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PluginConfig;

    #[test]
    fn sbatch_and_a_salloc_without_the_option_say_nothing() {
        let c = PluginConfig::parse::<&str>(&[]);
        assert_eq!(salloc_note(&["/usr/bin/sbatch".into()], &c), None);
        // No --nccl-check in this test process: nothing asked, nothing said.
        assert_eq!(salloc_note(&["/usr/bin/salloc".into()], &c), None);
    }
}
