#!/usr/bin/env bash
# End-to-end suite for the --nccl-check SPANK plugin against a real Slurm cluster on this
# machine (slurm/test-cluster/up.sh: munged, slurmctld, 2 slurmd on 127.0.0.1): the host's Slurm
# 22.05, or 24.11/26.05 when tests/matrix/run.sh runs it inside that release's root filesystem.
# Needs root and tests/setup-deps.sh. Builds what is missing (the plugin; the real worker for the
# no-GPU test), brings the cluster up, runs every test, always tears the cluster down, exits
# non-zero if any test failed. Every wait is bounded with `timeout`; all traffic stays on 127.0.0.1.
#
# Usage: bash tests/slurm/run.sh [TEST_NAME_SUBSTRING]
# Env (set by tests/matrix/run.sh): NCCL_CHECK_PLUGIN_SO (the plugin built for this Slurm;
#   default target/release/libnccl_check.so), NCCL_CHECK_FAULT_PLUGIN_SO (its fault-injection
#   build: enables the init-failure test, which is skipped, and says so, without it).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FILTER=${1:-}
CI_USER=${NCCL_CHECK_CI_USER:-ncclci}
TIMEOUT_S=4                          # plugstack timeout= for the suite
DEADLINE_S=$((TIMEOUT_S + 5))        # + KILL_GRACE_SECS (spank-plugin/src/config.rs)
# PASSED FAILED STARTED, fail, harness_run, harness_tally:
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"

