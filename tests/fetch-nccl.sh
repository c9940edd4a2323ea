#!/usr/bin/env bash
# Prints the path of a real libnccl.so.2 for the no-GPU worker tests, fetching it once from PyPI
# (the nvidia-nccl-cu12 wheel; NCCL loads without a GPU, so "no GPU" can be told from "no NCCL").
set -euo pipefail
version=2.32.3
dir=$(cd "$(dirname "$0")/.." && pwd)/target/test-nccl/$version
lib=$dir/nvidia/nccl/lib/libnccl.so.2
if [ ! -f "$lib" ]; then
  mkdir -p "$dir"
  command -v pip3 >/dev/null || command -v pip >/dev/null || { echo "fetch-nccl: pip is needed" >&2; exit 1; }
  timeout 600 python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_27_x86_64 \
    --python-version 3.11 "nvidia-nccl-cu12==$version" -d "$dir" >&2
  (cd "$dir" && unzip -q -o ./*.whl 'nvidia/nccl/lib/libnccl.so.2' && rm -f ./*.whl)
fi
echo "$lib"
