#!/usr/bin/env bash
# Stop the test cluster started by up.sh: each daemon by the PID in its pid file (SIGTERM, then
# SIGKILL after 15 s), munged only if up.sh started it. Never kills by name. Safe to run twice.
# Usage (root): slurm/test-cluster/down.sh [--purge]   (--purge also removes $CLUSTER_DIR)
set -uo pipefail

CLUSTER_DIR=${NCCL_CHECK_CLUSTER_DIR:-/var/tmp/nccl-check-cluster}
log() { echo "test-cluster: $*" >&2; }

stop_pid() { # name pidfile
    local name=$1 file=$2 pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    [[ "$pid" =~ ^[0-9]+$ ]] || { rm -f "$file"; return 0; }
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        if ! timeout 15 sh -c "while kill -0 $pid 2>/dev/null; do sleep 0.2; done"; then
            log "$name (pid $pid) ignored SIGTERM; SIGKILL"
            kill -KILL "$pid" 2>/dev/null
        fi
        log "stopped $name (pid $pid)"
    fi
    rm -f "$file"
}

for f in "$CLUSTER_DIR"/run/slurmd-*.pid; do
    [ -e "$f" ] || continue
    n=${f##*/slurmd-}; stop_pid "slurmd ${n%.pid}" "$f"
done
stop_pid slurmctld "$CLUSTER_DIR/run/slurmctld.pid"
stop_pid munged "$CLUSTER_DIR/run/munged.started.pid"
# A daemon whose pid file was lost (a restart by a package's maintainer script, a pid namespace)
# still carries this cluster's SLURM_CONF: stop it too, or the next cluster on the same port talks
# to it (seen: a 24.11 slurmctld left behind gave the 26.05 suite "Protocol authentication error").
for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/}; pid=${pid%/environ}
    case "$(cat "/proc/$pid/comm" 2>/dev/null)" in slurmctld|slurmd|slurmstepd|slurmscriptd) ;; *) continue ;; esac
    tr '\0' '\n' <"$env" 2>/dev/null | grep -qxF "SLURM_CONF=$CLUSTER_DIR/slurm.conf" || continue
    kill -KILL "$pid" 2>/dev/null && log "stopped a leftover $(cat "/proc/$pid/comm" 2>/dev/null || echo daemon) (pid $pid)"
done
if [ "${1:-}" = --purge ]; then
    rm -rf "$CLUSTER_DIR"
    log "removed $CLUSTER_DIR"
fi
exit 0
