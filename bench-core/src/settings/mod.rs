//! Stage 1, settings: the command line and the environment (Slurm's variables, `NCCL_CHECK_*`) in,
//! one validated [`options::Options`] out. Decides what this process is asked to do (its rank,
//! world, GPUs, sizes, rendezvous and credential) and refuses what cannot be run as a usage error
//! (exit 2) before anything is loaded, and names the node (`node_name`), the partition and the
//! communicator mode. The one reader of argv and of the check's own variables; what reads the
//! environment elsewhere does so on purpose: NCCL's own variables (`measure/nccl_env.rs`, which
//! sets them for NCCL and records them in the report), what CUDA was shown
//! (`CUDA_VISIBLE_DEVICES`, `measure/cuda.rs`), the step's layout for naming an absent node
//! (`meet/slurm_layout.rs`), and `--check-config`'s file (`main.rs`).

#[cfg(feature = "gpu")]
pub mod options;
