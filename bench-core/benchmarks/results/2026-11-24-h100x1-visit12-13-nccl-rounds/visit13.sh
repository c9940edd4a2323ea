#!/usr/bin/env bash
# Visit 13 (session 10): the starved rows after off_cpu::blame_starved (8 x3, 16 x2) and 8-node healthy x2.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
PY=/opt/torch/.venv/bin/python
R=$OUT/v13; mkdir -p "$R"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; } >"$R/device.txt" 2>&1
timeout 150 bash tests/gpu/fabric.sh --nodes 8 --rows starved,healthy --repeat 3 --budget 110 --out "$R/fabric/n8-starved" --nccl-lib "$LIB" >"$R/fabric-n8.log" 2>&1; echo "rc $?" >>"$R/fabric-n8.log"
timeout 150 bash tests/gpu/fabric.sh --nodes 16 --rows starved --repeat 2 --budget 100 --out "$R/fabric/n16-starved" --nccl-lib "$LIB" >"$R/fabric-n16.log" 2>&1; echo "rc $?" >>"$R/fabric-n16.log"
grep -hE '^(pass|fail|NOT)|^rc|^fabric n' "$R"/fabric-*.log | cut -c1-200
for d in "$R"/fabric/*/n*-starved-*; do for f in "$d"/fab0[1-9].json "$d"/fab1*.json; do [ -f "$f" ] && $PY -c "
import json,sys
r=json.load(open(sys.argv[1])); o=(r.get('facts') or {}).get('off_cpu') or {}
rs=[(x['code'], x.get('subject')) for x in r.get('reasons',[])][:3]
print(sys.argv[1].split('/')[-2], sys.argv[1].split('/')[-1][:5], r['verdict'], round(o.get('off_s',0)/max(o.get('window_s',1),1e-9),2), rs)" "$f"; done; done 2>/dev/null | awk '$5!="0.0" || $4!="PASS"' | head -30
tar czf "$OUT/visit13.tgz" -C "$OUT" v13 && rm -rf "$R"
