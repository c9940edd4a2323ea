#!/usr/bin/env bash
# GPU tests of the real nccl-check worker (not run in CI: CI has no GPU). Runs on 1 GPU (what
# applies), the two-process tests on 2 (one GPU each) or 4 (two each), the 1x4-vs-2x2 comparison
# and the simulated plugin launch on 4. Every step is bounded by `timeout`; traffic stays on 127.0.0.1.
#   tests/gpu/run.sh NCCL_CHECK LIBNCCL [OUTDIR]
# Optional: NCCL_CHECK_PROLOG=path/to/nccl-check-prolog (run as root) adds the prolog gate's checks;
# TORCH_PYTHON=python-with-torch adds the busy-GPU localization check.
set -u
bin=$1 lib=$2 out=${3:-/tmp/nccl-check-gpu-tests}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Multi-process checks outside Slurm prove membership with a shared secret (docs/security.md).
NCCL_CHECK_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n'); export NCCL_CHECK_SECRET
ngpus=$(nvidia-smi -L | grep -c ^GPU)
fails=0
check() { # name expected-rc actual-rc [detail]
  if [ "$2" = "$3" ]; then echo "PASS $1 ${4:-}"; else echo "FAIL $1: expected rc $2, got $3 ${4:-}"; fails=$((fails + 1)); fi
}
nc() { timeout -k 2 "${T:-120}" "$bin" --nccl-lib "$lib" "$@"; }
busbw() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("%.1f" % max(x["out_of_place"]["busbw"] for x in r))' "$1"; }

nc --json "$out/quick.json" >"$out/quick.txt" 2>&1; check "quick check on $ngpus GPUs passes" 0 $? "busbw $(busbw "$out/quick.json")"
for args in "-d float -o sum" "-d half -o max" "-d bfloat16 -o sum" "-d int8 -o prod" "-d double -o min" "-d uint64 -o sum" "-d int32 -o prod"; do
  nc all -b 1M -e 4M -w 1 -n 2 $args >"$out/types.txt" 2>&1; rc=$?
  check "all collectives $args verify" 0 $rc "$(tail -1 "$out/types.txt")"
done
nc all -b 8 -e 64K -f 8 -w 1 -n 2 >"$out/small.txt" 2>&1; check "tiny sizes (0-byte chunks) pass" 0 $?
CUDA_VISIBLE_DEVICES= nc >"$out/nogpu.txt" 2>&1; check "no visible GPU is ERROR 4" 4 $? "$(tail -1 "$out/nogpu.txt")"
# --progress: rank 0 prints a line every 3 s while a check runs (the no-GPU test is
# bench-core/tests/progress.rs). 1,500 timed all_reduce 1 GiB take ~10 s on 2 H200 (the full plan
# took under 3 s there: no tick); on one GPU there is no collective to time.
if [ "$ngpus" -ge 2 ]; then
  nc all_reduce -b 1G -e 1G -n 1500 --progress >"$out/progress.txt" 2>&1; r=$?
  check "--progress: 'running N s of 60 s budget: ...' lines while a 10 s check runs" "0 yes" \
    "$r $(grep -q '^nccl-check: running [0-9]* s of 60 s budget: ' "$out/progress.txt" && echo yes)" \
    "$(grep -c '^nccl-check: running' "$out/progress.txt") lines"
  check "--progress: one 'phase at T s: ...' line as NCCL init and the timed loop begin" "yes yes" \
    "$(grep -q '^nccl-check: phase at [0-9.]* s: NCCL init' "$out/progress.txt" && echo yes) $(grep -q '^nccl-check: phase at [0-9.]* s: all_reduce 1 GiB out-of-place' "$out/progress.txt" && echo yes)" \
    "$(grep -c '^nccl-check: phase at' "$out/progress.txt") phase lines"
fi

