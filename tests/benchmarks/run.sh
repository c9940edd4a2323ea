#!/usr/bin/env bash
# Benchmark-script suite: the plumbing of bench-core/benchmarks/compare-nccl-tests.py with fake
# nccl-tests binaries and a fake nccl-check (shell scripts printing fixed table rows), so that no GPU
# is needed: the nccl-tests flags of each launch mode, the rotated order of the runs, the per-point
# medians and ratios, the band count, and a point missing from nccl-check. The numbers the script
# exists for come from GPUs (bench-core/benchmarks/results/); this only keeps the script honest.
#
# Usage: bash tests/benchmarks/run.sh
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"
SCRIPT=$REPO/bench-core/benchmarks/compare-nccl-tests.py
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# A fake <coll>_perf: logs its arguments, prints two rows whose busbw depends on the launch mode.
mkdir -p "$T/nt"
cat > "$T/nt/all_reduce_perf" <<'FAKE'
#!/usr/bin/env bash
echo "nt $*" >> "$(dirname "$0")/../calls"
case " $* " in *" -t "*) b=300.00 ;; *) b=290.00 ;; esac
echo "# nccl-tests fake $*"
echo "    33554432       8388608     float     sum      -1   175.57  191.12  $b       0   176.62  189.98  $b       0"
echo "    67108864      16777216     float     sum      -1   175.57  191.12  310.00       0   176.62  189.98  310.00       0"
FAKE
# A fake nccl-check: 303 GB/s at 32 MiB (1.01 of -t, 1.045 of -g), 310 at 64 MiB, unless told to drop 64 MiB.
cat > "$T/nccl-check" <<'FAKE'
#!/usr/bin/env bash
echo "ours $*" >> "$(dirname "$0")/calls"
echo "    33554432       8388608     float     sum      -1   175.57  191.12  303.00       0   176.62  189.98  303.00       0"
[ -n "${FAKE_DROP_64M:-}" ] || echo "    67108864      16777216     float     sum      -1   175.57  191.12  310.00       0   176.62  189.98  310.00       0"
FAKE
chmod +x "$T/nt/all_reduce_perf" "$T/nccl-check"
touch "$T/libnccl.so.2"

compare() { # out-dir extra-args...
    local out=$1; shift
    rm -f "$T/calls"
    python3 "$SCRIPT" --nccl-check "$T/nccl-check" --nccl-tests "$T/nt" --nccl-lib "$T/libnccl.so.2" \
        --gpus 4 --collectives all_reduce --out "$T/$out" "$@" > "$T/$out.stdout" 2> "$T/$out.stderr"
}

test_default_is_one_thread_per_gpu() {
    compare default || fail "exit status $? ($(cat "$T/default.stderr"))"
    grep -q -- "^nt -b 32M -e 8G -f 2 -t 4 -g 1 -w 5 -n 20 -c 1$" "$T/calls" || fail "nccl-tests flags: $(cat "$T/calls")"
    grep -q "all_reduce  *33554432 .* 1.010 " "$T/default/ratios.txt" || fail "ratio: $(cat "$T/default/ratios.txt")"
    grep -q "points 4, within \[0.97, 1.03\]: 4," "$T/default/ratios.txt" || fail "band count: $(tail -1 "$T/default/ratios.txt")"
}

test_both_modes_rotate_and_write_a_table_each() {
    compare both --nccl-tests-mode both --repeat 3 || fail "exit status $?"
    # Round k starts with step k mod 3 of (threads, gpus, nccl-check).
    local firsts
    firsts=$(awk 'NR % 3 == 1 {print ($1 == "ours" ? "ours" : ($0 ~ / -t / ? "threads" : "gpus"))}' "$T/calls" | tr '\n' ' ')
    [ "$firsts" = "threads gpus ours " ] || fail "first tool per round: $firsts"
    grep -q -- "(-g 4)" "$T/both/ratios.gpus.txt" || fail "gpus table header"
    grep -q "all_reduce  *33554432 .* 1.045 " "$T/both/ratios.gpus.txt" || fail "gpus ratio: $(cat "$T/both/ratios.gpus.txt")"
    grep -q "within \[0.97, 1.03\]: 2," "$T/both/ratios.gpus.txt" || fail "gpus band count"
    grep -q "within \[0.97, 1.03\]: 4," "$T/both/ratios.threads.txt" || fail "threads band count"
    for f in spread.threads.txt spread.gpus.txt; do
        [ -s "$T/both/$f" ] || fail "$f missing"
    done
    local raw
    raw=$(find "$T/both" -name 'all_reduce.*.nccl-tests-threads.txt' | wc -l)
    [ "$raw" = 3 ] || fail "raw nccl-tests outputs: $raw"
}

test_a_point_missing_in_nccl_check_fails_the_run() {
    FAKE_DROP_64M=1 compare missing && fail "exit status 0 with a missing point"
    grep -q "67108864 missing in nccl-check" "$T/missing/ratios.txt" || fail "missing point not named"
}

