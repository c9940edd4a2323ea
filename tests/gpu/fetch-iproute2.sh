#!/usr/bin/env bash
# Puts Debian 12's `ip` and `tc` with the libraries they load into target/gpu-carry/iproute2
# (ignored by git, about 2-3 MB) and prints that folder. The GPU machine's image has no iproute2:
# carry this folder there (`run` tool: carry ["target/gpu-carry/iproute2"]); tests/gpu/fabric.sh
# runs it with LD_LIBRARY_PATH=<folder>/lib when `ip` is absent. Run here (Debian 12, apt); every
# step is bounded. shared/notes/emulated-fabric.md: checked on the GPU machine (glibc newer there).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$repo/target/gpu-carry/iproute2
pkgs=(iproute2 libbpf1 libelf1 libmnl0 libcap2 libxtables12 libbsd0 libmd0 zlib1g)
if [ -x "$out/ip" ] && [ -x "$out/tc" ] && [ -d "$out/lib" ]; then echo "$out"; exit 0; fi
work=$(mktemp -d /tmp/fetch-iproute2.XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$work" && timeout 300 apt-get download "${pkgs[@]}" >&2)
mkdir -p "$work/root" "$out/lib"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
install -m 0755 "$work/root/bin/ip" "$out/ip" 2>/dev/null || install -m 0755 "$work/root/sbin/ip" "$out/ip"
install -m 0755 "$work/root/sbin/tc" "$out/tc"
# Only the shared libraries (files and their soname links), nothing else of the packages.
find "$work/root/lib" "$work/root/usr/lib" -maxdepth 2 -name '*.so*' \( -type f -o -type l \) \
  -exec cp -a {} "$out/lib/" \;
# A tc plugin folder is not needed: tbf/htb/u32 are built into tc.
LD_LIBRARY_PATH=$out/lib "$out/ip" -V >&2
echo "$out"