# Node facts: NVML per GPU in the report, the inventory, the 1-GPU check, the sweep.
json_get() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }
# GPU1's memory saturated by another process's copy loop, 20 s from its first copy (bounded by
# timeout 40). Returns once the loop runs: the pid file is written after the buffers are on the GPU
# and one copy finished (a cold torch import took over 6 s once, and the check then measured an idle
# GPU); 30 s at most.
start_hog() {
  rm -f "$out/hog.pid"
  timeout 40 "$TORCH_PYTHON" -c "
import os,torch,time
a=torch.empty(2<<30,dtype=torch.uint8,device='cuda:1');b=torch.empty_like(a);b.copy_(a);torch.cuda.synchronize()
open('$out/hog.pid','w').write(str(os.getpid()));t=time.time()
while time.time()-t<20: b.copy_(a)
torch.cuda.synchronize()" & hog=$!
  local i
  for i in $(seq 1 300); do [ -s "$out/hog.pid" ] && break; sleep 0.1; done
  sleep 1   # the loop's first copies in flight
}
check "every GPU has NVML facts in the report (gpus[].health)" "True" \
  "$(json_get "$out/quick.json" 'all(g.get("health") for g in r["gpus"])')" "$(json_get "$out/quick.json" 'r["facts"]["nvml"]')"
check "every GPU has a local probe" "True" "$(json_get "$out/quick.json" 'all(g.get("local_probe") for g in r["gpus"])')" \
  "$(json_get "$out/quick.json" '[round(g["local_probe"]["copy_gbs"]) for g in r["gpus"] if g.get("local_probe")]') GB/s"
CUDA_VISIBLE_DEVICES=0 nc --json "$out/one.json" >"$out/one.txt" 2>&1; r=$?
check "1 GPU: PASS by the local probe, no collective" "0 yes no" \
  "$r $(grep -q '1 GPU: no collective; local probe' "$out/one.txt" && echo yes) $(grep -q 'busbw 0.0' "$out/one.txt" && echo yes || echo no)" "$(tail -1 "$out/one.txt")"
env -u NCCL_CHECK_NCCL_LIB CUDA_VISIBLE_DEVICES= timeout 20 "$bin" --nccl-lib /nonexistent/libnccl.so.2 --explain-thresholds --gpu-model "NVIDIA H200" --gpus 8 >"$out/explain.txt" 2>&1; r=$?
check "--explain-thresholds --gpu-model without GPU or NCCL" "0 yes" "$r $(grep -q 'local probe' "$out/explain.txt" && grep -q 'NVLinks per GPU: 18' "$out/explain.txt" && echo yes)"
T=600 nc all -b 8 -e 8G --timeout 540 --json "$out/sweep.json" >"$out/sweep.txt" 2>&1; check "all -b 8 -e 8G sweep passes" 0 $? "$(tail -1 "$out/sweep.txt")"
if [ "$ngpus" -ge 2 ]; then
  printf '[[expected_gpus]]\ncount = %s\n' "$ngpus" >"$out/expect.toml"
  CUDA_VISIBLE_DEVICES=0 nc --config "$out/expect.toml" --json "$out/missing.json" >"$out/missing.txt" 2>&1; r=$?
  check "expected_gpus = $ngpus, CUDA_VISIBLE_DEVICES=0: FAIL gpu_missing" "1 gpu_missing" \
    "$r $(json_get "$out/missing.json" 'r["reasons"][0]["code"]')" "$(tail -1 "$out/missing.txt")"
  nc --config "$out/expect.toml" >"$out/expected.txt" 2>&1; check "expected_gpus = $ngpus, all visible: PASS" 0 $? "$(tail -1 "$out/expected.txt")"
fi

