#!/usr/bin/env bash
# The causes on a GPU machine (not run in CI: no GPU there): the verdict names the cause, and a
# busy host, a busy GPU or an idle stray is never named as broken hardware.
#
#   tests/gpu/cause.sh NCCL_CHECK LIBNCCL OUTDIR [--repeat N] [--prolog-repeat M] [--prolog PROLOG]
#                      [--python PY] [--rows healthy,cpu1,cpu2,p2p-off,gpu-hog,idle-stray,emulated-busy]
#
# Rows (each N quick checks, --json per run):
#   healthy       nothing else on the node: PASS
#   cpu1, cpu2    one / two busy loops per core: never a FAIL naming a GPU, link, NIC or path;
#                 a FAIL or warning names the host as busy with the consumers' pids
#   p2p-off       NCCL_P2P_DISABLE=1: FAIL naming the links (GPU pairs), as before
#   gpu-hog       (--python) a process saturating GPU 1's memory bandwidth: FAIL naming GPU1 busy
#   idle-stray    (--python) an idle process holding 20 GiB on the last GPU: PASS with a warning
#                 naming it (pid)
#   emulated-busy (--python, 2+ GPUs) 4 emulated nodes e1..e4 (NCCL_HOSTID, one GPU each, or
#                 with fewer than 4 GPUs e2 alone on GPU 1 and the others sharing GPU 0; the
#                 adaptive plan), GPU 1 (e2's) saturated: every process names e2's GPU busy
#                 (report and verdict line: e2's own says GPU0, the others e2 GPU0), first and
#                 with the pid; none names any node's network
# With --prolog (root): the prolog gate with gpus = "all" under each CPU load, N runs, no cache,
# a recording scontrol: no run drains naming hardware (busy CPUs never drain: the loops here, of
# no job, are named beside the verdict).
# Prints one line per run and `cause: N failed`; exits non-zero when any expectation failed.
set -u
bin=$1 lib=$2 out=$3; shift 3
repeat=5 prepeat= prolog= py= rows=healthy,cpu1,cpu2,p2p-off,gpu-hog,idle-stray,emulated-busy
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat=$2; shift 2 ;;
    --prolog-repeat) prepeat=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --prolog) prolog=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    *) echo "cause.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
prepeat=${prepeat:-$repeat}
want() { case ",$rows," in *",$1,"*) return 0 ;; esac; return 1; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpus=$(nvidia-smi -L | grep -c ^GPU)
cores=$(nproc)
fails=0
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; hogs=(); }
trap stop_hogs EXIT

# One line per report: verdict, the reasons' code@subject, the warnings' codes, pair busbw range
# by both clocks, the host load. Then the row's expectation, by python, on the same JSON.
summarize() { # row json rc
  python3 - "$@" <<'EOF'
import json, sys
row, path, rc = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"{row} rc={rc} no report ({e})"); sys.exit(1)
reasons = [f"{x['code']}@{x.get('subject') or '-'}" for x in r.get("reasons", [])]
warns = [x["code"] for x in r.get("warnings", [])]
pairs = r.get("pairs", [])
host = [p["busbw"] for p in pairs]
gpu = [p["gpu_busbw"] for p in pairs if p.get("gpu_busbw") is not None]
rng = lambda v: f"{min(v):.0f}-{max(v):.0f}" if v else "-"
load = (r.get("facts") or {}).get("host") or {}
top = ",".join(str(c["pid"]) for c in load.get("top", []))
print(f"{row} rc={rc} {r.get('verdict')} reasons={reasons or '-'} warnings={warns or '-'} "
      f"pairs host={rng(host)} gpu={rng(gpu)} others={load.get('others_share', -1):.2f} "
      f"wait={load.get('own_wait_share') or 0:.2f} top={top or '-'}")
hardware = {"busbw_below_threshold", "gpu_outlier", "link_outlier", "node_outlier",
            "node_pair_outlier", "node_slow", "node_pair_slow", "rail_slow", "nvlink_down",
            "net_port_down", "net_rate_degraded", "worker_starved"}
