#!/usr/bin/env bash
# Visit 12 (session 10): issue 28's full fault tables after the rounds moved onto NCCL
# (part A: 8 nodes + run.sh + sku.sh; B: 16 nodes healthy x10; C: the 16-node fault rows).
# Usage: visit12.sh A|B|C
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
PY=/opt/torch/.venv/bin/python
B=$PWD/target/gpu-carry/nccl-check
R=$OUT/v12$1; mkdir -p "$R"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,pci.device_id --format=csv; git log --oneline -1 2>/dev/null; } >"$R/device.txt" 2>&1
case $1 in
  A)
    timeout 330 bash tests/gpu/fabric.sh --nodes 8 --budget 290 --out "$R/fabric/n8" --nccl-lib "$LIB" >"$R/fabric-n8.log" 2>&1; echo "rc $?" >>"$R/fabric-n8.log"
    timeout 150 bash tests/gpu/run.sh "$B" "$LIB" "$R/run" >"$R/run.log" 2>&1; echo "run rc $?" >>"$R/run.log"
    timeout 70 bash tests/gpu/sku.sh "$B" "$LIB" "$R/sku" "$PY" 2 >"$R/sku.log" 2>&1; echo "sku rc $?" >>"$R/sku.log"
    grep -E '^(PASS|FAIL)|rc ' "$R/run.log" "$R/sku.log" | cut -c1-160 | grep -v '^[^:]*:PASS all collectives' ;;
  B)
    timeout 560 bash tests/gpu/fabric.sh --nodes 16 --rows healthy --budget 520 --out "$R/fabric/n16-healthy" --nccl-lib "$LIB" >"$R/fabric-n16.log" 2>&1; echo "rc $?" >>"$R/fabric-n16.log" ;;
  C)
    timeout 560 bash tests/gpu/fabric.sh --nodes 16 --rows slow-node,slow-path,missing,two-slow,far-path,link-down,starved --budget 480 --out "$R/fabric/n16-faults" --nccl-lib "$LIB" >"$R/fabric-n16.log" 2>&1; echo "rc $?" >>"$R/fabric-n16.log" ;;
esac
grep -hE '^(pass|fail|NOT)|^rc|^fabric n' "$R"/fabric-*.log | cut -c1-200
for j in "$R"/fabric/*/*/fab01.json; do $PY -c "
import json,sys
r=json.load(open(sys.argv[1])); l=r.get('localization') or {}
print(sys.argv[1].split('/')[-2], r['verdict'], 'init_ms', round(r['phases']['nccl_init_ms']), 'total_ms', round(r['phases']['total_ms']), 'rounds', json.dumps(l.get('round_times'))[:300])" "$j" 2>/dev/null; done | head -40
tar czf "$OUT/visit12$1.tgz" -C "$OUT" "v12$1" && rm -rf "$R"
