#!/usr/bin/env bash
# The node side of tests/admin-path/run.sh, run as root inside a fresh Debian root filesystem of
# one Slurm major (tests/lib/roots.sh roots_fresh_suite: bookworm-fresh 22.05, trixie-fresh 24.11,
# sid-fresh 26.05: minbase + slurmd, slurmctld, slurm-client, munge from apt).
#
# First the site as any site has it before nccl-check (not part of the admin page): /etc/slurm/
# slurm.conf for this one node (its NodeName line from `slurmd -C`), munged, slurmctld and slurmd
# started by hand as their init scripts would. Then the admin page's blocks 2.1 .. 5.3 exactly as
# shown, each pasted into a root shell in /root (where the built dist/ was copied), each followed
# by the checks of what the admin page says it does here (no GPU, no NCCL). Then one test fixture,
# labelled as such: the prolog pointed at the prolog suite's fake worker (the documented
# `worker =` and `env =` keys of prolog.toml) to prove that a FAIL drains the node with the reason
# the admin page shows.
#
# Env (from run.sh): ADMIN_WORK (the host's work dir, under the repository, so visible here) with
#   blocks/S.B.sh and dist/*.deb; ADMIN_BLOCKS (the block ids in order); ADMIN_CTLD_PORT;
#   ADMIN_MM (the Slurm major: the package is nccl-check-slurm$ADMIN_MM).
# Every wait is bounded; the daemons are stopped on exit (and roots_run kills whatever is left in
# the namespace).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"
say() { echo "admin-path $ADMIN_MM (node): $*" >&2; }
W=${ADMIN_WORK:?} BLOCKS=${ADMIN_BLOCKS:?} PORT=${ADMIN_CTLD_PORT:-20817} MM=${ADMIN_MM:?}
PKG=nccl-check-slurm$MM
export DEBIAN_FRONTEND=noninteractive
NODE=$(hostname)                                  # what `srun hostname` prints
NODENAME=$(slurmd -C | sed -n '1s/^NodeName=\([^ ]*\).*/\1/p')   # Slurm's name of the node
LOGS=$W/node
mkdir -p "$LOGS"

