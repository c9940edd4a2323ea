#!/usr/bin/env bash
# Visit 15 (session 10, the final main: typed fact codes, renames, settings): issue 27's tests/gpu/run.sh and
# sku.sh on the final tree, and a fabric sanity pass with the same binary (8 nodes: healthy x2,
# slow node, starved; 16 nodes: slow node).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
PY=/opt/torch/.venv/bin/python
B=$PWD/target/gpu-carry/nccl-check P=$PWD/target/gpu-carry/nccl-check-prolog
R=$OUT/v15; mkdir -p "$R"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,pci.device_id --format=csv; } >"$R/device.txt" 2>&1
timeout 150 bash tests/gpu/run.sh "$B" "$LIB" "$R/run" >"$R/run.log" 2>&1; echo "run rc $?" >>"$R/run.log"
timeout 70 bash tests/gpu/sku.sh "$B" "$LIB" "$R/sku" "$PY" 2 >"$R/sku.log" 2>&1; echo "sku rc $?" >>"$R/sku.log"
timeout 40 bash tests/gpu/fault-pass.sh "$P" 20 >"$R/fault-pass.log" 2>&1; echo "fault-pass rc $?" >>"$R/fault-pass.log"
timeout 130 bash tests/gpu/fabric.sh --nodes 8 --rows healthy,slow-node,starved --repeat 2 --budget 100 --out "$R/fabric/n8" --nccl-lib "$LIB" >"$R/fabric-n8.log" 2>&1; echo "rc $?" >>"$R/fabric-n8.log"
timeout 80 bash tests/gpu/fabric.sh --nodes 16 --rows slow-node --budget 30 --out "$R/fabric/n16" --nccl-lib "$LIB" >"$R/fabric-n16.log" 2>&1; echo "rc $?" >>"$R/fabric-n16.log"
grep -hE '^(pass|fail|NOT)|^rc|^fabric n' "$R"/fabric-*.log | cut -c1-200
grep -E '^(PASS|FAIL)|rc ' "$R/run.log" "$R/sku.log" | cut -c1-160
tail -3 "$R/fault-pass.log"
tar czf "$OUT/visit15.tgz" -C "$OUT" v15 && rm -rf "$R"
