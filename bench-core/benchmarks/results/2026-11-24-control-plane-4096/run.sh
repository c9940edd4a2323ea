#!/usr/bin/env bash
# Reproduces this directory's raw results: the control plane (a star through the coordinator, with
# the beats of issue 28's link-down fix) at 1,024 and 4,096 real processes on 127.0.0.1
# (bench-core/examples/control_plane_bench.rs): join, sums of 1 and 64 values, then one whole
# localization through Team::gather; the coordinator's memory. One JSON line per run into OUT_DIR.
set -euo pipefail
OUT_DIR=${1:-.}
REPO=$(cd "$(dirname "$0")/../../../.." && pwd)
cargo build --release -p bench-core --features sim --example control_plane_bench --manifest-path "$REPO/Cargo.toml"
BENCH=$REPO/target/release/examples/control_plane_bench
NCCL_CHECK_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export NCCL_CHECK_SECRET
# The coordinator raises its own soft limit of open files (4,096 connections); start from 1,024.
ulimit -Sn 1024
tmp=$(mktemp -d)
port=31750
# NAME PROCS [extra arguments]: the budget's silence (15 s at --timeout 300), then 4,096 again
# with a silence of 120 s (2,048 processes a core leave some unscheduled for over 15 s), then with
# beats every 300 s (none during the run): what the beats themselves cost at 4,096.
while read -r name n extra; do
    port=$((port + 1))
    # shellcheck disable=SC2086
    /usr/bin/time -v timeout 900 nice -n 5 "$BENCH" --procs "$n" --rounds 5 --port "$port" --timeout 300 \
        --max-len 64 --out-dir "$tmp" $extra > "$OUT_DIR/$name.json" 2> "$OUT_DIR/$name.time.txt"
    rm -f "$tmp"/*.json
done <<'RUNS'
procs-1024 1024
procs-4096-silence15 4096
procs-4096 4096 --silence 120
procs-4096-nobeats 4096 --silence 600 --every 300
RUNS
rmdir "$tmp"
