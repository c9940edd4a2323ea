//! The `--nccl-check` SPANK plugin (filled by the SPANK issue; see README).
