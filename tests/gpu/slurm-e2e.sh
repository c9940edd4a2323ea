#!/usr/bin/env bash
# End to end on GPUs through real Slurm: Debian 12's Slurm 22.05 unpacked on the
# GPU machine (Ubuntu 24.04, cgroup v2 without systemd), two slurmd "nodes" n1 and n2 with one GPU
# each, the real plugin and the real worker, then the prolog gate as slurmd runs it.
#   tests/gpu/slurm-e2e.sh RELEASE_DIR LIBNCCL DEBS_DIR [OUTDIR]
# RELEASE_DIR holds nccl-check, nccl-check-prolog and libnccl_check.so (cargo build --release);
# DEBS_DIR the .deb files of slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libmunge2
# libdbus-1-3 (apt-get download on Debian 12). Root only; every step bounded; traffic on 127.0.0.1.
# What the machine needs and why: ../shared/notes/e2e-gpu-slurm.md.
set -u
rel=$(readlink -f "$1") lib=$(readlink -f "$2") debs=$(readlink -f "$3") out=${4:-/tmp/nccl-check-slurm-e2e}
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fails=0
check() { # name expected actual [detail]
  if [ "$2" = "$3" ]; then echo "PASS $1 ${4:-}"; else echo "FAIL $1: expected $2, got $3 ${4:-}"; fails=$((fails + 1)); fi
}
[ "$(id -u)" = 0 ] || { echo "slurm-e2e: must run as root" >&2; exit 2; }
[ "$(nvidia-smi -L | grep -c ^GPU)" -ge 2 ] || { echo "slurm-e2e: needs 2 GPUs" >&2; exit 2; }

# 1. Slurm and MUNGE from Debian's packages: only their programs and libraries are copied (unpacking
# into / directly can replace /lib); slurmd must be started under its own name.
scratch=$(mktemp -d)
for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$scratch"; done
for sub in usr/sbin usr/bin usr/lib/x86_64-linux-gnu; do
  [ -d "$scratch/$sub" ] && cp -a --update=none "$scratch/$sub/." "/$sub/"
done
# Debian 12's libdbus-1-3 ships under /lib (merged /usr on a real install): slurmd's cgroup/v2 needs it.
[ -d "$scratch/lib/x86_64-linux-gnu" ] && cp -a --update=none "$scratch/lib/x86_64-linux-gnu/." /usr/lib/x86_64-linux-gnu/
for b in slurmd slurmctld slurmstepd; do
  [ -e "/usr/sbin/$b" ] || ln -s "$b-wlm" "/usr/sbin/$b" 2>/dev/null || true
done
ldconfig
id slurm >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin slurm
id munge >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin munge
mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
[ -s /etc/munge/munge.key ] || /usr/sbin/mungekey -c -k /etc/munge/munge.key
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0400 /etc/munge/munge.key
grep -q ' n1 n2' /etc/hosts || echo "127.0.0.1 n1 n2" >> /etc/hosts
getent hosts "$(hostname)" >/dev/null || echo "127.0.0.1 $(hostname)" >> /etc/hosts
mkdir -p /sys/fs/cgroup/system.slice 2>/dev/null

# 2. The cluster: one GPU per node. Slurm 22.05 without device cgroups gives both nodes
# CUDA_VISIBLE_DEVICES=0, so a wrapper maps n2 to the second GPU; NCCL_HOSTID makes the two
# slurmd of one host two nodes for NCCL and for the verdict.
export NCCL_CHECK_CLUSTER_DIR=/var/tmp/nccl-check-gpu-cluster
cl=$NCCL_CHECK_CLUSTER_DIR
mkdir -p "$cl"
printf 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\nCgroupAutomount=yes\n' > "$cl/cgroup.conf"
printf 'NodeName=n1 Name=gpu File=/dev/nvidia0\nNodeName=n2 Name=gpu File=/dev/nvidia1\n' > "$cl/gres.conf"
install -d -m 0755 /opt/nccl-check-e2e
install -m 0755 "$rel/nccl-check" /opt/nccl-check-e2e/nccl-check
cat > /opt/nccl-check-e2e/worker <<EOF
#!/bin/sh
case "\$SLURMD_NODENAME" in n1) CUDA_VISIBLE_DEVICES=0 ;; n2) CUDA_VISIBLE_DEVICES=1 ;; esac
# The degraded node: its GPU's memory saturated by another process (a bounded copy loop), started
# and confirmed running (first copy done) before the worker measures.
if [ "\${NCCL_CHECK_E2E_HOG_NODE:-}" = "\$SLURMD_NODENAME" ] && [ -x "${TORCH_PYTHON:-/nonexistent}" ]; then
  rm -f /tmp/nccl-check-e2e-hog.ready /tmp/nccl-check-e2e-hog.stop
  CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES timeout 60 ${TORCH_PYTHON:-/nonexistent} -c "
import torch,time,os
a=torch.empty(2<<30,dtype=torch.uint8,device='cuda:0');b=torch.empty_like(a);t=time.time()
b.copy_(a);torch.cuda.synchronize();open('/tmp/nccl-check-e2e-hog.ready','w').close()
while time.time()-t<50 and not os.path.exists('/tmp/nccl-check-e2e-hog.stop'): b.copy_(a)
torch.cuda.synchronize()" >/dev/null 2>&1 &
  for i in \$(seq 1 100); do [ -e /tmp/nccl-check-e2e-hog.ready ] && break; sleep 0.2; done
