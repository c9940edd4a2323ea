#!/usr/bin/env bash
# Reproduces this directory's raw results: join (and the rest of the control-plane bench) at 256
# and 1,024 real processes on 127.0.0.1, three runs each, with the benchmark binary $BENCH
# (default: this tree's, built here) under the label LABEL (before / after). One JSON line per run
# into OUT_DIR/LABEL-procs-N-K.json, the spawning parent's /usr/bin/time -v beside it.
#   BENCH=/path/to/control_plane_bench bash run.sh before OUT_DIR   # built from commit 1668ca3
#   bash run.sh after OUT_DIR
set -euo pipefail
LABEL=${1:?before or after}
OUT_DIR=${2:-.}
REPO=$(cd "$(dirname "$0")/../../../.." && pwd)
if [ -z "${BENCH:-}" ]; then
    cargo build --release -p bench-core --features sim --example control_plane_bench --manifest-path "$REPO/Cargo.toml"
    BENCH=$REPO/target/release/examples/control_plane_bench
fi
NCCL_CHECK_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export NCCL_CHECK_SECRET
ulimit -Sn 1024
tmp=$(mktemp -d)
port=${PORT_BASE:-31850}
for n in 256 1024; do
    for k in 1 2 3; do
        port=$((port + 1))
        /usr/bin/time -v timeout 600 nice -n 5 "$BENCH" --procs "$n" --rounds 5 --port "$port" --timeout 300 \
            --max-len 64 --out-dir "$tmp" > "$OUT_DIR/$LABEL-procs-$n-$k.json" 2> "$OUT_DIR/$LABEL-procs-$n-$k.time.txt"
        rm -f "$tmp"/*.json
    done
done
rmdir "$tmp"
