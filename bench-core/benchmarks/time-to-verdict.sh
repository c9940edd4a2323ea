#!/usr/bin/env bash
# Benchmark (not a test; needs GPUs): time to verdict, process start to exit, of the floor program
# against nccl-check and nccl-tests, alternating the tools in every round on the same GPUs:
#   floor_par 256 MiB (floor_par.cu beside this script, a copy of shared/tools/floor_par.cu; fast exit), then for each nccl-check build
#   (--ours, several allowed: e.g. main's and a branch's) its all_reduce-only check
#   (`all_reduce -b 256M -e 256M -w 2 -n 5`) and its quick plan (all_reduce 256M + GPU pair
#   matrix), then nccl-tests' all_reduce_perf 256 MiB (-w 2 -n 5).
# One untimed warm-up round first (driver, JIT cache), then ROUNDS timed rounds. Writes under OUT:
#   raw/                 every run's output (nccl-check: --json report and table; floor: its line)
#   walls.tsv            round, tool, wall ms, exit code
#   summary.md           medians, ratios against floor_par, nccl-check's phases (medians), the
#                        floor's own context and init times, the targets (quick plan within 1.10x, all_reduce only within 1.03x)
#   machine.txt          GPUs, driver, NCCL, date
#
#   time-to-verdict.sh --lib LIBNCCL --ours NAME=BIN [--ours NAME=BIN ...] [--with NAME=VAR=VALUE ...]
#       [--nccl-tests DIR | --nccl-tests-src DIR] [--floor-src floor_par.cu] [--rounds 6] [--out DIR]
#       [--budget SECONDS]
# --budget: no round starts that would end past SECONDS from the script's start (by the last
# round's length); the summary is written from the rounds done.
# --with adds an environment variable to one --ours build's runs (e.g. --ours blocking=BIN
# --with blocking=NCCL_CHECK_COMM_MODE=blocking). --nccl-tests-src builds all_reduce_perf only
# (sm_90 and up: H100/H200/B200) against LIBNCCL's headers. nvcc: PATH, else /usr/local/cuda.
# NVLS and multicast stay off (NCCL_NVLS_ENABLE=0 ...), as on every GPU run of this project.
# One binary, each setup change against the serial order it replaced (NCCL_CHECK_SETUP, diagnosis),
# and the split communicator against a blocking init (NCCL_CHECK_COMM_MODE), ~4 min on 4 GPUs:
#   B=target/gpu-carry/nccl-check; time-to-verdict.sh --lib LIBNCCL --out $OUT/ttv --budget 520 \
#     --nccl-tests-src NCCL_TESTS_2.19.6_SRC --ours speed=$B \
#     --ours old=$B --with old=NCCL_CHECK_SETUP=probe-first,pairs-by-round \
#     --ours probe-first=$B --with probe-first=NCCL_CHECK_SETUP=probe-first \
#     --ours blocking=$B --with blocking=NCCL_CHECK_COMM_MODE=blocking
set -u
began=$(date +%s)
lib='' floor_src=$(dirname "$0")/floor_par.cu nt='' nt_src='' rounds=6 budget=0 out=${OUT:-/tmp/time-to-verdict}
names=()
declare -A bin=() envs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) lib=$2; shift 2 ;;
    --floor-src) floor_src=$2; shift 2 ;;
    --nccl-tests) nt=$2; shift 2 ;;
    --nccl-tests-src) nt_src=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --ours) names+=("${2%%=*}"); bin[${2%%=*}]=${2#*=}; shift 2 ;;
    --with) envs[${2%%=*}]+="${2#*=} "; shift 2 ;;
    *) echo "time-to-verdict.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -f "$lib" ] || { echo "time-to-verdict.sh: --lib LIBNCCL (a file) is required" >&2; exit 2; }
