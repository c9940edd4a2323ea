#!/usr/bin/env bash
# Overhead of the nccl-check plugin when --nccl-check is NOT given: wall time of `srun -N2 true`
# with the plugin loaded (`required`, as sites would list it) versus no plugin at all, and (when
# gcc and the Slurm headers are there) versus a no-op C SPANK plugin: the floor that loading any
# plugin costs. A
# benchmark, not a test: it prints the raw times, the medians and the ratio. Runs its own test
# cluster (slurm/test-cluster/up.sh) and tears it down. Root only.
#
# Usage: bash tests/slurm/bench-overhead.sh [REPS]      (default 30 per arm; arms interleaved)
# Result kept in tests/slurm/results/ (see the README there).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
REPS=${1:-30}
[ "$(id -u)" = 0 ] || { echo "bench-overhead: must run as root" >&2; exit 2; }
PLUGIN_SO=$REPO/target/release/libnccl_check.so
[ -f "$PLUGIN_SO" ] || timeout 1200 cargo build --release -p spank-plugin --manifest-path "$REPO/Cargo.toml" >&2 || exit 1

export NCCL_CHECK_CLUSTER_DIR
NCCL_CHECK_CLUSTER_DIR=$(mktemp -d /var/tmp/nccl-check-bench.XXXXXX)
CL=$NCCL_CHECK_CLUSTER_DIR
chmod 755 "$CL"
trap 'bash "$REPO/slurm/test-cluster/down.sh" --purge >/dev/null 2>&1' EXIT
bash "$REPO/slurm/test-cluster/up.sh" --nodes 2 --plugin "$PLUGIN_SO" \
    --plugin-args "worker=/nonexistent/nccl-check timeout=60" >/dev/null 2>&1 \
    || { echo "bench-overhead: cluster did not come up" >&2; exit 1; }
export SLURM_CONF=$CL/slurm.conf
CONF=$CL/plugstack.conf.d/zz-nccl-check.conf
ON_LINE=$(cat "$CONF")
NOOP_LINE=
if command -v gcc >/dev/null && [ -f /usr/include/slurm/spank.h ]; then
    printf '#include <slurm/spank.h>\nSPANK_PLUGIN(noop, 1);\nint slurm_spank_init(spank_t sp, int ac, char **av) { return 0; }\n' > "$CL/noop.c"
    gcc -shared -fPIC -O2 -o "$CL/lib/noop.so" "$CL/noop.c" && NOOP_LINE="required $CL/lib/noop.so"
fi
cd "$CL"

idle() { timeout 30 bash -c 'until [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge 2 ]; do sleep 0.2; done'; }
one() { # prints the wall time of one `srun -N2 true` in ms, 0.01 ms resolution
    local t0 t1
    idle
    t0=$(date +%s%N)
    timeout 60 srun -N2 true || echo "bench-overhead: srun failed" >&2
    t1=$(date +%s%N)
    awk -v ns=$((t1 - t0)) 'BEGIN {printf "%.2f\n", ns / 1e6}'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) printf "%.2f\n", a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

one >/dev/null; one >/dev/null      # warm-up (first launches load caches)
WITH=() WITHOUT=() NOOP=()
arm() { # with|without|noop: set the plugstack, time one srun
    case "$1" in
        with) echo "$ON_LINE" > "$CONF"; WITH+=("$(one)") ;;
        without) rm -f "$CONF"; WITHOUT+=("$(one)") ;;
        noop) [ -n "$NOOP_LINE" ] || return 0; echo "$NOOP_LINE" > "$CONF"; NOOP+=("$(one)") ;;
    esac
}
for i in $(seq 1 "$REPS"); do
    # Interleave the arms so drift (caches, other load) hits them alike; rotate the order.
    case $((i % 3)) in
        0) arm with; arm without; arm noop ;;
        1) arm without; arm noop; arm with ;;
        2) arm noop; arm with; arm without ;;
    esac
done
m_with=$(printf '%s\n' "${WITH[@]}" | median)
m_without=$(printf '%s\n' "${WITHOUT[@]}" | median)
echo "# nccl-check plugin overhead: srun -N2 true, option absent"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(uname -srm), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "slurm: $(srun --version), 2 slurmd on 127.0.0.1 (slurm/test-cluster/up.sh)"
echo "plugin line: $ON_LINE"
echo "reps per arm: $REPS (interleaved, order rotated, after 2 warm-up runs)"
echo "with plugin (ms):    ${WITH[*]}"
echo "without plugin (ms): ${WITHOUT[*]}"
if [ -n "$NOOP_LINE" ]; then
    m_noop=$(printf '%s\n' "${NOOP[@]}" | median)
    echo "no-op C plugin (ms):  ${NOOP[*]}"
fi
echo "median with plugin:    $m_with ms"
echo "median without plugin: $m_without ms"
awk -v a="$m_with" -v b="$m_without" 'BEGIN {printf "ratio with/without: %.4f (%+.2f%%)\n", a/b, (a/b-1)*100}'
if [ -n "$NOOP_LINE" ]; then
    echo "median no-op C plugin: $m_noop ms"
    awk -v a="$m_noop" -v b="$m_without" 'BEGIN {printf "ratio no-op C plugin/without: %.4f (%+.2f%%)\n", a/b, (a/b-1)*100}'
    awk -v a="$m_with" -v b="$m_noop" 'BEGIN {printf "ratio with/no-op C plugin: %.4f (%+.2f%%)\n", a/b, (a/b-1)*100}'
fi
