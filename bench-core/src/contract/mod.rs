//! The worker's side of its contract with everything that runs it (`nccl-check-contract`: the
//! command line, the exit codes, the report's head): the tests that the worker's parser takes
//! every command line the callers build, and that its report reads back as the callers read it.

#[cfg(all(test, feature = "gpu"))]
mod round_trip;
