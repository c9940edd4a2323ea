#!/usr/bin/env bash
# Visit 16 (session 10): after the barrier behind the last NCCL operation: 16 nodes slow-node x3 and
# healthy x2, 8 nodes starved x2; every worker's exit code must be its verdict's (0 PASS, 1 FAIL).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
R=$OUT/v16; mkdir -p "$R"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; } >"$R/device.txt" 2>&1
timeout 250 bash tests/gpu/fabric.sh --nodes 16 --rows slow-node,healthy --repeat 3 --budget 200 --out "$R/fabric/n16" --nccl-lib "$LIB" >"$R/fabric-n16.log" 2>&1; echo "rc $?" >>"$R/fabric-n16.log"
timeout 80 bash tests/gpu/fabric.sh --nodes 8 --rows starved --repeat 2 --budget 40 --out "$R/fabric/n8" --nccl-lib "$LIB" >"$R/fabric-n8.log" 2>&1; echo "rc $?" >>"$R/fabric-n8.log"
grep -hE '^(pass|fail|NOT)|^rc|^fabric n' "$R"/fabric-*.log | cut -c1-120
echo "exit codes other than the verdict's:"; grep -h "" "$R"/fabric/*/*/exit-codes.txt | tr ' ' '\n' | grep -vE '=(0|1)$' | sort | uniq -c
tar czf "$OUT/visit16.tgz" -C "$OUT" v16 && rm -rf "$R"
