#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run calls exactly this). Needs root on a
# Debian 12 machine: it installs what is missing, then runs lint, unit and integration tests, the
# PTX freshness check, and the real-Slurm suite (munged, slurmctld and 2 slurmd on this machine).
# GPU tests are separate: tests/gpu/run.sh on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n=== %s\n' "$*"; }

step "prerequisites"
bash tests/setup-deps.sh
NCCL_CHECK_TEST_NCCL_LIB=$(bash tests/fetch-nccl.sh)
export NCCL_CHECK_TEST_NCCL_LIB

step "format and lint"
cargo fmt --check
cargo clippy --all-targets -- -D warnings

step "unit and integration tests"
cargo test --workspace

step "committed PTX matches bench-core/kernels/check.cu"
tmp=$(mktemp --suffix=.ptx)
bench-core/kernels/build-ptx.sh "$tmp"
diff -u bench-core/kernels/check.ptx "$tmp"
rm -f "$tmp"

step "benchmark-script suite (fake tools)"
bash tests/benchmarks/run.sh

step "release build"
cargo build --release

step "real Slurm suite (SPANK plugin)"
bash tests/slurm/run.sh

step "scale suite (real Slurm, 64 nodes, simulated fabric)"
bash tests/scale/run.sh

step "prolog suite (real Slurm)"
bash tests/prolog/run.sh

step "container suite (older-glibc root filesystem, enroot files)"
bash tests/container/run.sh

step "packaging suite (DEB install/upgrade/remove, RPM metadata)"
bash tests/packaging/run.sh
echo "tests: all passed"
