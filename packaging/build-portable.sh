#!/usr/bin/env bash
# Builds the `nccl-check` worker so that it runs on glibc >= FLOOR (default 2.17), i.e. inside the
# containers users bring (NGC PyTorch images back to Ubuntu 16.04, CentOS 7, Rocky 8, ...), not
# only on the build host. pyxis/enroot bind-mount the host's worker into the job's container
# (enroot/README.md), where the container's glibc is the one the dynamic loader finds.
#
# How: cargo-zigbuild links against zig's glibc stubs of exactly the requested version
# (target triple suffix `.2.17`), so no old sysroot or old distro is needed on the build host.
# Why 2.17: it is Rust's own minimum for x86_64-unknown-linux-gnu, so a lower floor is not
# possible and this one costs nothing; every NGC PyTorch image has a newer glibc (table in
# enroot/README.md). The result is checked with objdump: no symbol may need a newer GLIBC_x.y.
#
# Usage: packaging/build-portable.sh [--print-path]   (run from anywhere; needs cargo, python3)
# Env:   NCCL_CHECK_GLIBC_FLOOR (default 2.17)
# Output: target/x86_64-unknown-linux-gnu/release/nccl-check (path printed on stdout).
# Installs what is missing, pinned: ziglang from PyPI (pip, into target/tools/python),
# cargo-zigbuild from crates.io (cargo install --locked).
set -euo pipefail
cd "$(dirname "$0")/.."

FLOOR=${NCCL_CHECK_GLIBC_FLOOR:-2.17}
TRIPLE=x86_64-unknown-linux-gnu
ZIGLANG_VERSION=0.17.1        # PyPI `ziglang`; tried with cargo-zigbuild 0.24.1
ZIGBUILD_VERSION=0.24.1
say() { echo "build-portable: $*" >&2; }

[[ "$FLOOR" =~ ^2\.[0-9]+$ ]] || { say "NCCL_CHECK_GLIBC_FLOOR must look like 2.17, got '$FLOOR'"; exit 2; }

# zig: a `zig` on PATH, else the PyPI wheel, which cargo-zigbuild runs as `python3 -m ziglang`.
# It is installed into target/tools/python (PYTHONPATH), not into the system's Python.
TOOLS_PY=$PWD/target/tools/python
export PYTHONPATH=$TOOLS_PY${PYTHONPATH:+:$PYTHONPATH}
if ! command -v zig >/dev/null 2>&1 && ! python3 -m ziglang version >/dev/null 2>&1; then
    say "installing ziglang==$ZIGLANG_VERSION from PyPI into $TOOLS_PY"
    timeout 600 python3 -m pip install -q --disable-pip-version-check --target "$TOOLS_PY" \
        "ziglang==$ZIGLANG_VERSION" >&2
    python3 -m ziglang version >/dev/null || { say "zig from PyPI does not run"; exit 1; }
fi
if ! command -v cargo-zigbuild >/dev/null 2>&1; then
    say "installing cargo-zigbuild $ZIGBUILD_VERSION (cargo install --locked, a few minutes)"
    timeout 1800 cargo install --locked --version "$ZIGBUILD_VERSION" cargo-zigbuild >&2
fi

say "cargo zigbuild --release -p bench-core --bin nccl-check --target $TRIPLE.$FLOOR"
timeout 2400 cargo zigbuild --release -p bench-core --bin nccl-check --target "$TRIPLE.$FLOOR" >&2
bin=$PWD/target/$TRIPLE/release/nccl-check
[ -x "$bin" ] || { say "no binary at $bin"; exit 1; }

# The proof: the highest GLIBC_ symbol version the binary needs must not exceed the floor.
newest=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
[ -n "$newest" ] || { say "objdump found no GLIBC_ symbols in $bin (not a glibc binary?)"; exit 1; }
if [ "$(printf '%s\n%s\n' "$newest" "$FLOOR" | sort -V | tail -1)" != "$FLOOR" ]; then
    say "FAIL: $bin needs GLIBC_$newest, above the floor $FLOOR:"
    objdump -T "$bin" | grep "GLIBC_$newest" >&2
    exit 1
fi
say "ok: $bin needs at most GLIBC_$newest (floor $FLOOR)"
echo "$bin"
