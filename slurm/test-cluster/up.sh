#!/usr/bin/env bash
# Bring up a real Slurm test cluster on this one machine: munged, slurmctld and N slurmd "nodes"
# n1..nN, all on 127.0.0.1 (Debian's Slurm is built with MULTIPLE_SLURMD; each slurmd gets its
# own port and spool). No systemd: the daemons are started by hand, their PIDs kept in
# $CLUSTER_DIR/run, and down.sh stops exactly those PIDs. Every wait is bounded.
#
# Usage (root):  slurm/test-cluster/up.sh [--nodes N] [--plugin PATH.so [--plugin-args "k=v ..."]]
#                                         [--plugstack FILE]
#                                        [--prolog PATH] [--conf "Key=Value"]... [--munge-socket PATH]
#   then:        . "${NCCL_CHECK_CLUSTER_DIR:-/var/tmp/nccl-check-cluster}/env.sh"   # SLURM_CONF
#                srun -N2 --nccl-check hostname
#   stop:        slurm/test-cluster/down.sh
# --plugin copies the .so into $CLUSTER_DIR/lib (readable by every user) and writes
# $CLUSTER_DIR/plugstack.conf.d/zz-nccl-check.conf ("required <so> <plugin-args>").
# --prolog adds Prolog=PATH and PrologFlags=Alloc (the prolog runs on every node at allocation);
# --conf appends one more slurm.conf line (repeatable; e.g. "SchedulerParameters=nohold_on_prolog_fail").
# --plugstack uses FILE as the cluster's PlugStackConfig instead (e.g. /etc/slurm/plugstack.conf,
# to load a plugin from where a package installed it, as a real node would); not with --plugin.
# --munge-socket starts a private munged on PATH (its files beside it; stopped by down.sh) and sets
# AuthInfo=socket=PATH (unless a --conf AuthInfo= line is given: it must then name the socket), so no
# other cluster's munged matters.
# NCCL_CHECK_CLUSTER_PROCTRACK="proctrack/cgroup" replaces the default proctrack/linuxproc (a
# cgroup.conf beside slurm.conf in $CLUSTER_DIR goes with it).
# NCCL_CHECK_CLUSTER_NODE_EXTRA="Gres=gpu:1" appends to every node's NodeName line (the GPU
# machine's end-to-end test; a gres.conf beside slurm.conf in $CLUSTER_DIR goes with it).
# Nothing under /etc is written: slurm.conf and plugstack.conf live in $CLUSTER_DIR.
set -euo pipefail

CLUSTER_DIR=${NCCL_CHECK_CLUSTER_DIR:-/var/tmp/nccl-check-cluster}
NODES=2
PLUGIN=
PLUGIN_ARGS=
PLUGSTACK=
PROLOG=
EXTRA_CONF=()
MUNGE_SOCKET=
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) NODES=$2; shift 2 ;;
        --plugin) PLUGIN=$2; shift 2 ;;
        --plugin-args) PLUGIN_ARGS=$2; shift 2 ;;
        --plugstack) PLUGSTACK=$2; shift 2 ;;
        --prolog) PROLOG=$2; shift 2 ;;
        --conf) EXTRA_CONF+=("$2"); shift 2 ;;
        --munge-socket) MUNGE_SOCKET=$2; shift 2 ;;
        *) echo "up.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
log() { echo "test-cluster: $*" >&2; }
# The daemons outlive this script: they must not inherit its descriptors beyond 0-2 (a caller's
# `flock FILE up.sh` lock would otherwise stay held by munged until it stops).
for fd in /proc/$$/fd/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] 2>/dev/null && [ "$fd" != 255 ] && eval "exec $fd>&-" 2>/dev/null
done
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/srun; do
    [ -x "$b" ] || die "$b missing (run tests/setup-deps.sh)"
done
# Up to 128 slurmd on one machine (tests/scale/run.sh brings up 64); ports CTLD+10 .. CTLD+137.
[[ "$NODES" =~ ^[1-9][0-9]{0,2}$ ]] && [ "$NODES" -le 128 ] || die "--nodes must be 1..128"
if [ -n "$PLUGSTACK" ]; then
    [ -z "$PLUGIN" ] || die "--plugstack and --plugin exclude each other"
    [ -f "$PLUGSTACK" ] || die "--plugstack $PLUGSTACK: no such file"