# verdict-vs-floor.sh with a fake floor_mp (sleeps FAKE_FLOOR_S) and a fake nccl-check (sleeps
# FAKE_CHECK_S, writes a PASS report with a `sizing` entry): the interleaving, one process per
# emulated node with its own NCCL_HOSTID and NVLS off, the medians, the ratio and the targets.
cat > "$T/floor_mp" <<'FAKE'
#!/usr/bin/env bash
echo "floor $* host=$NCCL_HOSTID nvls=$NCCL_NVLS_ENABLE mc=$TORCH_SYMM_MEM_DISABLE_MULTICAST shmem=$NVSHMEM_DISABLE_NVLS if=$NCCL_SOCKET_IFNAME" >> "$FAKE_CALLS"
sleep "${FAKE_FLOOR_S:-0}"
echo "mp rank $1 n $2 ctx_ms 1 init_ms 2 loop_ms 3 all_ms 4 busbw 1.000"
FAKE
cat > "$T/fake-check" <<'FAKE'
#!/usr/bin/env bash
echo "check host=$NCCL_HOSTID nvls=$NCCL_NVLS_ENABLE shared=$NCCL_CHECK_SHARED_GPUS $*" >> "$FAKE_CALLS"
while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
sleep "${FAKE_CHECK_S:-0}"
printf '{"verdict":"PASS","nccl":{"version":"2.28.9"},"sizing":[{"step":"all_reduce","bytes":16777216,"samples":5,"why":"budget"}]}\n' > "$json"
FAKE
chmod +x "$T/floor_mp" "$T/fake-check"

verdict_vs_floor() { # out-dir
    local out=$1
    export FAKE_CALLS=$T/$out.calls; rm -f "$FAKE_CALLS"
    bash "$REPO/bench-core/benchmarks/verdict-vs-floor.sh" --bin "$T/fake-check" --lib "$T/libnccl.so.2" \
        --floor-bin "$T/floor_mp" --nodes "2 3" --runs 2 --out "$T/$out" > "$T/$out.stdout" 2> "$T/$out.stderr"
}

test_verdict_vs_floor_interleaves_and_judges_the_targets() {
    FAKE_FLOOR_S=0.4 FAKE_CHECK_S=0 verdict_vs_floor vf || fail "exit status $? ($(cat "$T/vf.stderr"))"
    # 2 node counts x 2 runs x (2 or 3 processes) of each tool.
    [ "$(grep -c '^floor' "$T/vf.calls")" = 10 ] || fail "floor processes: $(grep -c '^floor' "$T/vf.calls")"
    [ "$(grep -c '^check host=e' "$T/vf.calls")" = 10 ] || fail "check processes: $(grep -c '^check host=e' "$T/vf.calls")"
    grep -q "^floor 2 3 .*/n3-run1/id 32 7 host=e2 nvls=0 mc=1 shmem=1 if=lo$" "$T/vf.calls" || fail "floor args/env: $(head -3 "$T/vf.calls")"
    grep -q "^check host=e1 nvls=0 shared=1 .*--rank 1 --world 2 --rendezvous 127.0.0.1:[0-9]* --plan quick" "$T/vf.calls" \
        || fail "check args/env: $(grep '^check' "$T/vf.calls" | head -2)"
    # Run 1 starts with the floor, run 2 with the check.
    local order
    order=$(awk -F'\t' 'NR > 1 && $1 == 2 {print $3}' "$T/vf/raw/walls.tsv" | tr '\n' ' ')
    [ "$order" = "floor check check floor " ] || fail "order: $order"
    grep -q "^| 2 | 0.4.* | yes | PASS, PASS | 2.28.9 | all_reduce 16M x5 (budget) |$" "$T/vf/summary.md" || fail "summary: $(cat "$T/vf/summary.md")"
    grep -q "^targets met: yes" "$T/vf/summary.md" || fail "targets"
    [ -s "$T/vf/README.md" ] && [ -s "$T/vf/machine.txt" ] || fail "README/machine.txt"
}

test_verdict_vs_floor_says_when_the_check_is_over_twice_the_floor() {
    FAKE_FLOOR_S=0 FAKE_CHECK_S=0.5 verdict_vs_floor slow || fail "exit status $?"
    grep -q "^| 3 | .* | NO |" "$T/slow/summary.md" || fail "summary: $(cat "$T/slow/summary.md")"
    grep -q "^targets met: NO" "$T/slow/summary.md" || fail "targets"
}

for t in test_default_is_one_thread_per_gpu test_both_modes_rotate_and_write_a_table_each \
         test_a_point_missing_in_nccl_check_fails_the_run test_verdict_vs_floor_interleaves_and_judges_the_targets \
         test_verdict_vs_floor_says_when_the_check_is_over_twice_the_floor; do
    harness_run "$t" "$t"
done
harness_tally "benchmark-script suite"
