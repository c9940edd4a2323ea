#!/usr/bin/env bash
# SKUs and causes on a GPU machine (one GPU is enough; not run in CI): the report names the GPU's SKU by
# its PCI device ID and the interconnect read from NVML; another process saturating GPU0's memory
# gives FAIL naming that process ("busy"); N healthy checks all PASS. Every step bounded by timeout.
#   tests/gpu/sku.sh NCCL_CHECK LIBNCCL OUTDIR [TORCH_PYTHON] [HEALTHY_RUNS]
set -u
bin=$1 lib=$2 out=$3 torch=${4:-} runs=${5:-10}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fails=0
check() { # name expected actual [detail]
  if [ "$2" = "$3" ]; then echo "PASS $1 ${4:-}"; else echo "FAIL $1: expected '$2', got '$3' ${4:-}"; fails=$((fails + 1)); fi
}
nc() { timeout -k 2 120 "$bin" --nccl-lib "$lib" "$@"; }
get() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

nvidia-smi --query-gpu=index,name,pci.device_id,pci.bus_id,driver_version --format=csv,noheader | tee "$out/nvidia-smi.txt"
want_id=$(awk -F', ' 'NR==1 { print tolower($3) }' "$out/nvidia-smi.txt")   # 0x233010DE
nc --json "$out/quick.json" >"$out/quick.txt" 2>&1; r=$?
check "quick check passes" 0 $r "$(tail -1 "$out/quick.txt")"
id=$(get "$out/quick.json" '"0x%04x10de" % r["gpus"][0]["pci_device_id"]')
check "the report's PCI device ID is the one nvidia-smi shows" "$want_id" "$id"
check "the report names the SKU by its device ID" "yes" \
  "$(get "$out/quick.json" '"yes" if "(PCI 10de:" in r["sku"] else "no"')" "$(get "$out/quick.json" 'r["sku"]')"
check "the table's header names the SKU and the interconnect" "yes" \
  "$(grep -q '^# GPU: .*(PCI 10de:.*; interconnect: ' "$out/quick.txt" && echo yes)" "$(grep '^# GPU: ' "$out/quick.txt")"
check "the report names the interconnect class" "yes" \
  "$(get "$out/quick.json" '"yes" if r["interconnect"]["class"] in ("nvswitch","pcie","bridged","nvlink_mesh") else "no"')" \
  "$(get "$out/quick.json" 'r["interconnect"]')"
CUDA_VISIBLE_DEVICES=0 nc --explain-thresholds >"$out/explain.txt" 2>&1
check "--explain-thresholds names the SKU by device ID and the interconnect" "yes" \
  "$(grep -q 'GPU: .*(PCI 10de:' "$out/explain.txt" && grep -q '^  interconnect: ' "$out/explain.txt" && echo yes)" \
  "$(grep -E '^  (GPU|interconnect):' "$out/explain.txt" | tr '\n' ' ')"

if [ -n "$torch" ]; then
  # Another user's leftover job: a copy loop through GPU0's memory for 25 s.
  timeout 40 "$torch" -c "
import torch,time
a=torch.empty(4<<30,dtype=torch.uint8,device='cuda:0');b=torch.empty_like(a);t=time.time()
while time.time()-t<25: b.copy_(a)
torch.cuda.synchronize()" & hog=$!
  sleep 8
  nc --json "$out/busy.json" >"$out/busy.txt" 2>&1; r=$?
  wait $hog
  first=$(get "$out/busy.json" 'r["reasons"][0]["message"] if r["reasons"] else ""')
  check "GPU0 saturated by another process: FAIL naming it busy with its pid" "1 yes" \
    "$r $(echo "$first" | grep -qE "busy: 1 other process \(pid $hog|busy: [0-9]+ other process" && echo yes)" "$first"
fi

# Four emulated nodes (NCCL_HOSTID) on the one GPU: without --shared-gpus an ERROR naming the GPU
# and the processes; with it a PASS whose summary says they shared it (probes in turns).
NCCL_CHECK_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n'); export NCCL_CHECK_SECRET
emulated() { # tag port [args...]
  local tag=$1 port=$2; shift 2
  for r in 0 1 2 3; do
    NCCL_HOSTID=e$r SLURMD_NODENAME=e$r nc --gpus 0 --rank $r --world 4 --rendezvous 127.0.0.1:$port \
      --timeout 60 --json "$out/$tag-$r.json" "$@" >"$out/$tag-$r.txt" 2>&1 &
  done
  local rcs=""
  for j in $(jobs -p); do wait "$j"; rcs="$rcs $?"; done
  echo "$rcs"
}
rcs=$(emulated shared-no 29701)
check "4 processes on one GPU without --shared-gpus: ERROR naming the GPU and the processes" "yes yes" \
  "$(echo "$rcs" | awk '{ok=1; for (i=1;i<=NF;i++) if ($i < 2) ok=0; print (ok && NF==4) ? "yes" : "no"}') $(grep -q 'driven by 4 processes of this check' "$out/shared-no-0.txt" && echo yes)" \
  "rcs:$rcs: $(grep -m1 -o 'GPU 0 .*processes of this check' "$out/shared-no-0.txt")"
rcs=$(emulated shared-yes 29702 --shared-gpus)
check "4 processes on one GPU with --shared-gpus: PASS, the summary says they shared it" " 0 0 0 0 yes" \
  "$rcs $(get "$out/shared-yes-0.json" '"yes" if "shared one GPU" in r["summary"] else "no"')" \
  "$(get "$out/shared-yes-0.json" 'r["summary"]')"

pass=0
for i in $(seq 1 "$runs"); do
  nc --json "$out/healthy-$i.json" >"$out/healthy-$i.txt" 2>&1 && pass=$((pass + 1))
done
check "$runs healthy checks PASS" "$runs" "$pass" "$(tail -1 "$out/healthy-$runs.txt")"
echo "sku tests: $fails failed"
exit $((fails > 0))