fi
NCCL_HOSTID=\$SLURMD_NODENAME NCCL_CHECK_NCCL_LIB=$lib
export CUDA_VISIBLE_DEVICES NCCL_HOSTID NCCL_CHECK_NCCL_LIB
exec /opt/nccl-check-e2e/nccl-check "\$@"
EOF
chmod 0755 /opt/nccl-check-e2e/worker
bash "$repo/slurm/test-cluster/down.sh" >/dev/null 2>&1
NCCL_CHECK_CLUSTER_NODE_EXTRA="Gres=gpu:1" timeout 120 bash "$repo/slurm/test-cluster/up.sh" --nodes 2 \
  --plugin "$rel/libnccl_check.so" --plugin-args "worker=/opt/nccl-check-e2e/worker timeout=60" \
  --conf "GresTypes=gpu" >"$out/up.txt" 2>&1
check "test cluster with 2 GPU nodes is up" 0 $? "$(tail -1 "$out/up.txt")"
export SLURM_CONF=$cl/slurm.conf
cp "$cl/slurm.conf" "$out/slurm.conf"

# 3. srun --nccl-check through the real plugin and worker.
t0=$(date +%s%N)
timeout -k 5 90 srun -N2 --gres=gpu:1 --nccl-check hostname >"$out/pass.txt" 2>&1; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "srun -N2 --gres=gpu:1 --nccl-check passes and runs the tasks" "0 2" "$rc $(grep -c "$(hostname)" "$out/pass.txt")" "${ms} ms: $(grep -m1 'nccl-check' "$out/pass.txt")"
timeout -k 5 90 srun -N2 --gres=gpu:1 --nccl-check --export=ALL,NCCL_CHECK_E2E_HOG_NODE=n2 hostname >"$out/degraded.txt" 2>&1; rc=$?
touch /tmp/nccl-check-e2e-hog.stop
timeout 20 sh -c 'while pgrep -f "hog[.]ready" >/dev/null; do sleep 0.5; done'
# Each task's worker judges what its process measured: n2's fails (its local probe), n1's passes, so
# n1's task may start before Slurm ends the step; the step fails and n2's task never runs.
check "n2's GPU memory saturated: the step fails, FAIL names n2, n2's task never runs" "nonzero yes yes" \
  "$([ $rc -ne 0 ] && echo nonzero || echo zero) $(grep -q 'FAIL on n2' "$out/degraded.txt" && echo yes || echo no) $([ "$(grep -c "^$(hostname)$" "$out/degraded.txt")" -le 1 ] && echo yes || echo no)" "$(grep -m1 'FAIL' "$out/degraded.txt")"

# 4. The prolog gate as slurmd runs it, on one node with both GPUs: a healthy node runs the job;
# with NVLink P2P off in the worker's environment (the admin's [env]) the prolog FAILs, drains the
# node with a reason naming the link, and the job does not run there.
bash "$repo/slurm/test-cluster/down.sh" >/dev/null 2>&1
install -m 0755 "$rel/nccl-check-prolog" /opt/nccl-check-e2e/nccl-check-prolog
printf 'NodeName=n1 Name=gpu File=/dev/nvidia[0-1]\n' > "$cl/gres.conf"
mkdir -p /etc/nccl-check
prolog_conf() { # extra [env] lines
  { echo 'worker = "/opt/nccl-check-e2e/nccl-check"'; echo '[env]'; echo "NCCL_CHECK_NCCL_LIB = \"$lib\""; printf '%s\n' "$@"; } > /etc/nccl-check/prolog.toml
  cp /etc/nccl-check/prolog.toml "$out/prolog-$#.toml"
}
prolog_conf
NCCL_CHECK_CLUSTER_NODE_EXTRA="Gres=gpu:2" timeout 120 bash "$repo/slurm/test-cluster/up.sh" --nodes 1 \
  --prolog /opt/nccl-check-e2e/nccl-check-prolog --conf "GresTypes=gpu" >"$out/up-prolog.txt" 2>&1
check "cluster with the prolog gate is up" 0 $? "$(tail -1 "$out/up-prolog.txt")"
/opt/nccl-check-e2e/nccl-check-prolog --check-config >"$out/prolog-check-config.txt" 2>&1
timeout -k 5 90 srun -N1 --gres=gpu:2 -t 1 true >"$out/prolog-pass.txt" 2>&1
check "prolog: a job on a healthy node runs" 0 $? "$(tail -1 "$out/prolog-pass.txt")"
prolog_conf 'NCCL_P2P_DISABLE = "1"'
rm -f /var/lib/nccl-check/last-pass.json  # a new config is a new fingerprint anyway
timeout -k 5 90 srun -N1 --gres=gpu:2 -t 1 --immediate=60 true >"$out/prolog-fail.txt" 2>&1; rc=$?
sleep 2
sinfo -R -h -o '%N|%E' >"$out/sinfo-R.txt" 2>&1
check "prolog: P2P off drains n1 with an nccl-check reason" "nonzero yes" \
  "$([ $rc -ne 0 ] && echo nonzero || echo zero) $(grep -q '^n1|nccl-check' "$out/sinfo-R.txt" && echo yes || echo no)" "$(cat "$out/sinfo-R.txt")"
cp "$cl"/log/*.log "$out/" 2>/dev/null
bash "$repo/slurm/test-cluster/down.sh" >/dev/null 2>&1
rm -f /etc/nccl-check/prolog.toml
echo "slurm-e2e: $fails failure(s)"
exit $((fails > 0))
