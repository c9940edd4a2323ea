#!/usr/bin/env bash
# Benchmark (not a test; needs a GPU): time to verdict of nccl-check's quick plan against the
# floor program (floor_mp.cu beside this script, a copy of shared/tools/floor_mp.cu: NCCL init and
# one all_reduce 32 MiB, 2 warm-up + 7 timed), N emulated nodes on GPU 0 over loopback sockets
# (each process its own NCCL_HOSTID, NCCL_SOCKET_IFNAME=lo, sockets only: ~1 GB/s busbw), the two
# interleaved (each round the other one first), RUNS runs each at every node count. Issue 47's
# target: the check's healthy verdict within 2x of the floor (medians) at 4 and 8 nodes, and no
# slower than 6 s at 8 nodes. Writes under OUT:
#   raw/          every run's output (floor: each rank's line; nccl-check: each rank's --json
#                 report and table), and walls.tsv (nodes, run, tool, wall ms, exit codes)
#   summary.md    per node count: median and range of each, the ratio, the targets met or not,
#                 the check's verdicts and what its budgeted steps measured (rank 0's `sizing`)
#   machine.txt   GPU, driver, NCCL, kernel, date
#   README.md     how it ran (this command line)
# then packs OUT (tests/tools/pack-run.py: README, summary, raw.tar.xz) when it lies in the repo.
#
#   verdict-vs-floor.sh --bin NCCL_CHECK --lib LIBNCCL [--nodes "4 8"] [--runs 5] [--out DIR]
#       [--floor-src floor_mp.cu | --floor-bin BIN] [--stagger S] [--timeout S] [--fraction F]
# --floor-bin skips the nvcc build (tests/benchmarks/run.sh hands it a fake). nvcc: PATH, else
# /usr/local/cuda. NVLS and multicast stay off in every process (NCCL_NVLS_ENABLE=0 ...).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin='' lib='' nodes_list='4 8' runs=5 out=${OUT:-/tmp/verdict-vs-floor} floor_src=$here/floor_mp.cu
floor_bin='' stagger=0 timeout_s=60 fraction='' args="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --lib) lib=$2; shift 2 ;;
    --nodes) nodes_list=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --floor-src) floor_src=$2; shift 2 ;;
    --floor-bin) floor_bin=$2; shift 2 ;;
    --stagger) stagger=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --fraction) fraction=$2; shift 2 ;;
    *) echo "verdict-vs-floor.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "verdict-vs-floor.sh: --bin NCCL_CHECK (an executable) is required" >&2; exit 2; }
[ -f "$lib" ] || { echo "verdict-vs-floor.sh: --lib LIBNCCL (a file) is required" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$out/raw" "$out/build"
# --fraction F: the outlier fraction of a site config (tests/gpu/fabric.sh runs emulated nodes
# at 0.70: one GPU and one kernel's sockets make their pairs uneven, which no real fabric does);
# without it the built-in 0.85.
cfg_env=()
if [ -n "$fraction" ]; then
  case $fraction in 0.[0-9]*) ;; *) echo "verdict-vs-floor.sh: --fraction must be 0.x" >&2; exit 2 ;; esac
  printf '[outliers]\nfraction = %s\n' "$fraction" >"$out/raw/site.toml"
  cfg_env=("NCCL_CHECK_CONFIG=$out/raw/site.toml")
fi
lib=$(readlink -f "$lib"); libdir=$(dirname "$lib")

if [ -z "$floor_bin" ]; then
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  inc=''
  for d in "$libdir/../include" "$(dirname "$libdir")/include" /usr/include; do
    [ -f "$d/nccl.h" ] && { inc=$d; break; }
  done
  [ -n "$inc" ] || { echo "verdict-vs-floor.sh: no nccl.h beside $lib" >&2; exit 2; }
  floor_bin=$out/build/floor_mp
  "$nvcc" -O2 -o "$floor_bin" "$floor_src" -I"$inc" -L"$libdir" -l:"$(basename "$lib")" \
    -Xlinker -rpath -Xlinker "$libdir" || { echo "verdict-vs-floor.sh: nvcc failed" >&2; exit 2; }
fi

