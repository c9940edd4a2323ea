#!/usr/bin/env bash
# Scale suite: a real Slurm cluster of 64 nodes on this machine (slurm/test-cluster/up.sh --nodes 64,
# MULTIPLE_SLURMD), and `srun -N64 --nccl-check` end to end through the real SPANK plugin, the
# real rendezvous and control plane and the real localizer. The worker is nccl-check-sim (only a
# `--features sim` build makes it): the real worker's options, rendezvous, control plane and
# localizer, with measurements from the fabric simulation, because this machine has no GPU.
# Tests: a healthy allocation PASSes with zero localization rounds; a node whose NICs are slow is
# named (FAIL); a node whose task dies before its rendezvous ends the step in ERROR naming the
# node and its rank within the budget. Needs root and tests/setup-deps.sh; every wait is bounded.
#
# Usage: bash tests/scale/run.sh [TEST_NAME_SUBSTRING]   (tests/run.sh runs it; ~2-4 min on 2 cores)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FILTER=${1:-}
NODES=${NCCL_CHECK_SCALE_NODES:-64}
TIMEOUT_S=20                          # the worker's --timeout (plugstack timeout=)
BUDGET_S=$((TIMEOUT_S + 5 + 30))      # + the plugin's kill grace + srun's start-up of 64 tasks
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"
say() { echo "scale/run.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }

cd "$REPO"
PLUGIN_SO=$REPO/target/release/libnccl_check.so
SIM_WORKER=$REPO/target/debug/nccl-check-sim
if [ ! -f "$PLUGIN_SO" ]; then
    timeout 1200 cargo build --release -p spank-plugin || { say "plugin build failed"; exit 1; }
fi
# Debug profile: the simulation needs no speed, and the test build's dependencies are reused.
timeout 1200 cargo build -p bench-core --features sim --bin nccl-check-sim \
    || { say "nccl-check-sim build failed"; exit 1; }

export NCCL_CHECK_CLUSTER_DIR
NCCL_CHECK_CLUSTER_DIR=$(mktemp -d /var/tmp/nccl-check-scale.XXXXXX)
CL=$NCCL_CHECK_CLUSTER_DIR
chmod 755 "$CL"
trap 'bash "$REPO/slurm/test-cluster/down.sh" --purge' EXIT
trap 'exit 130' INT TERM
t=$SECONDS
if ! bash "$REPO/slurm/test-cluster/up.sh" --nodes "$NODES" --plugin "$PLUGIN_SO"; then
    say "cluster of $NODES nodes did not come up"
    for f in "$CL"/log/slurmctld.log "$CL"/log/slurmd-n1.log; do echo "== $f"; tail -30 "$f"; done >&2
    exit 1
fi
say "$NODES nodes up in $((SECONDS - t)) s"
export SLURM_CONF=$CL/slurm.conf
install -m 0755 "$SIM_WORKER" "$CL/lib/nccl-check-sim"
mkdir -p "$CL/work" && chmod 1777 "$CL/work"
cd "$CL/work"
echo "required $CL/lib/nccl_check.so worker=$CL/lib/nccl-check-sim timeout=$TIMEOUT_S port_range=29500-29999" \
    > "$CL/plugstack.conf.d/zz-nccl-check.conf"

OUT=$CL/work/out ERR=$CL/work/err RC=0 ELAPSED=0
# The test cluster's node names (n1..n64) do not resolve: every slurmd is 127.0.0.1 under this
# machine's name. The plugin still picks the step's rendezvous port and passes --rendezvous
# n1:PORT; the simulated worker reads n1 as 127.0.0.1 (NCCL_CHECK_SIM_RENDEZVOUS_HOST).
run_srun() { # env assignments for the workers, then srun runs on every node, bounded by the budget
    local t0=$SECONDS
    env NCCL_CHECK_SIM_RENDEZVOUS_HOST=127.0.0.1 "$@" timeout "$BUDGET_S" srun -N"$NODES" --ntasks-per-node=1 --nccl-check true >"$OUT" 2>"$ERR"
    RC=$? ELAPSED=$((SECONDS - t0))
    # NCCL_CHECK_SCALE_KEEP=DIR keeps every run's stderr there (the cluster's folder is removed).
    if [ -n "${NCCL_CHECK_SCALE_KEEP:-}" ]; then cp "$ERR" "$NCCL_CHECK_SCALE_KEEP/run-$(date +%s%N).err"; fi
}
run_test() { # name function
    [ -n "$FILTER" ] && [[ "$1" != *"$FILTER"* ]] && return 0
    timeout 60 bash -c "until [ \"\$(sinfo -h -t idle -o %D 2>/dev/null | head -1)\" = $NODES ]; do sleep 0.5; done" \
        || say "nodes not idle before $1"
    harness_run "$1" "$2"
}
# What the ranks said, one line per distinct verdict (rank and node numbers folded), and srun's
# own lines, and the coordinator's (rank 0) and its rendezvous notes: enough to tell a FAIL from an
# ERROR, a slow node from a lost rendezvous, and a busy coordinator from a squatter.
verdicts() {
    { grep -E 'nccl-check: (PASS|FAIL|ERROR) .*\(rank 0 of' "$ERR" | head -1
      grep -E 'nccl-check: rendezvous: ' "$ERR" | sed -E 's/[0-9]+ more/N more/' | sort | uniq -c | sort -rn | head -4
      grep -E 'nccl-check: (PASS|FAIL|ERROR)' "$ERR" | sed -E 's/\(rank [0-9]+ of/(rank R of/; s/^.*nccl-check:/nccl-check:/' \
        | sort | uniq -c | sort -rn | head -6; grep -vE 'nccl-check: (PASS|FAIL|ERROR)' "$ERR" | tail -4; } | cut -c1-400
}
expect_err() { grep -qE -- "$1" "$ERR" || fail "stderr lacks /$1/; stderr: $(verdicts)"; }

t_healthy_passes_without_localization_rounds() {
    run_srun NCCL_CHECK_SIM_GPUS=8
    [ "$RC" = 0 ] || fail "expected PASS (rc 0), got $RC: $(verdicts)"
    expect_err "nccl-check: PASS \([a-z]+, $NODES ranks\): $((NODES * 8)) x simulated GPU on $NODES node\(s\), 2 rounds \(0 localization\)"
    [ "$ELAPSED" -le "$BUDGET_S" ] || fail "took $ELAPSED s (budget $BUDGET_S s)"
    say "healthy -N$NODES: $ELAPSED s"
}

t_slow_node_is_named() {
    run_srun NCCL_CHECK_SIM_GPUS=8 NCCL_CHECK_SIM_FAULTS=nodenet:n37:0.5
    [ "$RC" != 0 ] || fail "expected FAIL, got rc 0"
    expect_err "nccl-check: FAIL on n[0-9]+ .*: n37: every node pair it is in is slow on all 8 NICs"
    # Every rank reports the same single finding: no other node is named.
    [ "$(grep -cE 'nccl-check: FAIL on n[0-9]+ \(rank [0-9]+ of [0-9]+\): n37: every node pair' "$ERR")" = "$NODES" ] \
        || fail "not every rank names n37 alone: $(grep -E 'FAIL on' "$ERR" | sort | uniq -c | head -5)"
    grep -q "(and [0-9]* more)" "$ERR" && fail "more than one finding: $(grep -m1 'FAIL on' "$ERR")"
    say "slow n37 -N$NODES: $ELAPSED s"
}

t_missing_node_is_an_error_naming_it() {
    # n17's task dies before it joins (SIGKILL, as the OOM killer or a node failure would).
    run_srun NCCL_CHECK_SIM_GPUS=8 NCCL_CHECK_SIM_ABSENT=n17
    [ "$RC" != 0 ] || fail "expected ERROR, got rc 0"
    # The coordinator names the node (from the step's node list and tasks per node), then the rank.
    expect_err "ERROR on n1 \(rank 0 of $NODES\): .*no process of node n17 joined \(0 of 1\), process rank\(s\) 16 of $NODES never joined"
    [ "$ELAPSED" -le "$BUDGET_S" ] || fail "named after $ELAPSED s (budget $BUDGET_S s)"
    say "missing n17 -N$NODES: ERROR after $ELAPSED s: $(grep -m1 -oE 'ERROR on n1 \(rank 0 .*' "$ERR")"
}

run_test "srun -N$NODES --nccl-check passes a healthy simulated fabric with zero localization rounds" t_healthy_passes_without_localization_rounds
run_test "srun -N$NODES --nccl-check names the node whose NICs are slow" t_slow_node_is_named
run_test "a node whose task dies before the rendezvous ends in ERROR naming it within the budget" t_missing_node_is_an_error_naming_it
harness_tally scale/run.sh || { tail -20 "$CL"/log/slurmctld.log >&2; exit 1; }
