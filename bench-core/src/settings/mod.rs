//! Stage 1, settings: the command line and the environment (Slurm's variables, `NCCL_CHECK_*`) in,
//! one validated [`options::Options`] out. Decides what this process is asked to do (its rank,
//! world, GPUs, sizes, rendezvous and credential) and refuses what cannot be run as a usage error
//! (exit 2) before anything is loaded. Meant as the one reader of argv and the environment (what
//! still reads the environment elsewhere, issue 27 moves here).

#[cfg(feature = "gpu")]
pub mod options;