now_ms() { date +%s%3N; }
# One emulated node's environment: its own host to NCCL, sockets on loopback only.
node_env() { # rank
  echo "NCCL_HOSTID=e$1 SLURMD_NODENAME=e$1 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NET=Socket CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

run_floor() { # nodes run -> walls.tsv line
  local n=$1 k=$2 dir=$out/raw/n$1-run$2 pids=() codes='' t0
  mkdir -p "$dir"; rm -f "$dir"/id*
  t0=$(now_ms)
  for ((r = 0; r < n; r++)); do
    # shellcheck disable=SC2046  # node_env's words are the assignments
    env $(node_env "$r") timeout -k 2 "$timeout_s" "$floor_bin" "$r" "$n" "$dir/id" 32 7 >"$dir/floor.$r.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; codes+="$?,"; done
  printf '%s\t%s\tfloor\t%s\t%s\n' "$n" "$k" "$(($(now_ms) - t0))" "${codes%,}" >>"$out/raw/walls.tsv"
}

port=29700
run_check() { # nodes run
  local n=$1 k=$2 dir=$out/raw/n$1-run$2 pids=() codes='' t0
  mkdir -p "$dir"; port=$((port + 1))
  # The step's secret, as the plugin hands one to every task (no Slurm here).
  local secret; secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  t0=$(now_ms)
  for ((r = 0; r < n; r++)); do
    # shellcheck disable=SC2046
    env $(node_env "$r") "${cfg_env[@]}" NCCL_CHECK_SECRET="$secret" NCCL_CHECK_SHARED_GPUS=1 timeout -k 2 $((timeout_s + 10)) "$bin" --nccl-lib "$lib" \
      --gpus 0 --rank "$r" --world "$n" --rendezvous "127.0.0.1:$port" --plan quick --timeout "$timeout_s" \
      --json "$dir/check.$r.json" >"$dir/check.$r.txt" 2>&1 &
    pids+=($!)
    [ "$r" -lt $((n - 1)) ] && [ "$stagger" != 0 ] && sleep "$stagger"
  done
  for p in "${pids[@]}"; do wait "$p"; codes+="$?,"; done
  printf '%s\t%s\tcheck\t%s\t%s\n' "$n" "$k" "$(($(now_ms) - t0))" "${codes%,}" >>"$out/raw/walls.tsv"
}

printf 'nodes\trun\ttool\twall_ms\texit_codes\n' >"$out/raw/walls.tsv"
for n in $nodes_list; do
  for ((k = 1; k <= runs; k++)); do
    # Interleaved, the first tool alternating: neither always meets a warmer driver.
    if [ $((k % 2)) = 1 ]; then run_floor "$n" "$k"; run_check "$n" "$k"
    else run_check "$n" "$k"; run_floor "$n" "$k"; fi
  done
done

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kernel: $(uname -r)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 | sed 's/^/gpu, driver: /'
  echo "nccl library: $lib"
  echo "nccl-check: $("$bin" --version 2>/dev/null | head -1)"
} >"$out/machine.txt"

python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "raw", "walls.tsv"))][1:]
def report(n, k):
    try:
        return json.load(open(os.path.join(out, "raw", f"n{n}-run{k}", "check.0.json")))
    except (OSError, ValueError):
        return {}
lines = ["# nccl-check quick plan against the floor (floor_mp: init + all_reduce 32 MiB x7), emulated nodes over loopback", ""]
lines.append("| nodes | floor median (range) s | check median (range) s | ratio | target | met | verdicts (rank 0) | NCCL | sized (rank 0, first run) |")
lines.append("|---|---|---|---|---|---|---|---|---|")
ok = True
for n in sorted({int(r[0]) for r in rows}):
    w = {t: [int(r[3]) / 1e3 for r in rows if int(r[0]) == n and r[2] == t] for t in ("floor", "check")}
    if not w["floor"] or not w["check"]:
        continue
    f, c = statistics.median(w["floor"]), statistics.median(w["check"])
    ratio = c / f if f > 0 else float("inf")
    limit = "<= 2x" + (", <= 6 s" if n == 8 else "")
    runs = sorted({int(r[1]) for r in rows if int(r[0]) == n})
    verdicts = [report(n, k).get("verdict", "none") for k in runs]
    # A check that did not PASS gave no verdict in that time: no target is met by it.
    met = ratio <= 2.0 and (n != 8 or c <= 6.0) and all(v == "PASS" for v in verdicts)
    ok &= met
    first = report(n, runs[0])
    nccl = (first.get("nccl") or {}).get("version", "?")
    sized = "; ".join(f"{s['step']} {s['bytes'] >> 20}M x{s['samples']} ({s['why']})" for s in first.get("sizing", []))
    lines.append(f"| {n} | {f:.2f} ({min(w['floor']):.2f}-{max(w['floor']):.2f}) | {c:.2f} ({min(w['check']):.2f}-{max(w['check']):.2f}) | {ratio:.2f} | {limit} | {'yes' if met else 'NO'} | {', '.join(verdicts)} | {nccl} | {sized or 'none'} |")
lines += ["", f"targets met: {'yes' if ok else 'NO'}", ""]
lines.append(open(os.path.join(out, "machine.txt")).read())
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines))
print("\n".join(lines))
PY
cat >"$out/README.md" <<README
# verdict-vs-floor: nccl-check's quick plan against the floor program, emulated nodes over loopback

Ran \`bench-core/benchmarks/verdict-vs-floor.sh $args\` (issue 47's done-when: the check's
healthy verdict within 2x of the floor, median of $runs, and no slower than 6 s at 8 nodes). Every
process on GPU 0 with its own NCCL_HOSTID, sockets on loopback; NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1. The floor and the check alternate
which runs first. summary.md has the medians; raw.tar.xz every run's output and walls.tsv.
README
repo=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null)
case "$(readlink -f "$out")" in
  "$repo"/bench-core/benchmarks/results/*) python3 "$repo/tests/tools/pack-run.py" "$out" ;;
esac