# Two processes: one GPU each on 2 GPUs, two each on 4.
if [ "$ngpus" -ge 4 ]; then half0=0,1 half1=2,3; else half0=0 half1=1; fi
if [ "$ngpus" -ge 4 ]; then
  port=29611
  nc all_reduce -b 1G -e 1G --json "$out/one4.json" >"$out/one4.txt" 2>&1; check "1 process x 4 GPUs" 0 $?
  nc all_reduce -b 1G -e 1G --gpus 0,1 --rank 0 --world 2 --rendezvous 127.0.0.1:$port --json "$out/two0.json" >"$out/two0.txt" 2>&1 &
  p0=$!
  sleep 3   # the second process starts 3 s late: the rendezvous waits for it
  nc all_reduce -b 1G -e 1G --gpus 2,3 --rank 1 --world 2 --rendezvous 127.0.0.1:$port >"$out/two1.txt" 2>&1; r1=$?
  wait $p0; r0=$?
  check "2 processes x 2 GPUs (started 3 s apart)" "0 0" "$r0 $r1"
  a=$(busbw "$out/one4.json"); b=$(busbw "$out/two0.json")
  python3 -c "import sys; a,b=$a,$b; r=b/a; print(('PASS' if abs(r-1)<=0.03 else 'FAIL'), '2x2 vs 1x4 busbw %.1f / %.1f = %.3f (within 3%%)' % (b,a,r)); sys.exit(abs(r-1)>0.03)" || fails=$((fails + 1))
