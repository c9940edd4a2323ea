#!/usr/bin/env bash
# The prolog's Prometheus textfile, alert rules and Grafana dashboard against the real thing
# (Debian's prometheus and prometheus-node-exporter, installed by tests/setup-deps.sh):
#   1. promtool check rules + promtool test rules: each alert firing and not firing
#      (prolog/monitoring/nccl-check.rules.test.yml);
#   2. the real nccl-check-prolog (--recheck, a fake worker reporting busbw, a fake scontrol)
#      writes its metrics_file, the fault pass's and the node state's beside it; node_exporter's textfile collector serves it; Prometheus scrapes
#      it every second with the rules loaded: every rule loads healthy, and every dashboard
#      panel's query (prolog/monitoring/nccl-check.dashboard.json, $instance = .+) returns data.
# Root (the prolog's state and metrics directories must be root-owned). Loopback only, ports
# picked free, every wait bounded, only the daemons it started are stopped. ~15 s.
# Usage: bash tests/prometheus/run.sh [path/to/nccl-check-prolog]
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MON=$REPO/prolog/monitoring
say() { echo "prometheus/run.sh: $*" >&2; }
die() { say "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }
BIN=${1:-}
if [ -z "$BIN" ]; then
    for b in "$REPO/target/release/nccl-check-prolog" "$REPO/target/debug/nccl-check-prolog"; do
        [ -x "$b" ] && BIN=$b && break
    done
fi
[ -x "$BIN" ] || die "no nccl-check-prolog binary (cargo build -p nccl-check-prolog)"
for t in promtool prometheus prometheus-node-exporter; do
    command -v "$t" >/dev/null || die "$t missing: run tests/setup-deps.sh"
done

say "promtool check rules / test rules"
promtool check rules "$MON/nccl-check.rules.yml" >&2 || die "promtool check rules"
(cd "$MON" && promtool test rules nccl-check.rules.test.yml) >&2 || die "promtool test rules"

T=$(mktemp -d /var/tmp/nccl-check-prom.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do timeout 10 tail --pid="$p" -f /dev/null 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
chmod 755 "$T"
mkdir -p "$T/state" "$T/textfile" "$T/gpus/0000:18:00.0"
# The fault pass reads the HDR fixture tree: its kernel log has an application Xid 13 (a WARN).
cp -R "$REPO/prolog/tests/data/faults/hdr" "$T/faults"  # owned by root, as sysfs is
printf 'Model: X\nGPU UUID: GPU-prom-0\nBus Location: 0000:18:00.0\n' > "$T/gpus/0000:18:00.0/information"
printf '#!/bin/sh\n[ "$1" = show ] && echo "NodeName=n1 State=IDLE"\nexit 0\n' > "$T/scontrol"
cat > "$T/worker" <<'W'
#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
printf '{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":0,"reasons":[],"host":"n1","gpus":[],"results":[],"verdict":"PASS","summary":"fine","avg_busbw":{"all_reduce":301.5,"all_gather":250.25}}' > "$json"
exit 0
W
chmod 755 "$T/scontrol" "$T/worker"
cat > "$T/prolog.toml" <<C
worker = "$T/worker"
worker_config = "$T/none.toml"
state_dir = "$T/state"
gpu_info_dir = "$T/gpus"
scontrol = "$T/scontrol"
syslog_facility = "none"
fault_root = "$T/faults"
metrics_file = "$T/textfile/nccl_check.prom"
C
timeout 60 env -i "$BIN" --config "$T/prolog.toml" --recheck --node n1 >&2 || die "the prolog's recheck did not pass"
grep -q 'nccl_check_busbw_gbps{collective="all_reduce"} 301.500' "$T/textfile/nccl_check.prom" \
    || die "metrics file: $(cat "$T/textfile/nccl_check.prom")"
grep -q 'nccl_check_fault_findings{source="xid",class="warn"} 1' "$T/textfile/nccl_check-faults.prom" \
    || die "fault metrics file: $(cat "$T/textfile/nccl_check-faults.prom" 2>&1)"
# The recheck read Slurm's node state (the fake scontrol: IDLE): the allocated alert's fact.
grep -q 'nccl_check_node_allocated{slurm_state="IDLE"} 0' "$T/textfile/nccl_check-node.prom" \
    || die "node state file: $(cat "$T/textfile/nccl_check-node.prom" 2>&1)"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NE=$(port) PR=$(port)
prometheus-node-exporter --web.listen-address="127.0.0.1:$NE" --collector.disable-defaults \
    --collector.textfile --collector.textfile.directory="$T/textfile" >"$T/ne.log" 2>&1 &
PIDS+=($!)
cat > "$T/prometheus.yml" <<P
global: { scrape_interval: 1s, evaluation_interval: 1s }
rule_files: [ "$MON/nccl-check.rules.yml" ]
scrape_configs:
  - job_name: node
    static_configs: [ { targets: [ "127.0.0.1:$NE" ] } ]
P
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/data" \
    --web.listen-address="127.0.0.1:$PR" >"$T/prom.log" 2>&1 &
PIDS+=($!)

query() { # EXPR: the JSON of an instant query
    curl -sf --max-time 5 "http://127.0.0.1:$PR/api/v1/query" --data-urlencode "query=$1"
}
count() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["data"]["result"]) if d.get("status")=="success" else -1)'; }
ok=
for _ in $(seq 60); do
    n=$(query 'nccl_check_gate_state{state="pass"} == 1' 2>/dev/null | count 2>/dev/null)
    [ "${n:-0}" -ge 1 ] 2>/dev/null && ok=1 && break
    sleep 0.5
done
[ -n "$ok" ] || { tail -5 "$T/ne.log" "$T/prom.log" >&2; die "Prometheus never scraped the prolog's textfile"; }
say "Prometheus scrapes the prolog's textfile through node_exporter"

rules=$(curl -sf --max-time 5 "http://127.0.0.1:$PR/api/v1/rules") || die "no /api/v1/rules"
python3 - "$rules" "$MON/nccl-check.rules.yml" <<'PY' || die "rules not loaded healthy"
import json, re, sys
got = {r["name"]: r["health"] for g in json.loads(sys.argv[1])["data"]["groups"] for r in g["rules"]}
want = re.findall(r"^\s*- alert: (\S+)", open(sys.argv[2]).read(), re.M)
bad = [w for w in want if got.get(w) not in ("ok", "unknown")]
print(f"rules loaded: {sorted(got)}", file=sys.stderr)
sys.exit(1 if bad or len(want) != len(got) else 0)
PY

fails=0
while IFS= read -r line; do
    title=${line%%$'\t'*} expr=${line#*$'\t'}
    n=$(query "$expr" | count)
    if [ "${n:-0}" -ge 1 ] 2>/dev/null; then
        say "panel '$title': $n series"
    else
        say "FAIL: panel '$title': no data for $expr"; fails=$((fails + 1))
    fi
done < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["panels"]:
    for t in p["targets"]:
        print(p["title"] + "\t" + t["expr"].replace("$instance", ".+"))' "$MON/nccl-check.dashboard.json")
[ "$fails" = 0 ] || die "$fails dashboard panels without data"
say "PASS: rules tested with promtool, loaded healthy, every dashboard panel returns data"
