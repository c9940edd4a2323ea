//! nccl-check-host: what the three programs (the `nccl-check` worker, the SPANK plugin, the
//! prolog) need from the node they run on, shared so that each is written once. Nothing of the
//! contract between them (that is `nccl-check-contract`, which builds on this crate), no CUDA, no
//! NCCL, nothing heavy: the plugin is loaded into srun and slurmstepd.
//!
//! - a child run with deadlines: its own process group, bounded output, always reaped
//!   ([`supervise`]);
//! - Slurm host lists ([`hostlist`]) and the job a process's cgroup names ([`slurm_job`]);
//! - bounded reads of small files ([`read`]) and text from others made safe to print ([`text`]);
//! - stdout and stderr lines that never panic when the reader has gone ([`stdio`]);
//! - with feature `slurm-config`, Slurm's own configuration as the node uses it
//!   (`slurm_config`), and with feature `toml`, the one reader of TOML config files, whose
//!   errors name file, line and field (`config_file`).

#[cfg(feature = "toml")]
pub mod config_file;
pub mod hostlist;
pub mod read;
#[cfg(feature = "slurm-config")]
pub mod slurm_config;
pub mod slurm_job;
pub mod stdio;
pub mod supervise;
pub mod text;

#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