say() { echo "run.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }

# --- build ----------------------------------------------------------------------------------
cd "$REPO"
PLUGIN_SO=${NCCL_CHECK_PLUGIN_SO:-$REPO/target/release/libnccl_check.so}
FAULT_SO=${NCCL_CHECK_FAULT_PLUGIN_SO:-}
REAL_WORKER=$REPO/target/release/nccl-check
# The admin's plugin-line check, built with the plugin (tests/matrix/run.sh puts it beside it).
PLUGSTACK_BIN=${NCCL_CHECK_PLUGSTACK_BIN:-$(dirname "$PLUGIN_SO")/nccl-check-plugstack}
if { [ ! -f "$PLUGIN_SO" ] || [ ! -x "$PLUGSTACK_BIN" ]; } && [ -z "${NCCL_CHECK_PLUGIN_SO:-}" ]; then
    say "building the plugin"
    timeout 1200 cargo build --release -p spank-plugin || { say "plugin build failed"; exit 1; }
fi
if [ ! -x "$REAL_WORKER" ]; then
    say "building the real worker (cargo build --release -p bench-core)"
    timeout 1800 cargo build --release -p bench-core || say "real worker build failed; its test will fail"
fi

# --- cluster --------------------------------------------------------------------------------
export NCCL_CHECK_CLUSTER_DIR
NCCL_CHECK_CLUSTER_DIR=$(mktemp -d /var/tmp/nccl-check-ci.XXXXXX)
CL=$NCCL_CHECK_CLUSTER_DIR
chmod 755 "$CL"
CREATED_USER=
cleanup() {
    bash "$REPO/slurm/test-cluster/down.sh" --purge
    [ -n "$CREATED_USER" ] && userdel -r "$CI_USER" 2>/dev/null
    true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! id "$CI_USER" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$CI_USER" && CREATED_USER=1
fi
CI_UID=$(id -u "$CI_USER")

# slurmstepd inherits slurmd's environment: only the fault-injection build reads this (compat.rs).
[ -n "$FAULT_SO" ] && export NCCL_CHECK_FAULT_REMOTE_INIT=1
if ! bash "$REPO/slurm/test-cluster/up.sh" --nodes 2 --plugin "$PLUGIN_SO"; then
    say "cluster did not come up"
    for f in "$CL"/log/*.log; do echo "== $f"; tail -30 "$f"; done >&2
    exit 1
fi
unset NCCL_CHECK_FAULT_REMOTE_INIT
export SLURM_CONF=$CL/slurm.conf
# Slurm of the daemons: "slurm 22.05.8" or "slurm-wlm 24.11.5".
SLURM_VER=$(sinfo --version | grep -o '[0-9][0-9]*\.[0-9][0-9]*' | head -1)
say "Slurm $SLURM_VER, plugin $PLUGIN_SO"
[ -n "$FAULT_SO" ] && install -m 0755 "$FAULT_SO" "$CL/lib/nccl_check_fault.so"
install -m 0755 "$REPO/tests/fake-worker/nccl-check-fake" "$CL/lib/nccl-check-fake"
[ -x "$REAL_WORKER" ] && install -m 0755 "$REAL_WORKER" "$CL/lib/nccl-check"
mkdir -p "$CL/work" && chmod 1777 "$CL/work"
export NCCL_CHECK_FAKE_MARKER=$CL/work/fake.log
install -m 0666 /dev/null "$NCCL_CHECK_FAKE_MARKER"   # workers of every user append to it
cd "$CL/work"                        # a cwd every user can enter (jobs start in it)

SO=$CL/lib/nccl_check.so
conf() { # plugstack arguments for the plugin (re-read by Slurm at every job launch)
    echo "required $SO $*" > "$CL/plugstack.conf.d/zz-nccl-check.conf"
}
default_conf() { conf "worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S port_range=29500-29999"; }

# --- helpers --------------------------------------------------------------------------------
OUT=$CL/work/out ERR=$CL/work/err RC=0
# run_cmd CMD...: runs with a 60 s bound; stdout → $OUT, stderr → $ERR, exit status → $RC.
run_cmd() { timeout 60 "$@" >"$OUT" 2>"$ERR"; RC=$?; }
AS_USER=(runuser -u "$CI_USER" -- env SLURM_CONF="$SLURM_CONF" NCCL_CHECK_FAKE_MARKER="$NCCL_CHECK_FAKE_MARKER")
markers() { local n; n=$(grep -c '^rank=' "$NCCL_CHECK_FAKE_MARKER" 2>/dev/null); echo "${n:-0}"; }
markers_of_job() { grep "^rank=.* job=$1 step=$2 " "$NCCL_CHECK_FAKE_MARKER" 2>/dev/null; }
last_job() { grep -o 'job=[0-9]*' "$NCCL_CHECK_FAKE_MARKER" | tail -1 | cut -d= -f2; }
job_count() { scontrol show jobs -o 2>/dev/null | grep -c '^JobId='; }
expect_rc0() { [ "$RC" = 0 ] || fail "expected rc 0, got $RC; stderr: $(tail -5 "$ERR")"; }
expect_rc_nonzero() { [ "$RC" != 0 ] || fail "expected rc != 0, got 0"; }
expect_err() { grep -qF -- "$1" "$ERR" || fail "stderr lacks '$1'; stderr: $(tail -8 "$ERR")"; }
expect_out() { grep -qF -- "$1" "$OUT" || fail "stdout lacks '$1'; stdout: $(head -5 "$OUT")"; }
daemons_alive() {
    local f
    for f in "$CL"/run/slurmctld.pid "$CL"/run/slurmd-n1.pid "$CL"/run/slurmd-n2.pid; do
        kill -0 "$(cat "$f")" 2>/dev/null || fail "daemon from $f is gone" || return 1
    done
}
idle() { timeout 30 bash -c 'until [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge 2 ]; do sleep 0.3; done'; }

run_test() { # name function
    local name=$1
    [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]] && return 0
    default_conf
    unset NCCL_CHECK_FAKE NCCL_CHECK_FAKE_FAIL_RANK NCCL_CHECK_FAKE_OTHERS
    idle || say "nodes not idle before $name"
    harness_run "$name" "$2"
}

# --- tests ----------------------------------------------------------------------------------
t_help_lists_option() {
    local help
    for cmd in srun sbatch salloc; do
        # Captured first: `cmd --help | grep -q` under pipefail fails when grep exits early and
        # cmd dies of SIGPIPE (seen with 24.11's longer sbatch --help).
        help=$(timeout 20 "$cmd" --help 2>&1)
        grep -q -- '--nccl-check=mode' <<<"$help" || fail "$cmd --help lacks --nccl-check"
        # The usage text reads as a sentence, not a "[nccl-check]" tag.
        grep -q -- '\[nccl-check\]' <<<"$help" && fail "$cmd --help still shows [nccl-check]"
        grep -q -- 'Before the tasks start, check the NCCL bandwidth' <<<"$help" || fail "$cmd --help lacks the usage text"
    done
}

t_pass_runs_worker_on_both_nodes() {
    local before; before=$(markers)
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 -w n1,n2 --nccl-check hostname
    expect_rc0
    [ "$(grep -c . "$OUT")" = 2 ] || fail "expected 2 hostname lines: $(cat "$OUT")"
    expect_err "nccl-check: PASS (quick, 2 ranks)"
    [ "$(markers)" = $((before + 2)) ] || fail "expected 2 worker runs, got $(( $(markers) - before ))"
    local job; job=$(last_job)
    # No explicit --rendezvous: the worker derives it from the step; the site's range is passed.
    markers_of_job "$job" 0 | grep -q '^rank=0 world=2 rendezvous=derived plan=quick node=n1 ' || fail "rank 0 on n1 missing: $(markers_of_job "$job" 0)"
    markers_of_job "$job" 0 | grep -q '^rank=1 world=2 rendezvous=derived plan=quick node=n2 ' || fail "rank 1 on n2 missing"
    [ "$(markers_of_job "$job" 0 | grep -c ' port_range=29500-29999 ')" = 2 ] || fail "port_range= did not reach both workers: $(markers_of_job "$job" 0)"
    # rank 0's worker output reaches the user as it comes (progress), the others' does not.
    expect_err "fake worker: all_reduce 256 MiB ok"
    [ "$(grep -c 'fake worker: all_reduce' "$ERR")" = 1 ] || fail "expected only rank 0's worker output: $(cat "$ERR")"
    markers_of_job "$job" 0 | grep -q '^rank=0 .* progress=1 ' || fail "rank 0 did not get --progress"
    markers_of_job "$job" 0 | grep -q '^rank=1 .* progress=0 ' || fail "rank 1 got --progress"
}

t_each_step_gets_its_own_secret() {
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check true
    expect_rc0
    local job; job=$(last_job)
    local a; a=$(markers_of_job "$job" 0 | grep -o 'secret=[^ ]*' | sort -u)
    [ "$(echo "$a" | wc -l)" = 1 ] || fail "the ranks of one step got different secrets: $a"
    [ "$a" != "secret=unset" ] || fail "the worker got no NCCL_CHECK_SECRET"
    markers_of_job "$job" 0 | grep -q 'transport=set' && fail "srun's transport variable reached the worker"
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check true
    expect_rc0
    local b; b=$(markers_of_job "$(last_job)" 0 | grep -o 'secret=[^ ]*' | sort -u)
    [ "$b" != "secret=unset" ] && [ "$a" != "$b" ] || fail "two steps got the same secret ($a, $b)"
    # --export=NONE passes only SLURM_* variables: the secret still arrives.
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --export=NONE --nccl-check /bin/true
    expect_rc0
    markers_of_job "$(last_job)" 0 | grep -q 'secret=unset' && fail "--export=NONE lost the secret: $(markers_of_job "$(last_job)" 0)"
    # The user's program never sees it, and srun never prints it.
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check /usr/bin/env
    expect_rc0
    grep -q 'NCCL_CHECK_SECRET' "$OUT" && fail "the task's environment holds the secret: $(grep SECRET "$OUT")"
    grep -qi 'secret=' "$ERR" && fail "the secret was printed: $(cat "$ERR")"
    true
}

t_mode_names_any_case_and_a_detached_mode_is_refused() {
    NCCL_CHECK_FAKE=pass run_cmd srun -N1 --nccl-check=FULL true
    expect_rc0
    markers_of_job "$(last_job)" 0 | grep -q 'plan=full' || fail "--nccl-check=FULL did not run plan full"
    local before markers_before
    before=$(job_count)
    markers_before=$(markers)
    for cmd in "srun -N2 --nccl-check quick true" "salloc -N2 --nccl-check warn true"; do
        run_cmd $cmd
        expect_rc_nonzero
        expect_err "did you mean --nccl-check="
    done
    # sbatch opens its script ('full') before any plugin runs: refused there, with sbatch's words.
    run_cmd sbatch -N2 --nccl-check full /bin/true
    expect_rc_nonzero
    [ "$(job_count)" = "$before" ] || fail "a job was created for '--nccl-check quick'"
    [ "$(markers)" = "$markers_before" ] || fail "the worker ran for '--nccl-check quick'"
}

t_site_nccl_lib_unless_the_user_names_one() {
    conf "worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S nccl_lib=/opt/site/libnccl.so.2"
    NCCL_CHECK_FAKE=pass run_cmd env -u NCCL_CHECK_NCCL_LIB srun -N2 --nccl-check true
    expect_rc0
    [ "$(markers_of_job "$(last_job)" 0 | grep -c 'nccl_lib=/opt/site/libnccl.so.2$')" = 2 ] || fail "nccl_lib= did not reach the workers: $(markers_of_job "$(last_job)" 0)"
    NCCL_CHECK_NCCL_LIB=/home/me/libnccl.so.2 NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check true
    expect_rc0
    [ "$(markers_of_job "$(last_job)" 0 | grep -c 'nccl_lib=/home/me/libnccl.so.2$')" = 2 ] || fail "the user's NCCL_CHECK_NCCL_LIB did not win"
}

t_verbose_table_and_kept_reports() {
    local dir=$CL/work/reports.$$
    mkdir -p "$dir"
    NCCL_CHECK_REPORT_DIR=$dir NCCL_CHECK_FAKE=fail NCCL_CHECK_FAKE_FAIL_RANK=1 run_cmd srun -N2 -w n1,n2 --nccl-check=warn,verbose true
    expect_rc0
    local job; job=$(last_job)
    expect_err "nccl-check: node"
    grep -Eq '^nccl-check: n1 +0/2 PASS ' "$ERR" || fail "no PASS row for n1: $(cat "$ERR")"
    grep -Eq '^nccl-check: n2 +1/2 FAIL ' "$ERR" || fail "no FAIL row for n2: $(cat "$ERR")"
    [ -f "$dir/nccl-check-$job.0-n1-rank0.json" ] && [ -f "$dir/nccl-check-$job.0-n2-rank1.json" ] \
        || fail "reports not kept: $(ls "$dir")"
    grep -q '"verdict":"FAIL"' "$dir/nccl-check-$job.0-n2-rank1.json" || fail "the kept report is not rank 1's"
    # Without verbose there is no table; the site default turns it on.
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 -w n1,n2 --nccl-check true
    grep -q '^nccl-check: node' "$ERR" && fail "a table without verbose"
    conf "worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S verbose=1 report_dir=$dir"
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 -w n1,n2 --nccl-check true
    expect_rc0
    expect_err "nccl-check: node"
    [ -f "$dir/nccl-check-$(last_job).0-n2-rank1.json" ] || fail "report_dir= did not keep the reports"
    rm -rf "$dir"
}

# slurm/README.md "Install from source", step by step, into this cluster's plugstack directory
# (the plugin goes into Slurm's real PluginDir, as on a node; a file already there is restored).
t_documented_install_steps_work_and_a_wrong_path_breaks_nothing() {
    local snippet=$CL/plugstack.conf.d/zz-nccl-check.conf
    # The shipped file as is (no PluginDir filled in): plain jobs still run.
    sed "s|worker=[^ ]*|worker=$CL/lib/nccl-check-fake|" "$REPO/slurm/plugstack.conf.d/zz-nccl-check.conf" > "$snippet"
    run_cmd srun -N2 true
    expect_rc0
    local PLUGINDIR; PLUGINDIR=$(scontrol show config | awk '$1 == "PluginDir" {print $3}')
    [ -d "$PLUGINDIR" ] || { fail "scontrol show config gave no PluginDir ('$PLUGINDIR')"; return; }
    local so=$PLUGINDIR/nccl_check.so backup=
    [ -e "$so" ] && { backup=$CL/work/nccl_check.so.orig; cp -a "$so" "$backup"; }
    install -m 0755 "$PLUGIN_SO" "$so"
    sed "s|@PLUGINDIR@|$PLUGINDIR|; s|worker=[^ ]*|worker=$CL/lib/nccl-check-fake|" \
        "$REPO/slurm/plugstack.conf.d/zz-nccl-check.conf" > "$snippet"
    if timeout 20 srun --help 2>&1 | grep -- --nccl-check >/dev/null; then
        sed -i 's/^optional /required /' "$snippet"
    else
        fail "srun --help does not list --nccl-check after the documented steps"
    fi
    grep -q "^required $so " "$snippet" || fail "the snippet is not required $so: $(grep -v '^#' "$snippet")"
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check true
    expect_rc0
    expect_err "nccl-check: PASS (quick, 2 ranks)"
    if [ -n "$backup" ]; then cp -a "$backup" "$so"; else rm -f "$so"; fi
}

t_sbatch_checks_the_allocation_before_the_script() {
    NCCL_CHECK_FAKE=pass run_cmd sbatch -N2 --nccl-check --wait -o "$CL/work/batch-%j.out" --wrap 'echo script-started'
    expect_rc0
    local job; job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    [ "$(markers_of_job "$job" 0 | wc -l)" = 2 ] || fail "the allocation check did not run one worker per node: $(markers_of_job "$job" 0)"
    grep -q "nccl-check: PASS (allocation" "$CL/work/batch-$job.out" || fail "no allocation PASS line: $(cat "$CL/work/batch-$job.out")"
    [ "$(grep -n 'PASS (allocation' "$CL/work/batch-$job.out" | cut -d: -f1)" -lt "$(grep -n script-started "$CL/work/batch-$job.out" | cut -d: -f1)" ] \
        || fail "the script started before the check"
    run_cmd sbatch -N2 --nccl-check --wait -o "$CL/work/batch-%j.out" --export=ALL,NCCL_CHECK_FAKE=fail --wrap 'echo script-started'
    expect_rc_nonzero
    job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    grep -q "script-started" "$CL/work/batch-$job.out" && fail "the batch script ran after a FAIL"
    grep -q "nccl-check: FAIL in the allocation check" "$CL/work/batch-$job.out" || fail "no FAIL line: $(cat "$CL/work/batch-$job.out")"
    # One node FAILs while the other's worker still runs: srun kills that one (batch.rs
    # PEERS_GRACE_S) and its exit is then 137, not 1. Still a FAIL naming n1 (a CI run saw ERROR
    # here, and with --kill-on-bad-exit the worker's FAIL line was lost in half the runs).
    run_cmd sbatch -N2 -w n1,n2 --nccl-check --wait -o "$CL/work/batch-%j.out" \
        --export=ALL,NCCL_CHECK_FAKE=fail,NCCL_CHECK_FAKE_FAIL_RANK=0,NCCL_CHECK_FAKE_OTHERS=hang --wrap 'echo script-started'
    expect_rc_nonzero
    job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    grep -q "script-started" "$CL/work/batch-$job.out" && fail "the batch script ran after a FAIL"
    grep -q "nccl-check: FAIL in the allocation check: .*responsible: n1 GPU" "$CL/work/batch-$job.out" \
        || fail "a peer terminated by srun turned the FAIL into: $(cat "$CL/work/batch-$job.out")"
    conf "worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S batch_check=0"
    run_cmd sbatch -N2 --nccl-check --wait -o "$CL/work/batch-%j.out" --wrap 'echo script-started'
    expect_rc0
    job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    [ "$(markers_of_job "$job" 0 | wc -l)" = 0 ] || fail "batch_check=0 still checked the allocation"
}

t_full_mode_and_default_mode() {
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check=full true
    expect_rc0
    markers_of_job "$(last_job)" 0 | grep -q 'plan=full' || fail "--nccl-check=full did not run plan full"
    conf "worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S default_mode=full"
    NCCL_CHECK_FAKE=pass run_cmd srun -N1 --nccl-check true
    expect_rc0
    markers_of_job "$(last_job)" 0 | grep -q 'plan=full' || fail "default_mode=full not used for a bare --nccl-check"
}

t_fail_fails_step_with_message() {
    NCCL_CHECK_FAKE=fail NCCL_CHECK_FAKE_FAIL_RANK=1 run_cmd srun -N2 -w n1,n2 --nccl-check hostname
    expect_rc_nonzero
    expect_err "nccl-check: FAIL on n2 (rank 1 of 2): all_reduce 256 MiB busbw 12.3 < 300.0 GB/s (4% of the floor); responsible: n2 GPU"
    grep -q "FAIL on n1" "$ERR" && fail "rank 0 passed but was reported as FAIL"
    [ "$(grep -c . "$OUT")" -le 1 ] || fail "the failing task still ran: $(cat "$OUT")"
}

t_site_plan_passes_through() {
    NCCL_CHECK_FAKE_PLANS="full quick site_nvlink" NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check=plan=site_nvlink true
    expect_rc0
    expect_err "nccl-check: PASS (site_nvlink, 2 ranks)"
    [ "$(markers_of_job "$(last_job)" 0 | grep -c ' plan=site_nvlink ')" = 2 ] || fail "plan=site_nvlink did not reach both ranks"
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check=plan=nope true
    expect_rc_nonzero
    expect_err "unknown plan 'nope' (plans: full, quick)"
    local before; before=$(job_count)
    run_cmd srun -N2 --nccl-check=plan=Not/A/Plan true
    expect_rc_nonzero
    expect_err "nccl-check: invalid --nccl-check value 'plan=Not/A/Plan': invalid plan name"
    [ "$(job_count)" = "$before" ] || fail "a job was created for a malformed plan name"
}

t_warn_reports_and_runs() {
    NCCL_CHECK_FAKE=fail run_cmd srun -N2 --nccl-check=warn hostname
    expect_rc0
    expect_err "(warn mode: the task runs anyway)"
    [ "$(grep -c . "$OUT")" = 2 ] || fail "tasks did not run in warn mode"
}

t_hang_killed_at_deadline() {
    local start=$SECONDS
    NCCL_CHECK_FAKE=hang run_cmd srun -N2 --nccl-check hostname
    local took=$((SECONDS - start))
    expect_rc_nonzero
    expect_err "worker did not finish within $DEADLINE_S s"
    expect_err "process group was killed"
    [ "$took" -ge $((DEADLINE_S - 1)) ] || fail "step ended after $took s, before the deadline"
    [ "$took" -le $((DEADLINE_S + 15)) ] || fail "step took $took s (deadline $DEADLINE_S s + 15 s slack)"
    local pids; pids=$(grep "^hang " "$NCCL_CHECK_FAKE_MARKER" | tail -2 | sed 's/.*child=\([0-9]*\) worker=\([0-9]*\)/\1 \2/')
    [ -n "$pids" ] || fail "the hanging worker left no pids"
    for p in $pids; do
        [ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" = "" ] || [ "$(ps -o stat= -p "$p" | cut -c1)" = Z ] \
            || fail "process $p of the hung worker survived"
    done
    daemons_alive
}

t_crash_fails_step_daemons_stay_up() {
    NCCL_CHECK_FAKE=crash run_cmd srun -N2 --nccl-check hostname
    expect_rc_nonzero
    expect_err "worker killed by signal 11 (SIGSEGV)"
    daemons_alive
    run_cmd srun -N2 true
    expect_rc0
}

t_real_worker_without_gpu_reports_error() {
    [ -x "$CL/lib/nccl-check" ] || fail "real worker $REAL_WORKER was not built"
    conf "worker=$CL/lib/nccl-check timeout=30"
    run_cmd srun -N2 --nccl-check hostname
    expect_rc_nonzero
    expect_err "nccl-check: ERROR on n"
    # Contract: no GPU → exit 4 "no usable GPU". Without NCCL installed (CI) the worker may stop
    # one step earlier with exit 3 "NCCL library missing"; both are ERROR with the worker's text.
    grep -Eq "nccl-check: ERROR on n[12] \(rank [01] of 2\): .*(GPU|NCCL).*\[worker exit [34]\]" "$ERR" \
        || fail "expected the worker's no-GPU/no-NCCL ERROR (exit 4 or 3): $(tail -5 "$ERR")"
}

t_worker_missing_is_error() {
    conf "worker=/nonexistent/nccl-check timeout=$TIMEOUT_S"
    run_cmd srun -N2 --nccl-check true
    expect_rc_nonzero
    expect_err "cannot start the worker /nonexistent/nccl-check"
}

t_sbatch_option_reaches_inner_srun() {
    run_cmd sbatch -N2 --nccl-check --wait -o "$CL/work/batch-%j.out" \
        --wrap 'srun -N2 true; echo inner-rc=$?'
    expect_rc0
    local job; job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    # step 0 is the allocation check, step 1 the script's srun
    [ "$(markers_of_job "$job" 1 | wc -l)" = 2 ] || fail "inner srun (step 1) of job $job ran the worker $(markers_of_job "$job" 1 | wc -l) times"
    grep -q "^rank=.* job=$job step=4294967291 " "$NCCL_CHECK_FAKE_MARKER" && fail "the batch step itself ran the worker"
    grep -q "inner-rc=0" "$CL/work/batch-$job.out" || fail "inner srun failed: $(cat "$CL/work/batch-$job.out")"
}

t_inner_step_can_turn_it_off() {
    conf "worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S batch_check=0"
    run_cmd sbatch -N2 --nccl-check --wait -o "$CL/work/batch-%j.out" \
        --wrap 'srun -N2 --nccl-check=off true; srun -N2 true'
    expect_rc0
    local job; job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    [ "$(markers_of_job "$job" 0 | wc -l)" = 0 ] || fail "step 0 had --nccl-check=off but ran the worker"
    [ "$(markers_of_job "$job" 1 | wc -l)" = 2 ] || fail "step 1 should still inherit the option"
}

t_sbatch_failing_check_fails_inner_step() {
    conf "worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S batch_check=0"
    run_cmd sbatch -N2 --nccl-check --wait -o "$CL/work/batch-%j.out" \
        --export=ALL,NCCL_CHECK_FAKE=fail --wrap 'srun -N2 true; echo inner-rc=$?'
    local job; job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    grep -q "inner-rc=[1-9]" "$CL/work/batch-$job.out" || fail "inner srun did not fail: $(cat "$CL/work/batch-$job.out")"
    grep -q "nccl-check: FAIL on n" "$CL/work/batch-$job.out" || fail "no FAIL summary in the job output"
}

t_salloc_option_reaches_srun() {
    run_cmd salloc -N2 --nccl-check srun -N2 true
    expect_rc0
    local job; job=$(last_job)
    [ "$(markers_of_job "$job" 0 | wc -l)" = 2 ] || fail "srun inside salloc did not run the worker on 2 nodes"
    run_cmd salloc -N2 --nccl-check srun -N2 --nccl-check=off true
    expect_rc0
    [ "$(last_job)" = "$job" ] || fail "srun --nccl-check=off inside salloc ran the worker"
    # The issue's finding 6: salloc's own command (here: on this host) checks nothing, and says so.
    run_cmd salloc -N1 --nccl-check hostname
    expect_rc0
    expect_err "nccl-check: salloc does not check the allocation itself"
    expect_err "sbatch --nccl-check"
    [ "$(last_job)" = "$job" ] || fail "salloc hostname ran the worker"
    run_cmd salloc -N1 hostname
    ! grep -q 'nccl-check' "$ERR" || fail "salloc without the option mentions nccl-check: $(cat "$ERR")"
}

# The issue's finding 9: --nccl-check=help was refused as an invalid mode.
t_help_value_lists_the_modes_and_runs_nothing() {
    local before; before=$(job_count)
    # It once arrived as `srun: error:` lines with rc 1; a question answered is a success.
    local cmd
    for cmd in "srun -N1 --nccl-check=help true" "sbatch -N1 --nccl-check=help --wrap true" \
               "salloc -N1 --nccl-check=help true"; do
        # shellcheck disable=SC2086 # the words of $cmd are the command and its options
        run_cmd $cmd
        expect_rc0
        grep -qF -- "nccl-check: --nccl-check[=MODE][,verbose]: " "$OUT" || fail "$cmd: no help on stdout: $(cat "$OUT" "$ERR")"
        grep -qF -- "nccl-check: modes: quick, full, warn, off" "$OUT" || fail "$cmd: no modes on stdout: $(cat "$OUT")"
        grep -qF -- "nccl-check: nothing was run (this was --nccl-check=help)" "$OUT" || fail "$cmd: $(cat "$OUT")"
        ! grep -q 'error' "$ERR" || fail "$cmd: help said as an error: $(cat "$ERR")"
        ! grep -q 'invalid --nccl-check value' "$ERR" || fail "help was refused as invalid: $(cat "$ERR")"
    done
    [ "$(job_count)" = "$before" ] || fail "--nccl-check=help submitted a job"
}

t_invalid_values_rejected_before_allocation() {
    local before; before=$(job_count)
    for cmd in "srun -N2 --nccl-check=bogus true" "sbatch -N2 --nccl-check=bogus --wrap true" \
               "salloc -N2 --nccl-check=bogus true" "srun -N1 --nccl-check= --nccl-check=QUICKLY true"; do
        run_cmd $cmd
        expect_rc_nonzero
        expect_err "nccl-check: invalid --nccl-check value"
    done
    [ "$(job_count)" = "$before" ] || fail "a job was created for an invalid value"
}

t_no_option_never_runs_worker() {
    local before; before=$(markers)
    NCCL_CHECK_FAKE=fail run_cmd srun -N2 hostname
    expect_rc0
    run_cmd sbatch -N2 --wait -o /dev/null --wrap 'srun -N2 true'
    expect_rc0
    NCCL_CHECK_FAKE=fail run_cmd srun -N2 --nccl-check=off true
    expect_rc0
    [ "$(markers)" = "$before" ] || fail "the worker ran without --nccl-check"
    grep -q "nccl-check" "$ERR" && fail "the plugin printed something without the option: $(cat "$ERR")"
    true
}

t_non_root_user_jobs_work() {
    "${AS_USER[@]}" true || fail "cannot run as $CI_USER"
    NCCL_CHECK_FAKE=pass run_cmd "${AS_USER[@]}" srun -N2 --nccl-check id -u
    expect_rc0
    [ "$(sort -u "$OUT")" = "$CI_UID" ] || fail "tasks ran as $(sort -u "$OUT" | tr '\n' ' ')"
    markers_of_job "$(last_job)" 0 | grep -qv "uid=$CI_UID " && fail "the worker did not run as $CI_USER"
    NCCL_CHECK_FAKE=fail run_cmd "${AS_USER[@]}" srun -N2 --nccl-check true
    expect_rc_nonzero
    expect_err "nccl-check: FAIL on n"
    run_cmd "${AS_USER[@]}" sbatch -N2 --nccl-check --wait -o "$CL/work/user-%j.out" --wrap 'srun -N2 true'
    expect_rc0
    local job; job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    [ "$(markers_of_job "$job" 0 | grep -c "uid=$CI_UID ")" = 2 ] || fail "$CI_USER's batch step did not check as $CI_USER"
}

t_required_plugin_with_bad_config_keeps_plain_jobs_working() {
    conf "worker=$CL/lib/nccl-check-fake treshold=3"
    run_cmd srun -N2 true
    expect_rc0
    run_cmd sbatch -N1 --wait -o /dev/null --wrap true
    expect_rc0
    run_cmd srun -N2 --nccl-check true
    expect_rc_nonzero
    expect_err "nccl-check: plugstack.conf argument 'treshold=3': unknown argument 'treshold'"
}

t_sharp_refused_unless_allowed() {
    local before; before=$(job_count)
    local markers_before; markers_before=$(markers)
    for cmd in "srun -N2 --nccl-check=sharp true" "sbatch -N2 --nccl-check=sharp --wrap true" \
               "salloc -N2 --nccl-check=sharp true"; do
        run_cmd $cmd
        expect_rc_nonzero
        expect_err "nccl-check: --nccl-check=sharp is not allowed on this cluster"
    done
    [ "$(job_count)" = "$before" ] || fail "a job was created for a refused sharp check"
    [ "$(markers)" = "$markers_before" ] || fail "the worker ran for a refused sharp check"
    # The default (allow_sharp=0) also keeps SHARP off in the ordinary check.
    NCCL_COLLNET_ENABLE=1 run_cmd srun -N1 --nccl-check true
    expect_rc0
    markers_of_job "$(last_job)" 0 | grep -q 'expect_collnet=0 collnet_env=0 ' \
        || fail "allow_sharp=0 did not force NCCL_COLLNET_ENABLE=0: $(markers_of_job "$(last_job)" 0)"
}

t_sharp_allowed_passes_expect_collnet() {
    conf "worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S allow_sharp=1"
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check=sharp true
    expect_rc0
    expect_err "nccl-check: PASS (quick, 2 ranks)"
    local job; job=$(last_job)
    [ "$(markers_of_job "$job" 0 | grep -c 'plan=quick .* expect_collnet=1 collnet_env=unset ')" = 2 ] \
        || fail "both ranks should get --expect-collnet: $(markers_of_job "$job" 0)"
    NCCL_CHECK_FAKE=pass run_cmd srun -N2 --nccl-check true
    expect_rc0
    markers_of_job "$(last_job)" 0 | grep -q 'expect_collnet=1' && fail "quick mode passed --expect-collnet"
    # sbatch --nccl-check=sharp reaches the inner step; a failure fails it.
    run_cmd sbatch -N2 --nccl-check=sharp --wait -o "$CL/work/batch-%j.out" --wrap 'srun -N2 true; echo inner-rc=$?'
    expect_rc0
    job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    [ "$(markers_of_job "$job" 0 | grep -c 'expect_collnet=1')" = 2 ] || fail "the allocation check of sbatch --nccl-check=sharp lacks --expect-collnet"
    [ "$(markers_of_job "$job" 1 | grep -c 'expect_collnet=1')" = 2 ] || fail "inner step of sbatch --nccl-check=sharp lacks --expect-collnet"
    NCCL_CHECK_FAKE=fail run_cmd srun -N2 --nccl-check=sharp true
    expect_rc_nonzero
    expect_err "nccl-check: FAIL on n"
}

t_init_failure_drains_no_node_on_25_05_and_later() {
    [ -n "$FAULT_SO" ] || { echo "    skipped: no NCCL_CHECK_FAULT_PLUGIN_SO (tests/matrix/run.sh builds one)"; return 0; }
    # The fault-injection build fails slurm_spank_init in slurmstepd (slurmd's environment has
    # NCCL_CHECK_FAULT_REMOTE_INIT=1); that is where a required plugin's error drains a node.
    echo "required $CL/lib/nccl_check_fault.so worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S" \
        > "$CL/plugstack.conf.d/zz-nccl-check.conf"
    run_cmd sbatch -N1 -w n1 --no-requeue --wait -o /dev/null --wrap true
    local job; job=$(grep -o '[0-9]*$' "$OUT" | tail -1)
    default_conf
    [ -n "$job" ] || { fail "sbatch printed no job id: $(cat "$OUT" "$ERR")"; return 1; }
    local jstate; jstate=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*')
    scancel "$job" 2>/dev/null
    # From 23.11 on such a job fails and sbatch --wait exits non-zero (Slurm's changelog); 22.05
    # reports it COMPLETED with rc 0 (observed), and only the log and the drain below show it.
    if [ "$(printf '%s\n23.11\n' "$SLURM_VER" | sort -V | head -1)" = 23.11 ]; then
        [ "$jstate" != JobState=COMPLETED ] || fail "job $job completed although slurm_spank_init failed"
        [ "$RC" != 0 ] || fail "sbatch --wait exited 0 although slurm_spank_init failed ($jstate)"
    fi
    timeout 20 bash -c "until grep -q 'nccl_check_fault.so: init() failed' $CL/log/slurmd-n1.log; do sleep 0.3; done" \
        || fail "slurmd-n1.log does not show the injected init() failure"
    local state reason
    sleep 2                      # slurmctld handles the batch completion message
    state=$(sinfo -h -n n1 -o %T); reason=$(sinfo -h -R -n n1 -o %E)
    if [ "$(printf '%s\n25.05\n' "$SLURM_VER" | sort -V | head -1)" = 25.05 ]; then
        [[ "$state" != drain* ]] || fail "Slurm $SLURM_VER drained n1 ($reason) despite slurm_spank_init_failure_mode"
        echo "    Slurm $SLURM_VER: job $job $jstate (sbatch rc $RC), n1 stays $state"
    else
        # The control: without the failure mode (before 25.05) the same failure drains the node,
        # so the test above can fail. Resume it for the next tests.
        [[ "$state" == drain* ]] && [ "$reason" = "batch job complete failure" ] \
            || fail "Slurm $SLURM_VER: expected the pre-25.05 drain, got state $state reason '$reason'"
        echo "    Slurm $SLURM_VER (no failure mode): job $job $jstate (sbatch rc $RC), n1 drained with '$reason', as documented; resumed"
        scontrol update nodename=n1 state=resume
    fi
}

# Regression: a typo on the plugin line showed only when a user ran --nccl-check. The
# admin's check reads the plugstack Slurm reads (SLURM_CONF's PlugStackConfig and its include)
# and names it with the plugin's own parser; a valid line gives its effective arguments.
t_plugstack_check_names_a_typo_where_slurm_reads_it() {
    [ -x "$PLUGSTACK_BIN" ] || { fail "$PLUGSTACK_BIN was not built"; return 1; }
    local line=$CL/plugstack.conf.d/zz-nccl-check.conf
    conf "worker=$CL/lib/nccl-check-fake timout=120"
    run_cmd "$PLUGSTACK_BIN" --check
    [ "$RC" = 2 ] || fail "a typo gave exit $RC, not 2: $(cat "$OUT" "$ERR")"
    expect_out "# plugstack: $CL/plugstack.conf (PlugStackConfig at $SLURM_CONF:"
    expect_out "INVALID $line:1: unknown argument 'timout' (did you mean 'timeout'?)"
    # What a user would have met: the same sentence, from the same parser, in the plugin.
    run_cmd srun -N1 --nccl-check true
    expect_rc_nonzero
    expect_err "unknown argument 'timout' (did you mean 'timeout'?)"
    default_conf
    run_cmd "$PLUGSTACK_BIN" --check
    expect_rc0
    expect_out "# $line:1: worker=$CL/lib/nccl-check-fake timeout=$TIMEOUT_S port_range=29500-29999"
    run_cmd "$PLUGSTACK_BIN" --help
    expect_rc0
    expect_out "Exit codes: 0 valid"
}

# Regression: a failing check printed its ERROR twice (the worker's own verdict line,
# copied live, then the plugin's), three times with ,verbose (the table row too), and the row
# cut the sentence after 160 characters. Now: once, whole, in the row when there is a table.
t_a_failing_check_says_it_once_and_whole() {
    NCCL_CHECK_FAKE=error run_cmd srun -N1 -w n1 --nccl-check true
    expect_rc_nonzero
    [ "$(grep -c 'rendezvous: no peer' "$ERR")" = 1 ] || fail "the ERROR is not shown exactly once: $(grep nccl-check "$ERR")"
    expect_err "nccl-check: ERROR on n1 (rank 0 of 1): rendezvous: no peer"
    NCCL_CHECK_FAKE=error run_cmd srun -N1 -w n1 --nccl-check=quick,verbose true
    expect_rc_nonzero
    [ "$(grep -c 'rendezvous: no peer' "$ERR")" = 1 ] || fail "with verbose the ERROR is not shown exactly once: $(grep nccl-check "$ERR")"
    grep -Eq '^nccl-check: n1 +0/1 ERROR .*rendezvous: no peer' "$ERR" || fail "no ERROR row: $(grep nccl-check "$ERR")"
    NCCL_CHECK_FAKE=pass run_cmd srun -N1 -w n1 --nccl-check true
    expect_rc0
    [ "$(grep -c 'nccl-check: PASS' "$ERR")" = 1 ] || fail "the PASS is not shown exactly once: $(grep nccl-check "$ERR")"
    # The real worker's long sentence (its tries) in the row, not cut mid-word.
    [ -x "$CL/lib/nccl-check" ] || { fail "real worker $REAL_WORKER was not built"; return; }
    conf "worker=$CL/lib/nccl-check timeout=30"
    NCCL_CHECK_NCCL_LIB=/nonexistent/user-dir/libnccl.so.2 run_cmd srun -N1 -w n1 --nccl-check=quick,verbose true
    expect_rc_nonzero
    [ "$(grep -c 'NCCL library not found' "$ERR")" = 1 ] || fail "the real worker's ERROR is not shown exactly once: $(grep nccl-check "$ERR")"
    grep -Eq '^nccl-check: n1 +0/1 ERROR .*/nonexistent/user-dir/libnccl.so.2: .*No such file or directory\).*\[worker exit 3\]' "$ERR" \
        || fail "the row does not hold the whole sentence: $(grep nccl-check "$ERR")"
}

