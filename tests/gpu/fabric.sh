#!/usr/bin/env bash
# The multi-node check on real NCCL with real link faults: N emulated nodes (8, 16) in
# network namespaces on one GPU host, one Linux bridge, a veth per node, addresses of 10.250.7.0/24
# only inside the namespaces this script creates. Each node runs a real `nccl-check` worker on GPU
# 0 over NCCL's socket transport (its own NCCL_HOSTID and NCCL_SOCKET_IFNAME), started as the
# SPANK plugin starts it: Slurm's variables, the step's secret, --plan quick --timeout --rank
# --world --port-range, no --rendezvous (the worker derives it from SLURM_STEP_NODELIST; the node
# names resolve through /etc/netns/NS/hosts, which `ip netns exec` mounts over /etc/hosts inside
# that namespace only). Faults come from a table (fabric-faults.txt: slow node, slow path, link
# down mid-check, node absent, CPU-starved worker); each row is judged on the verdict, the
# culprits and the localization rounds of the coordinator's report (with any other node's own
# FAIL), and ERROR rows on the time. The table's load column runs busy loops beside the row
# (every core, or confined with taskset to one node's CPUs), started before the first worker
# and stopped after the last.
# Everything is removed on exit (trap); every wait is bounded by `timeout`. Needs root.
#
#   bash tests/gpu/fabric.sh --nodes 8 [--out DIR] [--rows a,b] [--repeat K] [--bin NCCL_CHECK]
#        [--nccl-lib LIB] [--table FILE] [--worker CMD] [--timeout S] [--stagger S] [--budget S]
#        [--alltoall-fraction F] [--plan budgeted|counted]
#   bash tests/gpu/fabric.sh --selftest [--out DIR]     the plumbing alone, no GPU (below)
#
# --worker CMD runs CMD (split on blanks) instead of `NCCL_CHECK --nccl-lib LIB` with the same
# arguments and environment, plus FABRIC_FAULT (the row's fault); fabric-sim-worker.sh is the
# GPU-less stand-in (nccl-check-sim: the real rendezvous and localizer across the namespaces).
# --alltoall-fraction F: the workers' [outliers] alltoall_fraction (default the built-in 0.5, see the plan's config
# below), for a run that calibrates it.
# --plan: budgeted (default) runs the built-in quick plan, each step sized by its time budget;
# counted runs it at a fixed 32 MiB, 2 warm-up and 5 timed iterations (the earlier rows).
# --budget S: no row starts after S seconds (the rest are listed NOT RUN), so a run fits a
# device call's limit. The worker defaults to target/gpu-carry/nccl-check, else
# target/release/nccl-check; NCCL to the one ldconfig, python's nvidia.nccl or a search finds.
# --selftest proves the shaping with TCP transfers between the namespaces: a shaped path is slow
# and only that path (`tests/README.md` "The emulated fabric").
#
# One GPU: every worker gets NCCL_CHECK_SHARED_GPUS=1 (without it, processes of one check on
# one GPU are an ERROR: they measure each other); their local probes then take turns. Workers
# still start 0.6 s apart (--stagger) as a plugin's tasks do not all start at once either.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The worker: a stripped copy in target/gpu-carry (what the GPU machine gets carried), else the
# release build of this checkout.
BIN=$REPO/target/gpu-carry/nccl-check
[ -x "$BIN" ] || BIN=$REPO/target/release/nccl-check
NODES=8 OUTDIR=/tmp/nccl-check-fabric ROWS= REPEAT= LIB= BUDGET=
TABLE=$REPO/tests/gpu/fabric-faults.txt PLAN=budgeted WORKER= TIMEOUT_S= STAGGER=0.6 SELFTEST=0 A2A_FRACTION=0.5
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) NODES=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --nccl-lib) LIB=$2; shift 2 ;;
    --table) TABLE=$2; shift 2 ;;
    --worker) WORKER=$2; shift 2 ;;
    --timeout) TIMEOUT_S=$2; shift 2 ;;
    --stagger) STAGGER=$2; shift 2 ;;
    --alltoall-fraction) A2A_FRACTION=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --plan) PLAN=$2; shift 2 ;;
    --selftest) SELFTEST=1; NODES=4; shift ;;
    *) echo "fabric.sh: unknown argument '$1' (see the header)" >&2; exit 2 ;;
  esac
done
say() { echo "fabric.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root (namespaces, tc)"; exit 2; }
case $NODES in [2-9]|[1-5][0-9]|6[0-4]) ;; *) say "--nodes must be 2..64"; exit 2 ;; esac
# The worker's budget: NCCL init over sockets of N processes on one GPU, the quick plan at 32 MiB
# and up to 2*log2(N)+4 localization rounds; ERROR rows end by it.
# 16 nodes: a healthy check takes ~24 s, one at 500 Mbit/s ~2x that (60 s ran out at 250mbit);
# far-path ~80 s (estimated: its pair at 12 Mbit/s in the tournament and its retest, ~45 s).
# 32 nodes (2026-12-03): the 4 MiB all_reduce's warm-up and timed loop alone took 25-53 s from one
# visit to the next on the shared GPU, and far-path (74 s in one visit) outlasted 100 s in the next.
[ -n "$TIMEOUT_S" ] || TIMEOUT_S=$((NODES <= 8 ? 40 : NODES <= 16 ? 100 : 160))

