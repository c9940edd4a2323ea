//! Stage 2, settings: the command line and the environment (Slurm's variables, `NCCL_CHECK_*`) in,
//! one validated [`options::Options`] out. Decides what this process is asked to do (its rank,
//! world, GPUs, sizes, rendezvous and credential) and refuses what cannot be run as a usage error
//! (exit 2) before anything is loaded, and names the node (`Options::node_name`), the partition
//! and the communicator mode. The environment is read once, into an
//! [`environment::Environment`] that `main` hands on (the options keep it as `Options::env` for
//! the stages that read Slurm's or CUDA's variables: the node's facts, the step's layout); the
//! only other place that touches the process's environment is NCCL's settings
//! (`measure/nccl_env.rs`, through `Environment::set_for_nccl`).

pub mod environment;
#[cfg(feature = "gpu")]
pub mod options;
