#!/usr/bin/env bash
# Builds everything tests/gpu/container-e2e.sh needs on the GPU machine (which has no network and no
# Slurm, pyxis, enroot or squashfs-tools) into target/gpu-carry/container/ (ignored by git), then
# prints that folder. Run here (Debian 12, root, apt, PyPI). Every step is bounded; the NCCL build
# is cached under target/container-carry-build/ (20 min the first time on 2 shared cores).
#
#   bash tests/gpu/fetch-container-carry.sh [NCCL_SRC]
#
# NCCL_SRC: a git checkout of NVIDIA/nccl (any state: the tag below is checked out into a private
# worktree; default $NCCL_CHECK_NCCL_SRC). Needed only when the NCCL build is not cached.
#
# What it puts there (22 MB):
#   debs/               Debian 12 packages the GPU machine lacks: Slurm 22.05 + MUNGE (as
#                       slurm-e2e.sh), squashfs-tools (enroot create runs unsquashfs) with liblzo2,
#                       jq, libbsd0/libmd0 (enroot's helpers link libbsd). Unpacked there with
#                       dpkg-deb -x into a scratch folder; only usr/bin, usr/sbin and the library
#                       folder are copied, never over an existing file.
#   spank_pyxis.so      pyxis 0.24.0 from ../shared/vendor, built against Debian 12's Slurm 22.05.
#   enroot.tar.gz       enroot 4.1.2 from ../shared/vendor (as tests/pyxis/run.sh builds it),
#                       installed with prefix /opt/nccl-check-e2e/enroot (its scripts name it).
#   release/            nccl-check and libnccl_check.so from target/release, stripped.
#   image-nccl.sqsh     the job's image: a minimal Debian 12 root (libc6, libgcc-s1, libstdc++6,
#                       busybox as /bin/sh and the few tools the test wrapper uses), CUDA 13's
#                       libcudart.so.13 (PyPI nvidia-cuda-runtime) and NCCL $NCCL_TAG built here
#                       for sm_90 only, at /usr/lib/x86_64-linux-gnu (in the image's ld.so.cache,
#                       as NGC images have it), the check's NCCL env in /etc/environment, a marker.
#   image-no-nccl.sqsh  the same root without NCCL (the "image has no NCCL" case).
#   BUILT_FROM          what went in, with sha256s.
# The NCCL is built with ONLY_FUNCS (the generator's own filter): the collectives the worker
# calls (AllReduce and ReduceScatter with Sum on every type the worker has, AllGather, Broadcast,
# SendRecv), every algorithm and protocol. A function left out becomes a no-op kernel, so this
# library is for this test only: the worker's default plans use only what is built (float and
# double, sum).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$repo/target/gpu-carry/container
build=$repo/target/container-carry-build
NCCL_TAG=v2.27.7-1
NCCL_ONLY_FUNCS='(AllReduce|ReduceScatter) Sum (i8|u8|i32|u32|i64|u64|f16|f32|f64|bf16) * *|AllGather * *|Broadcast * *|SendRecv'
CUDA_PIP=("nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-crt==13.0.88" "nvidia-nvvm==13.0.88"
          "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cccl==13.0.85")
HOST_DEBS=(slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libmunge2 libdbus-1-3
           squashfs-tools liblzo2-2 jq libjq1 libonig5 libbsd0 libmd0)