# --- iproute2: the host's, else the carried Debian 12 copy (tests/gpu/fetch-iproute2.sh) ---------
IPDIR=$REPO/target/gpu-carry/iproute2
if command -v ip >/dev/null && command -v tc >/dev/null; then
  IP=(ip) TC=(tc)
elif [ -x "$IPDIR/ip" ] && [ -x "$IPDIR/tc" ]; then
  IP=(env "LD_LIBRARY_PATH=$IPDIR/lib" "$IPDIR/ip") TC=(env "LD_LIBRARY_PATH=$IPDIR/lib" "$IPDIR/tc")
else
  say "no ip/tc here and none in $IPDIR: run tests/gpu/fetch-iproute2.sh where apt works and carry that folder"
  exit 2
fi
say "iproute2: ${IP[*]}"
ipx() { timeout 10 "${IP[@]}" "$@"; }
tcx() { timeout 10 "${TC[@]}" "$@"; }
# The worker's own environment must not get the carried libraries (ipx sets them for `ip` only);
# `ip netns exec NS env ...` below restores the caller's LD_LIBRARY_PATH.
ORIG_LDLP=${LD_LIBRARY_PATH-}

mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
RUN_ID=$$
BR=fbr$RUN_ID
name() { printf 'fab%02d' "$1"; }          # node k (1-based) -> its name
ns() { printf 'fab%02d-%s' "$1" "$RUN_ID"; } # its namespace (unique per run)
hv() { printf 'fh%02d-%s' "$1" "$RUN_ID"; }  # its veth end on the bridge (host namespace)
nv() { printf 'fn%02d' "$1"; }               # its veth end inside its namespace
addr() { echo "10.250.7.$1"; }
index_of() { echo $((10#${1#fab})); }        # fab07 -> 7

cleanup() {
  local k
  for pid in $(jobs -p); do kill -CONT -- "-$pid" 2>/dev/null; kill -KILL -- "-$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  for k in $(seq 1 "$NODES"); do
    ipx netns del "$(ns "$k")" 2>/dev/null
    rm -rf "/etc/netns/$(ns "$k")"
    ipx link del "$(hv "$k")" 2>/dev/null
  done
  ipx link del "$BR" 2>/dev/null
  rmdir /etc/netns 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the fabric -----------------------------------------------------------------------------------
up_fabric() {
  local k list
  ipx link add "$BR" type bridge || return 1
  ipx link set "$BR" up || return 1
  for k in $(seq 1 "$NODES"); do
    ipx netns add "$(ns "$k")" || return 1
    ipx link add "$(hv "$k")" type veth peer name "$(nv "$k")" netns "$(ns "$k")" || return 1
    ipx link set "$(hv "$k")" master "$BR" || return 1
    ipx link set "$(hv "$k")" up || return 1
    ipx -n "$(ns "$k")" addr add "$(addr "$k")/24" dev "$(nv "$k")" || return 1
    ipx -n "$(ns "$k")" link set "$(nv "$k")" up || return 1
    ipx -n "$(ns "$k")" link set lo up || return 1
  done
  # Node names resolve inside the namespaces only (ip netns exec mounts /etc/netns/NS/hosts).
  list=$(for k in $(seq 1 "$NODES"); do echo "$(addr "$k") $(name "$k")"; done)
  for k in $(seq 1 "$NODES"); do
    mkdir -p "/etc/netns/$(ns "$k")" && printf '127.0.0.1 localhost\n%s\n' "$list" >"/etc/netns/$(ns "$k")/hosts" || return 1
  done
  # Every port up before the first row (STP is off: a port forwards as soon as it is up).
  for k in $(seq 1 "$NODES"); do
    timeout 10 bash -c "until grep -qx up /sys/class/net/$(hv "$k")/operstate 2>/dev/null; do sleep 0.1; done" \
      || { say "$(hv "$k") not up"; return 1; }
  done
}

# Classful shaping for one path: htb with a default class at line rate, a shaped class, and a u32
# filter on the destination address. Probed once in a scratch namespace: if the kernel lacks htb
# or u32, the path is shaped with a dedicated veth between the two namespaces instead (tbf only).
PATH_MODE=
probe_path_mode() {
  local t=fprobe-$RUN_ID
  if [ -n "${FABRIC_PATH_MODE:-}" ]; then PATH_MODE=$FABRIC_PATH_MODE; say "path shaping: $PATH_MODE (FABRIC_PATH_MODE)"; return 0; fi
  ipx netns add "$t" || return 1
  if ipx -n "$t" link add fpa type veth peer name fpb &&
    ipx -n "$t" link set fpa up &&
    tcx -n "$t" qdisc add dev fpa root handle 1: htb default 10 2>/dev/null &&
    tcx -n "$t" class add dev fpa parent 1: classid 1:20 htb rate 1gbit 2>/dev/null &&
    tcx -n "$t" filter add dev fpa parent 1: protocol ip prio 1 u32 match ip dst 10.250.7.1/32 flowid 1:20 2>/dev/null; then
    PATH_MODE=htb
  else
    PATH_MODE=veth
  fi
  ipx netns del "$t"
  say "path shaping: $PATH_MODE (htb + u32 filter$([ $PATH_MODE = veth ] && echo ' unavailable: a dedicated veth per shaped path, tbf on it'))"
}

# tbf parameters: a burst of 512 kB keeps a 1-10 Gbit/s rate exact with 1500-byte packets.
TBF="burst 512kb latency 100ms"
shape_node() { # k rate: both directions of the node's link
  tcx qdisc replace dev "$(hv "$1")" root tbf rate "$2" $TBF &&
    tcx -n "$(ns "$1")" qdisc replace dev "$(nv "$1")" root tbf rate "$2" $TBF
}
shape_path() { # a b rate
  local a=$1 b=$2 rate=$3
  if [ "$PATH_MODE" = htb ]; then
    for pair in "$a $b" "$b $a"; do
      set -- $pair
      tcx -n "$(ns "$1")" qdisc replace dev "$(nv "$1")" root handle 1: htb default 10 r2q 1000 || return 1
      tcx -n "$(ns "$1")" class add dev "$(nv "$1")" parent 1: classid 1:10 htb rate 100gbit quantum 60000 || return 1
      tcx -n "$(ns "$1")" class add dev "$(nv "$1")" parent 1: classid 1:20 htb rate "$rate" ceil "$rate" burst 512k cburst 512k quantum 60000 || return 1
      tcx -n "$(ns "$1")" filter add dev "$(nv "$1")" parent 1: protocol ip prio 1 u32 match ip dst "$(addr "$2")/32" flowid 1:20 || return 1
    done
  else
    # A point-to-point veth between the two namespaces, a /32 route each way over it (source:
    # the node's bridge address, so NCCL sees the same addresses), tbf on both ends.
    ipx link add fpa-$RUN_ID netns "$(ns "$a")" type veth peer name fpb-$RUN_ID netns "$(ns "$b")" || return 1
    ipx -n "$(ns "$a")" link set fpa-$RUN_ID up && ipx -n "$(ns "$b")" link set fpb-$RUN_ID up || return 1
    ipx -n "$(ns "$a")" route add "$(addr "$b")/32" dev fpa-$RUN_ID src "$(addr "$a")" || return 1
    ipx -n "$(ns "$b")" route add "$(addr "$a")/32" dev fpb-$RUN_ID src "$(addr "$b")" || return 1
    tcx -n "$(ns "$a")" qdisc replace dev fpa-$RUN_ID root tbf rate "$rate" $TBF || return 1
    tcx -n "$(ns "$b")" qdisc replace dev fpb-$RUN_ID root tbf rate "$rate" $TBF || return 1
  fi
}
reset_faults() {
  local k
  for k in $(seq 1 "$NODES"); do
    tcx qdisc del dev "$(hv "$k")" root 2>/dev/null
    tcx -n "$(ns "$k")" qdisc del dev "$(nv "$k")" root 2>/dev/null
    ipx link set "$(hv "$k")" up
    ipx -n "$(ns "$k")" link del fpa-$RUN_ID 2>/dev/null
    ipx -n "$(ns "$k")" link del fpb-$RUN_ID 2>/dev/null
  done
  sleep 0.5 # the carrier of a link set up again
}
fabric_state() { # for the row's log: every qdisc, class and filter in place
  local k
  for k in $(seq 1 "$NODES"); do
    echo "== $(name "$k") ($(ns "$k")): $(tcx qdisc show dev "$(hv "$k")" | tr '\n' ';')"
    tcx -n "$(ns "$k")" -s qdisc show dev "$(nv "$k")"
    tcx -n "$(ns "$k")" class show dev "$(nv "$k")"
    tcx -n "$(ns "$k")" filter show dev "$(nv "$k")"
    ipx -n "$(ns "$k")" route show
  done
}

# --- the self-test: shaping measured with TCP between namespaces (no GPU) ----------------------
# A receiver in B counts bytes for 1 s; a sender in A writes as fast as it can. Prints Mbit/s.
rate() { # from to
  local port=$((20000 + RANDOM % 20000)) r
  ipx netns exec "$(ns "$2")" timeout 8 python3 -c '
import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(("0.0.0.0",int(sys.argv[1]))); s.listen(1); s.settimeout(5)
c,_=s.accept(); c.settimeout(5); n=0; t0=time.time()
while time.time()-t0<1.0:
    b=c.recv(1<<20)
    if not b: break
    n+=len(b)
print("%.0f" % (n*8/(time.time()-t0)/1e6))' "$port" >"$OUTDIR/rate.out" 2>"$OUTDIR/rate.err" &
  local rx=$!
  sleep 0.3
  ipx netns exec "$(ns "$1")" timeout 4 python3 -c '
import socket,sys,time
s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=3); b=bytes(1<<20); t0=time.time()
try:
    while time.time()-t0<1.5: s.sendall(b)
except OSError: pass' "$(addr "$2")" "$port" 2>>"$OUTDIR/rate.err"
  wait "$rx"
  r=$(cat "$OUTDIR/rate.out")
  echo "${r:-0}"
}
selftest() {
  local fails=0 t0=$SECONDS
  sel() { # name condition detail
    if eval "$2"; then echo "PASS $1 ($3)"; else echo "FAIL $1 ($3)"; fails=$((fails + 1)); fi
  }
  up_fabric || { say "fabric did not come up"; return 1; }
  probe_path_mode
  local r12 r13 r34 s12 s13 s31 s34 n12 n23 n34
  r12=$(rate 1 2) r13=$(rate 1 3) r34=$(rate 3 4)
  sel "unshaped paths carry > 1000 Mbit/s" '[ "$r12" -gt 1000 ] && [ "$r13" -gt 1000 ] && [ "$r34" -gt 1000 ]' "1->2 $r12, 1->3 $r13, 3->4 $r34 Mbit/s"
  shape_path 1 2 300mbit || sel "shape_path" false "tc failed"
  s12=$(rate 1 2) s21=$(rate 2 1) s13=$(rate 1 3) s32=$(rate 3 2) s34=$(rate 3 4)
  sel "path fab01<->fab02 at 300mbit: both ways <= 330 Mbit/s" '[ "$s12" -le 330 ] && [ "$s21" -le 330 ] && [ "$s12" -ge 150 ]' "1->2 $s12, 2->1 $s21 Mbit/s"
  sel "their other paths stay full rate (> 3x the shaped one)" '[ "$s13" -gt $((3 * s12)) ] && [ "$s32" -gt $((3 * s12)) ] && [ "$s34" -gt $((3 * s12)) ]' "1->3 $s13, 3->2 $s32, 3->4 $s34 Mbit/s"
  reset_faults
  shape_node 3 300mbit
  n13=$(rate 1 3) n31=$(rate 3 1) n34=$(rate 3 4) n12=$(rate 1 2)
  sel "node fab03 at 300mbit: every path of it <= 330 Mbit/s both ways" '[ "$n13" -le 330 ] && [ "$n31" -le 330 ] && [ "$n34" -le 330 ]' "1->3 $n13, 3->1 $n31, 3->4 $n34 Mbit/s"
  sel "the others' paths stay full rate" '[ "$n12" -gt $((3 * n13)) ]' "1->2 $n12 Mbit/s"
  reset_faults
  ipx link set "$(hv 4)" down
  local d; d=$(rate 1 4)
  sel "fab04's link down: nothing reaches it" '[ "$d" -eq 0 ]' "1->4 $d Mbit/s"
  reset_faults
  d=$(rate 1 4)
  sel "fab04's link up again: full rate" '[ "$d" -gt 1000 ]' "1->4 $d Mbit/s"
  echo "fabric self-test: $fails failed ($((SECONDS - t0)) s)"
  return $((fails > 0))
}
if [ "$SELFTEST" = 1 ]; then
  selftest
  exit $?
fi

# --- the GPU run ------------------------------------------------------------------------------------
if [ -z "$WORKER" ]; then
  [ -x "$BIN" ] || { say "no worker at $BIN: cargo build --release -p bench-core --bin nccl-check (here, glibc 2.36) and carry it"; exit 2; }
  if [ -z "$LIB" ]; then
    LIB=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
    [ -n "$LIB" ] || LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null)
    [ -n "$LIB" ] || LIB=$(timeout 60 find / -xdev -name libnccl.so.2 -print -quit 2>/dev/null)
  fi
  [ -n "$LIB" ] && [ -f "$LIB" ] || { say "no libnccl.so.2 found: pass --nccl-lib"; exit 2; }
  read -r -a WORKER_CMD <<<"$BIN --nccl-lib $LIB"
else
  read -r -a WORKER_CMD <<<"$WORKER"
fi
# The plan of these rows (--plan): the built-in quick plan, its steps sized by their time budgets
# (default), or that plan counted at 32 MiB (256 MiB over sockets at 0.4 GB/s would take
# minutes); passed as a site would, through the worker's config.
CFG=$OUTDIR/fabric-plan.toml
# The outlier fraction: 0.70, not the built-in 0.85. Every emulated "node" shares one GPU and one
# kernel's socket stack, which no real fabric does: in 1 of 10 healthy 8-node runs four disjoint
# pairs read 0.75x the others in their screening round and again in their retest
# (bench-core/benchmarks/results/2026-11-24-h100x1-fabric-visit3). The faults of the table are at
# 0.3-0.4x, far below either.
# alltoall_fraction: the built-in 0.5 unless --alltoall-fraction. Measured on 2x H200 (all nodes
# on GPU 0, 2026-11-27, bench-core/benchmarks/results/2026-11-27-h200x2-all-paths): healthy, the
# alltoall read 0.93-1.03x the all_reduce's busbw at 8 nodes and 0.80x at 16; the far-path rows
# 0.14x and 0.18x.
case $A2A_FRACTION in 0.[0-9]*) ;; *) say "--alltoall-fraction must be 0.x"; exit 2 ;; esac
case $PLAN in budgeted|counted) ;; *) say "--plan must be budgeted or counted"; exit 2 ;; esac
{
  echo "# tests/gpu/fabric.sh: the outlier fractions of emulated nodes; plan: $PLAN"
  printf '[outliers]\nfraction = 0.70\nalltoall_fraction = %s\n' "$A2A_FRACTION"
  # counted: the quick plan at a fixed 32 MiB (the rows' earlier runs); budgeted: the built-in
  # quick plan, each step sized by its time budget (issue 47), as a site without a plan runs it.
  [ "$PLAN" = counted ] && cat <<'EOF'
[plans.quick]
description = "fabric suite: all_reduce 32M, then the pair matrix at 32M"
steps = [
  { collective = "all_reduce", bytes = "32M", warmup = 2, iters = 5 },
  { pairs = true, bytes = "32M", warmup = 2, iters = 5 },
]
EOF
} >"$CFG"

