//! Stage 3, meet: the settings (rendezvous address, credential, rank, world) in, one [`team::Team`]
//! out: the authenticated processes of the check (`rendezvous`), their control plane and where
//! every rank runs ([`topology::Topology`], built once). Decides who may join (`rendezvous::auth`),
//! who never came (`rendezvous::absent`) and who was lost mid-check (`rendezvous::plane::lost`).
//! The control plane is a star through the coordinator, which at 4,096 processes was the limit
//! (bench-core/benchmarks/results/2026-11-24-control-plane-4096): so the welcome lists each host
//! once and the localizer's rounds travel by NCCL, not by the star.

pub mod rendezvous;
pub mod slurm_layout;
pub mod team;
pub mod topology;