codes = [x["code"] for x in r.get("reasons", [])]
ok = True
if row == "healthy":
    ok = r.get("verdict") == "PASS"
elif row.startswith("cpu"):
    ok = not (set(codes) & hardware) and r.get("verdict") in ("PASS", "FAIL")
    if r.get("verdict") == "FAIL":
        ok = ok and codes[:1] == ["host_busy"]
elif row == "p2p-off":
    ok = r.get("verdict") == "FAIL" and any("<->" in (x.get("subject") or "") or "GPU" in (x.get("subject") or "") for x in r.get("reasons", []))
elif row == "gpu-hog":
    ok = r.get("verdict") == "FAIL" and any("GPU1" in (x.get("subject") or "") or "busy" in x["message"] for x in r.get("reasons", []))
elif row == "emulated-busy":
    # Every process (e2's own and the others') names e2's GPU busy, with the pid, in its report
    # and in the verdict line srun prints: e2 says "GPU0" (its own node), the others "e2 GPU0";
    # no process names any node's network (bench-core/src/localize/own.rs).
    import os, re
    node = re.sub(r"^emulated-busy-|\.json$", "", os.path.basename(path))
    gpu = "GPU0" if node == "e2" else "e2 GPU0"
    first = (r.get("reasons") or [{}])[0]
    network = {"node_slow", "node_pair_slow", "rail_slow", "node_outlier", "node_pair_outlier"}
    try:
        text = open(path[:-len(".json")] + ".txt", errors="replace").read().splitlines()
    except OSError:
        text = []
    line = next((l for l in reversed(text) if l.startswith("nccl-check: ")), "")
    ok = (r.get("verdict") == "FAIL" and first.get("code") == "gpu_busy"
          and first.get("subject") == gpu and first.get("cause") == "busy"
          and "pid" in first.get("message", "") and not (set(codes) & network)
          and line.startswith("nccl-check: FAIL " + gpu + ": busy: "))
    if not ok:
        print(f"  {node}: want {gpu} busy first; verdict line: {line[:200] or '-'}")
elif row == "idle-stray":
    ok = r.get("verdict") == "PASS" and any("pid" in w["message"] for w in r.get("warnings", []))
print(f"  expect {row}: {'ok' if ok else 'WRONG'}")
sys.exit(0 if ok else 1)
EOF
}

quick() { # row [env...]
  local row=$1; shift
  for i in $(seq "$repeat"); do
    local j=$out/$row-$i.json
    env "$@" timeout -k 2 120 "$bin" --nccl-lib "$lib" --json "$j" >"$out/$row-$i.txt" 2>&1
    summarize "$row" "$j" $? || fails=$((fails + 1))
  done
}

busy_loops() { # per-core
  for _ in $(seq $(( cores * $1 ))); do
    timeout 900 sh -c 'while :; do :; done' &
    hogs+=($!)
  done
  sleep 1
}

gate_runs() { # row
  [ -n "$prolog" ] && [ "$(id -u)" = 0 ] || return 0
  local pd=$out/prolog-$1; mkdir -p "$pd/state"
  printf '#!/bin/sh\necho "$*" >> %s/scontrol.log\ncase "$*" in "show node -d -o gpu01") echo "NodeName=gpu01 Gres=gpu:'"$ngpus"' GresUsed=gpu:0 State=IDLE";; show*) echo "NodeName=gpu01 State=IDLE Reason=(null)";; esac\n' "$pd" >"$pd/scontrol"
  chmod +x "$pd/scontrol"
  # Slurm's JSON beside it (the prolog reads whose a GPU is from squeue --json): no job holds one.
  printf '#!/bin/sh\necho %s\n' "'{\"jobs\":[]}'" >"$pd/squeue"; chmod +x "$pd/squeue"
  printf 'worker = "%s"\nworker_config = "/nonexistent.toml"\ngpus = "all"\ncache_seconds = 0\nstate_dir = "%s/state"\nscontrol = "%s/scontrol"\n[env]\nNCCL_CHECK_NCCL_LIB = "%s"\nNCCL_NVLS_ENABLE = "0"\n' \
    "$(readlink -f "$bin")" "$pd" "$pd" "$lib" >"$pd/gate.toml"
  for i in $(seq "$prepeat"); do
    env -i SLURMD_NODENAME=gpu01 SLURM_JOB_ID=$((100 + i)) SLURM_SCRIPT_CONTEXT=prolog_slurmd \
      timeout -k 2 120 "$prolog" --config "$pd/gate.toml" >"$pd/run-$i.txt" 2>&1
    local rc=$? drained=no
    grep -q 'state=drain' "$pd/scontrol.log" 2>/dev/null && drained=yes
    grep -q 'state=drain reason=nccl-check:[^|]*busy' "$pd/scontrol.log" 2>/dev/null && drained=busy
    echo "prolog-$1 run $i rc=$rc drained=$drained: $(tail -1 "$pd/run-$i.txt" | cut -c1-220)"
    [ "$drained" != yes ] || fails=$((fails + 1))
    rm -f "$pd/scontrol.log"
  done
}