if command -v nvidia-smi >/dev/null && [ -z "$WORKER" ]; then
  DEVICE=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null)
  DRIVER=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0 2>/dev/null)
elif [ -n "$WORKER" ]; then
  DEVICE="none (stand-in worker: $WORKER)" DRIVER=none
else
  DEVICE="unknown (no nvidia-smi)" DRIVER=unknown
fi
SUMMARY=$OUTDIR/summary.tsv
NCCL_VERSION=
if [ ! -f "$SUMMARY" ]; then
  {
    echo "# tests/gpu/fabric.sh, fault table tests/gpu/fabric-faults.txt"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# device: $DEVICE (all emulated nodes on GPU 0)"
    echo "# driver: $DRIVER"
    echo "# kernel: $(uname -r)"
    echo "# worker: ${WORKER:-$BIN} $( [ -z "$WORKER" ] && "$BIN" --version 2>/dev/null | head -1)"
    echo "# start stagger: ${STAGGER} s; NCCL_CHECK_SHARED_GPUS=1 (one GPU: probes in turns); plan: $PLAN"
    printf 'row\tn\trun\tfault\texpected\tgot\tculprit\trounds\tseconds\tresult\n'
  } >"$SUMMARY"
fi
NCCL_LINE_DONE=0

up_fabric || { say "fabric did not come up"; exit 1; }
probe_path_mode
say "$NODES nodes up: bridge $BR, namespaces $(ns 1)..$(ns "$NODES"), results in $OUTDIR"