stop_daemons() {
    local f pid
    timeout 20 scontrol shutdown >/dev/null 2>&1
    for f in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid /run/munge/munged.pid; do
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        [[ "$pid" =~ ^[0-9]+$ ]] || continue
        kill -TERM "$pid" 2>/dev/null
        timeout 15 sh -c "while kill -0 $pid 2>/dev/null; do sleep 0.2; done" || kill -KILL "$pid" 2>/dev/null
    done
    # The logs, for a failure's diagnosis on the host (the overlay goes with the namespace).
    cp /var/log/slurm/*.log "$LOGS/" 2>/dev/null
    true
}
trap stop_daemons EXIT
trap 'exit 130' INT TERM

OUT=$LOGS/out RC=0
# paste S.B: the admin page's block, as an admin pastes it into a root shell in /root.
paste_block() {
    say "admin page block $1:"; sed 's/^/    | /' "$W/blocks/$1.sh" >&2
    (cd /root && timeout 300 bash "$W/blocks/$1.sh") >"$OUT" 2>&1
    RC=$?
    cp "$OUT" "$LOGS/block-$1.log"
}
says() { grep -qF -- "$1" "$OUT" || fail "the output lacks '$1'; it was: $(tail -12 "$OUT")"; }
says_not() { ! grep -qF -- "$1" "$OUT" || fail "the output has '$1': $(grep -F -- "$1" "$OUT" | head -3)"; }
drained_nodes() { sinfo -h -N -t drain,drained,draining -o %N 2>/dev/null; }
idle() { timeout 30 bash -c 'until [ -n "$(sinfo -h -N -t idle -o %N 2>/dev/null)" ]; do sleep 0.3; done'; }

# --- the site before nccl-check -------------------------------------------------------------
t_site() {
    local node_line
    node_line=$(slurmd -C | head -1)
    [[ "$node_line" == NodeName=* ]] || { fail "slurmd -C: $node_line"; return 1; }
    mkdir -p /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /run/slurm /run/munge
    chown slurm:slurm /var/lib/slurm/slurmctld /var/log/slurm /run/slurm
    chown munge:munge /run/munge
    cat > /etc/slurm/slurm.conf <<CONF
# A one-node site (tests/admin-path/site.sh). Ports off the defaults: other test clusters may run.
ClusterName=site
SlurmctldHost=$NODE
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
SlurmUser=slurm
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
ReturnToService=2
$node_line
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
    timeout 15 runuser -u munge -- /usr/sbin/munged || { fail "munged did not start"; return 1; }
    timeout 10 sh -c 'until munge -n | unmunge >/dev/null 2>&1; do sleep 0.2; done' || { fail "munged does not answer"; return 1; }
    timeout 20 slurmctld || { fail "slurmctld did not start: $(tail -5 /var/log/slurm/slurmctld.log)"; return 1; }
    timeout 20 slurmd || { fail "slurmd did not start: $(tail -5 /var/log/slurm/slurmd.log)"; return 1; }
    timeout 60 bash -c 'until [ -n "$(sinfo -h -N -t idle -o %N 2>/dev/null)" ]; do sleep 0.5; done' \
        || { fail "the node did not become idle: $(sinfo -N 2>&1)"; return 1; }
    [ "$(timeout 20 srun hostname 2>&1)" = "$NODE" ] || fail "srun hostname does not work before nccl-check"
}

# --- what each block of the admin page must do here (no GPU, no NCCL) ------------------------
check_2.1() {
    [ "$RC" = 0 ] || fail "apt-get install failed (rc $RC): $(tail -8 "$OUT")"
    says "The SPANK plugin is disabled until you uncomment"
    # This site has no gres/gpu: the default gpus = "job" would check nothing, and the install
    # says so (admin step 2; step 5 sets gpus = "all"). Nothing else is not ready.
    says 'NOT READY gpus = "job" but Slurm has no GresTypes=gpu'
    [ "$(grep -c 'NOT READY' "$OUT")" = 1 ] || fail "more than the gres warning: $(grep 'NOT READY' "$OUT")"
    dpkg-query -W -f='${Status}\n' "$PKG" | grep -qx 'install ok installed' || fail "$PKG is not installed"
    local help; help=$(timeout 20 srun --help 2>&1)
    ! grep -q -- --nccl-check <<<"$help" || fail "srun --help lists --nccl-check before it was enabled"
    [ "$(timeout 20 srun hostname 2>&1)" = "$NODE" ] || fail "srun hostname broke after the install"
}

check_3.1() {
    says "Thresholds for 8 x 'NVIDIA H100 80GB HBM3' on 1 node(s)"
    says "APPLIES  all_reduce"
    says "NVLinks per GPU: 18 active"
    # nccl-check without NCCL: the admin page's ERROR, exit 3.
    says "nccl-check: ERROR NCCL library not found"
    [ "$RC" = 3 ] || fail "nccl-check exited $RC, the admin page says 3 (no NCCL) or 4 (no GPU)"
}

check_4.1() {
    grep -q '^required /usr/lib/x86_64-linux-gnu/slurm-wlm/nccl_check.so ' /etc/slurm/plugstack.conf.d/zz-nccl-check.conf \
        || fail "the admin page's sed did not enable the plugin line"
    says "--nccl-check=mode"
    says "nccl-check: ERROR on $NODENAME (rank 0 of 1): NCCL library not found"
    says "[worker exit 3]"
    ! grep -qx "$NODE" "$OUT" || fail "the task ran although the check said ERROR"
    [ "$RC" != 0 ] || fail "srun --nccl-check hostname exited 0 without NCCL"
}

check_5.1() {
    [ "$RC" = 0 ] || fail "scontrol reconfigure failed (rc $RC): $(cat "$OUT")"
    local conf; conf=$(timeout 20 scontrol show config 2>&1)
    # 22.05 prints "Prolog = a,b", 24.11 and later "Prolog[0] = a" per entry.
    grep -Eq '^Prolog(\[[0-9]+\])? +=.*/usr/sbin/nccl-check-prolog' <<<"$conf" || fail "Slurm does not run the prolog: $(grep -E '^Prolog' <<<"$conf")"
    grep -Eq '^PrologFlags +=.*Alloc' <<<"$conf" || fail "PrologFlags lacks Alloc: $(grep -E '^PrologFlags' <<<"$conf")"
    idle || fail "the node is not idle after the reconfigure: $(sinfo -N 2>&1)"
}

check_5.2() {
    says 'gpus = "all"    # /etc/nccl-check/prolog.toml:'
    says 'on_error = "run"    # default'
    says "dry run: nothing below was done"
    says "NCCL library not found"              # the recheck ran the worker on this node
    says_not "INVALID"
    says_not "NOT READY"
    timeout 20 nccl-check-prolog --check-config >/dev/null 2>&1 || fail "--check-config exits $? on the admin page's config"
    [ "$RC" = 0 ] || fail "--dry-run exited $RC"
    [ -z "$(drained_nodes)" ] || fail "the dry run drained: $(sinfo -R)"
}