IMAGE_DEBS=(libc6 libgcc-s1 libstdc++6 busybox)
PYXIS_SHA=063653ba39125ac29796cc6079701d1ec34dd4c5baf698efacc0f36bf3619681
ENROOT_SHA=817e8d551135e6f3fc311d1ee57b03fb4d30325acba732f8dea43069ca11f8d3
ENROOT_PREFIX=/opt/nccl-check-e2e/enroot
say() { echo "fetch-container-carry: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (chroot ldconfig, file owners in the images)"
for t in mksquashfs dpkg-deb apt-get pip make gcc strip; do
    command -v "$t" >/dev/null || die "$t missing (apt-get install squashfs-tools build-essential; pip)"
done
vendor=
for d in "$repo/shared/vendor" "$repo/../shared/vendor" /work/shared/vendor; do
    [ -f "$d/pyxis-0.24.0.tar.gz" ] && { vendor=$(cd "$d" && pwd); break; }
done
[ -n "$vendor" ] || die "no pyxis-0.24.0.tar.gz in shared/vendor"
echo "$PYXIS_SHA  $vendor/pyxis-0.24.0.tar.gz" | sha256sum -c --quiet - || die "pyxis archive: sha256 mismatch"
echo "$ENROOT_SHA  $vendor/enroot-4.1.2.tar.gz" | sha256sum -c --quiet - || die "enroot archive: sha256 mismatch"
mkdir -p "$build" "$out"

# 1. CUDA 13.0's compiler and runtime from PyPI (the nvcc, crt, nvvm, runtime and cccl wheels
# together are a CUDA toolkit's compiler: nvidia/cu13/{bin,include,lib,nvvm}).
cuda=$build/cuda/nvidia/cu13
if [ ! -x "$cuda/bin/nvcc" ] || [ ! -f "$cuda/lib/libcudart.so.13" ]; then
    rm -rf "$build/wheels" "$build/cuda" && mkdir -p "$build/wheels" "$build/cuda"
    timeout 600 pip download -q --no-deps -d "$build/wheels" "${CUDA_PIP[@]}" >&2
    for w in "$build"/wheels/*.whl; do python3 -m zipfile -e "$w" "$build/cuda"; done
    chmod +x "$cuda"/bin/* "$cuda"/nvvm/bin/*
    ln -sfn lib "$cuda/lib64"
fi
"$cuda/bin/nvcc" --version | grep -q 'release 13.0' || die "nvcc from the wheels does not run"

# 2. NCCL for sm_90 only (cached: the long step).
nccl_lib=$build/nccl-$NCCL_TAG/build/lib/libnccl.so.2
if [ ! -f "$nccl_lib" ]; then
    src=${1:-${NCCL_CHECK_NCCL_SRC:-}}
    [ -d "$src/.git" ] || [ -f "$src/HEAD" ] || die "NCCL not built yet: give a git checkout of NVIDIA/nccl as NCCL_SRC"
    rm -rf "$build/nccl-$NCCL_TAG"
    git clone -q "$src" "$build/nccl-$NCCL_TAG" || die "cannot clone $src"
    git -C "$build/nccl-$NCCL_TAG" checkout -q "$NCCL_TAG" || die "no tag $NCCL_TAG in $src"
    say "building NCCL $NCCL_TAG for sm_90 (log $build/nccl-build.log; about 20 min on 2 cores)"
    (cd "$build/nccl-$NCCL_TAG" && timeout 7200 nice -n 19 make -j2 src.build CUDA_HOME="$cuda" \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ONLY_FUNCS="$NCCL_ONLY_FUNCS") \
        >"$build/nccl-build.log" 2>&1 || { tail -20 "$build/nccl-build.log" >&2; die "NCCL build failed"; }
fi
nccl_real=$(readlink -f "$nccl_lib")

# 3. Debian packages: the GPU machine's and the image's.
rm -rf "$out/debs" "$build/image-debs" && mkdir -p "$out/debs" "$build/image-debs"
(cd "$out/debs" && timeout 300 apt-get download "${HOST_DEBS[@]}" >&2) || die "apt-get download (host) failed"
(cd "$build/image-debs" && timeout 300 apt-get download "${IMAGE_DEBS[@]}" >&2) || die "apt-get download (image) failed"

# 4. pyxis against Debian 12's Slurm 22.05 headers (the Slurm the GPU machine gets).
[ -f /usr/include/slurm/spank.h ] || die "no <slurm/spank.h> (apt-get install libslurm-dev)"
rm -rf "$build/pyxis" && mkdir -p "$build/pyxis"
tar -xzf "$vendor/pyxis-0.24.0.tar.gz" -C "$build/pyxis" --strip-components=1
timeout 600 make -C "$build/pyxis" -j2 >"$build/pyxis-build.log" 2>&1 || die "pyxis build failed ($build/pyxis-build.log)"
install -m 0755 "$build/pyxis/spank_pyxis.so" "$out/spank_pyxis.so"

# 5. enroot as tests/pyxis/run.sh builds it (no submodules: FORCE_GLIBC, libbsd, a makeself stub),
# installed into a staging root with the prefix the GPU machine will use.
es=$build/enroot-src
rm -rf "$es" "$build/enroot-root" && mkdir -p "$es"
tar -xzf "$vendor/enroot-4.1.2.tar.gz" -C "$es" --strip-components=1
mkdir -p "$es/deps/dist/makeself/bin"
printf '#!/bin/sh\necho "enroot-makeself: not in this test build" >&2\nexit 1\n' >"$es/deps/dist/makeself/bin/enroot-makeself"
chmod 755 "$es/deps/dist/makeself/bin/enroot-makeself"
touch "$es/deps/makeself/.stamp" "$es/deps/linux-headers/.stamp"
enroot_make() {
    (cd "$es" && GIT_DIR=/nonexistent CPPFLAGS="-D_GNU_SOURCE=1 -include bsd/string.h" \
        timeout 600 make -j2 FORCE_GLIBC=1 LDLIBS="-l:libbsd.a -l:libbsd.so" "$@")
}
# The prefix on both: `make all` writes it into bin/enroot and conf/enroot.conf.
enroot_make all prefix="$ENROOT_PREFIX" >"$build/enroot-build.log" 2>&1 || die "enroot build failed ($build/enroot-build.log)"
enroot_make install prefix="$ENROOT_PREFIX" DESTDIR="$build/enroot-root" >>"$build/enroot-build.log" 2>&1 \
    || die "enroot install failed ($build/enroot-build.log)"
grep -q "ENROOT_SYSCONF_PATH *\"$ENROOT_PREFIX/etc/enroot\"" "$build/enroot-root$ENROOT_PREFIX/bin/enroot" \
    || die "the installed enroot does not name $ENROOT_PREFIX/etc/enroot"
tar -czf "$out/enroot.tar.gz" -C "$build/enroot-root" .

# 6. The worker and the plugin.
rel=${NCCL_CHECK_RELEASE_DIR:-$repo/target/release}
mkdir -p "$out/release"
for f in nccl-check libnccl_check.so; do
    [ -f "$rel/$f" ] || die "$rel/$f missing (cargo build --release -p bench-core -p spank-plugin)"
    strip -o "$out/release/$f" "$rel/$f"
done

# 7. The images.
root=$build/image-root
rm -rf "$root" && mkdir -p "$root"
for d in "$build"/image-debs/*.deb; do dpkg-deb -x "$d" "$root"; done
# What a container never uses here: documentation, locales, gconv modules, the rest of busybox's docs.
rm -rf "${root:?}"/usr/share "${root:?}"/usr/lib/x86_64-linux-gnu/gconv "${root:?}"/usr/libexec "${root:?}"/var
# Debian 12's packages are not merged-/usr (libc in /lib, busybox in /bin): kept as they unpack.
mkdir -p "$root"/{dev,proc,sys,tmp,run,root,home,etc,var/tmp,usr/bin,usr/local/bin}
chmod 1777 "$root/tmp" "$root/var/tmp"
# busybox is /bin/sh and the tools the test's worker wrapper runs (dirname, cat, cp, ...).
[ -x "$root/bin/busybox" ] || die "busybox missing from the image root"
for a in sh cat cp dirname ls env mkdir rm touch sleep id grep sed head tail tr true false echo test md5sum; do
    ln -sf busybox "$root/bin/$a"
done
# The loader's configuration as Debian has it (libc6 ships ld.so.conf.d/x86_64-linux-gnu.conf).
echo 'include /etc/ld.so.conf.d/*.conf' >"$root/etc/ld.so.conf"
grep -qx /usr/lib/x86_64-linux-gnu "$root/etc/ld.so.conf.d/x86_64-linux-gnu.conf" || die "libc6 has no multiarch ld.so.conf.d file"
# Names from files first (the rendezvous resolves the node name through the host's /etc/hosts,
# which enroot binds in; without this file glibc would ask DNS first, and no DNS answers there).
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n' \
    >"$root/etc/nsswitch.conf"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf 'PRETTY_NAME="nccl-check test image (Debian 12 libraries)"\nID=nccl-check-image\nVERSION_ID=%s\n' \
    "${NCCL_TAG#v}" >"$root/etc/os-release"
# The check's environment as an image sets it (enroot reads /etc/environment into the container).
printf 'NCCL_NVLS_ENABLE=0\nTORCH_SYMM_MEM_DISABLE_MULTICAST=1\nNVSHMEM_DISABLE_NVLS=1\n' >"$root/etc/environment"
install -m 0755 "$cuda/lib/libcudart.so.13" "$root/usr/lib/x86_64-linux-gnu/libcudart.so.13"
pack() { # ROOT IMAGE
    ldconfig -r "$1" || die "ldconfig -r $1 failed"
    timeout 600 mksquashfs "$1" "$2" -noappend -quiet -no-progress -comp xz -processors 2 -all-root >/dev/null \
        || die "mksquashfs $2 failed"
    chmod 0644 "$2"
}
echo "no-nccl" >"$root/etc/nccl-check-test-image"
pack "$root" "$out/image-no-nccl.sqsh"
strip --strip-unneeded -o "$root/usr/lib/x86_64-linux-gnu/$(basename "$nccl_real")" "$nccl_real"
ln -sfn "$(basename "$nccl_real")" "$root/usr/lib/x86_64-linux-gnu/libnccl.so.2"
echo "nccl-${NCCL_TAG#v}" >"$root/etc/nccl-check-test-image"
pack "$root" "$out/image-nccl.sqsh"

{
    echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME") from $(git -C "$repo" rev-parse --short HEAD)"
    echo "NCCL $NCCL_TAG sm_90 ONLY_FUNCS='$NCCL_ONLY_FUNCS' CUDA $("$cuda/bin/nvcc" --version | sed -n 's/.*release //p')"
    echo "enroot prefix $ENROOT_PREFIX"
    (cd "$out" && find . -type f ! -name BUILT_FROM -print0 | sort -z | xargs -0 sha256sum)
} >"$out/BUILT_FROM"
say "$(du -sh "$out" | cut -f1) in $out"
echo "$out"