# Regression: the hint named --nccl-lib, which a user cannot pass through srun. It names
# what is true: the user's NCCL_CHECK_NCCL_LIB when that is what failed, else that variable and
# the plugin line's nccl_lib= (the admin's), saying which one was tried.
t_the_nccl_hint_names_what_a_srun_user_can_set() {
    [ -x "$CL/lib/nccl-check" ] || { fail "real worker $REAL_WORKER was not built"; return; }
    conf "worker=$CL/lib/nccl-check timeout=30"
    NCCL_CHECK_NCCL_LIB=/nonexistent/user-dir/libnccl.so.2 run_cmd srun -N1 --nccl-check true
    expect_rc_nonzero
    grep -q -- '--nccl-lib' "$ERR" && fail "the hint names --nccl-lib: $(grep nccl-check "$ERR")"
    expect_err "NCCL_CHECK_NCCL_LIB=/nonexistent/user-dir/libnccl.so.2 (your environment)"
    conf "worker=$CL/lib/nccl-check timeout=30 nccl_lib=/nonexistent/site-dir/libnccl.so.2"
    run_cmd srun -N1 --nccl-check true
    expect_rc_nonzero
    grep -q -- '--nccl-lib' "$ERR" && fail "the hint names --nccl-lib: $(grep nccl-check "$ERR")"
    expect_err "nccl_lib=/nonexistent/site-dir/libnccl.so.2 on the plugin line"
    expect_err "NCCL_CHECK_NCCL_LIB"
}