fi
if [ "$ngpus" -ge 2 ]; then
  port=29612
  NCCL_HOSTID=node0 nc all -b 64M -e 64M --gpus $half0 --rank 0 --world 2 --rendezvous 127.0.0.1:$port --json "$out/host0.json" >"$out/host0.txt" 2>&1 &
  p0=$!
  NCCL_HOSTID=node1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET nc all -b 64M -e 64M --gpus $half1 --rank 1 --world 2 --rendezvous 127.0.0.1:$port >"$out/host1.txt" 2>&1; r1=$?
  wait $p0; r0=$?
  check "2 emulated nodes (NCCL_HOSTID) all collectives, data correct" "0 0" "$r0 $r1" "$(grep -m1 -o 'NET/Socket[^ ]*' "$out/host1.txt") busbw $(busbw "$out/host0.json")"

  # The conducted localization on real NCCL (--pair-matrix adaptive): the coordinator
  # runs the localizer, the other process follows by gathers of its own results only. Healthy: PASS
  # with the localization in both reports; with TORCH_PYTHON, the second node's GPU memory saturated
  # by a copy loop: FAIL on that process naming its GPU.
  loc() { # name node rank port [worker args...]
    local name=$1 node=$2 rank=$3 port=$4; shift 4
    env NCCL_HOSTID=$node SLURMD_NODENAME=$node timeout -k 2 90 "$bin" --nccl-lib "$lib" --pair-matrix adaptive \
      --gpus $rank --rank $rank --world 2 --rendezvous 127.0.0.1:$port --timeout 60 --json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1
  }
  loc loc0 nA 0 29614 & p0=$!; loc loc1 nB 1 29614; r1=$?; wait $p0; r0=$?
  check "adaptive plan, 2 emulated nodes: PASS, localization in both reports" "0 0 yes" \
    "$r0 $r1 $(json_get "$out/loc1.json" '"yes" if r["localization"]["rounds"] >= 2 and r["localization"]["nodes"] == 2 else "no"')" \
    "$(json_get "$out/loc0.json" 'r["localization"]')"
  # A site's multi-node rule (min_nodes = 2) gives phase B a floor: a healthy allocation then ends
  # after the allocation-wide collective, with no localization round. 1 GB/s: sockets on loopback.
  printf '[[thresholds]]\ncollective = "all_reduce"\nmin_nodes = 2\nmin_busbw = 1.0\nsource = "gpu suite: sockets between emulated nodes"\n' >"$out/multinode.toml"
  loc flo0 nA 0 29616 --config "$out/multinode.toml" & p0=$!; loc flo1 nB 1 29616 --config "$out/multinode.toml"; r1=$?; wait $p0; r0=$?
  check "adaptive plan with a min_nodes = 2 floor: PASS with no localization round" "0 0 0 1.0" \
    "$r0 $r1 $(json_get "$out/flo1.json" 'r["localization"]["localization_rounds"]') $(json_get "$out/flo0.json" 'r["localization"]["allocation_floor"]')" \
    "$(json_get "$out/flo0.json" 'r["localization"]')"
  if [ -n "${TORCH_PYTHON:-}" ]; then
    start_hog
    loc deg0 nA 0 29615 & p0=$!; loc deg1 nB 1 29615; r1=$?; wait $p0; r0=$?
    wait $hog; hog=$(cat "$out/hog.pid" 2>/dev/null || echo 0)
    # Where NVML lists the copy loop on the GPU (H200 here), the cause is that process
    # (gpu_busy, with its pid), in nB's verdict and, through the shared findings, in nA's too;
    # where it lists none, nB's local probe names the GPU slow (local_probe_slow).
    held=$(json_get "$out/deg1.json" '"yes" if any(p["pid"] == '"$hog"' for g in r["gpus"] for p in (g.get("health") or {}).get("processes", [])) else "no"')
    if [ "$held" = yes ]; then
      check "adaptive plan, nB's GPU memory saturated: nB and nA FAIL naming nB's GPU busy with the pid" "1 gpu_busy GPU0 yes 1 gpu_busy nB GPU0 yes" \
        "$r1 $(json_get "$out/deg1.json" 'r["reasons"][0]["code"], r["reasons"][0].get("subject")' | tr -d "(),'") $(grep -q "pid $hog" "$out/deg1.txt" && echo yes) $r0 $(json_get "$out/deg0.json" 'r["reasons"][0]["code"], r["reasons"][0].get("subject")' | tr -d "(),'") $(json_get "$out/deg0.json" '"yes" if "pid '"$hog"'" in r["summary"] else "no"')" \
        "nB: $(json_get "$out/deg1.json" 'r["summary"]'); nA: $(json_get "$out/deg0.json" 'r["summary"]')"
    else
      check "adaptive plan, nB's GPU memory saturated: nB FAILs naming its GPU slow" "1 local_probe_slow" \
        "$r1 $(json_get "$out/deg1.json" 'r["reasons"][0]["code"]')" "nA rc $r0: $(json_get "$out/deg1.json" 'r["summary"]')"
    fi
  fi

  # (a) world 3, only 2 processes: both end with ERROR within --timeout + 1 s
  port=29613; t0=$(date +%s%N)
  nc --gpus 0 --rank 0 --world 3 --rendezvous 127.0.0.1:$port --timeout 10 >"$out/a0.txt" 2>&1 &
  p0=$!
  nc --gpus 1 --rank 1 --world 3 --rendezvous 127.0.0.1:$port --timeout 10 >"$out/a1.txt" 2>&1; r1=$?
  wait $p0; r0=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  check "missing rank: both ERROR 5" "5 5" "$r0 $r1" "after ${ms} ms: $(tail -1 "$out/a0.txt")"
  [ $ms -le 11000 ] && echo "PASS missing rank ends within timeout+1s (${ms} ms)" || { echo "FAIL missing rank took ${ms} ms"; fails=$((fails + 1)); }

  # (b) one process SIGKILLed in the timed loop: the other ends with ERROR within the budget
  port=29614
  nc all_reduce -b 8G -e 8G -w 1 -n 400 --gpus $half0 --rank 0 --world 2 --rendezvous 127.0.0.1:$port --timeout 25 >"$out/b0.txt" 2>&1 &
  p0=$!
  nc all_reduce -b 8G -e 8G -w 1 -n 400 --gpus $half1 --rank 1 --world 2 --rendezvous 127.0.0.1:$port --timeout 25 >"$out/b1.txt" 2>&1 &
  p1=$!
  # `nc` is a shell function: $p1 is its subshell, not the worker. Kill the worker (and its
  # timeout) by its own command line, mid-loop: 2 x 400 iterations of 8 GiB take > 15 s.
  sleep 8; pkill -9 -f -- "--rank 1 --world 2 --rendezvous 127.0.0.1:$port"; t0=$(date +%s%N)
  wait $p0; r0=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  check "peer SIGKILLed mid-loop: survivor ERROR" 1 $(( r0 >= 5 && r0 <= 7 )) "rc $r0 after ${ms} ms: $(tail -1 "$out/b0.txt")"
