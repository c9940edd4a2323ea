#!/usr/bin/env bash
# GPU tests of the real nccl-check worker (not run in CI: CI has no GPU). Needs >= 2 GPUs; the
# two-process tests need 4. Every step is bounded by `timeout`; traffic stays on 127.0.0.1.
#   tests/gpu/run.sh NCCL_CHECK LIBNCCL [OUTDIR]
set -u
bin=$1 lib=$2 out=${3:-/tmp/nccl-check-gpu-tests}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpus=$(nvidia-smi -L | grep -c ^GPU)
fails=0
check() { # name expected-rc actual-rc [detail]
  if [ "$2" = "$3" ]; then echo "PASS $1 ${4:-}"; else echo "FAIL $1: expected rc $2, got $3 ${4:-}"; fails=$((fails + 1)); fi
}
nc() { timeout -k 2 "${T:-120}" "$bin" --nccl-lib "$lib" "$@"; }
busbw() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("%.1f" % max(x["out_of_place"]["busbw"] for x in r))' "$1"; }

nc --json "$out/quick.json" >"$out/quick.txt" 2>&1; check "quick check on $ngpus GPUs passes" 0 $? "busbw $(busbw "$out/quick.json")"
for args in "-d float -o sum" "-d half -o max" "-d bfloat16 -o sum" "-d int8 -o prod" "-d double -o min" "-d uint64 -o sum" "-d int32 -o prod"; do
  nc all -b 1M -e 4M -w 1 -n 2 $args >"$out/types.txt" 2>&1; rc=$?
  check "all collectives $args verify" 0 $rc "$(tail -1 "$out/types.txt")"
done
nc all -b 8 -e 64K -f 8 -w 1 -n 2 >"$out/small.txt" 2>&1; check "tiny sizes (0-byte chunks) pass" 0 $?
CUDA_VISIBLE_DEVICES= nc >"$out/nogpu.txt" 2>&1; check "no visible GPU is ERROR 4" 4 $? "$(tail -1 "$out/nogpu.txt")"

if [ "$ngpus" -ge 4 ]; then
  port=29611
  nc all_reduce -b 1G -e 1G --json "$out/one4.json" >"$out/one4.txt" 2>&1; check "1 process x 4 GPUs" 0 $?
  nc all_reduce -b 1G -e 1G --gpus 0,1 --rank 0 --world 2 --rendezvous 127.0.0.1:$port --json "$out/two0.json" >"$out/two0.txt" 2>&1 &
  p0=$!
  sleep 3   # the second process starts 3 s late: the rendezvous waits for it
  nc all_reduce -b 1G -e 1G --gpus 2,3 --rank 1 --world 2 --rendezvous 127.0.0.1:$port >"$out/two1.txt" 2>&1; r1=$?
  wait $p0; r0=$?
  check "2 processes x 2 GPUs (started 3 s apart)" "0 0" "$r0 $r1"
  a=$(busbw "$out/one4.json"); b=$(busbw "$out/two0.json")
  python3 -c "import sys; a,b=$a,$b; r=b/a; print(('PASS' if abs(r-1)<=0.03 else 'FAIL'), '2x2 vs 1x4 busbw %.1f / %.1f = %.3f (within 3%%)' % (b,a,r)); sys.exit(abs(r-1)>0.03)" || fails=$((fails + 1))

  port=29612
  NCCL_HOSTID=node0 nc all -b 64M -e 64M --gpus 0,1 --rank 0 --world 2 --rendezvous 127.0.0.1:$port --json "$out/host0.json" >"$out/host0.txt" 2>&1 &
  p0=$!
  NCCL_HOSTID=node1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET nc all -b 64M -e 64M --gpus 2,3 --rank 1 --world 2 --rendezvous 127.0.0.1:$port >"$out/host1.txt" 2>&1; r1=$?
  wait $p0; r0=$?
  check "2 emulated nodes (NCCL_HOSTID) all collectives, data correct" "0 0" "$r0 $r1" "$(grep -m1 -o 'NET/Socket[^ ]*' "$out/host1.txt") busbw $(busbw "$out/host0.json")"

  # (a) world 3, only 2 processes: both end with ERROR within --timeout + 1 s
  port=29613; t0=$(date +%s%N)
  nc --gpus 0 --rank 0 --world 3 --rendezvous 127.0.0.1:$port --timeout 10 >"$out/a0.txt" 2>&1 &
  p0=$!
  nc --gpus 1 --rank 1 --world 3 --rendezvous 127.0.0.1:$port --timeout 10 >"$out/a1.txt" 2>&1; r1=$?
  wait $p0; r0=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  check "missing rank: both ERROR 5" "5 5" "$r0 $r1" "after ${ms} ms: $(tail -1 "$out/a0.txt")"
  [ $ms -le 11000 ] && echo "PASS missing rank ends within timeout+1s (${ms} ms)" || { echo "FAIL missing rank took ${ms} ms"; fails=$((fails + 1)); }

  # (b) one process SIGKILLed in the timed loop: the other ends with ERROR within the budget
  port=29614
  nc all_reduce -b 8G -e 8G -w 1 -n 400 --gpus 0,1 --rank 0 --world 2 --rendezvous 127.0.0.1:$port --timeout 25 >"$out/b0.txt" 2>&1 &
  p0=$!
  nc all_reduce -b 8G -e 8G -w 1 -n 400 --gpus 2,3 --rank 1 --world 2 --rendezvous 127.0.0.1:$port --timeout 25 >"$out/b1.txt" 2>&1 &
  p1=$!
  sleep 10; kill -9 $p1; t0=$(date +%s%N)
  wait $p0; r0=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  check "peer SIGKILLed mid-loop: survivor ERROR" 1 $(( r0 >= 5 && r0 <= 7 )) "rc $r0 after ${ms} ms: $(tail -1 "$out/b0.txt")"
fi

NCCL_P2P_DISABLE=1 nc --json "$out/p2p.json" >"$out/p2p.txt" 2>&1; echo "INFO NCCL_P2P_DISABLE=1 quick: rc $? busbw $(busbw "$out/p2p.json")"
echo "gpu tests: $fails failed"
exit $((fails > 0))
