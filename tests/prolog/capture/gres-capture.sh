#!/usr/bin/env bash
# Captures what Slurm says about GPU allocations on a shared node (scontrol show node -d, scontrol
# show job -d, squeue, the prolog's whole environment) in a 1-node test cluster with 4 fake gres
# GPUs (plain files: slurmd only stats them) and two jobs on it. The fixtures of
# prolog/src/shared.rs (prolog/tests/data/shared/<major>[-untyped]/) come from here:
#   bash tests/prolog/capture/gres-capture.sh OUT                 # 22.05, the host's Slurm
#   REPO=$PWD; . tests/lib/roots.sh; roots_run "$(roots_ensure trixie)" [UNTYPED=1] -- \
#       bash "$PWD/tests/prolog/capture/gres-capture.sh" "$PWD/target/cap"   # 24.11 (sid: 26.05)
# The .json files are the same questions with --json (Slurm's structured output).
# Typed GPUs of two types by default (gpu:h100:2,gpu:a100:2: several gres lists); UNTYPED=1:
# gpu:4. Root; run it under /work/slurm-suite.lock like the suites (fixed port 17917).
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
OUTDIR=${1:?usage: gres-capture.sh OUTDIR}
mkdir -p "$OUTDIR"
export NCCL_CHECK_CLUSTER_DIR NCCL_CHECK_CLUSTER_PORT=${NCCL_CHECK_CLUSTER_PORT:-17917}
NCCL_CHECK_CLUSTER_DIR=$(mktemp -d /var/tmp/nccl-check-gres-cap.XXXXXX)
CL=$NCCL_CHECK_CLUSTER_DIR
chmod 755 "$CL"
trap 'bash "$REPO/slurm/test-cluster/down.sh" --purge' EXIT
mkdir -p "$CL/dev" && for i in 0 1 2 3; do : > "$CL/dev/gpu$i"; done
if [ -n "${UNTYPED:-}" ]; then
    printf 'NodeName=n1 Name=gpu File=%s/dev/gpu[0-3]\n' "$CL" > "$CL/gres.conf"
    GRES=gpu:4 B_GRES=gpu:2
else
    printf 'NodeName=n1 Name=gpu Type=h100 File=%s/dev/gpu[0-1]\nNodeName=n1 Name=gpu Type=a100 File=%s/dev/gpu[2-3]\n' \
        "$CL" "$CL" > "$CL/gres.conf"
    GRES=gpu:h100:2,gpu:a100:2 B_GRES=gpu:a100:2
fi
# shellcheck disable=SC2016  # $SLURM_JOB_ID is the prolog's
printf '#!/bin/sh\nenv | sort > %s/prolog-env.$SLURM_JOB_ID\nexit 0\n' "$OUTDIR" > "$CL/prolog.sh"
chmod 755 "$CL/prolog.sh"
NCCL_CHECK_CLUSTER_NODE_EXTRA="Gres=$GRES" bash "$REPO/slurm/test-cluster/up.sh" --nodes 1 \
    --prolog "$CL/prolog.sh" --munge-socket "$CL/munge/munge.socket.2" --conf "GresTypes=gpu" \
    || { tail -20 "$CL"/log/*.log; exit 1; }
export SLURM_CONF=$CL/slurm.conf
scontrol show node -d -o n1 > "$OUTDIR/node-idle.txt"
a=$(timeout 20 sbatch --parsable -N1 -w n1 --gres=gpu:1 -o /dev/null --wrap 'sleep 60')
b=$(timeout 20 sbatch --parsable -N1 -w n1 --gres="$B_GRES" -o /dev/null --wrap 'sleep 60')
timeout 30 bash -c 'until [ "$(squeue -h -t R | wc -l)" = 2 ]; do sleep 0.3; done' || echo "jobs not running" >&2
scontrol show node -d -o n1 > "$OUTDIR/node-two-jobs.txt"
scontrol show job -d -o "$a" > "$OUTDIR/job-a.txt"
scontrol show job -d -o "$b" > "$OUTDIR/job-b.txt"
squeue -h -w n1 -o '%A %T' > "$OUTDIR/squeue.txt"
# Slurm's structured answers (shared.rs reads squeue.json; the text above is what it read before).
# 22.05's scontrol has no --json: those files then hold its error, which is the finding.
scontrol show node -d --json n1 > "$OUTDIR/node-two-jobs.json" 2>&1
scontrol show job -d --json "$a" > "$OUTDIR/job-a.json" 2>&1
scontrol show job -d --json "$b" > "$OUTDIR/job-b.json" 2>&1
squeue --json -w n1 > "$OUTDIR/squeue.json" 2>&1
scontrol --version > "$OUTDIR/version.txt"
scancel "$a" "$b"
ls -la "$OUTDIR"