NODELIST=$(printf 'fab[01-%02d]' "$NODES")
JOB=$((4000 + RUN_ID % 5000))
fails=0 total=0

# One node's worker, as the plugin's slurmstepd starts it (spank-plugin/src/slurmstepd.rs: the
# task's Slurm variables, the step's secret as NCCL_CHECK_SECRET, --plan --json --timeout --rank
# --world --port-range, --progress on rank 0); runs in the background. The emulation adds only
# what makes N processes on one host N nodes to NCCL: NCCL_HOSTID, NCCL_SOCKET_IFNAME (exact
# match: the node's veth), and sockets only (NCCL_IB_DISABLE, NCCL_NET): an RDMA device is not
# confined to a network namespace and would bypass the emulated fabric. NCCL_DEBUG=WARN puts
# NCCL's own warnings (a socket that broke, a timeout) in the node's log.
# The load of a row (fabric-faults.txt's load column): all:K starts K busy loops per core;
# only:NODE confines that node's worker and 6 busy loops to the host's last 2 CPUs, every other
# worker to the rest (PIN[k], the taskset prefix of node k's launch). LOAD_PIDS: what to stop.
LOAD_PIDS=() PIN=()
start_load() { # load
  local cpus i spec=$1 last
  cpus=$(nproc)
  LOAD_PIDS=() PIN=()
  case $spec in
    none) ;;
    all:*)
      for i in $(seq 1 $((${spec#all:} * cpus))); do
        sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
        LOAD_PIDS+=($!)
      done ;;
    only:*)
      [ "$cpus" -ge 4 ] || { say "load $spec needs 4 CPUs or more"; return 1; }
      last="$((cpus - 2)),$((cpus - 1))"
      for i in $(seq 1 6); do
        taskset -c "$last" sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
        LOAD_PIDS+=($!)
      done
      for k in $(seq 1 "$NODES"); do PIN[$k]="taskset -c 0-$((cpus - 3))"; done
      PIN[$(index_of "${spec#only:}")]="taskset -c $last" ;;
    *) say "unknown load '$spec'"; return 1 ;;
  esac
}
stop_load() {
  local p
  for p in "${LOAD_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  LOAD_PIDS=() PIN=()
}

launch() { # k rowdir fault
  local k=$1 dir=$2 rank=$(($1 - 1)) extra=() pin=()
  [ -n "${PIN[$1]:-}" ] && read -r -a pin <<<"${PIN[$1]}"
  [ "$rank" = 0 ] && extra=(--progress)
  local ldlp=(-u LD_LIBRARY_PATH)
  [ -n "$ORIG_LDLP" ] && ldlp=("LD_LIBRARY_PATH=$ORIG_LDLP")
  # setsid: the worker (and `timeout`) get their own process group, which `starve` stops.
  setsid "${IP[@]}" netns exec "$(ns "$k")" env "${ldlp[@]}" \
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    NCCL_CHECK_SECRET="$SECRET" NCCL_CHECK_CONFIG="$CFG" FABRIC_FAULT="$3" NCCL_CHECK_SHARED_GPUS=1 \
    CUDA_VISIBLE_DEVICES=0 NCCL_HOSTID="$(name "$k")" NCCL_SOCKET_IFNAME="=$(nv "$k")" \
    NCCL_IB_DISABLE=1 NCCL_NET=Socket NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
    SLURM_JOB_ID=$JOB SLURM_STEP_ID=0 SLURM_JOB_NODELIST="$NODELIST" SLURM_STEP_NODELIST="$NODELIST" \
    SLURM_NNODES="$NODES" SLURM_STEP_NUM_NODES="$NODES" SLURM_NTASKS="$NODES" SLURM_STEP_NUM_TASKS="$NODES" \
    SLURM_TASKS_PER_NODE="1(x$NODES)" SLURM_STEP_TASKS_PER_NODE="1(x$NODES)" SLURM_JOB_GPUS=0 SLURM_STEP_GPUS=0 \
    SLURMD_NODENAME="$(name "$k")" SLURM_PROCID=$rank SLURM_LOCALID=0 SLURM_NODEID=$rank \
    "${pin[@]}" timeout -k 2 $((TIMEOUT_S + 10)) "${WORKER_CMD[@]}" --plan quick --json "$dir/$(name "$k").json" \
    --timeout "$TIMEOUT_S" --rank "$rank" --world "$NODES" --port-range 29501-29999 "${extra[@]}" \
    >"$dir/$(name "$k").log" 2>&1 </dev/null &
  PIDS[$k]=$!
}

# The row's reports -> "verdict|culprits|rounds|nccl|end", from the coordinator's report (rank 0,
# the first file): culprits, every fabNN it names (FAIL: in its reasons; ERROR: in its summary);
# end, when it gave its verdict (Unix seconds). A node judges its own facts (a missing GPU, a
# worker that could not run: `worker_starved`) in its own report, which its own prolog acts on:
# when the coordinator PASSes, a FAIL in any other node's report makes the row's verdict FAIL and
# adds the nodes that report names.
judge_report() { # coordinator.json other.json...
  python3 - "$@" <<'PY'
import json, re, sys
def load(path):
    try:
        return json.load(open(path))
    except Exception:
        return None
def named(r):
    text = []
    if r.get("verdict") == "PASS":
        return set()  # a PASS blames nobody (a host_busy warning names a host, not a culprit)
    if word(r) == "BUSY":
        # Busy only: the reasons' subjects, the busy nodes themselves (their messages cite the
        # slow pair they explain, whose other node is no culprit).
        subjects = set(re.findall(r"\bfab\d\d\b", " ".join(x.get("subject") or "" for x in r.get("reasons", []))))
        if subjects:
            return subjects
    if r.get("verdict") == "FAIL":
        for x in r.get("reasons", []):
            text += [x.get("subject") or "", x.get("message") or ""]
    else:
        text = [r.get("summary") or ""] + [x.get("message") or "" for x in r.get("reasons", [])]
    # A node named as HOST:PORT is the rendezvous address (the coordinator's node), not a culprit.
    return set(re.findall(r"\bfab\d\d\b(?!:\d)", " ".join(text)))
def word(r):
    # exit 8: only a busy node found (an ERROR that names it; the hardware was not judged).
    return "BUSY" if r.get("exit_code") == 8 else r.get("verdict")
def busy_warned(r):
    # The hosts a report's warnings name busy by others (not the check's own load, which is
    # said and never weighed).
    return {x.get("subject") for x in r.get("warnings", []) if x.get("code") == "host_busy"
            and x.get("subject") and "not weighed as load" not in (x.get("message") or "")}
def own_named(r):
    # The check's own workers named as a host's load (a consumer "pid N (user, nccl-check...)").
    text = " ".join(x.get("message") or "" for x in r.get("reasons", []) + r.get("warnings", []))
    return re.search(r"pid \d+ \([^,()]*, nccl-check", text) is not None
r = load(sys.argv[1])
if r is None:
    print("NOREPORT|-|-||0|0|-|-"); sys.exit(0)
verdict, names = word(r), named(r)
reports = [r] + list(filter(None, map(load, sys.argv[2:])))
if verdict in ("PASS", "FAIL", "BUSY"):
    for other in reports[1:]:
        w = word(other)
        if w == "FAIL" or (w == "BUSY" and verdict != "FAIL"):
            verdict = "FAIL" if "FAIL" in (w, verdict) else w
            names |= named(other)
loc = r.get("localization") or {}
rounds = loc.get("localization_rounds", "-")
nccl = (r.get("nccl") or {}).get("version", "")
end = r.get("started_unix", 0) + (r.get("phases") or {}).get("total_ms", 0) / 1e3
own = sum(own_named(x) for x in reports)
# The nodes whose own hardware a reason blames (its cause, the report's structured field).
hw = {n for x in r.get("reasons", []) if x.get("cause") == "hardware"
      for n in re.findall(r"\bfab\d\d\b", x.get("subject") or "")}
lst = lambda s: ",".join(sorted(s)) or "-"
print("%s|%s|%s|%s|%.3f|%d|%s|%s" % (verdict, lst(names), rounds, nccl, end, own, lst(busy_warned(r)), lst(hw)))
PY
}

run_row() { # row run fault load expect culprit rounds
  local row=$1 run=$2 fault=$3 load=$4 expect=$5 culprit=$6 maxr=$7
  local dir; dir=$OUTDIR/n$NODES-$row-$run
  rm -rf "$dir"; mkdir -p "$dir"
  SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  JOB=$((JOB + 1))
  reset_faults
  local absent= down= downat= starve= pct= item f
  for item in ${fault//,/ }; do
    IFS=: read -r -a f <<<"$item"
    case ${f[0]} in
      none) ;;
      slow) shape_node "$(index_of "${f[1]}")" "${f[2]}" || say "$row: shaping ${f[1]} failed" ;;
      path) shape_path "$(index_of "${f[1]}")" "$(index_of "${f[2]}")" "${f[3]}" || say "$row: shaping ${f[1]}<->${f[2]} failed" ;;
      down) down=$(index_of "${f[1]}") downat=${f[2]} ;;
      absent) absent=$(index_of "${f[1]}") ;;
      starve) starve=$(index_of "${f[1]}") pct=${f[2]} ;;
      *) say "$row: unknown fault '$item'"; return 1 ;;
    esac
  done
  fabric_state >"$dir/fabric-before.txt" 2>&1
  start_load "$load" || { stop_load; return 1; }
  [ "$load" = none ] || { sleep 1; echo "$(date -u +%T.%N) load $load: ${#LOAD_PIDS[@]} busy loops" >>"$dir/faults.log"; }
  local t0 k
  t0=$(date +%s%N)
  PIDS=()
  for k in $(seq 1 "$NODES"); do
    if [ "$k" = "$absent" ]; then echo "never started (fault absent)" >"$dir/$(name "$k").log"; else launch "$k" "$dir" "$fault"; fi
    [ "$k" -lt "$NODES" ] && sleep "$STAGGER"
  done
  local helpers=()
  if [ -n "$down" ]; then
    # SECONDS after the last start: every worker has joined (the rendezvous ends when the last
    # one arrives), so the link goes down inside the check (NCCL init, a collective or a round:
    # faults.log keeps the coordinator's last progress line to say which).
    (sleep "$downat"
      ipx link set "$(hv "$down")" down &&
        echo "$(date -u +%T.%N) link of $(name "$down") set down $downat s after the last start; coordinator: $(grep -a 'running' "$dir/$(name 1).log" | tail -1)" >>"$dir/faults.log") &
    helpers+=($!)
  fi
  if [ -n "$starve" ] && [ -n "${PIDS[$starve]:-}" ]; then
    local stop cont
    stop=$(python3 -c "print(0.5 * $pct / 100)") cont=$(python3 -c "print(0.5 * (100 - $pct) / 100)")
    (pg=${PIDS[$starve]}; end=$((SECONDS + TIMEOUT_S + 15))
      while [ $SECONDS -lt $end ] && kill -0 "$pg" 2>/dev/null; do
        kill -STOP -- "-$pg" 2>/dev/null; sleep "$stop"; kill -CONT -- "-$pg" 2>/dev/null; sleep "$cont"
      done; kill -CONT -- "-$pg" 2>/dev/null) &
    helpers+=($!)
  fi
  local rcs=() rc hung=
  for k in $(seq 1 "$NODES"); do
    if [ -n "${PIDS[$k]:-}" ]; then wait "${PIDS[$k]}"; rc=$?; else rc=-; fi
    rcs+=("$(name "$k")=$rc")
    # 124/137: `timeout` had to end it, past its own --timeout and watchdog: a hang (the node
    # whose link went down is dead to the check and may hang on its own side; not judged).
    case $rc in 124 | 137) [ "$k" = "$down" ] || hung+="$(name "$k") " ;; esac
  done
  local all_secs
  all_secs=$(python3 -c "print('%.1f' % (($(date +%s%N) - $t0) / 1e9))")
  for h in "${helpers[@]}"; do kill "$h" 2>/dev/null; wait "$h" 2>/dev/null; done
  stop_load
  [ -n "$starve" ] && [ -n "${PIDS[$starve]:-}" ] && kill -CONT -- "-${PIDS[$starve]}" 2>/dev/null
  fabric_state >"$dir/fabric-after.txt" 2>&1
  echo "${rcs[*]}" >"$dir/exit-codes.txt"
  local got verdict names rounds nccl end secs own
  local others=()
  for k in $(seq 2 "$NODES"); do others+=("$dir/$(name "$k").json"); done
  got=$(judge_report "$dir/$(name 1).json" "${others[@]}")
  local warned hw
  IFS='|' read -r verdict names rounds nccl end own warned hw <<<"$got"
  # HOSTBUSY: the node's host named busy, never its network: a BUSY verdict naming it, or a PASS
  # whose warning names its host busy (its load slowed nothing past the run's own noise).
  # Load confined to one node: its host is named busy (a reason or a warning), its network
  # never (no reason of cause hardware names it).
  local confined=
  case $load in only:*) confined=${load#only:} ;; esac
  if [ -n "$confined" ] && [ "$verdict" != PASS ] && [[ ",$warned," == *",$confined,"* ]]; then
    names=$(printf '%s\n' ${names//,/ } "$confined" | grep -v '^-$' | sort -u | paste -sd,)
  fi
  local shown=$verdict
  if [ "$expect" = HOSTBUSY ]; then
    case $verdict in
      BUSY) verdict=HOSTBUSY ;;
      PASS) [ "$warned" = - ] || { verdict=HOSTBUSY names=$warned shown=PASS+host_busy; } ;;
    esac
  fi
  # seconds: from the first start to the coordinator's verdict (its report's own clock).
  secs=$(python3 -c "e=$end; print('%.1f' % (e - $t0 / 1e9) if e > 0 else '$all_secs')")
  if [ "$NCCL_LINE_DONE" = 0 ] && [ -n "$nccl" ]; then
    sed -i "s|^# driver: .*|&\n# NCCL: $nccl|" "$SUMMARY"; NCCL_LINE_DONE=1
  fi
  # Judged: the verdict, exactly the expected culprits, the rounds (FAIL/PASS), and the time:
  # the coordinator's verdict within the worker's budget after the last start, and every worker
  # gone within its `timeout -k 2 (budget + 10)` (a worker past that is a hang: row failed).
  local ok=pass why=
  [ "$verdict" = "$expect" ] || { ok=fail why+="verdict $verdict; "; }
  [ "$names" = "$culprit" ] || { ok=fail why+="culprits $names; "; }
  [ -z "$confined" ] || [[ ",$hw," != *",$confined,"* ]] || { ok=fail why+="$confined's own hardware blamed under its confined load; "; }
  if [ "$maxr" != - ]; then
    { [ "$rounds" != - ] && [ "$rounds" -le "$maxr" ]; } 2>/dev/null || { ok=fail why+="rounds $rounds > $maxr; "; }
  fi
  local budget
  budget=$(python3 -c "print($TIMEOUT_S + $STAGGER * ($NODES - 1) + 3)")
  python3 -c "import sys; sys.exit(not ($secs <= $budget))" || { ok=fail why+="verdict after $secs s > $budget s; "; }
  python3 -c "import sys; sys.exit(not ($all_secs <= $budget + 11))" || { ok=fail why+="last worker ended after $all_secs s; "; }
  [ -z "$hung" ] || { ok=fail why+="killed by timeout (hung): $hung; "; }
  [ "${own:-0}" = 0 ] || { ok=fail why+="the check's own workers named as load in $own report(s); "; }
  # A PASS, FAIL or BUSY row: every worker that ran ends with a verdict's code (0, 1 or busy's
  # 8), none in another ERROR (two neighbours of a node that exited right after the last
  # all_reduce ended in 7).
  if [ "$expect" != ERROR ]; then
    local odd
    odd=$(printf '%s\n' "${rcs[@]}" | grep -vE '=(0|1|8|-)$' | tr '\n' ' ')
    [ -z "$odd" ] || { ok=fail why+="workers not ending 0/1/8: $odd; "; }
  fi
  [ $ok = pass ] || fails=$((fails + 1))
  local ran=$fault
  [ "$load" = none ] || ran="$fault+load:$load"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$row" "$NODES" "$run" "$ran" "$expect $culprit" \
    "$shown" "$names" "$rounds" "$secs" "$ok${why:+ ($why)}" >>"$SUMMARY"
  echo "$ok n=$NODES $row#$run: expected $expect $culprit, got $verdict $names, rounds $rounds, verdict after $secs s (all ended after $all_secs s)${why:+ ($why)}; exits: ${rcs[*]}"
  # The coordinator's one-line verdict, for the console, and what its alltoall beside the
  # all_reduce read (bench-core/src/localize/paths.rs: slow or not, against what, in how long).
  tail -1 "$dir/$(name 1).log" | sed 's/^/    /'
  grep -a -m1 '^# alltoall' "$dir/$(name 1).log" | sed 's/^/    /' || true
}

while read -r row n repeat fault load expect culprit maxr; do
  case $row in '#'* | '') continue ;; esac
  [ "$n" = "$NODES" ] || continue
  if [ -n "$ROWS" ] && [[ ",$ROWS," != *",$row,"* ]]; then continue; fi
  [ -n "$REPEAT" ] && repeat=$REPEAT
  for run in $(seq 1 "$repeat"); do
    total=$((total + 1))
    if [ -n "$BUDGET" ] && [ "$SECONDS" -ge "$BUDGET" ]; then
      echo "NOT RUN n=$NODES $row#$run: --budget $BUDGET s spent"
      printf '%s\t%s\t%s\t%s\t%s\t-\t-\t-\t-\tnot run (budget)\n' "$row" "$NODES" "$run" "$fault" "$expect $culprit" >>"$SUMMARY"
      fails=$((fails + 1))
      continue
    fi
    run_row "$row" "$run" "$fault" "$load" "$expect" "$culprit" "$maxr"
  done
done <"$TABLE"
echo "fabric n=$NODES: $fails of $total rows failed or not run ($SECONDS s); summary $SUMMARY"
exit $((fails > 0))