fi
if [ -s "$CLUSTER_DIR/run/slurmctld.pid" ] && kill -0 "$(cat "$CLUSTER_DIR/run/slurmctld.pid")" 2>/dev/null; then
    die "a test cluster already runs from $CLUSTER_DIR (run down.sh first)"
fi

HOST=$(hostname)
getent hosts "$HOST" >/dev/null || die "hostname '$HOST' does not resolve (add it to /etc/hosts)"
CTLD_PORT=${NCCL_CHECK_CLUSTER_PORT:-16817}
FIRST_NODE_PORT=$((CTLD_PORT + 10))
LAST_NODE_PORT=$((FIRST_NODE_PORT + NODES - 1))

mkdir -p "$CLUSTER_DIR"/{run,log,lib,spool/ctld,spool/d,plugstack.conf.d}
chmod 755 "$CLUSTER_DIR" "$CLUSTER_DIR"/{run,log,lib,spool,spool/d,plugstack.conf.d}
chown slurm:slurm "$CLUSTER_DIR/spool/ctld" "$CLUSTER_DIR/log" "$CLUSTER_DIR/run"
rm -rf "$CLUSTER_DIR"/spool/ctld/* "$CLUSTER_DIR"/spool/d/*

cat > "$CLUSTER_DIR/slurm.conf" <<CONF
# Written by slurm/test-cluster/up.sh: $NODES nodes on 127.0.0.1, for tests only.
ClusterName=ncclcheck
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=$CLUSTER_DIR/spool/ctld
SlurmdSpoolDir=$CLUSTER_DIR/spool/d/%n
SlurmctldPidFile=$CLUSTER_DIR/run/slurmctld.pid
SlurmdPidFile=$CLUSTER_DIR/run/slurmd-%n.pid
SlurmctldLogFile=$CLUSTER_DIR/log/slurmctld.log
SlurmdLogFile=$CLUSTER_DIR/log/slurmd-%n.log
SlurmdDebug=debug
PlugStackConfig=${PLUGSTACK:-$CLUSTER_DIR/plugstack.conf}
ProctrackType=${NCCL_CHECK_CLUSTER_PROCTRACK:-proctrack/linuxproc}
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
KillWait=5
# sbatch --wait sleeps 2 s between polls, growing 4x (8, 32 s) only while the sleep is below
# MinJobAge/2 (sbatch.c _job_wait): with 16 it polls at 2, 10, 18 s ..., so a batch test of an
# 11 s job returns at 18 s, not 42 s (the slurm suite's batch tests wait on it). A finished job's record is kept at least 16 s.
MinJobAge=16
NodeName=n[1-$NODES] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[$FIRST_NODE_PORT-$LAST_NODE_PORT] CPUs=2 RealMemory=1000 State=UNKNOWN ${NCCL_CHECK_CLUSTER_NODE_EXTRA:-}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
[ "$NODES" = 1 ] && sed -i "s/^NodeName=n\[1-1\].*Port=\[[0-9-]*\]/NodeName=n1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$FIRST_NODE_PORT/" "$CLUSTER_DIR/slurm.conf"
if [ -n "$PROLOG" ]; then
    [ -x "$PROLOG" ] || die "--prolog $PROLOG: not an executable file"
    printf 'Prolog=%s\nPrologFlags=Alloc\n' "$PROLOG" >> "$CLUSTER_DIR/slurm.conf"
fi
if [ -n "$MUNGE_SOCKET" ] && ! printf '%s\n' "${EXTRA_CONF[@]}" | grep -q '^AuthInfo='; then
    echo "AuthInfo=socket=$MUNGE_SOCKET" >> "$CLUSTER_DIR/slurm.conf"
fi
for line in "${EXTRA_CONF[@]}"; do
    printf '%s\n' "$line" >> "$CLUSTER_DIR/slurm.conf"
done
echo "include $CLUSTER_DIR/plugstack.conf.d/*.conf" > "$CLUSTER_DIR/plugstack.conf"
rm -f "$CLUSTER_DIR"/plugstack.conf.d/*.conf
if [ -n "$PLUGIN" ]; then
    [ -f "$PLUGIN" ] || die "--plugin $PLUGIN: no such file"
    # Stripped, as a package would install it (the release build keeps debug info: 7 MB vs 0.5 MB).
    install -m 0755 "$PLUGIN" "$CLUSTER_DIR/lib/nccl_check.so"
    command -v strip >/dev/null && strip "$CLUSTER_DIR/lib/nccl_check.so"
    echo "required $CLUSTER_DIR/lib/nccl_check.so $PLUGIN_ARGS" > "$CLUSTER_DIR/plugstack.conf.d/zz-nccl-check.conf"
fi
chmod 644 "$CLUSTER_DIR/slurm.conf" "$CLUSTER_DIR/plugstack.conf"
echo "export SLURM_CONF=$CLUSTER_DIR/slurm.conf" > "$CLUSTER_DIR/env.sh"
export SLURM_CONF=$CLUSTER_DIR/slurm.conf

# munged: a private one on --munge-socket, else reuse a running one (same key), else start one and
# remember that we did.
if [ -n "$MUNGE_SOCKET" ]; then
    md=$(dirname "$MUNGE_SOCKET")
    mkdir -p "$md" && chown munge:munge "$md" && chmod 0755 "$md"
    timeout 15 runuser -u munge -- /usr/sbin/munged --socket="$MUNGE_SOCKET" --pid-file="$md/munged.pid" \
        --log-file="$md/munged.log" --seed-file="$md/munged.seed" || die "private munged failed to start"
    timeout 10 sh -c "until munge -S '$MUNGE_SOCKET' -n | unmunge -S '$MUNGE_SOCKET' >/dev/null 2>&1; do sleep 0.2; done" \
        || die "private munged does not answer on $MUNGE_SOCKET"
    cp "$md/munged.pid" "$CLUSTER_DIR/run/munged.started.pid"
    log "private munged started on $MUNGE_SOCKET (pid $(cat "$CLUSTER_DIR/run/munged.started.pid"))"
elif timeout 5 sh -c 'munge -n | unmunge' >/dev/null 2>&1; then
    log "munged already running; reusing it"
else
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    chmod 0755 /run/munge
    [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key missing"
    timeout 15 runuser -u munge -- /usr/sbin/munged || die "munged failed to start"
    timeout 10 sh -c 'until munge -n | unmunge >/dev/null 2>&1; do sleep 0.2; done' \
        || die "munged does not answer"
    cp /run/munge/munged.pid "$CLUSTER_DIR/run/munged.started.pid"
    log "munged started (pid $(cat "$CLUSTER_DIR/run/munged.started.pid"))"
fi

timeout 20 /usr/sbin/slurmctld -c || die "slurmctld failed to start (see $CLUSTER_DIR/log/slurmctld.log)"
timeout 20 sh -c "until [ -s '$CLUSTER_DIR/run/slurmctld.pid' ]; do sleep 0.2; done" \
    || die "slurmctld wrote no pid file"
for i in $(seq 1 "$NODES"); do
    timeout 20 /usr/sbin/slurmd -N "n$i" || die "slurmd n$i failed to start (see $CLUSTER_DIR/log/slurmd-n$i.log)"
done
IDLE_WAIT=$((60 + NODES))   # 64 slurmd register one by one with slurmctld on 2 shared cores
log "waiting (at most $IDLE_WAIT s) for $NODES idle nodes"
if ! timeout "$IDLE_WAIT" bash -c "until [ \"\$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)\" -ge $NODES ]; do sleep 0.5; done"; then
    sinfo -N >&2 || true
    die "nodes did not become idle (logs in $CLUSTER_DIR/log)"
fi
sinfo -N >&2
log "up: . $CLUSTER_DIR/env.sh; srun -N$NODES hostname"
