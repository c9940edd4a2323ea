#!/usr/bin/env bash
# nccl-check enroot hook: make the check load the same libnccl the container's PyTorch loads.
# Installed as /etc/enroot/hooks.d/90-nccl-check.sh (mode 0755; enroot runs only executable
# hooks). See enroot/README.md.
#
# enroot runs hooks before the container starts, on the host, with ENROOT_ROOTFS (the container's
# root filesystem), ENROOT_ENVIRON (the container's environment file, KEY=VALUE lines; appended
# lines are exported in the container), ENROOT_MOUNTS and ENROOT_PID set, and the host environment
# (enroot doc/configuration.md). A hook that exits non-zero aborts the container start, so this
# one always exits 0, whatever it finds.
#
# The worker dlopens NCCL_CHECK_NCCL_LIB if set, else `libnccl.so.2` through the dynamic loader.
# That finds NGC images' NCCL (/usr/lib/x86_64-linux-gnu, in ld.so.cache). A pip-installed
# PyTorch instead loads the `nvidia-nccl-cu1x` wheel's copy through its RUNPATH
# (site-packages/nvidia/nccl/lib/libnccl.so.2), which the loader does not see; then this hook
# sets NCCL_CHECK_NCCL_LIB to that file, so the check tests the NCCL the job will use. Order:
#   1. NCCL_CHECK_NCCL_LIB already set (by the image, an environ.d file, or the job): keep it.
#   2. a site-packages directory holding both torch/ and nvidia/nccl/lib/libnccl.so.2: that copy.
#   3. libnccl.so.2 visible to the loader (the container's ld.so.cache or LD_LIBRARY_PATH): nothing.
#   4. any site-packages nvidia/nccl/lib/libnccl.so.2: that copy.
#   5. none: nothing (the worker then reports ERROR "NCCL library not found", exit 3).

set -u

main() {
    local rootfs=${ENROOT_ROOTFS:-} environ=${ENROOT_ENVIRON:-}
    [ -n "$rootfs" ] && [ -d "$rootfs" ] || return 0
    [ -n "$environ" ] && [ -f "$environ" ] && [ -w "$environ" ] || return 0

    # 1. Already chosen (the image's /etc/environment and environ.d are in $environ by now; the
    #    job's own environment is our environment).
    [ -n "${NCCL_CHECK_NCCL_LIB:-}" ] && return 0
    grep -q '^NCCL_CHECK_NCCL_LIB=' "$environ" 2>/dev/null && return 0

    local sites=() d
    shopt -s nullglob
    for d in "$rootfs"/usr/local/lib/python3*/dist-packages "$rootfs"/usr/local/lib/python3*/site-packages \
             "$rootfs"/usr/lib/python3/dist-packages "$rootfs"/usr/lib/python3*/site-packages \
             "$rootfs"/opt/conda/lib/python3*/site-packages "$rootfs"/opt/conda/envs/*/lib/python3*/site-packages \
             "$rootfs"/opt/*/lib/python3*/site-packages; do
        [ -d "$d" ] && sites+=("$d")
    done
    shopt -u nullglob

    # 2. pip PyTorch next to a pip NCCL (the last one wins: python3.12 after python3.10).
    local with_torch='' any=''
    for d in "${sites[@]+"${sites[@]}"}"; do
        [ -f "$d/nvidia/nccl/lib/libnccl.so.2" ] || continue
        any=$d/nvidia/nccl/lib/libnccl.so.2
        [ -d "$d/torch" ] && with_torch=$any
    done
    if [ -n "$with_torch" ]; then
        set_lib "$rootfs" "$environ" "$with_torch"
        return 0
    fi

    # 3. The loader finds one: the container's ld.so.cache names it, or an LD_LIBRARY_PATH
    #    directory of the container's environment holds it.
    if [ -f "$rootfs/etc/ld.so.cache" ] && grep -qa 'libnccl\.so\.2' "$rootfs/etc/ld.so.cache"; then
        return 0
    fi
    local ldpath dir
    ldpath=$(grep '^LD_LIBRARY_PATH=' "$environ" | tail -n 1 | cut -d= -f2- | tr -d "\"'")
    local IFS=:
    for dir in $ldpath; do
        [ -n "$dir" ] && [ -e "$rootfs/${dir#/}/libnccl.so.2" ] && return 0
    done
    unset IFS

    # 4. Any pip NCCL.
    [ -n "$any" ] && set_lib "$rootfs" "$environ" "$any"
    return 0
}

# set_lib ROOTFS ENVIRON HOST_PATH: writes the path as the container will see it.
set_lib() {
    local inside=${3#"$1"}
    inside=/${inside#/}
    printf 'NCCL_CHECK_NCCL_LIB=%s\n' "$inside" >> "$2"
}

main "$@" || true
exit 0