# Regression: the batch log doubled the prefix ("FAIL in the allocation check:
# nccl-check: FAIL ..."), repeated the worker's line and showed srun's own "task 0: Exited with
# exit code 1" unexplained. Now one line says it.
t_the_batch_log_says_the_failure_once() {
    run_cmd sbatch -N2 -w n1,n2 --nccl-check --wait -o "$CL/work/batch-%j.out" \
        --export=ALL,NCCL_CHECK_FAKE=fail,NCCL_CHECK_FAKE_FAIL_RANK=1 --wrap 'echo script-started'
    expect_rc_nonzero
    local job log; job=$(grep -o '[0-9]*$' "$OUT" | tail -1); log=$CL/work/batch-$job.out
    grep -q "nccl-check: FAIL in the allocation check: all_reduce 256 MiB busbw 12.3 < 300.0 GB/s .*responsible: n2 GPU" "$log" \
        || fail "no FAIL line naming n2: $(cat "$log")"
    grep -q "nccl-check: [A-Z]* in the allocation check: .*nccl-check:" "$log" && fail "the prefix is doubled: $(cat "$log")"
    [ "$(grep -c 'busbw 12.3' "$log")" = 1 ] || fail "the FAIL is not said exactly once: $(cat "$log")"
    grep -q 'Exited with exit code' "$log" && fail "srun's task exit line is in the log unexplained: $(cat "$log")"
    run_cmd sbatch -N1 --nccl-check --wait -o "$CL/work/batch-%j.out" --export=ALL,NCCL_CHECK_FAKE=error --wrap 'echo script-started'
    expect_rc_nonzero
    job=$(grep -o '[0-9]*$' "$OUT" | tail -1); log=$CL/work/batch-$job.out
    [ "$(grep -c 'rendezvous: no peer' "$log")" = 1 ] || fail "the ERROR is not said exactly once: $(cat "$log")"
    grep -q 'Exited with exit code' "$log" && fail "srun's task exit line is in the log unexplained: $(cat "$log")"
    grep -q "script-started" "$log" && fail "the batch script ran after an ERROR"
    true
}