check_5.3() {
    grep -qx "$NODE" "$OUT" || fail "the job did not run (an ERROR must not stop it): $(head -5 "$OUT")"
    says '"state": "error"'
    says "NCCL library not found"
    # gate.json ends with its newline: sinfo -R's header starts a line of its own.
    grep -q '^REASON ' "$OUT" || fail "sinfo -R's header is glued to gate.json: $(grep REASON "$OUT")"
    [ -z "$(drained_nodes)" ] || fail "an ERROR drained the node: $(sinfo -R)"
}

# --- the fixture: a FAIL --------------------------------------------------------------------
FIXTURE=/usr/local/lib/nccl-check-test-fixture
t_fail_drains_with_the_shown_reason() {
    # TEST FIXTURE, not a step of the admin page: the prolog runs the prolog suite's fake worker, which
    # hands it a FAIL report recorded on 4x H200 with NVLink P2P off (tests/prolog/data).
    mkdir -p "$FIXTURE"
    install -m 0755 "$REPO/tests/prolog/fake-worker" "$FIXTURE/fake-worker"
    cp -r "$REPO/tests/prolog/data" "$FIXTURE/data"
    # This node shares the host's process table: the host's own load (other builds on the CI
    # machine) is said beside the verdict, never drained, so the reason below is the FAIL's.
    printf '# TEST FIXTURE (tests/admin-path/site.sh)\nworker = "%s"\nenv = { NCCL_CHECK_FAKE = "fail" }\n' \
        "$FIXTURE/fake-worker" >> /etc/nccl-check/prolog.toml
    timeout 20 nccl-check-prolog --check-config >"$OUT" 2>&1 || { fail "--check-config with the fixture: $(cat "$OUT")"; return 1; }
    idle || true
    timeout 120 srun hostname >"$OUT" 2>&1
    local rc=$? job reason shown
    [ "$rc" != 0 ] || fail "srun hostname succeeded on a node whose prolog said FAIL"
    ! grep -qx "$NODE" "$OUT" || fail "the task ran on a node whose prolog said FAIL"
    reason=$(sinfo -h -R -o '%E' 2>/dev/null)
    [[ "$reason" == nccl-check:* ]] || { fail "sinfo -R: '$reason' (expected a nccl-check: drain)"; return 1; }
    grep -q '"state": "fail"' /var/lib/nccl-check/gate.json || fail "gate.json: $(cat /var/lib/nccl-check/gate.json)"
    # The admin page shows this very reason (its job number aside).
    job=$(sed -n 's/.*(job \([0-9]*\))$/\1/p' <<<"$reason")
    shown=$(sed -n '/^## For the admin with ten minutes/,/^## /p' "$REPO/docs/admin.md" | tr '\n' ' ' | tr -s ' ' \
        | grep -o '`nccl-check:[^` ][^`]*(job [0-9]*)`' | head -1 | tr -d '`')
    [ -n "$shown" ] || { fail "the admin page's ten-minute section shows no nccl-check: drain reason"; return 1; }
    [ "${reason% (job *)}" = "${shown% (job *)}" ] \
        || fail "sinfo -R says '$reason'; the admin page shows '$shown'"
    say "drain reason of job $job: $reason"
    scontrol update nodename="$(sinfo -h -N -o %N | head -1)" state=resume >/dev/null 2>&1
}

# --- run -----------------------------------------------------------------------------------
run_test() { harness_run "$@"; }
run_test "the site before nccl-check: a one-node Slurm $MM and munge from apt, srun works" t_site
if [ "$TEST_FAILED" = 0 ]; then
    for b in $BLOCKS; do
        [ "$b" = 1.1 ] && continue                     # built on the host
        if ! declare -F "check_$b" >/dev/null; then
            eval "t_block_$b() { fail 'this suite does not know what admin page block $b is to do: add check_$b'; }"
            run_test "admin page block $b" "t_block_$b"
            continue
        fi
        eval "t_block_$b() { paste_block $b; check_$b; }"
        run_test "admin step ${b%.*}, block $b: $(grep -v '^ *#' "$W/blocks/$b.sh" | head -1 | cut -c1-70)" "t_block_$b"
    done
    run_test "[fixture] a FAIL drains the node with the reason the admin page shows; the job does not run" t_fail_drains_with_the_shown_reason
fi
harness_tally "admin-path $MM (node)"
