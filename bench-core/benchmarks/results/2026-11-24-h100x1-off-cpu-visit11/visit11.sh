#!/usr/bin/env bash
# Visit 11 (session 10, main + off-CPU watch): the starved rows (16 x3, 8 x2) and healthy 16 x3,
# with every node's facts.off_cpu (what the watch sees on a healthy emulation).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
PY=/opt/torch/.venv/bin/python
R=$OUT/v11; mkdir -p "$R"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; } >"$R/device.txt" 2>&1
timeout 330 bash tests/gpu/fabric.sh --nodes 16 --rows starved,healthy --repeat 3 --budget 280 --out "$R/fabric/n16-starved" --nccl-lib "$LIB" >"$R/fabric-n16.log" 2>&1; echo "rc $?" >>"$R/fabric-n16.log"
timeout 100 bash tests/gpu/fabric.sh --nodes 8 --rows starved --repeat 2 --budget 60 --out "$R/fabric/n8-starved" --nccl-lib "$LIB" >"$R/fabric-n8.log" 2>&1; echo "rc $?" >>"$R/fabric-n8.log"
grep -hE '^(pass|fail|NOT)|^rc' "$R"/fabric-*.log | cut -c1-220
for d in "$R"/fabric/*/n*-*; do
  $PY - "$d" <<'PY'
import json, sys, glob, os
d = sys.argv[1]; out = []
for f in sorted(glob.glob(d + "/fab*.json")):
    try: r = json.load(open(f))
    except Exception: continue
    o = (r.get("facts") or {}).get("off_cpu")
    if o: out.append("%s:%.0f%%/%.1fs" % (os.path.basename(f)[:5], 100 * o["off_s"] / max(o["window_s"], 1e-9), o["window_s"]))
print(os.path.basename(d), r.get("verdict") if out else "-", " ".join(out))
PY
done
tar czf "$OUT/visit11.tgz" -C "$OUT" v11 && rm -rf "$R"
