#!/bin/sh
# The GPU-less stand-in for tests/gpu/fabric.sh --worker: nccl-check-sim (a `--features sim`
# build: the real options, Slurm rendezvous across the namespaces, control plane and localizer;
# the measurements from the fabric simulation). It cannot feel tc, so the row's fault
# (FABRIC_FAULT, set by fabric.sh) is handed to the simulation: slow and starve make the node's
# network 0.3x, path the node pair's by its rate; down stalls every worker after the rendezvous as NCCL's
# collectives stall when a node's link goes down (NCCL_CHECK_SIM_HOLD_MS: nothing ends the
# stall but the team failing or the deadline), so only the control plane's watch can name the
# node; absent never starts it (fabric.sh). This proves fabric.sh's plumbing
# (launch, names, secret, namespaces, judging), not the check on real NCCL. No multi-node floor
# (NCCL_CHECK_SIM_FLOOR=none): the real run has no threshold for sockets either.
sim=${FABRIC_SIM:-$(dirname "$0")/../../target/debug/nccl-check-sim}
# tc's rate (1gbit, 100mbit) as a factor of 3.2 Gbit/s, at most 1.
rate_factor() {
  echo "$1" | awk '{ r = $0; s = 1e9; if (sub(/mbit$/, "", r)) s = 1e6; else if (!sub(/gbit$/, "", r)) { print 0.3; exit }
    f = r * s / 3.2e9; if (f > 1) f = 1; printf "%.6f\n", f }'
}
faults=
for item in $(echo "${FABRIC_FAULT:-}" | tr ',' ' '); do
  IFS=: read -r kind a b c <<EOT
$item
EOT
  case $kind in
    slow | starve) faults="$faults,nodenet:$a:0.3" ;;
    # A path is its rate over the healthy bridge's ~3.2 Gbit/s a node (the fault table's
    # comment): the alltoall beside the all_reduce feels a path only below a flow's share.
    path) faults="$faults,link:$a:$b:$(rate_factor "$c")" ;;
    down) export NCCL_CHECK_SIM_HOLD_MS=3600000 ;;
  esac
done
NCCL_CHECK_SIM_FAULTS=${faults#,} NCCL_CHECK_SIM_GPUS=1 NCCL_CHECK_SIM_FLOOR=none exec "$sim" "$@"