[ ${#names[@]} -gt 0 ] || { echo "time-to-verdict.sh: at least one --ours NAME=BIN" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$out/raw" "$out/build"
lib=$(readlink -f "$lib"); libdir=$(dirname "$lib")
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
# An NCCL home as nccl-tests' Makefile wants it: include/ of the library's package, lib/libnccl.so.
home=$out/build/nccl-home; mkdir -p "$home/lib"
ln -sfn "$lib" "$home/lib/libnccl.so"; ln -sfn "$lib" "$home/lib/libnccl.so.2"
for inc in "$libdir/../include" "$(dirname "$libdir")/include" /usr/include; do
  [ -f "$inc/nccl.h" ] && { ln -sfn "$(readlink -f "$inc")" "$home/include"; break; }
done
if [ ! -f "$home/include/nccl.h" ]; then
  echo "time-to-verdict.sh: no nccl.h beside $lib: floor_par and nccl-tests are not built" >&2
  floor_src='' nt_src=''
fi

floor=
if [ -n "$floor_src" ]; then
  floor=$out/build/floor_par
  if ! timeout 120 "$nvcc" -O2 -std=c++17 -o "$floor" "$floor_src" -I"$home/include" -L"$home/lib" -lnccl \
      -lpthread -Xlinker -rpath -Xlinker "$libdir" >"$out/build/floor.log" 2>&1; then
    echo "time-to-verdict.sh: floor_par did not build:"; tail -5 "$out/build/floor.log"; floor=
  fi
fi
if [ -n "$nt_src" ]; then
  cp -r "$nt_src" "$out/build/nccl-tests-src"
  nt=$out/build/nccl-tests
  if ! timeout 240 make -C "$out/build/nccl-tests-src/src" -j"$(nproc)" MPI=0 NCCL_HOME="$home" \
      CUDA_HOME="$cuda_home" BUILDDIR="$nt" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
      "$nt/all_reduce_perf" >"$out/build/nccl-tests.log" 2>&1; then
    echo "time-to-verdict.sh: all_reduce_perf did not build:"; tail -5 "$out/build/nccl-tests.log"; nt=
  fi
fi
ngpus=$(nvidia-smi -L | grep -c ^GPU)
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | sed 's/^/driver /'
  echo "nccl $lib"
  for n in "${names[@]}"; do echo "ours $n ${bin[$n]} env: ${envs[$n]:-}"; done
  echo "floor ${floor:-none} nccl-tests ${nt:-none} rounds $rounds cpus $(nproc)"
} >"$out/machine.txt"
cat "$out/machine.txt"

# One run: wall ms from fork to exit, by the monotonic clock of this shell's date.
run() { # tool round outfile cmd...
  local tool=$1 round=$2 file=$3; shift 3
  local t0 t1 rc
  t0=$(date +%s%N)
  timeout -k 2 60 "$@" >"$file" 2>&1; rc=$?
  t1=$(date +%s%N)
  printf '%s\t%s\t%s\t%s\n' "$round" "$tool" "$(( (t1 - t0) / 1000000 ))" "$rc" >>"$out/walls.tsv"
  printf 'round %s %-24s %6s ms rc=%s\n' "$round" "$tool" "$(( (t1 - t0) / 1000000 ))" "$rc"
}
: >"$out/walls.tsv"
last=0
for round in $(seq 0 "$rounds"); do
  t_round=$(date +%s)
  if [ "$budget" -gt 0 ] && [ $(( t_round - began + last )) -gt "$budget" ]; then
    echo "budget: round $round would end past ${budget} s; stopping after $((round - 1)) timed rounds"
    break
  fi
  r=$out/raw/r$round
  [ -n "$floor" ] && run floor_par "$round" "$r-floor.txt" env LD_LIBRARY_PATH="$libdir" "$floor" 256 10 1
  for n in "${names[@]}"; do
    # shellcheck disable=SC2086
    run "$n:all_reduce" "$round" "$r-$n-ar.txt" env ${envs[$n]:-} "${bin[$n]}" all_reduce -b 256M -e 256M \
      -w 2 -n 5 --nccl-lib "$lib" --json "$r-$n-ar.json"
    # shellcheck disable=SC2086
    run "$n:quick" "$round" "$r-$n-quick.txt" env ${envs[$n]:-} "${bin[$n]}" --nccl-lib "$lib" \
      --json "$r-$n-quick.json"
  done
  [ -n "$nt" ] && run nccl-tests:all_reduce "$round" "$r-nccl-tests.txt" env LD_LIBRARY_PATH="$libdir" \
    "$nt/all_reduce_perf" -b 256M -e 256M -g "$ngpus" -w 2 -n 5
  last=$(( $(date +%s) - t_round ))
done

python3 - "$out" <<'EOF'
import glob, json, os, re, statistics as st, sys
out = sys.argv[1]
walls = {}
for line in open(os.path.join(out, "walls.tsv")):
    rnd, tool, ms, rc = line.split("\t")
    if rnd != "0":  # round 0 warms the driver and the JIT cache
        walls.setdefault(tool, []).append((int(ms), int(rc)))
med = lambda v: st.median(v) if v else float("nan")
floor = med([w for w, _ in walls.get("floor_par", [])])
lines = ["# Time to verdict: process start to exit, medians of the timed rounds", "",
         open(os.path.join(out, "machine.txt")).read().strip().replace("\n", "  \n"), "",
         "| tool | median ms | vs floor_par | min..max ms | runs | exit codes |", "|---|---|---|---|---|---|"]
for tool, v in walls.items():
    ms = [w for w, _ in v]
    lines.append(f"| {tool} | {med(ms):.0f} | {med(ms) / floor:.3f}x | {min(ms)}..{max(ms)} | {len(ms)} | "
                 f"{','.join(sorted({str(c) for _, c in v}))} |")
# nccl-check's phases, medians over the timed rounds.
keys = ["cuda_init_ms", "contexts_ms", "allocation_ms", "probe_ms", "nccl_init_ms", "comms_ready_at_ms",
        "warmup_ms", "timed_loop_ms", "verification_ms", "pairs_ms", "total_ms"]
lines += ["", "nccl-check's report phases (ms, medians; `comms_ready_at`: process start to the last "
          "communicator ready), the all_reduce 256M busbw, the slowest GPU's local probe, verdicts:", "",
          "| run | " + " | ".join(k[:-3] for k in keys) + " | busbw | probe GB/s | verdicts |",
          "|---|" + "---|" * (len(keys) + 3)]
for f in sorted({re.sub(r"^r\d+-", "", os.path.basename(p))[:-5] for p in glob.glob(os.path.join(out, "raw", "r*-*.json"))}):
    reps = []
    for p in glob.glob(os.path.join(out, "raw", f"r*-{f}.json")):
        if re.search(r"/r0-", p):
            continue
        try:
            reps.append(json.load(open(p)))
        except Exception:
            pass
    if not reps:
        continue
    ph = [med([r.get("phases", {}).get(k, float("nan")) for r in reps]) for k in keys]
    bw = med([min(x["out_of_place"]["busbw"], x["in_place"]["busbw"]) for r in reps for x in r.get("results", [])[:1]])
    probe = min((g["local_probe"]["copy_gbs"] for r in reps for g in r.get("gpus", []) if g.get("local_probe")), default=float("nan"))
    verdicts = ",".join(sorted({r.get("verdict", "?") for r in reps}))
    lines.append(f"| {f} | " + " | ".join(f"{x:.0f}" for x in ph) + f" | {bw:.1f} | {probe:.0f} | {verdicts} |")
fl = []
for p in glob.glob(os.path.join(out, "raw", "r*-floor.txt")):
    if re.search(r"/r0-", p):
        continue
    text = open(p).read()
    m = re.search(r"ctx_ms (\d+) ctx\+init_ms (\d+) all_ms (\d+) busbw ([\d.]+)", text)
    pre = re.search(r"pre_ms (\d+)", text)
    if m:
        fl.append([float(x) for x in m.groups()] + [float(pre.group(1)) if pre else float("nan")])
if fl:
    f = [med([r[i] for r in fl]) for i in range(5)]
    lines += ["", "floor_par's own times (medians): before its threads (cuInit, unique id) %.0f ms, "
              "contexts %.0f ms, contexts + NCCL init %.0f ms, its main() %.0f ms, busbw %.1f GB/s"
              % (f[4], f[0], f[1], f[2], f[3]),
              "",
              "Setup against the floor: process start to every communicator ready is floor_par's "
              "before-threads + contexts-and-init (%.0f ms) against nccl-check's comms_ready_at; "
              "the rest of the wall time is measuring, the report and exit." % (f[4] + f[1])]
nt = med([w for w, _ in walls.get("nccl-tests:all_reduce", [])])
lines += ["", "Done when (issue 35), per --ours build:"]
for tool in walls:
    if tool.endswith(":quick"):
        n = tool[:-6]
        q, a = med([w for w, _ in walls[tool]]), med([w for w, _ in walls.get(n + ":all_reduce", [])])
        lines.append(f"- {n}: quick {q / floor:.3f}x floor ({'ok' if q <= 1.10 * floor else 'NOT'} <= 1.10x), "
                     f"all_reduce only {a / floor:.3f}x ({'ok' if a <= 1.03 * floor else 'NOT'} <= 1.03x), "
                     f"quick {'<' if q < nt else '>='} nccl-tests all_reduce ({q:.0f} vs {nt:.0f} ms)")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
print(text)
EOF