run_test "srun, sbatch and salloc --help list --nccl-check" t_help_lists_option
run_test "srun -N2 --nccl-check runs the worker on both nodes (fake pass)" t_pass_runs_worker_on_both_nodes
run_test "each srun step gets its own secret, also with --export=NONE; tasks never see it" t_each_step_gets_its_own_secret
run_test "--nccl-check=FULL works; '--nccl-check quick' is refused before allocation" t_mode_names_any_case_and_a_detached_mode_is_refused
run_test "plugstack nccl_lib= reaches the worker unless the user sets NCCL_CHECK_NCCL_LIB" t_site_nccl_lib_unless_the_user_names_one
run_test ",verbose prints the per-node table; reports are kept on request" t_verbose_table_and_kept_reports
run_test "sbatch --nccl-check checks the allocation before the batch script's first command" t_sbatch_checks_the_allocation_before_the_script
run_test "the documented install steps work on this node; the shipped file breaks nothing" t_documented_install_steps_work_and_a_wrong_path_breaks_nothing
run_test "--nccl-check=full and default_mode=full run the full plan" t_full_mode_and_default_mode
run_test "a failing check fails the step and names the node and GPU" t_fail_fails_step_with_message
run_test "--nccl-check=plan=NAME runs a site's own plan; the worker names an unknown one" t_site_plan_passes_through
run_test "warn mode reports the failure and runs the tasks" t_warn_reports_and_runs
run_test "a hanging worker is killed at the deadline and the step fails" t_hang_killed_at_deadline
run_test "a crashing worker fails the step; slurmd and slurmstepd stay up" t_crash_fails_step_daemons_stay_up
run_test "with no GPU the real worker reports ERROR and the step fails with its message" t_real_worker_without_gpu_reports_error
run_test "a missing worker binary is an ERROR, not a crash" t_worker_missing_is_error
run_test "sbatch --nccl-check reaches the inner srun" t_sbatch_option_reaches_inner_srun
run_test "--nccl-check=off on an inner step turns the check off" t_inner_step_can_turn_it_off
run_test "a failing check inside sbatch fails the inner step" t_sbatch_failing_check_fails_inner_step
run_test "srun --nccl-check=help lists the modes and runs nothing" t_help_value_lists_the_modes_and_runs_nothing
run_test "salloc --nccl-check reaches srun; off turns it off; salloc says its own command is not checked" t_salloc_option_reaches_srun
run_test "invalid values are rejected before allocation" t_invalid_values_rejected_before_allocation
run_test "--nccl-check=sharp is refused before allocation unless allow_sharp=1" t_sharp_refused_unless_allowed
run_test "with allow_sharp=1, --nccl-check=sharp passes --expect-collnet to every rank" t_sharp_allowed_passes_expect_collnet
run_test "without the option the worker never runs" t_no_option_never_runs_worker
run_test "jobs of a non-root user work and check as that user" t_non_root_user_jobs_work
run_test "the required plugin with a bad config does not break plain jobs" t_required_plugin_with_bad_config_keeps_plain_jobs_working
run_test "nccl-check-plugstack --check names a plugin-line typo where Slurm reads it" t_plugstack_check_names_a_typo_where_slurm_reads_it
run_test "a failing check says its ERROR once, whole, also with ,verbose" t_a_failing_check_says_it_once_and_whole
run_test "the missing-NCCL hint names what an srun user can set, never --nccl-lib" t_the_nccl_hint_names_what_a_srun_user_can_set
run_test "the batch log says the allocation check's failure once, without srun's task exit line" t_the_batch_log_says_the_failure_once
run_test "slurm_spank_init failing in slurmstepd drains no node on 25.05+ (drains before: the control)" t_init_failure_drains_no_node_on_25_05_and_later

if ! harness_tally run.sh; then
    for f in "$CL"/log/*.log; do echo "== tail $f"; tail -15 "$f"; done >&2
    exit 1
fi
