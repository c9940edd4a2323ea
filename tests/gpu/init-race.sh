#!/usr/bin/env bash
# The NCCL init race at scale (issue 44 item 5): K healthy checks of N emulated nodes on one GPU
# (tests/gpu/fabric.sh's namespaces, bridge and launch, one table row `healthy N K none none PASS`),
# then the count of what the race looked like: workers that ended in ERROR 7 (Runtime) and
# workers whose log or report names the split refused by NCCL ("ncclCommSplit returned ..." or
# "Attempt to use communicator before the previous operation returned ncclSuccess").
#
#   bash tests/gpu/init-race.sh [--nodes 32] [--runs 10] [--out DIR] [fabric.sh options...]
#   bash tests/gpu/init-race.sh --count DIR...      count folders of earlier runs only
#   bash tests/gpu/init-race.sh --selftest          the counter on made-up folders (no GPU)
#
# fabric.sh options pass through (--bin, --nccl-lib, --worker, --timeout, --stagger, --budget).
# Exit 0 when every run PASSed with no ERROR 7 and no split race; 1 otherwise; 2 when it could
# not run. --count reads every run folder (fabric.sh's nN-healthy-K) under each DIR, so the runs
# of several device calls (each at most 10 minutes: --runs 4 --budget 420 at 32 nodes) add up.
# Every environment keeps NVLS and multicast off, as fabric.sh sets them for its workers.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "init-race.sh: $*" >&2; }

# One line per run folder, then the totals; returns 1 when any run has an ERROR 7 or the race.
count() { # DIR...
  local runs=0 err7_runs=0 err7=0 race_runs=0 races=0 dir codes e7 raced
  for dir in $(find "$@" -mindepth 1 -maxdepth 2 -type d -name 'n*-healthy-*' 2>/dev/null | sort); do
    [ -f "$dir/exit-codes.txt" ] || continue
    runs=$((runs + 1))
    codes=$(cat "$dir/exit-codes.txt")
    e7=$(tr ' ' '\n' <<<"$codes" | grep -c '=7$')
    # The split race, in any worker's log or report (its error names the NCCL call and text).
    raced=$(grep -lE 'ncclCommSplit returned|Attempt to use communicator before the previous operation' \
      "$dir"/*.log "$dir"/*.json 2>/dev/null | xargs -r -n1 basename | sed 's/\..*//' | sort -u | paste -sd' ')
    [ "$e7" -gt 0 ] && err7_runs=$((err7_runs + 1))
    err7=$((err7 + e7))
    if [ -n "$raced" ]; then race_runs=$((race_runs + 1)); races=$((races + $(wc -w <<<"$raced"))); fi
    echo "$dir: ERROR 7 on $e7 worker(s); failed split: ${raced:-none}; exits: $codes"
  done
  echo "init race: $runs run(s): $err7_runs with an ERROR 7 ($err7 worker(s)), $race_runs naming a failed ncclCommSplit ($races worker(s))"
  [ "$runs" -gt 0 ] || { say "no run folder (nN-healthy-K with exit-codes.txt) under $*"; return 1; }
  [ "$err7_runs" = 0 ] && [ "$race_runs" = 0 ]
}

# The counter on made-up run folders (no GPU, no namespaces): a clean run passes; one worker in
# ERROR 7 whose log names the refused split fails, and is named.
selftest() {
  local t out rc
  t=$(mktemp -d) || return 2
  mkdir -p "$t/clean/n4-healthy-1" "$t/raced/n4-healthy-1"
  echo "fab01=0 fab02=0 fab03=0 fab04=0" >"$t/clean/n4-healthy-1/exit-codes.txt"
  echo "fab01=0 fab02=0 fab03=7 fab04=0" >"$t/raced/n4-healthy-1/exit-codes.txt"
  echo "nccl-check: ERROR: GPU 0 (rank 2): NCCL init: ncclCommSplit returned ncclInvalidArgument (4): Attempt to use communicator before the previous operation returned ncclSuccess" \
    >"$t/raced/n4-healthy-1/fab03.log"
  rc=0
  count "$t/clean" >/dev/null || { say "selftest: a clean run counted as raced"; rc=1; }
  out=$(count "$t/raced") && { say "selftest: a raced run passed: $out"; rc=1; }
  grep -q 'ERROR 7 on 1 worker(s); failed split: fab03;' <<<"$out" || { say "selftest: fab03 not named: $out"; rc=1; }
  rm -rf "$t"
  [ $rc = 0 ] && echo "init-race.sh selftest: the counter passes a clean run and fails a raced one"
  return $rc
}

if [ "${1:-}" = --selftest ]; then
  selftest
  exit $?
fi
if [ "${1:-}" = --count ]; then
  shift
  [ $# -gt 0 ] || { say "--count needs the folders of earlier runs"; exit 2; }
  count "$@"
  exit $?
fi

NODES=32 RUNS=10 OUTDIR=/tmp/nccl-check-init-race TIMEOUT_S= PASS=()
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) NODES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --timeout) TIMEOUT_S=$2; shift 2 ;;
    --bin | --nccl-lib | --worker | --stagger | --budget) PASS+=("$1" "$2"); shift 2 ;;
    *) say "unknown argument '$1' (see the header)"; exit 2 ;;
  esac
done
case $RUNS in [1-9] | [1-9][0-9]) ;; *) say "--runs must be 1..99"; exit 2 ;; esac
# fabric.sh's budget is sized for 8-16 nodes; past 16 the NCCL init of N processes on one GPU and
# their 0.6 s start stagger take longer (a PASS ends when it ends: this only bounds a hang).
[ -n "$TIMEOUT_S" ] || TIMEOUT_S=$((NODES <= 16 ? 100 : 180))
mkdir -p "$OUTDIR" || exit 2
table=$OUTDIR/init-race-table.txt
# fabric-faults.txt's columns (row nodes repeat fault expect culprit rounds); rounds `-`: the
# race is judged here, not the localizer.
printf '# tests/gpu/init-race.sh: healthy runs only\nhealthy %s %s none none PASS - -\n' "$NODES" "$RUNS" >"$table"
bash "$here/fabric.sh" --nodes "$NODES" --table "$table" --timeout "$TIMEOUT_S" --out "$OUTDIR" "${PASS[@]}"
fabric=$?
count "$OUTDIR"
race=$?
[ "$fabric" -le 1 ] || exit 2
[ "$fabric" = 0 ] && [ "$race" = 0 ]
