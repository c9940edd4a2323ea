#!/usr/bin/env bash
# Benchmark (not a test): process start to exit of one all_reduce 256 MiB check on every visible GPU,
# N runs each of nccl-check, nccl-tests (an existing build) and the floor program floor_par
# (shared/tools/floor_par.cu built with nvcc; fast exit), printed as wall ms and medians; also
# nccl-check's quick plan (all_reduce 256M + the GPU pair matrix, the prolog's check).
#   time-to-verdict.sh NCCL_CHECK NCCL_TESTS_DIR FLOOR_PAR LIBNCCL [RUNS]
set -u
ours=$1 nt=$2 floor=$3 lib=$4 runs=${5:-5}
ngpus=$(nvidia-smi -L | grep -c ^GPU)
libdir=$(dirname "$(readlink -f "$lib")")
wall() { local t0 t1; t0=$(date +%s%N); "$@" >/tmp/ttv.out 2>&1; local rc=$?; t1=$(date +%s%N); echo "$(( (t1 - t0) / 1000000 )) $rc"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A all
for i in $(seq "$runs"); do
  for tool in floor nccl-check nccl-check-quick nccl-tests; do
    case $tool in
      floor) r=$(LD_LIBRARY_PATH=$libdir wall "$floor" 256 10 1) ;;
      nccl-check) r=$(wall "$ours" all_reduce -b 256M -e 256M -w 2 -n 5 --nccl-lib "$lib" --json /tmp/ttv.json) ;;
      nccl-check-quick) r=$(wall "$ours" --nccl-lib "$lib" --json /tmp/ttv-quick.json) ;;
      nccl-tests) r=$(LD_LIBRARY_PATH=$libdir wall "$nt/all_reduce_perf" -b 256M -e 256M -g "$ngpus" -w 2 -n 5) ;;
    esac
    echo "run $i $tool wall_ms=${r% *} rc=${r#* }"
    all[$tool]+="${r% *} "
    [ "$tool" = nccl-check ] && grep -o '"phases": {[^}]*}' <(tr -d '\n ' </tmp/ttv.json | sed 's/"phases":/"phases": /') | head -1
  done
done
for tool in floor nccl-check nccl-check-quick nccl-tests; do
  echo "median $tool wall_ms=$(echo ${all[$tool]} | tr ' ' '\n' | median) runs: ${all[$tool]}"
done
