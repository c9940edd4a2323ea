#!/usr/bin/env bash
# End-to-end suite for the prolog gate (nccl-check-prolog) in a real Slurm 22.05 cluster on this
# machine: slurm/test-cluster/up.sh with Prolog= set (PrologFlags=Alloc), 2 slurmd on 127.0.0.1.
# No GPU: the worker is tests/prolog/fake-worker, which hands the prolog a report recorded for
# 4x H200 (tests/prolog/data) and the matching exit code; from there on (verdict, drain, cache,
# resume, logs) it is the production code. The GPUs' identity comes from a fake
# /proc/driver/nvidia/gpus built from the same report (config gpu_info_dir).
#
# Needs root, tests/setup-deps.sh and `cargo build --release` (tests/run.sh does both; this builds
# the prolog if it is missing). Every wait is bounded; the cluster is always torn down.
# slurm.conf additions: SchedulerParameters=nohold_on_prolog_fail (a requeued batch job is not
# held, so it can run on the other node by itself), AuthInfo=cred_expire=10 (Slurm delays a
# requeued job by cred_expire + 1 s; 120 s by default) and a private munged (up.sh --munge-socket),
# so other test clusters on this machine starting and stopping theirs do not matter.
#
# Usage: bash tests/prolog/run.sh [TEST_NAME_SUBSTRING]
#   env NCCL_CHECK_CLUSTER_PORT (default 17817) keeps it apart from other test clusters.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FILTER=${1:-}
# PASSED FAILED STARTED, fail, harness_run, harness_tally:
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"
say() { echo "prolog/run.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }

cd "$REPO"
BIN=$REPO/target/release/nccl-check-prolog
if [ ! -x "$BIN" ]; then
    say "building the prolog"
    timeout 1200 cargo build --release -p nccl-check-prolog || { say "build failed"; exit 1; }
fi

# --- cluster and fixtures -------------------------------------------------------------------
export NCCL_CHECK_CLUSTER_DIR NCCL_CHECK_CLUSTER_PORT=${NCCL_CHECK_CLUSTER_PORT:-17817}
NCCL_CHECK_CLUSTER_DIR=$(mktemp -d /var/tmp/nccl-check-prolog-ci.XXXXXX)
CL=$NCCL_CHECK_CLUSTER_DIR
chmod 755 "$CL"
# A second, unprivileged user (created for the suite when missing, removed after): another
# user's processes and jobs beside the starting job.
EVIL=${NCCL_CHECK_EVIL_USER:-ncclevil}
CREATED_EVIL=
if ! id "$EVIL" >/dev/null 2>&1; then
    useradd -M -s /bin/bash "$EVIL" && CREATED_EVIL=1
fi
cleanup() {
    declare -F shadow_undo >/dev/null && shadow_undo     # defined below: an early exit comes first
    bash "$REPO/slurm/test-cluster/down.sh" --purge
    declare -F cgroup_dirs_undo >/dev/null && cgroup_dirs_undo     # after slurmd stopped
    [ -n "$CREATED_EVIL" ] && userdel "$EVIL" 2>/dev/null
    true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

T=$CL/prolog                         # everything the prolog reads and writes
mkdir -p "$T/bin" "$T/gpus" "$T/mode" "$T/work" "$T/metrics"
install -m 0755 "$BIN" "$T/bin/nccl-check-prolog"
install -m 0755 "$REPO/tests/prolog/fake-worker" "$T/bin/fake-worker"
cp -r "$REPO/tests/prolog/data" "$T/bin/data"
make_gpus() { # the fake driver directory from the PASS report's GPUs
    rm -rf "$T/gpus" && mkdir -p "$T/gpus"
    python3 - "$T/bin/data/real-quick-pass.json" "$T/gpus" <<'PY'
import json, os, sys
for g in json.load(open(sys.argv[1]))["gpus"]:
    d = os.path.join(sys.argv[2], g["pci_bus_id"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "information"), "w") as f:
        f.write(f"Model: \t\t {g['name']}\nGPU UUID: \t {g['uuid']}\nBus Location: \t {g['pci_bus_id']}\n"
                "Device Minor: \t 0\nGPU Excluded:\t No\n")
PY
}
make_gpus
CONF=$T/prolog.toml
MARKER=$T/marker
# conf ["key = value"...]: the prolog config, re-read by every prolog run: the suite's defaults,
# each replaced by a given line with the same key; $CONF_ENV (`K = "v"`) joins the env table.
conf() {
    local defaults=(
        "worker = \"$T/bin/fake-worker\""
        "worker_config = \"$T/nccl-check.toml\""
        "gpus = \"all\""
        "state_dir = \"$T/state/%n\""
        "gpu_info_dir = \"$T/gpus\""
        "metrics_file = \"$T/metrics/%n.prom\""
        "budget_seconds = 10"
        "fault_root = \"$T/faults\""
    ) line d
    {
        for d in "${defaults[@]}"; do
            for line in "$@"; do [ "${line%% =*}" = "${d%% =*}" ] && continue 2; done
            echo "$d"
        done
        printf '%s\n' "$@"
        echo "env = { NCCL_CHECK_FAKE_MODE_DIR = \"$T/mode\", NCCL_CHECK_FAKE_MARKER = \"$MARKER\"${CONF_ENV:+, $CONF_ENV} }"
    } > "$CONF"
}
# slurmd runs Prolog= without arguments: a wrapper names the suite's config. No GPU here: a test
# that creates $T/nvml-on gives the prolog the fake NVML (prolog/tests/data/fake-nvml.c: every GPU
# lost), which it asks before a kernel record drains. In a matrix root (no compiler there) the
# matrix built it on the host: NCCL_CHECK_FAKE_NVML_SO.
mkdir -p "$T/nvml"
if [ -n "${NCCL_CHECK_FAKE_NVML_SO:-}" ]; then
    install -m 0755 "$NCCL_CHECK_FAKE_NVML_SO" "$T/nvml/libnvidia-ml.so.1" || { say "no $NCCL_CHECK_FAKE_NVML_SO"; exit 1; }
else
    cc -shared -fPIC -o "$T/nvml/libnvidia-ml.so.1" "$REPO/prolog/tests/data/fake-nvml.c" || { say "cc fake-nvml.c failed"; exit 1; }
fi
# A test that creates $T/slow/NODE makes the wrapper a slow site prolog on that node first: it
# waits (at most 40 s) while the file stands, then records the job and runs the gate.
printf '#!/bin/sh
if [ -e %s/"$SLURMD_NODENAME" ]; then
    i=0; while [ -e %s/"$SLURMD_NODENAME" ] && [ $i -lt 80 ]; do sleep 0.5; i=$((i + 1)); done
    echo "$SLURM_JOB_ID" >> %s
fi
[ -e %s ] && export LD_LIBRARY_PATH=%s
exec %s --config %s
' "$T/slow" "$T/slow" "$T/slow-ended" \
    "$T/nvml-on" "$T/nvml" "$T/bin/nccl-check-prolog" "$CONF" > "$T/bin/prolog.sh"
chmod 755 "$T/bin/prolog.sh"
# Epilog=: the same binary, told apart by SLURM_SCRIPT_CONTEXT=epilog_slurmd (which slurmd sets;
# the wrapper records it). Off unless a test creates $T/epilog-on, so the other tests' worker
# counts stay theirs.
printf '#!/bin/sh
echo "${SLURM_SCRIPT_CONTEXT:-unset}" >> %s
[ -e %s ] || exit 0
exec %s --config %s
' \
    "$T/epilog-contexts" "$T/epilog-on" "$T/bin/nccl-check-prolog" "$CONF" > "$T/bin/epilog.sh"
chmod 755 "$T/bin/epilog.sh"
conf

if ! bash "$REPO/slurm/test-cluster/up.sh" --nodes 2 --prolog "$T/bin/prolog.sh" \
    --munge-socket "$CL/munge/munge.socket.2" --conf "AuthInfo=socket=$CL/munge/munge.socket.2,cred_expire=10" \
    --conf "SchedulerParameters=nohold_on_prolog_fail" --conf "PrologEpilogTimeout=60" --conf "Epilog=$T/bin/epilog.sh"; then
    say "cluster did not come up"
    for f in "$CL"/log/*.log; do echo "== $f"; tail -30 "$f"; done >&2
    exit 1
fi
export SLURM_CONF=$CL/slurm.conf
cd "$T/work"

# --- helpers --------------------------------------------------------------------------------
OUT=$T/out ERR=$T/err RC=0
mode() { echo "$2" > "$T/mode/$1"; }               # mode NODE pass|fail|error|hang|...
runs_of() { local n; n=$(grep -c "^node=$1 " "$MARKER" 2>/dev/null); echo "${n:-0}"; }
reason_of() { sinfo -h -R -o '%N#%E' 2>/dev/null | awk -F'#' -v n="$1" '$1 == n { print $2 }'; }
drained() { scontrol show node -o "$1" 2>/dev/null | grep -q 'State=[A-Z+]*DRAIN'; }
# prolog_direct ARGS...: the binary as slurmd would start it (no PATH), stdout/stderr/rc captured.
prolog_direct() {
    timeout 60 env -i SLURM_CONF="$SLURM_CONF" SLURM_SCRIPT_CONTEXT=prolog_slurmd ${EXTRA_ENV:-} \
        "$T/bin/nccl-check-prolog" --config "$CONF" "$@" >"$OUT" 2>"$ERR"
    RC=$?
}
# submit [sbatch args...]: a batch job printing where it ran; echoes the job id.
submit() { timeout 20 sbatch --parsable -N1 -o "$T/work/job-%j.out" "$@" --wrap 'echo "ran on $SLURMD_NODENAME"'; }
wait_done() { # JOB SECONDS: until the job left the queue
    timeout "$2" bash -c "while [ -n \"\$(squeue -h -j $1 2>/dev/null)\" ]; do sleep 0.5; done" \
        || fail "job $1 still queued after $2 s: $(squeue -h -j "$1" -o '%T %R %N' 2>&1)"
}
ran_on() { cat "$T/work/job-$1.out" 2>/dev/null | sed -n 's/^ran on //p'; }
reset() { # every node resumed and idle, no state, every node passes
    scontrol update nodename=n1,n2 state=resume >/dev/null 2>&1
    rm -rf "$T/state" "$T/mode"/* "$T/metrics"/* "$T/bin/data" "$T/faults" "$T/epilog-on" "$T/nvml-on" "$T/slow" "$T/slow-ended" && : > "$MARKER"
    # fault_root: a kernel log without records and no PCI devices, unless a test fills it (no
    # kernel log at all is said as unreadable on every run: prolog/tests/faults.rs tests that).
    mkdir -p "$T/faults/dev" && : > "$T/faults/dev/kmsg"
    cp -r "$REPO/tests/prolog/data" "$T/bin/data"
    make_gpus
    conf
    timeout 30 bash -c 'until [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge 2 ]; do sleep 0.3; done' \
        || say "nodes not idle: $(sinfo -N 2>&1 | tr '\n' ' ')"
}

run_test() { # name function
    local name=$1
    [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]] && return 0
    reset
    harness_run "$name" "$2"
}

# --- tests ----------------------------------------------------------------------------------
t_fail_drains_and_requeues() {
    mode n1 fail
    local j; j=$(submit) || { fail "sbatch failed"; return; }
    wait_done "$j" 120
    [ "$(runs_of n1)" -ge 1 ] || fail "the prolog never measured on n1 (job landed elsewhere?): $(cat "$MARKER")"
    local r; r=$(reason_of n1)
    [[ "$r" == "nccl-check:GPUs slow|all_reduce 256 MiB out-of-place: busbw 25.2 < 300.0 GB/s (+1 more) (job $j)" ]] \
        || fail "sinfo -R reason of n1: '$r'"
    # What sinfo -R shows by default (20 characters): ours, the culprit, the problem.
    sinfo -R -n n1 | grep -q '^nccl-check:GPUs slow ' || fail "sinfo -R shows: $(sinfo -R -n n1 | tail -1)"
    drained n1 || fail "n1 is not drained"
    [ "$(ran_on "$j")" = n2 ] || fail "job $j did not run on n2: '$(ran_on "$j")'"
    scontrol show job "$j" | grep -q 'Restarts=1' || fail "job $j was not requeued once: $(scontrol show job "$j" | grep Restarts)"
    grep -q "prolog failed: rc:1 output:nccl-check-prolog: FAIL job $j on n1" "$CL/log/slurmd-n1.log" \
        || fail "slurmd's log lacks the prolog's FAIL line"
    ls "$T/state/n1/runs/job-$j."*/report.json >/dev/null 2>&1 || fail "the job's report was not kept in runs/job-$j.*"
    grep -q '"state": "fail"' "$T/state/n1/gate.json" || fail "gate.json: $(cat "$T/state/n1/gate.json")"
    ! grep -qs '"passed_unix"' "$T/state/n1/last-pass.json" || fail "a FAIL left a cached pass: $(cat "$T/state/n1/last-pass.json")"
    grep -q 'nccl_check_verdict{verdict="FAIL"} 1' "$T/metrics/n1.prom" || fail "metrics lack the FAIL"
    grep -q 'nccl_check_busbw_gbps{collective="all_reduce"} 24.651' "$T/metrics/n1.prom" || fail "metrics lack busbw"
}

t_worker_gets_only_path_and_the_config_env() {
    local j; j=$(submit -w n1) || { fail "sbatch failed"; return; }
    wait_done "$j" 60
    local envs; envs=$(sed -n 's/.* env=//p' "$MARKER" | head -1)
    # PWD, SHLVL and _ are set by bash itself.
    [ "$envs" = "CUDA_DEVICE_ORDER,NCCL_CHECK_FAKE_MARKER,NCCL_CHECK_FAKE_MODE_DIR,PATH,PWD,SHLVL,TMPDIR,_" ] \
        || fail "the worker's environment: $envs"
    grep -q -- "args=--plan quick --json $T/state/n1/runs/job-$j\.[^/ ]*/report.json --timeout 8 --quiet env=" "$MARKER" \
        || fail "the worker's arguments: $(head -1 "$MARKER")"
    [ "$(ran_on "$j")" = n1 ] || fail "job did not run"
    # The worker's config is passed when it exists.
    echo "# thresholds" > "$T/nccl-check.toml"
    : > "$MARKER"
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=8" prolog_direct
    grep -q -- "--quiet --config $T/nccl-check.toml env=" "$MARKER" || fail "no --config: $(cat "$MARKER")"
    rm -f "$T/nccl-check.toml"
}

t_error_drains_nothing_and_the_job_runs() {
    mode n1 error
    local j; j=$(submit -w n1) || { fail "sbatch failed"; return; }
    wait_done "$j" 60
    [ "$(ran_on "$j")" = n1 ] || fail "job $j did not run on n1"
    drained n1 && fail "ERROR drained n1: $(reason_of n1)"
    [ "$(runs_of n1)" = 1 ] || fail "the worker ran $(runs_of n1) times"
    grep -q 'nccl_check_verdict{verdict="ERROR"} 1' "$T/metrics/n1.prom" || fail "metrics lack the ERROR"
    grep -q 'nccl_check_gate_state{state="error"} 1' "$T/metrics/n1.prom" || fail "metrics lack the gate state"
    grep -q '"state": "error"' "$T/state/n1/gate.json" || fail "gate.json: $(cat "$T/state/n1/gate.json")"
    grep -q "ERROR job $j on n1: all GPUs: the worker exited 3: NCCL library not found" "$T/state/n1/gate.json" \
        || fail "gate.json does not say what happened: $(cat "$T/state/n1/gate.json")"
}

t_a_hung_worker_is_killed_at_the_budget_and_the_job_runs() {
    conf "budget_seconds = 5"
    mode n1 hang
    local j t0=$SECONDS; j=$(submit -w n1) || { fail "sbatch failed"; return; }
    wait_done "$j" 60
    [ "$(ran_on "$j")" = n1 ] || fail "job $j did not run on n1"
    drained n1 && fail "a timeout drained n1"
    [ $((SECONDS - t0)) -le 30 ] || fail "took $((SECONDS - t0)) s with a 5 s budget"
    local child; child=$(sed -n 's/^hang child=\([0-9]*\).*/\1/p' "$MARKER" | head -1)
    [ -n "$child" ] || fail "the fake worker did not hang"
    # Gone, or a zombie waiting for init to reap it.
    local st; st=$([ -n "$child" ] && ps -o stat= -p "$child" 2>/dev/null)
    [ -z "$st" ] || [[ "$st" == Z* ]] || fail "the worker's child $child survived (state $st)"
}

t_cached_pass_skips_the_measurement() {
    conf "cache_seconds = 600"
    local j1 j2 j3
    j1=$(submit -w n1) && wait_done "$j1" 60
    [ "$(runs_of n1)" = 1 ] || fail "first job: the worker ran $(runs_of n1) times, expected 1"
    j2=$(submit -w n1) && wait_done "$j2" 60
    [ "$(runs_of n1)" = 1 ] || fail "second job: the worker ran again (no cache)"
    [ "$(ran_on "$j2")" = n1 ] || fail "second job did not run"
    # Another GPU in the node (a new UUID): the pass no longer counts.
    sed -i 's/GPU-1c421d08/GPU-00000000/' "$T"/gpus/*/information "$T/bin/data/real-quick-pass.json"
    j3=$(submit -w n1) && wait_done "$j3" 60
    [ "$(runs_of n1)" = 2 ] || fail "third job after a GPU change: the worker ran $(($(runs_of n1) - 1)) more times, expected 1"
    # The cached path as slurmd runs it, timed (the benchmark: prolog/benchmarks/cached-path.sh).
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=99" prolog_direct
    [ "$RC" = 0 ] && grep -q "PASS (cached) job 99 on n1" "$ERR" || fail "direct run: rc $RC, $(cat "$ERR")"
    bash "$REPO/prolog/benchmarks/cached-path.sh" 100 "$T/bin/nccl-check-prolog" >"$OUT" 2>&1 \
        || fail "cached path over 50 ms or not cached: $(cat "$OUT")"
    sed 's/^/    /' "$OUT"
}

t_auto_resume_resumes_only_our_own_drains() {
    conf "auto_resume = true"
    # n1: drained by nccl-check (a recheck that fails); n2: drained by an admin.
    mode n1 fail
    EXTRA_ENV="" prolog_direct --recheck --node n1
    [ "$RC" = 1 ] || fail "recheck FAIL: rc $RC, expected 1; $(cat "$ERR")"
    [[ "$(reason_of n1)" == "nccl-check:GPUs slow|all_reduce"* ]] || fail "n1 not drained by nccl-check: '$(reason_of n1)'"
    scontrol update nodename=n2 state=drain reason="admin: PSU ticket 4711"
    mode n1 pass
    prolog_direct --recheck --node n1
    [ "$RC" = 0 ] || fail "recheck PASS: rc $RC; $(cat "$ERR")"
    drained n1 && fail "n1 still drained after it passed: '$(reason_of n1)'"
    prolog_direct --recheck --node n2
    [ "$RC" = 0 ] || fail "recheck PASS on n2: rc $RC"
    [ "$(reason_of n2)" = "admin: PSU ticket 4711" ] || fail "n2's admin drain was touched: '$(reason_of n2)'"
    # A drain of ours that an admin then took over (new reason) is the admin's now.
    scontrol update nodename=n2 state=resume
    mode n2 fail
    prolog_direct --recheck --node n2
    [[ "$(reason_of n2)" == "nccl-check:"* ]] || fail "n2 not drained by the recheck: '$(reason_of n2)'"
    scontrol update nodename=n2 state=drain reason="admin: keep out, RMA"
    mode n2 pass
    prolog_direct --recheck --node n2
    [ "$(reason_of n2)" = "admin: keep out, RMA" ] || fail "the admin's reason on n2 was touched: '$(reason_of n2)'"
}

t_a_broken_config_never_drains() {
    mode n1 fail
    conf 'budget_secs = 5'                # a typo: unknown key
    local j; j=$(submit -w n1) || { fail "sbatch failed"; return; }
    wait_done "$j" 60
    [ "$(ran_on "$j")" = n1 ] || fail "job $j did not run on n1"
    drained n1 && fail "a broken config drained n1"
    [ "$(runs_of n1)" = 0 ] || fail "the worker ran with a broken config"
    EXTRA_ENV="SLURMD_NODENAME=n1" prolog_direct
    [ "$RC" = 0 ] || fail "broken config: rc $RC, expected 0"
    local n; n=$(grep -n '^budget_secs' "$CONF" | cut -d: -f1)
    grep -qF "ERROR config: $CONF:$n: " "$ERR" && grep -qF "budget_secs" "$ERR" \
        || fail "the error does not name file, line and field: $(cat "$ERR")"
    timeout 20 env -i "$T/bin/nccl-check-prolog" --config /nonexistent/prolog.toml --node n1 >"$OUT" 2>"$ERR"
    RC=$?
    [ "$RC" = 0 ] && grep -q "cannot read" "$ERR" || fail "missing --config: rc $RC, $(cat "$ERR")"
    # The gate is off, and says so where admins look.
    grep -q 'nccl_check_gate_state{state="disabled"} 1' "$T/metrics/n1.prom" || fail "metrics lack the disabled gate"
    grep -q '"state": "disabled"' "$T/state/n1/gate.json" || fail "gate.json: $(cat "$T/state/n1/gate.json" 2>&1)"
    prolog_direct --check-config
    [ "$RC" = 2 ] && grep -q "^INVALID $CONF:$n: " "$OUT" || fail "--check-config on a broken file: rc $RC, $(cat "$OUT")"
}

t_check_config_prints_every_key_and_its_source() {
    echo 'on_fail = "run"' >> "$CONF"          # appended, as configuration management does
    local n; n=$(wc -l < "$CONF")
    prolog_direct --check-config
    [ "$RC" = 0 ] || fail "--check-config: rc $RC, $(cat "$OUT")"
    grep -q "^on_fail = \"run\"    # $CONF:$n\$" "$OUT" || fail "on_fail source: $(cat "$OUT")"
    grep -q '^on_error = "run"    # default$' "$OUT" || fail "on_error source: $(cat "$OUT")"
    [ "$(grep -cE '^[a-z_]+ = .*    # ' "$OUT")" = 21 ] || fail "not every key printed: $(cat "$OUT")"
    conf; echo 'on_fail = "drain"' >> "$CONF"; n=$(wc -l < "$CONF")
    prolog_direct --check-config
    [ "$RC" = 2 ] && grep -q "^INVALID $CONF:$n: on_fail: " "$OUT" || fail "appended bad value: rc $RC, $(cat "$OUT")"
    conf 'worker = "/nonexistent/nccl-check"'
    prolog_direct --check-config
    [ "$RC" = 2 ] && grep -q "^NOT READY worker /nonexistent/nccl-check" "$OUT" || fail "missing worker: rc $RC, $(cat "$OUT")"
}

# The issue's findings 2-4: what makes the gate a no-op is NOT READY (exit 2); a budget above
# PrologEpilogTimeout is said as the gate cuts it.
t_check_config_checks_the_budget_gres_and_the_worker_config() {
    # Above PrologEpilogTimeout: the gate cuts it (said, with what to set); none left is NOT READY.
    conf 'budget_seconds = 70'
    prolog_direct --check-config
    [ "$RC" = 0 ] && grep -q "^# budget_seconds = 70 cut to 53 s by PrologEpilogTimeout = 60 ($CL/slurm.conf:[0-9]*)" "$OUT" \
        || fail "budget above PrologEpilogTimeout: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    grep -q 'Set budget_seconds <= 53 ' "$OUT" || fail "no actionable budget: $(grep cut "$OUT")"
    conf 'gpus = "job"'
    prolog_direct --check-config
    [ "$RC" = 2 ] && grep -q '^NOT READY gpus = "job" but Slurm has no GresTypes=gpu' "$OUT" \
        || fail "gpus = job without gres/gpu: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    conf
    prolog_direct --check-config
    [ "$RC" = 0 ] && grep -q "^# PrologEpilogTimeout = 60 ($CL/slurm.conf:[0-9]*): each run of the gate" "$OUT" \
        || fail "the suite's config: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    grep -q '^worker: # fake worker' "$OUT" || fail "the worker's --check-config was not asked: $(cat "$OUT")"
    # The real worker on a worker config with a typo (nccl-check.toml: fracton).
    local real=$REPO/target/release/nccl-check
    [ -x "$real" ] || { fail "no $real (cargo build --release -p bench-core)"; return 1; }
    install -m 0755 "$real" "$T/bin/nccl-check"
    printf '[outliers]\nfracton = 0.9\n' > "$T/nccl-check.toml"
    conf "worker = \"$T/bin/nccl-check\""
    prolog_direct --check-config
    rm -f "$T/nccl-check.toml"
    [ "$RC" = 2 ] && grep -q "^NOT READY $T/bin/nccl-check --check-config: INVALID .*fracton" "$OUT" \
        || fail "a worker config typo: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    # The library named by the prolog's own env (which wins over nccl_lib in any file) is said to
    # be there, in this file; the old hint said to set nccl_lib in /etc/nccl-check/nccl-check.toml.
    CONF_ENV='NCCL_CHECK_NCCL_LIB = "/nonexistent/libnccl.so.2"' conf "worker = \"$T/bin/nccl-check\""
    prolog_direct --check-config
    [ "$RC" = 2 ] && grep -q "^worker: NOT READY NCCL (/nonexistent/libnccl.so.2): no such file; .*: NCCL_CHECK_NCCL_LIB in \`env\` of $CONF names it" "$OUT" \
        || fail "the prolog's env naming a missing NCCL: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    grep -q "nccl-check/nccl-check.toml" <(grep NCCL "$OUT" | grep -v '^env = ') && fail "a file that does not fix it is named: $(grep NCCL "$OUT")"
}

t_dry_run_without_a_job_says_so_once() {
    conf 'gpus = "job"'
    EXTRA_ENV="SLURMD_NODENAME=n1" prolog_direct --dry-run
    [ "$RC" = 0 ] || fail "rc $RC"
    [ "$(cat "$OUT" "$ERR" | wc -l)" = 1 ] && grep -q 'nothing to check' "$OUT" \
        || fail "expected one line: $(cat "$OUT" "$ERR")"
    ! grep -q 'no job' "$OUT" "$ERR" || fail "says 'no job': $(cat "$OUT")"
}

t_dry_run_prints_and_does_nothing() {
    mode n1 fail
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=77" prolog_direct --dry-run
    [ "$RC" = 0 ] || fail "dry run exited $RC"
    grep -qF 'drain:  n1 reason="nccl-check:GPUs slow|all_reduce 256 MiB out-of-place: busbw 25.2 < 300.0 GB/s (+1 more) (job 77)"' "$OUT" \
        || fail "dry run does not show the drain: $(cat "$OUT")"
    grep -q 'exit:   1 (a dry run exits 0)' "$OUT" || fail "dry run does not show the exit code"
    drained n1 && fail "the dry run drained n1"
    [ ! -e "$T/state/n1/drained" ] || fail "the dry run left a drain marker"
    [ ! -e "$T/metrics/n1.prom" ] || fail "the dry run wrote metrics"
}

t_on_fail_run_lets_the_job_run_and_drains_after() {
    echo 'on_fail = "run"' >> "$CONF"     # appended: a prolog setting, not a worker variable
    mode n1 fail
    local j; j=$(submit -w n1) || { fail "sbatch failed"; return; }
    wait_done "$j" 60
    [ "$(ran_on "$j")" = n1 ] || fail "job $j did not run on n1"
    [[ "$(reason_of n1)" == "nccl-check:"*"(job $j)" ]] || fail "n1 not drained: '$(reason_of n1)'"
    grep -q "FAIL job $j on n1: .*; drained n1, the job runs" "$T/state/n1/gate.json" \
        || fail "gate.json: $(cat "$T/state/n1/gate.json")"
}

t_job_gpus_are_passed_to_the_worker() {
    conf 'gpus = "job"'
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=5 CUDA_VISIBLE_DEVICES=3,1" prolog_direct
    [ "$RC" = 0 ] || fail "rc $RC: $(cat "$ERR")"
    grep -q -- '--quiet --gpus 1,3 env=' "$MARKER" || fail "worker args: $(cat "$MARKER")"
    # A job without GPUs is not checked.
    : > "$MARKER"
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=6" prolog_direct
    [ "$RC" = 0 ] && grep -q "no GPUs allocated" "$ERR" || fail "job without GPUs: rc $RC, $(cat "$ERR")"
    [ "$(runs_of n1)" = 0 ] || fail "the worker ran for a job without GPUs"
}

# Another process on a GPU given to the job (a leftover of the previous job) drains the
# node with a reason that says busy, though the bandwidth passed; "warn" only logs it.
t_a_stray_process_on_the_jobs_gpu_drains_busy() {
    conf 'gpus = "job"'
    mode n1 busy
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=9 CUDA_VISIBLE_DEVICES=0" prolog_direct
    [ "$RC" = 1 ] || fail "rc $RC (expected the FAIL's 1): $(cat "$ERR")"
    local r; r=$(reason_of n1)
    [[ "$r" == "nccl-check:GPU0 busy|GPU0: busy: 1 other process (pid 4242, user bob, 8.0 GiB): not the job's, the node is not clean (job 9)" ]] \
        || fail "sinfo -R reason of n1: '$r'"
    sinfo -R -n n1 | grep -q '^nccl-check:GPU0 busy ' || fail "sinfo -R shows: $(sinfo -R -n n1 | tail -1)"
    drained n1 || fail "n1 is not drained"
    scontrol update nodename=n1 state=resume >/dev/null 2>&1
    conf 'gpus = "job"' 'stray_processes = "warn"'
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=10 CUDA_VISIBLE_DEVICES=0" prolog_direct
    [ "$RC" = 0 ] || fail "warn: rc $RC: $(cat "$ERR")"
    grep -q "busy: 1 other process (pid 4242, user bob, 8.0 GiB).*warned only" "$ERR" || fail "warn: not logged: $(cat "$ERR")"
    drained n1 && fail "warn drained n1"
}

# The issue's finding 4: a prolog that checks nothing says so every time. gpus = "job" on this
# cluster without gres/gpu: the job runs unchecked, and gate.json (not the last job's PASS),
# the metric and syslog say "skipped" and why, for this job.
t_a_prolog_that_checks_nothing_says_skipped_every_time() {
    local j1 j2 sock=$T/syslog.sock lines=$T/syslog.lines pid
    rm -f "$sock" "$lines"
    python3 - "$sock" "$lines" <<'PY2' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); s.settimeout(60)
with open(sys.argv[2], "a") as out:
    try:
        while True:
            out.write(s.recv(4096).decode(errors="replace") + "\n"); out.flush()
    except socket.timeout:
        pass
PY2
    pid=$!
    timeout 5 bash -c "until [ -S '$sock' ]; do sleep 0.1; done"
    conf "syslog_socket = \"$sock\""
    j1=$(submit -w n1) || { fail "sbatch failed"; kill "$pid"; return; }
    wait_done "$j1" 60
    grep -q "\"state\": \"pass\"" "$T/state/n1/gate.json" || fail "job $j1: gate.json $(cat "$T/state/n1/gate.json")"
    conf 'gpus = "job"' "syslog_socket = \"$sock\""
    j2=$(submit -w n1) || { fail "sbatch failed"; kill "$pid"; return; }
    wait_done "$j2" 60
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    [ "$(ran_on "$j2")" = n1 ] || fail "job $j2 did not run"
    local g; g=$(cat "$T/state/n1/gate.json")
    grep -q '"state": "skipped"' <<<"$g" && grep -q "\"job\": \"$j2\"" <<<"$g" \
        && grep -q 'no GPUs allocated to the job' <<<"$g" || fail "gate.json after job $j2: $g"
    grep -q 'nccl_check_gate_state{state="skipped"} 1' "$T/metrics/n1.prom" || fail "metric: $(grep gate_state "$T/metrics/n1.prom")"
    grep -q "nccl-check-prolog\[[0-9]*\]: SKIPPED job $j2 on n1" "$lines" || fail "syslog: $(cat "$lines" 2>&1 | tail -3)"
}

t_recheck_leaves_a_busy_node_alone() {
    local j; j=$(timeout 20 sbatch --parsable -N1 -w n1 -o /dev/null --wrap "touch $T/work/started; sleep 60") \
        || { fail "sbatch failed"; return; }
    # Started = its prolog is over (RUNNING alone is not: with PrologFlags=Alloc it precedes the prolog).
    timeout 30 bash -c "until [ -e $T/work/started ]; do sleep 0.3; done" || fail "job $j did not start"
    mode n1 fail
    : > "$MARKER"
    prolog_direct --recheck --node n1
    [ "$RC" = 0 ] && grep -q "skipped, jobs run on the node" "$ERR" || fail "recheck on a busy node: rc $RC, $(cat "$ERR")"
    [ "$(runs_of n1)" = 0 ] || fail "the worker ran on a busy node"
    drained n1 && fail "n1 drained"
    scancel "$j"; wait_done "$j" 30
    # Where Slurm's answer fails, hangs or is not a node line, the (now idle)
    # node is not measured either: no verdict (exit 2), said why, within a quarter of the budget.
    local case
    for case in "echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 1" \
        "exec sleep 100" "echo 'NodeName=n1 CPUAlloc=0'"; do
        printf '#!/bin/sh\n%s\n' "$case" > "$T/bin/scontrol"
        chmod 755 "$T/bin/scontrol"
        conf "scontrol = \"$T/bin/scontrol\""
        : > "$MARKER"
        local t0=$SECONDS
        prolog_direct --recheck --node n1
        [ "$RC" = 2 ] && grep -q "recheck on n1: not checked, no verdict" "$ERR" \
            || fail "recheck, scontrol '$case': rc $RC, $(cat "$ERR")"
        [ $((SECONDS - t0)) -le 5 ] || fail "recheck, scontrol '$case': took $((SECONDS - t0)) s"
        [ "$(runs_of n1)" = 0 ] || fail "recheck, scontrol '$case': the worker ran"
    done
    rm -f "$T/bin/scontrol"
    drained n1 && fail "n1 drained"
}

t_the_epilog_drains_after_the_job_and_its_pass_is_the_next_prolog_s_cache() {
    conf "cache_seconds = 600"
    touch "$T/epilog-on"
    : > "$T/epilog-contexts"
    local j1 j2 j3
    j1=$(submit -w n1) && wait_done "$j1" 60   # the job leaves the queue once its epilog ended
    grep -qx epilog_slurmd "$T/epilog-contexts" \
        || fail "slurmd's Epilog= environment has SLURM_SCRIPT_CONTEXT='$(sort -u "$T/epilog-contexts" | tr '\n' ' ')'"
    [ "$(runs_of n1)" = 2 ] || fail "job $j1: the worker ran $(runs_of n1) times, expected 2 (prolog, epilog)"
    grep -q '"context": "epilog"' "$T/state/n1/gate.json" || fail "gate.json: $(cat "$T/state/n1/gate.json")"
    j2=$(submit -w n1) && wait_done "$j2" 60
    [ "$(runs_of n1)" = 3 ] || fail "job $j2: the worker ran $(($(runs_of n1) - 2)) more times, expected 1 (the prolog's pass is the epilog's cache)"
    mode n1 fail
    j3=$(submit -w n1) && wait_done "$j3" 60
    [ "$(ran_on "$j3")" = n1 ] || fail "job $j3 did not run on n1 (the prolog's pass was cached)"
    drained n1 || fail "the epilog's FAIL did not drain n1"
    local r; r=$(reason_of n1)
    [[ "$r" == "nccl-check:GPUs slow|"*" (job $j3, epilog)" ]] || fail "sinfo -R reason of n1: '$r'"
    scontrol show job "$j3" | grep -q 'JobState=COMPLETED' \
        || fail "job $j3: $(scontrol show job "$j3" | grep -o 'JobState=[A-Z]*')"
    grep -q "FAIL epilog job $j3 on n1" "$CL/log/slurmd-n1.log" "$T/state/n1/gate.json" \
        || fail "no FAIL epilog line: $(cat "$T/state/n1/gate.json")"
}

t_a_kernel_xid_drains_before_the_worker_runs() {
    cp -R "$REPO/prolog/tests/data/faults/hdr/." "$T/faults/"  # owned by root, as sysfs is
    # Without NVML (none on this machine) nothing confirms the record: a WARN, the worker measures.
    echo '3,4,9000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.' >> "$T/faults/dev/kmsg"
    local j; j=$(submit -w n1) || { fail "sbatch failed"; return; }
    wait_done "$j" 60
    [ "$(ran_on "$j")" = n1 ] && ! drained n1 || fail "an unconfirmed Xid drained n1 or the job did not run: $(reason_of n1)"
    python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["faults"]["findings"]
x=[x for x in f if x["what"]=="Xid 79 GPU has fallen off the bus"][0]
assert x["class"]=="warn" and x["evidence"].startswith("not confirmed by the driver"), f' "$T/state/n1/gate.json" \
        || fail "unconfirmed Xid in gate.json: $(cat "$T/state/n1/gate.json")"
    # The driver says the GPU is lost (the fake NVML): the driver's record drains, naming both.
    touch "$T/nvml-on"
    echo '3,5,9000001,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.' >> "$T/faults/dev/kmsg"
    local before; before=$(runs_of n1)
    j=$(submit -w n1) || { fail "sbatch failed"; return; }
    timeout 30 bash -c "until scontrol show node -o n1 | grep -q 'State=[A-Z+]*DRAIN'; do sleep 0.3; done"
    local r; r=$(reason_of n1)
    [[ "$r" == "nccl-check:Xid 79|Xid 79 GPU has fallen off the bus on 0000:18:00 (NVML: the GPU is lost (it does not answer)): reboot needed (job $j)" ]] \
        || fail "sinfo -R reason of n1: '$r'"
    [ "$(runs_of n1)" = "$before" ] || fail "the worker ran on a node with a hardware fault"
    python3 -c 'import json,sys; g=json.load(open(sys.argv[1])); s=g["faults"]["sources"]
assert [x["name"] for x in s]==["kmsg","aer","ib"] and all(x["readable"] for x in s), s
assert g["faults"]["total_ms"] < 50, g["faults"]' "$T/state/n1/gate.json" || fail "gate.json faults: $(cat "$T/state/n1/gate.json")"
    scancel "$j" 2>/dev/null; wait_done "$j" 60
}

# A CPU-only job runs a program named `Xid (PCI:0):79` (its process name: the name of
# the link it is started through) that segfaults; the kernel writes `Xid (PCI:0):79[PID]: segfault
# at ...` to this machine's real /dev/kmsg (with show_unhandled_signals on: turned on for the
# test, restored after). That job's epilog and the next job's prolog read the real log
# (fault_root = "/"): neither drains, the next job runs, gate.json says the record was ignored.
t_a_crashing_program_named_like_an_xid_drains_nothing() {
    local trace=/proc/sys/debug/exception-trace was
    was=$(cat "$trace" 2>/dev/null) || { fail "cannot read $trace"; return; }
    [ "$was" = 1 ] || echo 1 > "$trace" || { fail "cannot turn on $trace"; return; }
    xid_crash_then_a_job "$(python3 -c 'import sys; print(sys.executable)')"
    [ "$was" = 1 ] || echo "$was" > "$trace" || fail "could not restore $trace to $was"
}

xid_crash_then_a_job() { # PYTHON: the crash and its epilog, the kernel's line, then a job on n1
    local crash="$T/work/Xid (PCI:0):79" j1 j2 pid
    # With fault_root = "/" the prolog also reads this machine's real process table, where a
    # build beside the suite keeps CPUs busy: said beside the verdict, never a drain.
    conf 'fault_root = "/"' 'cache_seconds = 0'
    touch "$T/epilog-on"
    ln -sfn "$1" "$crash" || { fail "ln $1"; return; }
    printf '#!/bin/bash\n"%s" -c "import ctypes; ctypes.string_at(0)" &\npid=$!\nwait $pid\necho "crashed pid=$pid rc=$?"\n' \
        "$crash" > "$T/work/crash.sh"
    j1=$(timeout 20 sbatch --parsable -N1 -w n1 -o "$T/work/job-%j.out" "$T/work/crash.sh") || { fail "sbatch crash"; return; }
    wait_done "$j1" 60   # its epilog has ended
    pid=$(sed -n 's/^crashed pid=\([0-9]*\) rc=139$/\1/p' "$T/work/job-$j1.out")
    [ -n "$pid" ] || { fail "job $j1 did not segfault: $(cat "$T/work/job-$j1.out") (n1: $(reason_of n1))"; return; }
    timeout 10 bash -c "until dmesg | grep -qF 'Xid (PCI:0):79[$pid]: segfault at'; do sleep 0.3; done" \
        || { fail "the kernel wrote no segfault line for pid $pid: $(dmesg | tail -3)"; return; }
    drained n1 && fail "job $j1's epilog drained n1 for a user's crashing program: $(reason_of n1)"
    python3 -c 'import json,sys; g=json.load(open(sys.argv[1])); k=g["faults"]["sources"][0]
assert g["context"]=="epilog", g["context"]
assert k["name"]=="kmsg" and k["path"]=="/dev/kmsg" and k["readable"], k
assert "not the NVIDIA driver" in (k.get("note") or ""), k
assert not g["faults"]["findings"], g["faults"]' "$T/state/n1/gate.json" || fail "epilog gate.json faults: $(cat "$T/state/n1/gate.json")"
    j2=$(submit -w n1) && wait_done "$j2" 60
    [ "$(ran_on "$j2")" = n1 ] || fail "job $j2 did not run on n1: $(reason_of n1)"
    drained n1 && fail "a user's crashing program drained n1: $(reason_of n1)"
    rm -f "$crash"
}

# Another user's load never drains (issue 45 finding 3, issue 46's linuxproc finding): a second,
# unprivileged user runs a CPU-only job on n1 whose task is a busy loop, and two busy loops of no
# job (as with ssh without pam_slurm_adopt), every loop's comm `x<ESC>[2J|y` (bash started
# through a link of that name). The prolog of a starting job reads the real process table
# (fault_root = "/") under the default stray_processes = "fail": PASS, nothing drained; the loops
# are named with their user and whose they are, as Slurm says (`scontrol listpids`: this cluster
# runs proctrack/linuxproc, so no cgroup says it), the comm escaped; no scontrol argument carries
# the ESC. A real job started on n1 beside them runs there. The old code drained n1
# `nccl-check:CPUs busy|... 2 processes of no job (pid ... (x<ESC>[2J|y) ...` (the job's loop was
# "of no job" too).
# starting_jobs_never_drain FIRST_JOB_ID PATTERN: up to 3 prologs of starting jobs on n1
# (FIRST_JOB_ID, +1, +2) read the real process table; each passes, drains nothing and puts no
# raw ESC in its verdict line; true once one's warning about busy CPUs matches PATTERN.
starting_jobs_never_drain() {
    local k id
    for k in 0 1 2; do
        id=$(($1 + k))
        EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=$id" prolog_direct
        [ "$RC" = 0 ] && grep -q "PASS job $id on n1" "$ERR" || fail "beside another user's busy CPUs: rc $RC, $(cat -v "$ERR")"
        drained n1 && { fail "another user's busy CPUs drained n1: $(reason_of n1 | cat -v)"; return 0; }
        grep -q $'\033' "$ERR" && fail "a raw ESC reached the verdict line: $(cat -v "$ERR")"
        grep -q "; WARNING CPUs: busy: [0-9]* process.* not this job's (.*$2.*(warned only: busy CPUs never drain)" "$ERR" && return 0
    done
    return 1
}

t_another_users_busy_cpus_never_drain() {
    local esc link j b i real
    esc=$(printf 'x\033[2J|y')
    mkdir -p "$T/evil" && chmod 1777 "$T/evil"
    link="$T/evil/$esc"
    ln -sfn /bin/bash "$link"
    real=$(command -v scontrol)
    printf '#!/bin/sh\nprintf "%%s\\n" "$*" >> %s\nexec %s "$@"\n' "$T/scontrol-args" "$real" > "$T/bin/scontrol-rec"
    chmod 755 "$T/bin/scontrol-rec" && ln -sfn "$(command -v squeue)" "$T/bin/squeue" && : > "$T/scontrol-args"
    conf 'fault_root = "/"' 'cache_seconds = 0' "scontrol = \"$T/bin/scontrol-rec\""
    j=$(cd /tmp && timeout 20 runuser -u "$EVIL" -- env SLURM_CONF="$SLURM_CONF" sbatch --parsable -w n1 -n1 \
        -o /dev/null --wrap "exec \"$link\" -c 'echo \$\$ > $T/evil/job-loop; while :; do :; done'") \
        || { fail "sbatch as $EVIL failed"; return; }
    timeout 30 bash -c "until [ -s $T/evil/job-loop ]; do sleep 0.3; done" \
        || { fail "job $j's loop did not start: $(squeue -h -j "$j" -o '%T %R' 2>&1), n1: $(reason_of n1 | cat -v)"; scancel "$j"; return; }
    for i in 1 2; do
        # setsid and setpriv exec (runuser would wait as a parent, and stop itself when its
        # child is stopped below); a session of its own, as a login's loop would have.
        timeout -k 1 120 setsid setpriv --reuid="$EVIL" --regid="$EVIL" --init-groups -- "$link" \
            -c "echo \$\$ > $T/evil/loop$i; while :; do :; done" &
    done
    timeout 10 bash -c "until [ -s $T/evil/loop1 ] && [ -s $T/evil/loop2 ]; do sleep 0.2; done" || fail "the loops of no job did not start"
    # On a CI machine whose builds load every core the loops would get too little CPU to count
    # as busy (half a CPU each): root raises their priority and their sessions' (the kernel's
    # autogroups share the CPUs by session), so they keep the CPUs busy as on an idle node.
    for i in "$T/evil/job-loop" "$T/evil/loop1" "$T/evil/loop2"; do
        renice -n -10 -p "$(cat "$i")" >/dev/null || fail "renice $i"
        [ -e "/proc/$(cat "$i")/autogroup" ] && echo -10 > "/proc/$(cat "$i")/autogroup"
    done
    sleep 1
    # Whether a loop counts as busy (half a CPU over 300 ms) depends on what else this 2-core
    # machine runs, so the job's loop and the loops of no job are judged in turn (the others
    # stopped, SIGSTOP), each with up to 3 starting jobs, every one of which must pass without a
    # drain and one of which must name them; then all three run beside a real job.
    local jl l1 l2
    jl=$(cat "$T/evil/job-loop") l1=$(cat "$T/evil/loop1") l2=$(cat "$T/evil/loop2")
    kill -STOP "$l1" "$l2"
    starting_jobs_never_drain 9001 "pid $jl (x\\\\u{1b}\[2J\\\\u{7c}y), user $EVIL, job $j, " \
        || fail "job $j's loop was never named as its job's (listpids), escaped: $(cat -v "$ERR")"
    kill -STOP "$jl"; kill -CONT "$l1" "$l2"
    starting_jobs_never_drain 9011 "(x\\\\u{1b}\[2J\\\\u{7c}y), user $EVIL, no job, .*(x\\\\u{1b}\[2J\\\\u{7c}y), user $EVIL, no job, " \
        || fail "the loops of no job were never named, escaped: $(cat -v "$ERR")"
    kill -CONT "$jl"
    grep -q "^listpids \* n1$" "$T/scontrol-args" || fail "scontrol listpids was not asked: $(cat "$T/scontrol-args")"
    # A real job starting beside them (n1's other core): its prolog passes, it runs on n1.
    b=$(submit -w n1) && wait_done "$b" 60
    [ "$(ran_on "$b")" = n1 ] || fail "job $b did not run on n1: $(reason_of n1 | cat -v)"
    drained n1 && fail "job $b's prolog drained n1: $(reason_of n1 | cat -v)"
    grep -q $'\033' "$T/scontrol-args" && fail "an ESC reached scontrol's argument: $(cat -v "$T/scontrol-args")"
    for i in 1 2; do kill "$(cat "$T/evil/loop$i")" 2>/dev/null; done
    scancel "$j"; wait_done "$j" 30
    wait
    rm -f "$T/bin/squeue" "$T/bin/scontrol-rec"
}

# slurm_conf_edit SED_EXPR: the cluster's slurm.conf edited (saved first to slurm.conf.saved)
# and announced with scontrol reconfigure; slurm_conf_restore undoes it. Both wait (bounded) until
# the controller shows PrologEpilogTimeout = $1 of slurm_conf_wait.
slurm_conf_edit() {
    [ -e "$CL/slurm.conf.saved" ] || cp "$CL/slurm.conf" "$CL/slurm.conf.saved"
    sed -i "$1" "$CL/slurm.conf"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure failed"
}
slurm_conf_wait() { # TIMEOUT: until scontrol shows it
    timeout 30 bash -c "until scontrol show config 2>/dev/null | grep -Eq '^PrologEpilogTimeout *= $1( |\$)'; do sleep 0.5; done" \
        || fail "PrologEpilogTimeout is not $1 after reconfigure: $(scontrol show config 2>&1 | grep -i PrologEpilog)"
}
slurm_conf_restore() {
    [ -e "$CL/slurm.conf.saved" ] || return 0
    mv "$CL/slurm.conf.saved" "$CL/slurm.conf"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure (restore) failed"
    slurm_conf_wait 60
    timeout 30 bash -c 'until [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge 2 ]; do sleep 0.3; done' \
        || say "nodes not idle after the restore: $(sinfo -N 2>&1 | tr '\n' ' ')"
}

# budget_seconds above the PrologEpilogTimeout slurmd has now (lowered after
# the cluster started, in an Include'd file, announced by reconfigure): the gate cuts its own
# budget below it, so a hung check ends as the gate's ERROR in gate.json and the job runs; slurmd
# never kills the prolog ('Prolog hung') nor drains the node ('Prolog error').
t_a_budget_above_prolog_epilog_timeout_ends_as_the_gate_s_error() {
    echo "PrologEpilogTimeout=15" > "$CL/timeout.conf"
    slurm_conf_edit "s|^PrologEpilogTimeout=60\$|Include $CL/timeout.conf|"
    grep -q "^Include $CL/timeout.conf" "$CL/slurm.conf" || fail "no PrologEpilogTimeout=60 line in slurm.conf to move"
    slurm_conf_wait 15
    conf "budget_seconds = 40"
    # What --check-config says is what the run does: the same cut, not NOT READY.
    prolog_direct --check-config
    [ "$RC" = 0 ] && grep -q "^# budget_seconds = 40 cut to 8 s by PrologEpilogTimeout = 15 ($CL/timeout.conf:1)" "$OUT" \
        || fail "--check-config: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    mode n1 hang
    local logged; logged=$(wc -l < "$CL/log/slurmd-n1.log")
    local j t0=$SECONDS; j=$(submit -w n1) || { fail "sbatch failed"; slurm_conf_restore; return; }
    wait_done "$j" 90
    [ "$(ran_on "$j")" = n1 ] || fail "job $j did not run on n1: '$(ran_on "$j")', $(scontrol show job "$j" 2>&1 | grep -o 'JobState=[A-Z]* Reason=[^ ]*')"
    drained n1 && fail "n1 drained: '$(reason_of n1)'"
    local said; said=$(tail -n +"$((logged + 1))" "$CL/log/slurmd-n1.log" | grep -i 'prolog hung\|prolog error\|prolog failed')
    [ -z "$said" ] || fail "slurmd failed the prolog: $said"
    grep -q '"state": "error"' "$T/state/n1/gate.json" \
        && grep -q "ERROR job $j on n1: .*budget of 8 s.*(budget_seconds = 40 cut to 8 s by PrologEpilogTimeout = 15 ($CL/timeout.conf:1)" "$T/state/n1/gate.json" \
        || fail "gate.json: $(cat "$T/state/n1/gate.json" 2>&1)"
    [ $((SECONDS - t0)) -le 60 ] || fail "took $((SECONDS - t0)) s"
    slurm_conf_restore
}

# A Prolog= with a one-letter typo, live on the controller, is NOT READY with
# the path it should have; no job runs while it stands.
t_check_config_names_a_prolog_entry_slurm_cannot_run() {
    slurm_conf_edit "s|^Prolog=.*|Prolog=$T/bin/nccl-check-prolg|"
    slurm_conf_wait 60
    prolog_direct --check-config
    slurm_conf_restore
    [ "$RC" = 2 ] && grep -q "^NOT READY Prolog=$T/bin/nccl-check-prolg (scontrol show config): no such file (did you mean /usr/sbin/nccl-check-prolog?)" "$OUT" \
        || fail "a Prolog= typo: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    # The epilog gate is shown with the budget it gets (the suite's Epilog= wrapper runs it).
    prolog_direct --check-config
    [ "$RC" = 0 ] && grep -q "^# PrologEpilogTimeout = 60 ($CL/slurm.conf:[0-9]*): each run of the gate (Prolog=$T/bin/prolog.sh, Epilog=$T/bin/epilog.sh) gets its budget_seconds = 10 s" "$OUT" \
        || fail "the epilog gate: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
}

# slurm_conf_shows REGEX: until scontrol show config has a line matching it (bounded).
slurm_conf_shows() {
    timeout 30 bash -c "until scontrol show config 2>/dev/null | grep -Eq '$1'; do sleep 0.5; done" \
        || fail "scontrol show config has no '$1': $(scontrol show config 2>&1 | grep -E '^(Prolog|Epilog)')"
}

# Issue 46, S1: the gate's link is the only file of the site's Prolog= glob. The refusal said
# "remove that file, keep the Prolog= line"; done so, the glob matches nothing and slurmd
# drains the node at the next job while --check-config said ready.
t_a_glob_whose_only_file_is_the_gate() {
    local d=$T/prolog.d
    rm -rf "$d"; mkdir -p "$d"
    ln -s "$T/bin/prolog.sh" "$d/50-nccl-check"
    slurm_conf_edit "s|^Prolog=.*|Prolog=$d/*|"
    slurm_conf_shows "^Prolog(\[0\])? *= $d/\*"
    prolog_direct --where-configured
    [ "$RC" = 1 ] && grep -qF "Prolog=$d/* -> through $d/50-nccl-check, the only file it matches: remove that file and the Prolog= line" "$OUT" \
        || fail "--where-configured: rc $RC, $(cat "$OUT")"
    grep -q "keep the Prolog= line" "$OUT" && fail "the advice keeps a line that then matches nothing: $(cat "$OUT")"
    prolog_direct --check-config
    [ "$RC" = 0 ] || fail "--check-config with the gate in the glob: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    # The old advice followed: the pattern matches nothing.
    rm -f "$d/50-nccl-check"
    prolog_direct --check-config
    [ "$RC" = 2 ] && grep -qF "NOT READY Prolog=$d/* (scontrol show config): matches no file: slurmd fails every job's prolog" "$OUT" \
        && grep -q "^Until this is fixed on .*slurmd drains the node" "$OUT" \
        || fail "an empty glob: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    grep -q "not drained" <(tail -1 "$OUT") && fail "the summary contradicts the drain: $(tail -1 "$OUT")"
    # What that message says, as Slurm does it: the next job's prolog fails and n1 drains.
    local j; j=$(submit -w n1) || { fail "sbatch failed"; slurm_conf_restore; return; }
    timeout 60 bash -c "until scontrol show node -o n1 | grep -q 'State=[A-Z+]*DRAIN'; do sleep 0.5; done"
    local r; r=$(reason_of n1)
    [[ "$r" == *"Prolog error"* ]] || fail "n1 after a job with an empty Prolog= glob: '$r', $(scontrol show node -o n1 | grep -o 'State=[^ ]*')"
    scancel "$j" 2>/dev/null
    slurm_conf_restore
    rm -rf "$d"
}

# Issue 46, S1: PrologEpilogTimeout raised in the file before 'scontrol reconfigure'. slurmd
# still has the old 15 s, as the controller does; the gate went by the file's 60 s, slurmd killed
# the hung check at 15 s and drained the node while --check-config said ready.
t_a_timeout_raised_in_the_file_before_a_reconfigure() {
    slurm_conf_edit "s|^PrologEpilogTimeout=60\$|PrologEpilogTimeout=15|"
    slurm_conf_wait 15
    sed -i "s|^PrologEpilogTimeout=15\$|PrologEpilogTimeout=60|" "$CL/slurm.conf"   # no reconfigure
    grep -q '^PrologEpilogTimeout=60$' "$CL/slurm.conf" || fail "slurm.conf not edited"
    conf "budget_seconds = 40"
    prolog_direct --check-config
    [ "$RC" = 0 ] && grep -q "^# PrologEpilogTimeout differs: the controller has 15 (scontrol show config), this node's slurm.conf 60 ($CL/slurm.conf:[0-9]*): a 'scontrol reconfigure' is pending" "$OUT" \
        && grep -q "^# budget_seconds = 40 cut to 8 s by PrologEpilogTimeout = 15 (scontrol show config)" "$OUT" \
        || fail "--check-config: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    mode n1 hang
    local logged; logged=$(wc -l < "$CL/log/slurmd-n1.log")
    local j t0=$SECONDS; j=$(submit -w n1) || { fail "sbatch failed"; slurm_conf_restore; return; }
    wait_done "$j" 90
    [ "$(ran_on "$j")" = n1 ] || fail "job $j did not run on n1: '$(ran_on "$j")', $(scontrol show job "$j" 2>&1 | grep -o 'JobState=[A-Z]* Reason=[^ ]*')"
    drained n1 && fail "n1 drained: '$(reason_of n1)'"
    local said; said=$(tail -n +"$((logged + 1))" "$CL/log/slurmd-n1.log" | grep -i 'prolog hung\|prolog error\|prolog failed')
    [ -z "$said" ] || fail "slurmd failed the prolog: $said"
    grep -q "ERROR job $j on n1: .*budget of 8 s.*(budget_seconds = 40 cut to 8 s by PrologEpilogTimeout = 15 (scontrol show config)" "$T/state/n1/gate.json" \
        || fail "gate.json: $(cat "$T/state/n1/gate.json" 2>&1)"
    [ $((SECONDS - t0)) -le 60 ] || fail "took $((SECONDS - t0)) s"
    slurm_conf_restore
}

# Issue 46, item 3: BatchStartTimeout, measured. slurmctld checks a batch job's launch only when
# the job's node registers (every 20th ping, a ping every SlurmdTimeout/3 s: here SlurmdTimeout=3,
# about every 20 s; on 22.05 also at each reconfigure): a batch job whose batch step is not
# running BatchStartTimeout + MessageTimeout (at most 10 s) after it started is "missing from
# batch node" and ended by node failure, requeued; the node is not drained. Here 1 + 10 = 11 s.
# n1: a slow site prolog ($T/slow/n1, until the test removes it) under a batch job A (ended and
# requeued: Slurm's side) and an srun job S (PrologFlags=Alloc: srun waits, the job runs); n2:
# the gate alone, its worker hung, budget_seconds = 36, under a batch job G. The gate cuts its
# prolog below the 11 s (to 4 s), so G runs; the old gate ran the 36 s and G was ended as A is.
t_a_prolog_longer_than_batch_start_timeout() {
    slurm_conf_edit '$a BatchStartTimeout=1\nSlurmdTimeout=3'
    slurm_conf_shows '^BatchStartTimeout *= 1 sec'
    slurm_conf_shows '^SlurmdTimeout *= 3 sec'
    conf "budget_seconds = 36"
    mode n2 hang
    mkdir -p "$T/slow" && : > "$T/slow/n1"
    local ctld d1 a g sp t0=$SECONDS
    ctld=$(wc -l < "$CL/log/slurmctld.log"); d1=$(wc -l < "$CL/log/slurmd-n1.log")
    a=$(submit -w n1) && g=$(submit -w n2) || { fail "sbatch"; rm -f "$T/slow/n1"; slurm_conf_restore; return; }
    timeout 70 srun -w n1 -N1 -n1 sh -c 'echo "ran on $SLURMD_NODENAME"' >"$T/work/srun.out" 2>"$T/work/srun.err" &
    sp=$!
    new_ctld() { tail -n +"$((ctld + 1))" "$CL/log/slurmctld.log"; }
    timeout 45 bash -c "until tail -n +$((ctld + 1)) '$CL/log/slurmctld.log' | grep -q 'JobId=$a missing'; do sleep 0.5; done" \
        || fail "job $a (slow site prolog) was not ended as missing in 45 s: $(new_ctld | grep -v debug | tail -5)"
    local killed=$((SECONDS - t0))
    rm -f "$T/slow/n1"
    wait "$sp"; local src=$?
    timeout 30 bash -c "until grep -Eq '(Job |JobId=)$a( SLUID=[^ ]*)? already killed' '$CL/log/slurmd-n1.log'; do sleep 0.5; done"
    new_ctld | grep -q "Batch JobId=$a missing from batch node n1 (not found BatchStartTime after startup), Requeuing job" \
        && new_ctld | grep -q "requeue JobId=$a due to node failure" \
        || fail "slurmctld on job $a: $(new_ctld | grep "JobId=$a" | tr '\n' '|')"
    scontrol show job -o "$a" | grep -q 'Restarts=1' || fail "job $a was not requeued: $(scontrol show job -o "$a" | grep -o 'JobState=[^ ]*\|Restarts=[^ ]*' | tr '\n' ' ')"
    tail -n +"$((d1 + 1))" "$CL/log/slurmd-n1.log" | grep -Eq "(Job |JobId=)$a( SLUID=[^ ]*)? already killed, do not launch batch job" \
        || fail "slurmd n1 launched job $a's script: $(tail -n +"$((d1 + 1))" "$CL/log/slurmd-n1.log" | grep -i "prolog\|launch" | tail -5 | tr '\n' '|')"
    drained n1 && fail "n1 drained: '$(reason_of n1)'"
    [ "$src" = 0 ] && grep -q '^ran on n1$' "$T/work/srun.out" || fail "srun (Alloc) under the same prolog: rc $src, $(cat "$T/work/srun.out" "$T/work/srun.err")"
    wait_done "$g" 30
    [ "$(ran_on "$g")" = n2 ] || fail "job $g (the gate, hung) did not run on n2: $(new_ctld | grep "JobId=$g" | tr '\n' '|')"
    new_ctld | grep -q "JobId=$g missing" && fail "job $g was ended as missing: the gate outlasted BatchStartTimeout"
    grep -q "ERROR job $g on n2: .*budget of 4 s.*(budget_seconds = 36 cut to 4 s by BatchStartTimeout = 1 + MessageTimeout = 10 (at most 10 counts) = 11 s ($CL/slurm.conf:[0-9]*)" "$T/state/n2/gate.json" \
        || fail "gate.json n2: $(cat "$T/state/n2/gate.json" 2>&1)"
    say "job $a ended as missing $killed s after submission; srun rc $src; job $g ran on n2"
    scancel "$a" 2>/dev/null; wait_done "$a" 30
    slurm_conf_restore
}

# Issue 46, S2: --check-config said ready when no Slurm configuration could be read at all, and
# when a local /etc/slurm/slurm.conf (no ClusterName: scontrol, srun and sinfo fail on the node)
# shadows a configless node's cache.
SHADOW_MADE=
shadow_undo() {
    [ -n "$SHADOW_MADE" ] || return 0
    rm -f /etc/slurm/slurm.conf /run/slurm/conf
    rmdir /run/slurm 2>/dev/null
    SHADOW_MADE=
}
t_no_slurm_config_or_a_shadowing_slurm_conf_is_not_ready() {
    timeout 60 env -i SLURM_CONF=/nonexistent/slurm.conf SLURMD_NODENAME=n1 \
        "$T/bin/nccl-check-prolog" --config "$CONF" --check-config >"$OUT" 2>"$ERR"; RC=$?
    if [ -e /etc/slurm/slurm.conf ] || [ -e /run/slurm/conf ]; then
        fail "/etc/slurm/slurm.conf or /run/slurm/conf exists on this machine; not touching them"; return 1
    fi
    [ "$RC" = 2 ] && grep -q "^NOT READY Slurm's configuration could not be read" "$OUT" \
        || fail "no Slurm configuration: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    # A configless node: the controller's file in the cache, and the admin's three lines in a
    # local /etc/slurm/slurm.conf.
    mkdir -p "$CL/conf-cache" /run/slurm
    cp "$CL/slurm.conf" "$CL/conf-cache/slurm.conf"
    SHADOW_MADE=1
    ln -s "$CL/conf-cache" /run/slurm/conf
    printf 'Prolog=%s\nPrologFlags=Alloc\nPrologEpilogTimeout=120\n' "$T/bin/prolog.sh" > /etc/slurm/slurm.conf
    timeout 60 env -i SLURMD_NODENAME=n1 "$T/bin/nccl-check-prolog" --config "$CONF" --check-config >"$OUT" 2>"$ERR"; RC=$?
    shadow_undo
    [ "$RC" = 2 ] && grep -q "^NOT READY /etc/slurm/slurm.conf shadows the configless cache /run/slurm/conf/slurm.conf" "$OUT" \
        || fail "a shadowing slurm.conf: rc $RC, $(grep -v '^[a-z_]* = ' "$OUT")"
    # The cache is the source named, not the local file's 120.
    grep -q "PrologEpilogTimeout = 60 (/run/slurm/conf/slurm.conf:[0-9]*)" "$OUT" \
        || fail "the cache is not the source: $(grep -i timeout "$OUT")"
}

# Issue 46, S3: a reader that goes away (| head -1) made every binary panic ('failed printing to
# stdout: Broken pipe') and the prolog exit 0 even for NOT READY. `closed CMD...`: stdout a pipe
# whose reader has already gone (every write EPIPE), stderr to $ERR, exit code in RC.
closed() {
    python3 -c 'import os, subprocess, sys
r, w = os.pipe(); os.close(r)
sys.exit(subprocess.run(sys.argv[1:], stdout=w, stderr=open(os.environ["ERR"], "w"), timeout=60).returncode)' "$@"
    RC=$?
}
t_a_closed_pipe_keeps_the_exit_code_and_never_panics() {
    local worker=$REPO/target/release/nccl-check plugstack=$REPO/target/release/nccl-check-plugstack
    [ -x "$worker" ] && [ -x "$plugstack" ] || { fail "build the worker and nccl-check-plugstack first (cargo build --release -p bench-core -p spank-plugin)"; return 1; }
    conf 'worker = "/nonexistent/nccl-check"'
    timeout 60 env -i SLURM_CONF="$SLURM_CONF" "$T/bin/nccl-check-prolog" --config "$CONF" --check-config 2>"$ERR" | head -1 >"$OUT"
    RC=${PIPESTATUS[0]}
    [ "$RC" = 2 ] || fail "--check-config | head -1 on a NOT READY config: rc $RC"
    ! grep -q panicked "$ERR" || fail "--check-config | head -1 panicked: $(cat "$ERR")"
    ERR=$ERR closed env -i SLURM_CONF="$SLURM_CONF" "$T/bin/nccl-check-prolog" --config "$CONF" --check-config
    [ "$RC" = 2 ] && ! grep -q panicked "$ERR" || fail "--check-config into a closed pipe: rc $RC, $(cat "$ERR")"
    conf
    timeout 60 env -i SLURM_CONF="$SLURM_CONF" SLURMD_NODENAME=n1 "$T/bin/nccl-check-prolog" --config "$CONF" --recheck --dry-run 2>"$ERR" | head -1 >"$OUT"
    RC=${PIPESTATUS[0]}
    [ "$RC" = 0 ] && ! grep -q panicked "$ERR" || fail "--recheck --dry-run | head -1: rc $RC, $(cat "$ERR")"
    ERR=$ERR closed env -i SLURM_CONF="$SLURM_CONF" SLURMD_NODENAME=n1 "$T/bin/nccl-check-prolog" --config "$CONF" --recheck --dry-run
    [ "$RC" = 0 ] && ! grep -q panicked "$ERR" || fail "--recheck --dry-run into a closed pipe: rc $RC, $(cat "$ERR")"
    ERR=$ERR closed env -i "$worker" --check-config
    [ "$RC" = 0 ] && ! grep -q panicked "$ERR" || fail "nccl-check --check-config into a closed pipe: rc $RC, $(cat "$ERR")"
    "$worker" --check-config 2>&1 | head -1 >"$OUT"; RC=${PIPESTATUS[0]}
    [ "$RC" = 0 ] || fail "nccl-check --check-config 2>&1 | head -1: rc $RC"
    ERR=$ERR closed env -i SLURM_CONF="$SLURM_CONF" "$plugstack" --check
    [ "$RC" = 0 ] && ! grep -q panicked "$ERR" || fail "nccl-check-plugstack --check into a closed pipe: rc $RC, $(cat "$ERR")"
    env -i SLURM_CONF="$SLURM_CONF" "$plugstack" --check 2>&1 | head -1 >"$OUT"; RC=${PIPESTATUS[0]}
    [ "$RC" = 0 ] || fail "nccl-check-plugstack --check 2>&1 | head -1: rc $RC"
}

run_test "FAIL drains the node with an nccl-check: reason; the batch job is requeued and runs on n2" t_fail_drains_and_requeues
run_test "the worker gets only PATH and the config's [env], and the contract's arguments" t_worker_gets_only_path_and_the_config_env
run_test "ERROR drains nothing and the job runs" t_error_drains_nothing_and_the_job_runs
run_test "a hung worker is killed at the budget, nothing drained, the job runs" t_a_hung_worker_is_killed_at_the_budget_and_the_job_runs
run_test "a cached pass skips the measurement (<= 50 ms); a GPU change invalidates it" t_cached_pass_skips_the_measurement
run_test "auto-resume resumes only nccl-check's own drains" t_auto_resume_resumes_only_our_own_drains
run_test "a broken config never drains and names file, line and field" t_a_broken_config_never_drains
run_test "--dry-run prints the drain it would do and does nothing" t_dry_run_prints_and_does_nothing
run_test "on_fail = run: the job runs on the node, which is drained" t_on_fail_run_lets_the_job_run_and_drains_after
run_test "--recheck leaves a node with running jobs alone" t_recheck_leaves_a_busy_node_alone
run_test "gpus = job passes the job's GPUs; a job without GPUs is not checked" t_job_gpus_are_passed_to_the_worker
run_test "a stray process on the job's GPU drains the node busy; stray_processes = warn only logs it" t_a_stray_process_on_the_jobs_gpu_drains_busy
run_test "a prolog that checks nothing writes gate.json skipped, the metric and a syslog line, for this job" t_a_prolog_that_checks_nothing_says_skipped_every_time
run_test "--check-config prints every key and its source; an appended line is a prolog key; exit 2 when invalid or not ready" t_check_config_prints_every_key_and_its_source
run_test "--check-config: a budget above PrologEpilogTimeout is cut as the gate cuts it; gpus = job without gres/gpu and the worker's config are NOT READY" t_check_config_checks_the_budget_gres_and_the_worker_config
run_test "--dry-run with gpus = job and no job says so in one line" t_dry_run_without_a_job_says_so_once
run_test "Epilog= (SLURM_SCRIPT_CONTEXT=epilog_slurmd): a PASS is the next prolog's cache; a FAIL drains after the job, which completes" t_the_epilog_drains_after_the_job_and_its_pass_is_the_next_prolog_s_cache
run_test "a kernel Xid 79 drains the node before the worker runs, naming Xid, PCI address and the driver's state that confirms it (unconfirmed: no drain)" t_a_kernel_xid_drains_before_the_worker_runs
run_test "a CPU job's program named like an Xid segfaults (real kernel log): its epilog and the next job's prolog drain nothing" t_a_crashing_program_named_like_an_xid_drains_nothing
run_test "budget_seconds above PrologEpilogTimeout (Include'd, lowered live): a hung check ends as the gate's ERROR, slurmd drains nothing" t_a_budget_above_prolog_epilog_timeout_ends_as_the_gate_s_error
run_test "--check-config: a Prolog= typo on the controller is NOT READY; the epilog gate is shown" t_check_config_names_a_prolog_entry_slurm_cannot_run
run_test "a Prolog= glob whose only file is the gate: the refusal says to remove the line too; the glob left empty is NOT READY and drains the next job" t_a_glob_whose_only_file_is_the_gate
run_test "PrologEpilogTimeout raised in the file before a reconfigure: the controller's stricter value cuts the budget, slurmd drains nothing" t_a_timeout_raised_in_the_file_before_a_reconfigure
run_test "a prolog longer than BatchStartTimeout (+ MessageTimeout): slurmctld ends the batch job as missing at the node's registration and requeues it, srun (Alloc) runs, nothing drains; the gate ends first" t_a_prolog_longer_than_batch_start_timeout
run_test "--check-config: no Slurm configuration at all, or a local slurm.conf shadowing the configless cache, is NOT READY" t_no_slurm_config_or_a_shadowing_slurm_conf_is_not_ready
run_test "a closed pipe (| head -1): --check-config keeps exit 2, --recheck --dry-run, the worker and nccl-check-plugstack never panic" t_a_closed_pipe_keeps_the_exit_code_and_never_panics
run_test "another user's busy loops of no job and another job's busy task beside a starting job never drain; named by listpids, the comm escaped" t_another_users_busy_cpus_never_drain

# --- a shared node: the cluster again, now with 4 gres GPUs on each node ----------------------
# The GPUs are plain files (slurmd only stats them: the same on 22.05, 24.11 and 26.05); the
# driver directory of make_gpus lists 4 GPUs too, so Slurm's index i is the driver's GPU i.
# Under gpus = "all", GPUs that Slurm gave other jobs are skipped and said so,
# and a stray process on a GPU that is this job's or no job's still counts against the node.
shared_cluster_up() {
    bash "$REPO/slurm/test-cluster/down.sh" >/dev/null 2>&1
    mkdir -p "$CL/dev" && for i in 0 1 2 3; do : > "$CL/dev/gpu$i"; done
    printf 'Name=gpu File=%s/dev/gpu[0-3]\n' "$CL" > "$CL/gres.conf"
    NCCL_CHECK_CLUSTER_NODE_EXTRA="Gres=gpu:4" bash "$REPO/slurm/test-cluster/up.sh" --nodes 2 \
        --prolog "$T/bin/prolog.sh" --munge-socket "$CL/munge/munge.socket.2" \
        --conf "AuthInfo=socket=$CL/munge/munge.socket.2,cred_expire=10" --conf "GresTypes=gpu" \
        --conf "SchedulerParameters=nohold_on_prolog_fail" --conf "PrologEpilogTimeout=60" \
        --conf "Epilog=$T/bin/epilog.sh"
}

# gres_of JOB: the job's GPU indices on n1 as slurmctld says (scontrol show job -d).
gres_of() { scontrol show job -d -o "$1" | grep -o ' GRES=[^ ]*' | head -1; }

t_a_shared_node_skips_other_jobs_gpus_and_judges_the_rest() {
    local x a b
    conf 'cache_seconds = 0'           # every prolog measures (X's pass would answer B's)
    # Job A holds GPU1: job X takes GPU0 first and leaves.
    x=$(timeout 20 sbatch --parsable -w n1 --gres=gpu:1 -o /dev/null --wrap 'sleep 300') || { fail "sbatch X"; return; }
    a=$(timeout 20 sbatch --parsable -w n1 --gres=gpu:1 -o /dev/null --wrap "touch $T/work/a-started; sleep 300") \
        || { fail "sbatch A"; return; }
    timeout 30 bash -c "until [ -e $T/work/a-started ]; do sleep 0.3; done" || fail "job $a did not start"
    scancel "$x"; wait_done "$x" 30
    [[ "$(gres_of "$a")" == *"(IDX:1)" ]] || { fail "job $a holds $(gres_of "$a"), not GPU1"; scancel "$a"; return; }
    # Job B's prolog, run by slurmd: GPU1 is skipped, the worker gets the other three.
    : > "$MARKER"
    b=$(submit -w n1 --gres=gpu:1) || { fail "sbatch B"; scancel "$a"; return; }
    wait_done "$b" 60
    [ "$(ran_on "$b")" = n1 ] || fail "job $b did not run on n1"
    grep -q -- "--gpus 0,2,3 env=" "$MARKER" || fail "job $b: worker args: $(cat "$MARKER")"
    grep -q "\"message\": \"PASS job $b on n1: GPUs 0,2,3 (skipped GPU1: allocated to job $a) in " "$T/state/n1/gate.json" \
        || fail "job $b: gate.json: $(cat "$T/state/n1/gate.json")"
    # A stray process on a measured GPU (the report's first: GPU0, given to no job) counts.
    mode n1 busy
    : > "$MARKER"
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=999" prolog_direct
    [ "$RC" = 1 ] || fail "stray on a free GPU: rc $RC (expected the FAIL's 1): $(cat "$ERR")"
    grep -q "skipped GPU1: allocated to job $a" "$ERR" || fail "stray: not said: $(cat "$ERR")"
    local r; r=$(reason_of n1)
    [[ "$r" == "nccl-check:GPU0 busy|"*"(job 999)" ]] || fail "sinfo -R reason of n1: '$r'"
    scontrol update nodename=n1 state=resume >/dev/null 2>&1
    conf 'cache_seconds = 0' 'stray_processes = "warn"'
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=1000" prolog_direct
    [ "$RC" = 0 ] && grep -q "busy: 1 other process.*warned only" "$ERR" || fail "warn: rc $RC, $(cat "$ERR")"
    drained n1 && fail "warn drained n1"
    # Slurm cannot be asked (scontrol fails): every GPU measured, the stray only warned, said why.
    printf '#!/bin/sh\necho "scontrol: broken on purpose" >&2\nexit 1\n' > "$T/bin/scontrol"
    chmod 755 "$T/bin/scontrol"
    conf 'cache_seconds = 0' "scontrol = \"$T/bin/scontrol\""
    : > "$MARKER"
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=1001" prolog_direct
    [ "$RC" = 0 ] && grep -q "Slurm could not say which GPUs other jobs hold (.*broken on purpose" "$ERR" \
        && grep -q "warned only" "$ERR" || fail "Slurm not asked: rc $RC, $(cat "$ERR")"
    grep -q -- "--gpus" "$MARKER" && fail "Slurm not asked: the worker did not get every GPU: $(cat "$MARKER")"
    drained n1 && fail "a stray drained n1 though Slurm could not say whose GPU it is"
    scancel "$a"; wait_done "$a" 30
}

# gres_json JOB: the job's gres_detail as Slurm's JSON says (its name and paths may lie).
gres_json() {
    squeue --json 2>>"$T/squeue-json.err" | python3 -c '
import json, sys
for j in json.load(sys.stdin)["jobs"]:
    if str(j["job_id"]) == sys.argv[1]: print(",".join(j.get("gres_detail") or []))' "$1"
}

# Another user's job whose name, working directory and comment (set at run time
# with scontrol update) read like Slurm's GRES fields chooses nothing: the starting job's GPUs
# are still measured, the other job's GPU is still the one skipped, nothing drains.
t_a_hostile_job_name_workdir_and_comment_choose_nothing_on_a_shared_node() {
    local x a b lie=' Nodes=n1 GRES=gpu:1(IDX:0)' wd
    conf 'cache_seconds = 0'
    wd="$T/work/$lie GRES=gpu:2(IDX:2-3)"
    mkdir -p "$wd" && chmod 777 "$wd" && rm -f "$T/work/hostile-started"
    x=$(timeout 20 sbatch --parsable -w n1 --gres=gpu:1 -o /dev/null --wrap 'sleep 300') || { fail "sbatch X"; return; }
    a=$(timeout 20 sbatch --parsable -w n1 --gres=gpu:1 -J "$lie" -D "$wd" -o /dev/null \
        --wrap "touch $T/work/hostile-started; sleep 300") || { fail "sbatch A"; scancel "$x"; return; }
    timeout 30 bash -c "until [ -e $T/work/hostile-started ]; do sleep 0.3; done" || fail "job $a did not start"
    scancel "$x"; wait_done "$x" 30
    scontrol update jobid="$a" comment="$lie GRES=gpu:4(IDX:0-3)" || fail "scontrol update comment"
    scontrol show job -d -o "$a" | grep -q "Comment=$lie" || fail "job $a's comment not set: $(scontrol show job -o "$a")"
    [ "$(gres_json "$a")" = "gpu:1(IDX:1)" ] || { fail "job $a holds $(gres_json "$a"), not GPU1: $(tail -3 "$T/squeue-json.err" 2>/dev/null)"; scancel "$a"; return; }
    : > "$MARKER"
    b=$(submit -w n1 --gres=gpu:1) || { fail "sbatch B"; scancel "$a"; return; }
    wait_done "$b" 60
    [ "$(ran_on "$b")" = n1 ] || fail "job $b did not run on n1"
    grep -q -- "--gpus 0,2,3 env=" "$MARKER" || fail "job $b: worker args: $(cat "$MARKER")"
    grep -q "\"message\": \"PASS job $b on n1: GPUs 0,2,3 (skipped GPU1: allocated to job $a) in " "$T/state/n1/gate.json" \
        || fail "job $b: gate.json: $(cat "$T/state/n1/gate.json")"
    drained n1 && fail "n1 drained: $(reason_of n1)"
    # A slow result where Slurm cannot say whose a GPU is (its JSON answer cut short): NOT
    # JUDGED, the job runs, nothing drains.
    mode n1 fail
    printf '#!/bin/sh\necho "{\\"jobs\\": [{\\"job_id\\": 1,"\n' > "$T/bin/squeue"
    ln -sf "$(command -v scontrol)" "$T/bin/scontrol"
    chmod 755 "$T/bin/squeue"
    conf 'cache_seconds = 0' "scontrol = \"$T/bin/scontrol\""
    : > "$MARKER"
    EXTRA_ENV="SLURMD_NODENAME=n1 SLURM_JOB_ID=1002" prolog_direct
    [ "$RC" = 0 ] && grep -q "NOT JUDGED job 1002 on n1: all GPUs .*not Slurm's JSON.*not drained, the job runs" "$ERR" \
        || fail "a slow result beside unknown owners: rc $RC, $(cat "$ERR")"
    [ "$(runs_of n1)" = 1 ] || fail "the worker ran $(runs_of n1) times"
    drained n1 && fail "n1 drained though whose GPUs are whose is not known: $(reason_of n1)"
    rm -f "$T/bin/squeue" "$T/bin/scontrol"
    scancel "$a"; wait_done "$a" 30
}

if [ -z "$FILTER" ] || [[ "a shared node" == *"$FILTER"* ]]; then
    if shared_cluster_up; then
        run_test "a shared node (gres): gpus = all skips other jobs' GPUs and says so; a stray on a free GPU still counts" \
            t_a_shared_node_skips_other_jobs_gpus_and_judges_the_rest
        run_test "a shared node (gres): a hostile job name, workdir and comment choose nothing; unknown owners never drain" \
            t_a_hostile_job_name_workdir_and_comment_choose_nothing_on_a_shared_node
    else
        say "the cluster with gres GPUs did not come up"; STARTED=$((STARTED + 2))
    fi
fi

# --- proctrack/cgroup: the cluster again, job processes in the job's cgroup --------------------
# Issue 46's audit: with proctrack/cgroup another job's load is in that job's cgroup, and Slurm's
# `scontrol listpids` reads it from there. Which cgroup plugin slurmd can run depends on the
# machine: where /sys/fs/cgroup is cgroup2 (unified), cgroup/v2 with IgnoreSystemd=yes (no
# systemd here; 26.05 then names the job's directory by its SLUID); where it is a tmpfs of v1
# hierarchies (this machine and CI: the v2 hierarchy beside them at /sys/fs/cgroup/unified has
# no controller but hugetlb), cgroup/v1, the freezer's /slurm_nN/uid_U/job_J. cgroup/v2 cannot
# run on such a machine on any major: tests/README.md says Slurm's words.
CGROUP_PLUGIN=cgroup/v1
[ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] && CGROUP_PLUGIN=cgroup/v2
cgroup_cluster_up() {
    bash "$REPO/slurm/test-cluster/down.sh" >/dev/null 2>&1
    rm -f "$CL/gres.conf"
    printf 'CgroupPlugin=%s\nIgnoreSystemd=yes\n' "$CGROUP_PLUGIN" > "$CL/cgroup.conf"
    NCCL_CHECK_CLUSTER_PROCTRACK=proctrack/cgroup bash "$REPO/slurm/test-cluster/up.sh" --nodes 2 \
        --prolog "$T/bin/prolog.sh" --munge-socket "$CL/munge/munge.socket.2" \
        --conf "AuthInfo=socket=$CL/munge/munge.socket.2,cred_expire=10" \
        --conf "SchedulerParameters=nohold_on_prolog_fail" --conf "PrologEpilogTimeout=60" \
        --conf "Epilog=$T/bin/epilog.sh"
}
# The v1 plugin leaves its empty per-node directories (slurm_n1, slurm_n2) in the machine's
# hierarchies after slurmd stops: removed (rmdir: only empty ones) once the cluster is down.
cgroup_dirs_undo() {
    local d
    for d in /sys/fs/cgroup/*/slurm_n[12] /sys/fs/cgroup/system.slice/n[12]_slurmstepd.scope; do
        [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    true
}

# Another user's CPU-only job whose task is a busy loop, under proctrack/cgroup: its process
# lies in that job's cgroup (asserted: the path Slurm wrote names job_J or, 26.05 with cgroup/v2,
# the job's SLUID). Starting jobs' prologs (real process table) pass and drain nothing, naming the
# loop as that job's: first as `scontrol listpids` says, then with listpids failing (a wrapper),
# from the cgroup path alone (host/src/slurm_job.rs::job_of_cgroup on what real Slurm wrote);
# a real job started on n1 beside it runs there.
t_another_jobs_busy_task_under_proctrack_cgroup_never_drains() {
    local link j jl cg b real
    mkdir -p "$T/evil" && chmod 1777 "$T/evil" && rm -f "$T/evil/cg-loop" "$T/no-listpids"
    link="$T/evil/burn"
    ln -sfn /bin/bash "$link"
    real=$(command -v scontrol)
    printf '#!/bin/sh\nprintf "%%s\\n" "$*" >> %s\n[ "$1" = listpids ] && [ -e %s ] && { echo "listpids: broken on purpose" >&2; exit 1; }\nexec %s "$@"\n' \
        "$T/scontrol-args" "$T/no-listpids" "$real" > "$T/bin/scontrol-rec"
    chmod 755 "$T/bin/scontrol-rec" && ln -sfn "$(command -v squeue)" "$T/bin/squeue" && : > "$T/scontrol-args"
    conf 'fault_root = "/"' 'cache_seconds = 0' "scontrol = \"$T/bin/scontrol-rec\""
    j=$(cd /tmp && timeout 20 runuser -u "$EVIL" -- env SLURM_CONF="$SLURM_CONF" sbatch --parsable -w n1 -n1 \
        -o /dev/null --wrap "exec \"$link\" -c 'echo \$\$ > $T/evil/cg-loop; while :; do :; done'") \
        || { fail "sbatch as $EVIL failed"; return; }
    timeout 30 bash -c "until [ -s $T/evil/cg-loop ]; do sleep 0.3; done" \
        || { fail "job $j's loop did not start: $(squeue -h -j "$j" -o '%T %R' 2>&1), n1: $(reason_of n1)"; scancel "$j"; return; }
    jl=$(cat "$T/evil/cg-loop")
    cg=$(cat "/proc/$jl/cgroup")
    echo "    $CGROUP_PLUGIN: job $j's loop (pid $jl) in $(grep -E 'job_|/s[0-9A-Z]{13}/' <<<"$cg" | tr '\n' ' ')"
    grep -Eq "/job_$j/|/s[0-9A-HJKMNP-TV-Z]{13}/" <<<"$cg" || fail "job $j's loop is in no job's cgroup: $(tr '\n' ' ' <<<"$cg")"
    renice -n -10 -p "$jl" >/dev/null || fail "renice $jl"
    [ -e "/proc/$jl/autogroup" ] && echo -10 > "/proc/$jl/autogroup"
    sleep 1
    # Up to 6 starting jobs each: on a loaded 2-core machine the loop may miss the half CPU that
    # counts as busy in one run (a run that drains, or does not PASS, fails at once).
    local pat="pid $jl (burn), user $EVIL, job $j, "
    starting_jobs_never_drain 9201 "$pat" || starting_jobs_never_drain 9204 "$pat" \
        || fail "job $j's loop was never named as its job's (listpids): $(cat -v "$ERR")"
    grep -q "^listpids \* n1$" "$T/scontrol-args" || fail "scontrol listpids was not asked: $(cat "$T/scontrol-args")"
    touch "$T/no-listpids"
    starting_jobs_never_drain 9211 "$pat" || starting_jobs_never_drain 9214 "$pat" \
        || fail "with listpids failing, job $j's loop was never named from its cgroup: $(cat -v "$ERR")"
    rm -f "$T/no-listpids"
    b=$(submit -w n1) && wait_done "$b" 60
    [ "$(ran_on "$b")" = n1 ] || fail "job $b did not run on n1: $(reason_of n1)"
    drained n1 && fail "job $b's prolog drained n1: $(reason_of n1)"
    scancel "$j"; wait_done "$j" 30
    rm -f "$T/bin/squeue" "$T/bin/scontrol-rec"
}

if [ -z "$FILTER" ] || [[ "proctrack/cgroup" == *"$FILTER"* ]]; then
    if cgroup_cluster_up; then
        run_test "proctrack/cgroup ($CGROUP_PLUGIN): another job's busy task is named as that job's by listpids and by its cgroup path alone, never drains" \
            t_another_jobs_busy_task_under_proctrack_cgroup_never_drains
    else
        say "the cluster with proctrack/cgroup ($CGROUP_PLUGIN) did not come up:"
        grep -h -E 'fatal|error: .*cgroup' "$CL"/log/slurmd-n*.log | tail -4 >&2
        STARTED=$((STARTED + 1))
    fi
    bash "$REPO/slurm/test-cluster/down.sh" >/dev/null 2>&1
    cgroup_dirs_undo
fi

harness_tally "prolog suite" || exit 1
if [ -z "$FILTER" ] && [ "$STARTED" != 30 ]; then
    say "only $STARTED of 30 tests ran"; exit 1
fi
exit 0
