#!/usr/bin/env bash
# The project's test command (README "Build and test"; .ci/run calls exactly this). Needs root on a
# Debian 12 machine: it installs what is missing, then runs lint, unit and integration tests, the
# PTX freshness check, and the real-Slurm suites (munged, slurmctld and 2 slurmd on this machine)
# on every Slurm major of the matrix: 22.05 (the host's), 24.11 and 26.05 (debootstrapped Debian
# trixie and sid roots, cached under target/slurm-roots; tests/matrix/run.sh), each followed by the
# admin path of docs/admin.md on a fresh Debian root of that major (tests/admin-path/run.sh --slurm MM),
# then the container suites: the worker in an older root, and real pyxis + enroot containers
# (tests/pyxis/run.sh).
# GPU tests are separate: tests/gpu/run.sh and tests/gpu/fabric.sh on a GPU machine (fabric.sh's
# GPU-less plumbing check runs here).
#
# Usage: bash tests/run.sh [--slurm MAJOR.MINOR]...   (default: 22.05 24.11 26.05)
#   or   NCCL_CHECK_SLURM="24.11" bash tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%T)"; }

RELEASES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --slurm) RELEASES+=("${2:?--slurm needs MAJOR.MINOR}"); shift 2 ;;
        *) echo "tests/run.sh: unknown argument '$1' (usage: tests/run.sh [--slurm MAJOR.MINOR]...)" >&2; exit 2 ;;
    esac
done
# shellcheck disable=SC2206  # a list of words
[ ${#RELEASES[@]} -gt 0 ] || RELEASES=(${NCCL_CHECK_SLURM:-22.05 24.11 26.05})
for r in "${RELEASES[@]}"; do
    case "$r" in 22.05|24.11|26.05) ;; *) echo "tests/run.sh: no Slurm $r in the matrix (22.05 24.11 26.05)" >&2; exit 2 ;; esac
done

step "prerequisites"
bash tests/setup-deps.sh
NCCL_CHECK_TEST_NCCL_LIB=$(bash tests/fetch-nccl.sh)
export NCCL_CHECK_TEST_NCCL_LIB

step "format and lint"
cargo fmt --check
cargo clippy --all-targets -- -D warnings
# No non-test function over 100 lines (the list names any that is).
python3 tests/tools/longest-fns.py --selftest
python3 tests/tools/longest-fns.py --max 100

step "one name per thing: no new public item named like another"
python3 tests/tools/duplicate-names.py --selftest
python3 tests/tools/duplicate-names.py --allow tests/tools/duplicate-names.allow

step "bench-core's stages: no import that runs backwards beyond the shrinking allow list"
python3 tests/tools/stage-imports.py --selftest
python3 tests/tools/stage-imports.py --allow tests/tools/stage-imports.allow

step "the SPANK plugin, bench-core, host, contract and the prolog: no import circle (modules that name each other, directly or through others) beyond the shrinking allow list"
python3 tests/tools/import-circles.py --selftest
python3 tests/tools/import-circles.py --allow tests/tools/import-circles.allow spank-plugin/src bench-core/src host/src contract/src prolog/src

step "committed results stay lean: each run folder a README, a summary and raw.tar.xz (<= 10 files)"
python3 tests/tools/pack-run.py --selftest
python3 tests/tools/pack-run.py --check

step "the README stays a front page: under 200 lines (detail goes to docs/)"
readme_lines=$(wc -l < README.md)
[ "$readme_lines" -lt 200 ] || { echo "tests/run.sh: README.md has $readme_lines lines; move detail to docs/" >&2; exit 1; }

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

step "Prometheus: the prolog's alert rules (promtool test rules) and dashboard against a real node_exporter and Prometheus"
bash tests/prometheus/run.sh target/release/nccl-check-prolog

for r in "${RELEASES[@]}"; do
    step "Slurm $r: SPANK plugin, prolog and packaging suites against real Slurm $r daemons"
    bash tests/matrix/run.sh --slurm "$r"
    # Right after the matrix: its build of this major's packages is still warm in target/slurm-matrix.
    step "admin path on Slurm $r: the ten-minute admin path (docs/admin.md) on a fresh Debian root with Slurm $r from apt"
    bash tests/admin-path/run.sh --slurm "$r"
done

step "scale suite (real Slurm 22.05, 64 nodes, simulated fabric)"
bash tests/scale/run.sh

step "emulated fabric plumbing: namespaces, tc shaping, the simulated worker (no GPU; tests/gpu/fabric.sh)"
cargo build -p bench-core --features sim --bin nccl-check-sim
# One cause across processes on real processes (loopback): a node's own finding names it in
# every process's verdict (bench-core/tests/sim_own_cause.rs; only a sim build has the worker).
cargo test -p bench-core --features sim --test sim_own_cause
fabric_out=$(mktemp -d /tmp/nccl-check-fabric.XXXXXX)
bash tests/gpu/fabric.sh --selftest --out "$fabric_out/selftest"
bash tests/gpu/fabric.sh --nodes 8 --rows healthy,slow-node,slow-path,far-path,missing --repeat 1 \
    --timeout 5 --stagger 0.1 --worker "$PWD/tests/gpu/fabric-sim-worker.sh" --out "$fabric_out/standin"
# A link set down mid-check: every worker stalls as NCCL does, only the control plane's watch
# can name the node (5 s of silence at this budget; ~12 s).
bash tests/gpu/fabric.sh --nodes 8 --rows link-down --repeat 1 --timeout 20 --stagger 0.1 \
    --worker "$PWD/tests/gpu/fabric-sim-worker.sh" --out "$fabric_out/standin-down"
# The init-race loop (tests/gpu/init-race.sh): its counter on made-up folders, then 2 healthy
# runs through fabric.sh with the stand-in, which must end with no ERROR 7 (~12 s).
bash tests/gpu/init-race.sh --selftest
bash tests/gpu/init-race.sh --nodes 8 --runs 2 --timeout 5 --stagger 0.1 \
    --worker "$PWD/tests/gpu/fabric-sim-worker.sh" --out "$fabric_out/init-race"
rm -rf "$fabric_out"

step "container suite (older-glibc root filesystem, enroot files)"
bash tests/container/run.sh

step "pyxis suite (real pyxis 0.24.0 + enroot 4.1.2 containers, host Slurm 22.05)"
# Their sources are not on any package registry CI can reach: they come from the steering repo's
# shared/vendor (or NCCL_CHECK_VENDOR_DIR). Where neither exists the suite cannot build them; that
# is said loudly here rather than failing every other suite's result with it.
vendored=
for d in "${NCCL_CHECK_VENDOR_DIR:-}" shared/vendor ../shared/vendor; do
    [ -n "$d" ] && compgen -G "$d/pyxis-*.tar.gz" >/dev/null && vendored=$d && break
done
if [ -n "$vendored" ]; then
    bash tests/pyxis/run.sh
else
    echo "tests: NOT RUN: pyxis suite: no pyxis/enroot sources in \$NCCL_CHECK_VENDOR_DIR, shared/vendor or ../shared/vendor"
fi
echo "tests: all passed (Slurm ${RELEASES[*]})"