fi

# Verdicts: the NVLink path gone is FAIL, by bandwidth and by transport.
reasons() { python3 -c 'import json,sys; print(" ".join(sorted(set(x["code"] for x in json.load(open(sys.argv[1]))["reasons"]))))' "$1"; }
summary() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"])' "$1"; }
transports() { python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["transports"]; print(" ".join(sorted(set(x for p in t["paths"] for x in p["transports"]))))' "$1"; }
if [ "$ngpus" -ge 2 ]; then
  check "healthy node: quick plan PASS, every path P2P" "0 p2p" "$(nc --json "$out/healthy.json" >"$out/healthy.txt" 2>&1; echo $?) $(transports "$out/healthy.json")" "$(summary "$out/healthy.json")"
  NCCL_P2P_DISABLE=1 nc --json "$out/p2p.json" >"$out/p2p.txt" 2>&1; r=$?
  # The threshold's reason only where a built-in floor covers these GPUs (2x H200 has a pair
  # floor; 2x H100 has none: the transport alone names the links there).
  floored=$(json_get "$out/p2p.json" '"busbw_below_threshold " if any(x.get("expected") for x in r.get("pairs", []) + r.get("results", [])) else ""')
  check "NCCL_P2P_DISABLE=1: FAIL by transport (and threshold where a floor applies)" "1 ${floored}transport_fallback" "$r $(reasons "$out/p2p.json")" "$(summary "$out/p2p.json")"
fi

if [ -n "${TORCH_PYTHON:-}" ] && [ "$ngpus" -ge 2 ]; then
  # On 2 GPUs no third GPU tells the two apart: the local probe names the busy one. GPU1's memory
  # saturated by another process's copy loop (20 s, bounded); a matmul loop would not do: it leaves
  # the memory bandwidth to the probe (2055 vs 2089 GB/s measured on H200).
  start_hog
  nc --json "$out/busy.json" >"$out/busy.txt" 2>&1; r=$?
  wait $hog; hog=$(cat "$out/hog.pid" 2>/dev/null || echo 0)
  first=$(python3 -c 'import json,sys; x=json.load(open(sys.argv[1]))["reasons"][0]; print(x["code"], x.get("subject",""))' "$out/busy.json" 2>/dev/null)
  # NVML lists the copy loop on GPU1 (H200 here): its cause is that process, named with its pid
  # (gpu_busy); where NVML lists no process, the probe names the GPU slow (local_probe_slow).
  if json_get "$out/busy.json" 'any(p["pid"] == '"$hog"' for g in r["gpus"] for p in (g.get("health") or {}).get("processes", []))' | grep -q True; then
    check "GPU1 memory saturated by a listed process: FAIL gpu_busy naming GPU1 and the pid (not the pair)" "1 yes yes" \
      "$r $(echo "$first" | grep -qE '^gpu_busy GPU1$' && echo yes) $(grep -q "pid $hog" "$out/busy.txt" && echo yes)" "$first: $(summary "$out/busy.json")"
  else
    check "GPU1 memory saturated: FAIL local_probe_slow naming GPU1 (not the pair)" "1 yes" "$r $(echo "$first" | grep -qE '^local_probe_slow .*GPU1' && echo yes)" "$first: $(summary "$out/busy.json")"
  fi
fi

if [ "$ngpus" -ge 4 ]; then
  # Two simulated nodes launched as the SPANK plugin launches the worker: one per node,
  # Slurm's variables, the node's GPUs; then n2 degraded: the summary names n2.
  launch() { # name node rank devices port [env...]
    local name=$1 node=$2 rank=$3 dev=$4 port=$5; shift 5
    env "$@" CUDA_VISIBLE_DEVICES=$dev NCCL_HOSTID=$node SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_PROCID=$rank SLURM_NTASKS=2 SLURMD_NODENAME=$node \
      timeout -k 2 90 "$bin" --plan quick --rank $rank --world 2 --rendezvous 127.0.0.1:$port --timeout 60 --json "$out/$name.json" --nccl-lib "$lib" >"$out/$name.txt" 2>&1
  }
  launch ok1 n1 0 0,1 29621 & p0=$!; launch ok2 n2 1 2,3 29621; r1=$?; wait $p0; r0=$?
  check "2 simulated nodes, plugin-style launch: PASS" "0 0" "$r0 $r1" "$(summary "$out/ok1.json")"
  launch bad1 n1 0 0,1 29622 & p0=$!; launch bad2 n2 1 2,3 29622 NCCL_P2P_DISABLE=1; r1=$?; wait $p0; r0=$?
  check "n2's NVLink gone: both FAIL naming node n2" "1 1 yes" "$r0 $r1 $(summary "$out/bad1.json" | grep -q '^node n2' && echo yes)" "$(summary "$out/bad1.json")"
fi

if [ -n "${NCCL_CHECK_PROLOG:-}" ] && [ "$(id -u)" = 0 ]; then
  # The prolog gate as slurmd runs it: root, no PATH, Slurm's variables and a hostile
  # LD_LIBRARY_PATH it must drop. No Slurm here: scontrol is a recording stub.
  pd=$out/prolog; rm -rf "$pd"; mkdir -p "$pd/state"
  printf '#!/bin/sh\necho "$*" >> %s/scontrol.log\ncase "$*" in "show node -d -o gpu01") echo "NodeName=gpu01 Gres=gpu:'"$ngpus"' GresUsed=gpu:0 State=IDLE";; show*) echo "NodeName=gpu01 State=IDLE Reason=(null)";; esac\n' "$pd" > "$pd/scontrol"; chmod +x "$pd/scontrol"
  # Slurm's JSON beside it (the prolog reads whose a GPU is from squeue --json): no job holds one.
  printf '#!/bin/sh\necho %s\n' "'{\"jobs\":[]}'" >"$pd/squeue"; chmod +x "$pd/squeue"
  conf() { printf 'worker = "%s"\nworker_config = "/nonexistent.toml"\ngpus = "all"\ncache_seconds = %s\nstate_dir = "%s/state"\nscontrol = "%s/scontrol"\n[env]\nNCCL_CHECK_NCCL_LIB = "%s"\nNCCL_NVLS_ENABLE = "0"\n%s\n' "$(readlink -f "$bin")" "$2" "$pd" "$pd" "$lib" "$3" > "$pd/$1.toml"; }
  conf pass 600 ""; conf fail 0 'NCCL_P2P_DISABLE = "1"'
  gate() { env -i SLURMD_NODENAME=gpu01 SLURM_JOB_ID=$1 SLURM_SCRIPT_CONTEXT=prolog_slurmd LD_LIBRARY_PATH=/evil timeout -k 2 60 "$NCCL_CHECK_PROLOG" --config "$pd/$2.toml"; }
  gate 1 pass >"$pd/pass.txt" 2>&1; check "prolog: healthy node passes" 0 $? "$(tail -1 "$pd/pass.txt")"
  t0=$(date +%s%N); gate 2 pass >"$pd/cached.txt" 2>&1; r=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  check "prolog: cached pass <= 50 ms" "0 yes" "$r $([ $ms -le 50 ] && echo yes)" "${ms} ms"
  if [ "$ngpus" -ge 2 ]; then # one GPU has no NVLink path to lose
    rm -rf "$pd/state"/*; gate 3 fail >"$pd/fail.txt" 2>&1; r=$?
    # The drain reason: `nccl-check:` then 20 characters that name the culprit (prolog/src/reason.rs).
    check "prolog: NVLink gone drains with nccl-check: and exits 1" "1 yes" "$r $(grep -q 'state=drain reason=nccl-check:' "$pd/scontrol.log" && echo yes)" "$(tail -1 "$pd/scontrol.log")"
  fi
fi
echo "gpu tests: $fails failed"
exit $((fails > 0))
