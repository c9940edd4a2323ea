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

for t in test_default_is_one_thread_per_gpu test_both_modes_rotate_and_write_a_table_each \
         test_a_point_missing_in_nccl_check_fails_the_run; do
    harness_run "$t" "$t"
done
harness_tally "benchmark-script suite"
