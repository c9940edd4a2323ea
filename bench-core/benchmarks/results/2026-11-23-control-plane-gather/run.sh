#!/usr/bin/env bash
# Reproduces this directory's raw results: the control plane at 64, 256 and 1,024 real processes on
# 127.0.0.1 (bench-core/examples/control_plane_bench.rs), then 1,024 with one process that exits
# after joining and one that stops answering. Writes one JSON line per run into OUT_DIR.
set -euo pipefail
OUT_DIR=${1:-.}
REPO=$(cd "$(dirname "$0")/../../../.." && pwd)
cargo build --release -p bench-core --features sim --example control_plane_bench --manifest-path "$REPO/Cargo.toml"
BENCH=$REPO/target/release/examples/control_plane_bench
NCCL_CHECK_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export NCCL_CHECK_SECRET
# The coordinator raises its own soft limit of open files; start from the common 1,024.
ulimit -Sn 1024
tmp=$(mktemp -d)
port=31650
for n in 64 256 1024; do
    port=$((port + 1))
    timeout 600 "$BENCH" --procs "$n" --rounds 10 --port "$port" --timeout 120 --out-dir "$tmp" > "$OUT_DIR/procs-$n.json"
    rm -f "$tmp"/*.json
done
for mode in exit hang absent; do
    port=$((port + 1))
    timeout 600 "$BENCH" --procs 1024 --rounds 3 --port "$port" --timeout 20 --dead 517 --dead-mode "$mode" \
        --out-dir "$tmp" > "$OUT_DIR/procs-1024-dead-$mode.json"
    cp "$tmp/cp-bench-0.json" "$OUT_DIR/procs-1024-dead-$mode.coordinator.json" 2>/dev/null || true
    rm -f "$tmp"/*.json
done
rmdir "$tmp"