{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,pci.device_id --format=csv,noheader; echo "cores $cores"; } >"$out/device.txt" 2>&1
hog_gpu() { # GPU: memory traffic on it until stop_hogs
  CUDA_VISIBLE_DEVICES=$1 timeout 300 "$py" -c '
import torch, time
a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
t = time.time()
while time.time() - t < 280: b.copy_(a)
' & hogs+=($!)
  sleep 8
}

emulated_busy() { # 4 emulated nodes, e2's GPU busy; every process's report judged
  local port=29631 pids=() i
  NCCL_CHECK_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n'); export NCCL_CHECK_SECRET
  # With 2 or 3 GPUs, e2 alone on GPU 1 (the hogged one) and e1, e3, e4 sharing GPU 0.
  local gpu shared=
  [ "$ngpus" -ge 4 ] || shared=NCCL_CHECK_SHARED_GPUS=1
  for i in 0 1 2 3; do
    gpu=$i; [ "$ngpus" -ge 4 ] || { [ $i = 1 ] && gpu=1 || gpu=0; }
    env $shared NCCL_HOSTID=e$((i + 1)) SLURMD_NODENAME=e$((i + 1)) timeout -k 2 120 "$bin" --nccl-lib "$lib" \
      --pair-matrix adaptive --gpus $gpu --rank $i --world 4 --rendezvous 127.0.0.1:$port --timeout 90 \
      --json "$out/emulated-busy-e$((i + 1)).json" >"$out/emulated-busy-e$((i + 1)).txt" 2>&1 &
    pids+=($!)
  done
  for i in 0 1 2 3; do
    wait "${pids[$i]}"; summarize emulated-busy "$out/emulated-busy-e$((i + 1)).json" $? || fails=$((fails + 1))
  done
}

{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,pci.device_id --format=csv,noheader; echo "cores $cores"; } >"$out/device.txt" 2>&1
! want healthy || quick healthy
! want cpu1 || { busy_loops 1; quick cpu1; gate_runs cpu1; stop_hogs; }
! want cpu2 || { busy_loops 2; quick cpu2; gate_runs cpu2; stop_hogs; }
if [ "$ngpus" -ge 2 ] && want p2p-off; then
  repeat=2 quick p2p-off NCCL_P2P_DISABLE=1
fi
if [ -n "$py" ] && [ "$ngpus" -ge 2 ]; then
  if want gpu-hog; then hog_gpu 1; repeat=2 quick gpu-hog; stop_hogs; fi
  if want idle-stray; then
    # An idle stray: 20 GiB held on the last GPU, nothing running.
    CUDA_VISIBLE_DEVICES=$((ngpus - 1)) timeout 300 "$py" -c '
import torch, time
a = torch.empty(20 << 30, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); time.sleep(280)
' & hogs+=($!)
    sleep 8
    repeat=2 quick idle-stray
    stop_hogs
  fi
  if want emulated-busy; then hog_gpu 1; emulated_busy; stop_hogs; fi
fi
echo "cause: $fails failed"
exit $((fails > 0))
