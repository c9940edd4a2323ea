#!/usr/bin/env bash
# Real-container suite: `srun --container-image=IMAGE.sqsh --nccl-check` through
# the REAL pyxis 0.24.0 and enroot 4.1.2 (built here from ../shared/vendor), beside the nccl-check
# plugin, on the host's Slurm 22.05 test cluster (slurm/test-cluster/up.sh). No GPU, no registry.
#
#   1. Builds pyxis against the host's <slurm/spank.h> and enroot (FORCE_GLIBC, Debian's libbsd
#      for strlcpy: the archive has no musl submodule) once into target/pyxis/ (never in git);
#      installs enroot per run into the cluster directory with an enroot.conf whose runtime, data,
#      cache and temp paths are all under it, plus the repo's enroot/ hook, environ and mounts
#      files (the fstab with its host paths moved under the test directory, options unchanged).
#   2. Packs an image: Debian 11 (the container suite's cached bullseye root, debootstrapped if
#      absent) + the test libnccl.so.2 at /usr/lib/x86_64-linux-gnu (in the image's ld.so.cache,
#      as NGC images have it) + a marker file with a per-run token, into a .sqsh (mksquashfs).
#      The worker is NOT in the image: enroot-mount binds it in from the host (enroot/mounts.d),
#      as on a site. It is the glibc-2.17 build (packaging/build-portable.sh), as packaged.
#   3. plugstack.conf includes a plugstack.conf.d with pyxis.conf and zz-nccl-check.conf, the
#      documented order (slurm/plugstack.conf.d/zz-nccl-check.conf).
#   4. Tests (as an unprivileged user): both plugins' options in srun --help; the check runs in
#      the container with the image's NCCL (where-worker records /etc/os-release, the marker and
#      the report's library path); the reversed order checks the host instead; a missing or a
#      corrupt .sqsh ends in an ERROR for the job and never drains a node; --container-unshare=net
#      is refused by pyxis over enroot 4.1.2, and with a network namespace of loopback alone
#      (enroot-switchroot-unshare-net, as an enroot honouring ENROOT_UNSHARE_NET makes it) is the
#      plugin's ERROR naming it at once, never FAIL, no drain.
#
# Needs root on Debian 12 (apt: squashfs-tools, parallel, pigz, jq, zstd, libbsd-dev, gcc, make,
# debootstrap). Usage: bash tests/pyxis/run.sh [TEST_NAME_SUBSTRING]
# Env: NCCL_CHECK_VENDOR_DIR (default: <repo>/shared/vendor, else <repo>/../shared/vendor),
#      NCCL_CHECK_ROOTFS_CACHE (the container suite's root cache, default /var/tmp/nccl-check-rootfs).
# Like the other real-Slurm suites it uses fixed ports: run it under
#   flock -w 2400 /work/slurm-suite.lock bash tests/pyxis/run.sh
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FILTER=${1:-}
# Its own user (other suites create and delete ncclci) and its own munged (a private socket,
# stopped by down.sh): nothing is shared with another cluster on the machine but the ports.
CI_USER=${NCCL_CHECK_PYXIS_USER:-ncclpyxis}
PYXIS_TGZ=pyxis-0.24.0.tar.gz
PYXIS_SHA=063653ba39125ac29796cc6079701d1ec34dd4c5baf698efacc0f36bf3619681
ENROOT_TGZ=enroot-4.1.2.tar.gz
ENROOT_SHA=817e8d551135e6f3fc311d1ee57b03fb4d30325acba732f8dea43069ca11f8d3
ROOTFS_CACHE=${NCCL_CHECK_ROOTFS_CACHE:-/var/tmp/nccl-check-rootfs}
SUITE=bullseye                       # the image's Debian release (the host is bookworm)
IMAGE_NCCL=/usr/lib/x86_64-linux-gnu/libnccl.so.2
# PASSED FAILED STARTED, fail, harness_run, harness_tally:
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"

say() { echo "pyxis/run.sh: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }
cd "$REPO" || exit 1
T0=$SECONDS

# --- prerequisites --------------------------------------------------------------------------
need=()
for p in squashfs-tools parallel pigz jq zstd libbsd-dev gcc make debootstrap libslurm-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # DPkg::Lock::Timeout: wait for another apt on the machine instead of failing (exit 100).
    { timeout 900 apt-get -o DPkg::Lock::Timeout=600 update -q >&2 \
        && timeout 1200 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${need[@]}" >&2; } \
        || die "apt-get install ${need[*]} failed"
fi

VENDOR=${NCCL_CHECK_VENDOR_DIR:-}
if [ -z "$VENDOR" ]; then
    for d in "$REPO/shared/vendor" "$REPO/../shared/vendor"; do
        [ -f "$d/$PYXIS_TGZ" ] && { VENDOR=$(cd "$d" && pwd); break; }
    done
fi
{ [ -n "$VENDOR" ] && [ -f "$VENDOR/$PYXIS_TGZ" ] && [ -f "$VENDOR/$ENROOT_TGZ" ]; } \
    || die "no $PYXIS_TGZ and $ENROOT_TGZ in \$NCCL_CHECK_VENDOR_DIR, $REPO/shared/vendor or $REPO/../shared/vendor"
echo "$PYXIS_SHA  $VENDOR/$PYXIS_TGZ" | sha256sum -c --quiet - || die "$PYXIS_TGZ: sha256 mismatch"
echo "$ENROOT_SHA  $VENDOR/$ENROOT_TGZ" | sha256sum -c --quiet - || die "$ENROOT_TGZ: sha256 mismatch"

# --- builds (cached under target/pyxis) -------------------------------------------------------
BUILD=$REPO/target/pyxis
SLURM_HEX=$(awk '$2 == "SLURM_VERSION_NUMBER" { print $3 }' /usr/include/slurm/slurm_version.h)
[ -n "$SLURM_HEX" ] || die "no SLURM_VERSION_NUMBER in /usr/include/slurm/slurm_version.h (libslurm-dev)"
PYXIS_DIR=$BUILD/pyxis-0.24.0-slurm-$SLURM_HEX     # pyxis must match the Slurm it loads into
ENROOT_SRC=$BUILD/enroot-4.1.2
mkdir -p "$BUILD" || die "cannot create $BUILD"

build_pyxis() {
    [ -f "$PYXIS_DIR/spank_pyxis.so" ] && return 0
    rm -rf "$PYXIS_DIR" "$PYXIS_DIR.partial" && mkdir -p "$PYXIS_DIR.partial" \
        && tar -xzf "$VENDOR/$PYXIS_TGZ" -C "$PYXIS_DIR.partial" --strip-components=1 \
        && timeout 600 make -C "$PYXIS_DIR.partial" -j2 >"$BUILD/pyxis-build.log" 2>&1 \
        && mv "$PYXIS_DIR.partial" "$PYXIS_DIR"
}
# enroot's archive lacks its submodules (musl, linux-headers, makeself): build its helpers with
# the system gcc against glibc (FORCE_GLIBC=1, an option of its Makefile), with strlcpy/strlcat
# from Debian's libbsd (glibc 2.36 has none; its bundled libbsd subset lacks them), the system's
# kernel headers, and a makeself stub (only `enroot bundle` uses it).
build_enroot() {
    [ -f "$ENROOT_SRC/.built" ] && return 0
    rm -rf "$ENROOT_SRC" && mkdir -p "$ENROOT_SRC" \
        && tar -xzf "$VENDOR/$ENROOT_TGZ" -C "$ENROOT_SRC" --strip-components=1 || return 1
    mkdir -p "$ENROOT_SRC/deps/dist/makeself/bin"
    printf '#!/bin/sh\necho "enroot-makeself: not in this test build" >&2\nexit 1\n' \
        >"$ENROOT_SRC/deps/dist/makeself/bin/enroot-makeself"
    chmod 755 "$ENROOT_SRC/deps/dist/makeself/bin/enroot-makeself"
    touch "$ENROOT_SRC/deps/makeself/.stamp" "$ENROOT_SRC/deps/linux-headers/.stamp"
    enroot_make all >"$BUILD/enroot-build.log" 2>&1 && touch "$ENROOT_SRC/.built"
}
# GIT_DIR: the Makefile runs `git submodule update` (errors ignored); never let it find this repo.
enroot_make() {
    ( cd "$ENROOT_SRC" && GIT_DIR=/nonexistent CPPFLAGS="-D_GNU_SOURCE=1 -include bsd/string.h" \
        timeout 600 make -j2 FORCE_GLIBC=1 LDLIBS="-l:libbsd.a -l:libbsd.so" "$@" )
}
t=$SECONDS
build_pyxis || { tail -20 "$BUILD/pyxis-build.log" >&2; die "pyxis build failed (log $BUILD/pyxis-build.log)"; }
build_enroot || { tail -20 "$BUILD/enroot-build.log" >&2; die "enroot build failed (log $BUILD/enroot-build.log)"; }
say "pyxis and enroot ready in $((SECONDS - t)) s ($PYXIS_DIR, $ENROOT_SRC)"

PLUGIN_SO=${NCCL_CHECK_PLUGIN_SO:-$REPO/target/release/libnccl_check.so}
if [ ! -f "$PLUGIN_SO" ]; then
    say "building the plugin"
    timeout 1200 cargo build --release -p spank-plugin || die "plugin build failed"
fi
WORKER=$(NCCL_CHECK_GLIBC_FLOOR=2.17 timeout 2400 bash packaging/build-portable.sh) || die "portable worker build failed"
NCCL_LIB=${NCCL_CHECK_TEST_NCCL_LIB:-}
[ -f "$NCCL_LIB" ] || NCCL_LIB=$(bash tests/fetch-nccl.sh) || die "cannot fetch a libnccl"
# The version the image's NCCL must report (the worker's own reading of the file, on the host).
timeout 60 "$WORKER" --nccl-lib "$NCCL_LIB" --timeout 10 --json "$BUILD/nccl-version.json" >/dev/null 2>&1
NCCL_VERSION=$(jq -r '.nccl.version // empty' "$BUILD/nccl-version.json" 2>/dev/null)
[ -n "$NCCL_VERSION" ] || die "the worker cannot read $NCCL_LIB's version"

# The image's base: the container suite's cached Debian 11 root (same cache, marker and lock).
ensure_base_root() {
    local dir=$ROOTFS_CACHE/$SUITE
    [ -f "$dir/.nccl-check-rootfs-complete" ] && return 0
    mkdir -p "$ROOTFS_CACHE"
    (
        timeout 1200 flock 9 || exit 1
        [ -f "$dir/.nccl-check-rootfs-complete" ] && exit 0
        rm -rf --one-file-system "$dir.partial" "$dir"
        say "debootstrap --variant=minbase $SUITE, about a minute"
        timeout 900 debootstrap --variant=minbase "$SUITE" "$dir.partial" http://deb.debian.org/debian \
            >"$ROOTFS_CACHE/$SUITE.log" 2>&1 || { rm -rf --one-file-system "$dir.partial"; exit 1; }
        rm -f "$dir.partial"/var/cache/apt/archives/*.deb
        touch "$dir.partial/.nccl-check-rootfs-complete" && mv "$dir.partial" "$dir"
    ) 9>"${ROOTFS_CACHE%/}.lock"
}
ensure_base_root || die "no $SUITE root filesystem (log $ROOTFS_CACHE/$SUITE.log)"

# --- cluster directory, enroot, pyxis -------------------------------------------------------
export NCCL_CHECK_CLUSTER_DIR
NCCL_CHECK_CLUSTER_DIR=$(mktemp -d /var/tmp/nccl-check-pyxis.XXXXXX)
CL=$NCCL_CHECK_CLUSTER_DIR
chmod 755 "$CL"
SITE=$CL/site                        # what a site would have under /etc and /usr
ENR=$CL/enroot                       # enroot's prefix
CREATED_USER=
cleanup() {
    bash "$REPO/slurm/test-cluster/down.sh"
    # Containers are gone with their steps; their files (owned by the user) go with the directory.
    if findmnt -rn -o TARGET | grep "^$CL/" >/dev/null; then
        say "mounts left under $CL; not removing it"
    else
        rm -rf --one-file-system "$CL"
    fi
    [ -n "$CREATED_USER" ] && userdel -r "$CI_USER" 2>/dev/null
    true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! id "$CI_USER" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$CI_USER" && CREATED_USER=1
fi

# enroot, installed into $ENR (its scripts name their sysconfdir/libdir, so a fresh install per
# run: the generated files are remade for this prefix).
rm -f "$ENROOT_SRC/enroot" "$ENROOT_SRC/conf/enroot.conf"
enroot_make install prefix="$ENR" >"$CL/enroot-install.log" 2>&1 \
    || { tail -20 "$CL/enroot-install.log" >&2; die "enroot install failed"; }
mkdir -p "$CL/enroot-state" && chmod 1777 "$CL/enroot-state"
# Every path per user under the test directory (values are evaluated by enroot, as the user).
cat >"$ENR/etc/enroot/enroot.conf" <<CONF
ENROOT_RUNTIME_PATH $CL/enroot-state/runtime-\$(id -u)
ENROOT_CONFIG_PATH  $CL/enroot-state/config-\$(id -u)
ENROOT_CACHE_PATH   $CL/enroot-state/cache-\$(id -u)
ENROOT_DATA_PATH    $CL/enroot-state/data-\$(id -u)
ENROOT_TEMP_PATH    $CL/enroot-state/tmp
ENROOT_MAX_PROCESSORS 2
CONF
mkdir -p "$CL/enroot-state/tmp" && chmod 1777 "$CL/enroot-state/tmp"
# The project's enroot files, as installed into /etc/enroot on a site. The fstab's host paths
# (/usr/libexec/nccl-check, /etc/nccl-check) are moved under $SITE; source = target stays true.
install -m 0755 enroot/hooks.d/90-nccl-check.sh "$ENR/etc/enroot/hooks.d/"
install -m 0644 enroot/environ.d/90-nccl-check.env "$ENR/etc/enroot/environ.d/"
sed -e "s#/usr/libexec/nccl-check#$SITE/libexec/nccl-check#g" -e "s#/etc/nccl-check#$SITE/etc/nccl-check#g" \
    enroot/mounts.d/90-nccl-check.fstab >"$ENR/etc/enroot/mounts.d/90-nccl-check.fstab"
grep -q "^$SITE/libexec/nccl-check  *$SITE/libexec/nccl-check " "$ENR/etc/enroot/mounts.d/90-nccl-check.fstab" \
    || die "the fstab rewrite missed the worker line"
mkdir -p "$SITE/libexec/nccl-check" "$SITE/etc/nccl-check" "$SITE/lib" "$SITE/plugstack.conf.d"
install -m 0755 "$WORKER" "$SITE/libexec/nccl-check/nccl-check"
install -m 0755 tests/pyxis/where-worker "$SITE/libexec/nccl-check/where-worker"
echo '# test site config' >"$SITE/etc/nccl-check/nccl-check.toml"
install -m 0755 "$PYXIS_DIR/spank_pyxis.so" "$SITE/lib/spank_pyxis.so"
install -m 0755 "$PLUGIN_SO" "$SITE/lib/nccl_check.so"
command -v strip >/dev/null && strip "$SITE/lib/nccl_check.so"
chmod -R go+rX "$SITE" "$ENR"

# plugstack as a site lays it out (slurm/plugstack.conf.d/zz-nccl-check.conf): an include of a
# directory, pyxis.conf sorting before zz-nccl-check.conf.
echo "include $SITE/plugstack.conf.d/*.conf" >"$SITE/plugstack.conf"
PYXIS_LINE="required $SITE/lib/spank_pyxis.so runtime_path=$CL/pyxis-run"
CHECK_LINE="required $SITE/lib/nccl_check.so worker=$SITE/libexec/nccl-check/where-worker timeout=30"
plugstack_order() { # documented | reversed
    rm -f "$SITE"/plugstack.conf.d/*.conf
    echo "$PYXIS_LINE" >"$SITE/plugstack.conf.d/pyxis.conf"
    case "$1" in
        documented) echo "$CHECK_LINE" >"$SITE/plugstack.conf.d/zz-nccl-check.conf" ;;
        # The pitfall the file name avoids: a name sorting before pyxis.conf.
        reversed) echo "$CHECK_LINE" >"$SITE/plugstack.conf.d/nccl-check.conf" ;;
    esac
}
plugstack_order documented

# enroot 4.1.2 ignores ENROOT_UNSHARE_NET (pyxis's --container-unshare=net); the stand-in in front
# of its enroot-switchroot gives the container the network namespace a later enroot would
# (tests/pyxis/enroot-switchroot-unshare-net). Off (the real enroot alone) unless a test asks.
mv "$ENR/bin/enroot-switchroot" "$ENR/bin/enroot-switchroot.real" || die "no enroot-switchroot in $ENR/bin"
enroot_unshares_net() { # yes | no
    rm -f "$ENR/bin/enroot-switchroot"
    case "$1" in
        yes) install -m 0755 tests/pyxis/enroot-switchroot-unshare-net "$ENR/bin/enroot-switchroot" ;;
        no) ln -sf enroot-switchroot.real "$ENR/bin/enroot-switchroot" ;;
    esac
}
enroot_unshares_net no

# The image: base root + the image's NCCL + a marker only the image has.
TOKEN=image-$RANDOM$RANDOM
IMG_ROOT=$CL/image-root
t=$SECONDS
cp -a --reflink=auto "$ROOTFS_CACHE/$SUITE" "$IMG_ROOT" || die "cannot copy the $SUITE root"
# No device nodes, as in any registry image: an unprivileged `enroot create` cannot make them
# (unsquashfs exits 2) and enroot provides /dev at start.
rm -rf --one-file-system "${IMG_ROOT:?}"/dev/* "$IMG_ROOT/.nccl-check-rootfs-complete"
{ install -m 0644 "$NCCL_LIB" "$IMG_ROOT$IMAGE_NCCL" && timeout 60 chroot "$IMG_ROOT" /sbin/ldconfig; } \
    || die "cannot put libnccl into the image"
echo "$TOKEN" >"$IMG_ROOT/etc/nccl-check-test-image"
IMAGE=$CL/image.sqsh
timeout 600 mksquashfs "$IMG_ROOT" "$IMAGE" -noappend -quiet -no-progress -processors 2 >"$CL/mksquashfs.log" 2>&1 \
    || { tail -5 "$CL/mksquashfs.log" >&2; die "mksquashfs failed"; }
rm -rf --one-file-system "$IMG_ROOT"
chmod 0644 "$IMAGE"
say "image $IMAGE ($(du -m "$IMAGE" | cut -f1) MB, $SUITE + NCCL $NCCL_VERSION at $IMAGE_NCCL, marker $TOKEN) in $((SECONDS - t)) s"
HOST_OS=$(. /etc/os-release && echo "$ID-$VERSION_ID")
[ ! -e "$IMAGE_NCCL" ] || say "note: the host also has $IMAGE_NCCL (the marker and os-release still tell them apart)"

# slurmstepd inherits slurmd's PATH, and pyxis runs `enroot` from it.
export PATH=$ENR/bin:$PATH
if ! bash slurm/test-cluster/up.sh --nodes 2 --plugstack "$SITE/plugstack.conf" --munge-socket "$CL/munge/munge.socket"; then
    for f in "$CL"/log/*.log; do echo "== $f"; tail -30 "$f"; done >&2
    die "cluster did not come up"
fi
export SLURM_CONF=$CL/slurm.conf
mkdir -p "$CL/work" && chmod 1777 "$CL/work"
cd "$CL/work" || exit 1
say "cluster up with pyxis + nccl-check ($((SECONDS - T0)) s since start)"

# --- helpers --------------------------------------------------------------------------------
OUT=$CL/work/out ERR=$CL/work/err RC=0 RES=$CL/work/results
# as_user CMD...: runs CMD as the unprivileged user, bounded; stdout/stderr/rc to $OUT/$ERR/$RC.
as_user() {
    timeout 180 runuser -u "$CI_USER" -- env SLURM_CONF="$SLURM_CONF" NCCL_CHECK_TEST_RESULTS="$RES" "$@" \
        >"$OUT" 2>"$ERR"
    RC=$?
}
fresh_results() { rm -rf "$RES" && mkdir -p "$RES" && chmod 0777 "$RES"; }
expect_err() { grep -qF -- "$1" "$ERR" || fail "stderr lacks '$1'; stderr: $(tail -8 "$ERR")"; }
where() { sed -n "s/^$1=//p" "$RES/where" 2>/dev/null; }
no_drain() {
    local drained
    drained=$(sinfo -h -R -o '%N %E' 2>/dev/null)
    [ -z "$drained" ] || fail "nodes drained/down: $drained"
    # shellcheck disable=SC2016  # expanded by the inner bash
    timeout 30 bash -c 'until [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge 2 ]; do sleep 0.3; done' \
        || fail "nodes not idle again: $(sinfo -N -h)"
}
run_test() { # name function
    local name=$1
    [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]] && return 0
    plugstack_order documented
    ( cd "$REPO" && enroot_unshares_net no )
    fresh_results
    harness_run "$name" "$2"
}
SRUN_C=(srun -N1 -n1 "--container-image=$IMAGE" "--container-mounts=$RES:$RES")

# --- tests ----------------------------------------------------------------------------------
t_help_lists_both_plugins() {
    local help
    help=$(timeout 20 srun --help 2>&1)
    grep -q -- '--container-image=' <<<"$help" || fail "srun --help lacks --container-image"
    grep -q -- '\[pyxis\]' <<<"$help" || fail "srun --help lacks [pyxis]"
    grep -q -- '--nccl-check=mode' <<<"$help" || fail "srun --help lacks --nccl-check"
    # nccl-check's usage text is a sentence, not a tag.
    grep -q -- 'Before the tasks start, check the NCCL bandwidth' <<<"$help" || fail "srun --help lacks nccl-check's usage text"
}

t_container_starts_without_the_check() {
    # The control: pyxis + enroot alone start the image (no --nccl-check: the plugin does nothing).
    # shellcheck disable=SC2016  # expanded in the container
    as_user "${SRUN_C[@]}" sh -c 'cat /etc/nccl-check-test-image; . /etc/os-release; echo "$ID-$VERSION_ID"; ls "$0"' \
        "$SITE/libexec/nccl-check"
    [ "$RC" = 0 ] || fail "srun --container-image failed (rc $RC): $(grep -v "created [0-9]" "$ERR" | tail -30)"
    grep -qx "$TOKEN" "$OUT" || fail "the image's marker is not visible: $(cat "$OUT")"
    grep -qx "debian-11" "$OUT" || fail "not the $SUITE image: $(cat "$OUT")"
    grep -qx 'where-worker' "$OUT" || fail "the worker is not mounted by enroot (mounts.d): $(cat "$OUT")"
    [ -e "$RES/where" ] && fail "the worker ran without --nccl-check"
    no_drain
}

t_check_runs_in_the_container_with_its_nccl() {
    as_user "${SRUN_C[@]}" --nccl-check hostname
    [ "$RC" != 0 ] || fail "srun succeeded although the check has no GPU"
    expect_err "nccl-check: ERROR on n1 (rank 0 of 1): no usable GPU"
    [ -s "$OUT" ] && fail "the task ran after the check's ERROR: $(cat "$OUT")"
    [ -s "$RES/where" ] || { fail "the worker left no record (did it run?)"; return; }
    echo "    where-worker: $(tr '\n' ' ' <"$RES/where")"
    [ "$(where os)" = debian-11 ] || fail "the check ran on $(where os), not in the $SUITE image"
    [ "$(where marker)" = "$TOKEN" ] || fail "the check did not see the image's marker: $(where marker)"
    [ "$(where worker_rc)" = 4 ] || fail "worker exit $(where worker_rc), expected 4 (no GPU)"
    local lib ver
    lib=$(jq -r '.nccl.library // empty' "$RES/report.json" 2>/dev/null)
    ver=$(jq -r '.nccl.version // empty' "$RES/report.json" 2>/dev/null)
    echo "    report: nccl.library=$lib nccl.version=$ver host=$(jq -r .host "$RES/report.json" 2>/dev/null)"
    # /lib is /usr/lib in a merged-/usr image: either spelling is the image's file.
    [ "$lib" = "$IMAGE_NCCL" ] || [ "$lib" = "${IMAGE_NCCL#/usr}" ] || fail "the worker loaded '$lib', not the image's $IMAGE_NCCL"
    [ "$ver" = "$NCCL_VERSION" ] || fail "NCCL version '$ver', expected $NCCL_VERSION"
    jq -e '.reasons[0].code == "no_gpu"' "$RES/report.json" >/dev/null || fail "reason is not no_gpu"
    no_drain
}

t_reversed_order_checks_the_host() {
    plugstack_order reversed
    as_user "${SRUN_C[@]}" --nccl-check hostname
    [ "$RC" != 0 ] || fail "srun succeeded although the check has no GPU"
    [ -s "$RES/where" ] || { fail "the worker left no record (did it run?)"; return; }
    echo "    where-worker: $(tr '\n' ' ' <"$RES/where")"
    [ "$(where os)" = "$HOST_OS" ] || fail "expected the host ($HOST_OS), the check ran on $(where os)"
    [ "$(where marker)" = none ] || fail "the host check saw the image's marker"
    local lib; lib=$(jq -r '.nccl.library // "none"' "$RES/report.json" 2>/dev/null)
    echo "    report: nccl.library=$lib; stderr: $(grep -m1 'nccl-check:' "$ERR")"
    [ "$lib" != "$IMAGE_NCCL" ] || [ -e "$IMAGE_NCCL" ] || fail "the host check loaded the image's NCCL"
    no_drain
}

t_image_without_nccl_is_named() {
    # The image's NCCL hidden (an empty file bound over it): the loader in the container finds
    # none, and the plugin, seeing the task moved into a container, names the image as what lacks
    # NCCL instead of the host's nccl_lib= (regression: it told the user to ask the admin).
    as_user srun -N1 -n1 "--container-image=$IMAGE" "--container-mounts=$RES:$RES,/dev/null:$IMAGE_NCCL" \
        --nccl-check hostname
    [ "$RC" != 0 ] || fail "srun succeeded without NCCL"
    [ "$(where worker_rc)" = 3 ] || fail "worker exit $(where worker_rc), expected 3 (NCCL not found)"
    [ "$(where marker)" = "$TOKEN" ] || fail "the check did not run in the image: marker $(where marker)"
    expect_err "nccl-check: ERROR on n1 (rank 0 of 1): NCCL library not found in the job's container image (srun --container-image)"
    expect_err "the image has no libnccl.so.2 that its loader can load"
    grep -qF "ask your admin" "$ERR" && fail "the hint sends the user to the admin: $(grep -m1 'nccl-check: ERROR' "$ERR")"
    echo "    stderr: $(grep -m1 'nccl-check: ERROR' "$ERR")"
    [ -s "$OUT" ] && fail "the task ran: $(cat "$OUT")"
    no_drain
}

t_missing_image_is_an_error_not_a_drain() {
    as_user srun -N1 -n1 "--container-image=$CL/work/no-such-image.sqsh" --nccl-check hostname
    [ "$RC" != 0 ] || fail "srun succeeded with a missing image"
    # pyxis relays enroot's own message, naming the file.
    expect_err "[ERROR] No such file or directory: $CL/work/no-such-image.sqsh"
    expect_err "slurmstepd-n1: error: pyxis:"
    echo "    stderr: $(grep -m1 -F '[ERROR]' "$ERR")"
    [ -s "$OUT" ] && fail "the task ran: $(cat "$OUT")"
    [ -e "$RES/where" ] && fail "the check ran although the container did not start"
    no_drain
}

t_corrupt_image_is_an_error_not_a_drain() {
    local bad=$CL/work/corrupt.sqsh
    head -c 8192 "$IMAGE" >"$bad"; head -c 65536 /dev/urandom >>"$bad"; chmod 0644 "$bad"
    as_user srun -N1 -n1 "--container-image=$bad" --nccl-check hostname
    [ "$RC" != 0 ] || fail "srun succeeded with a corrupt image"
    # unsquashfs's verdict on the file, relayed by pyxis.
    expect_err "FATAL ERROR: File system corruption detected"
    expect_err "slurmstepd-n1: error: pyxis:"
    echo "    stderr: $(grep -m1 -F 'FATAL ERROR' "$ERR")"
    [ -s "$OUT" ] && fail "the task ran: $(cat "$OUT")"
    [ -e "$RES/where" ] && fail "the check ran although the container did not start"
    no_drain
}

t_unshare_net_refused_by_this_enroot() {
    # The vendored pair as it is: enroot 4.1.2 does not act on ENROOT_UNSHARE_NET, so pyxis finds
    # the container in the host's network namespace and refuses the step itself; the check never
    # runs and no node drains.
    as_user "${SRUN_C[@]}" --container-unshare=net --nccl-check hostname
    [ "$RC" != 0 ] || fail "srun succeeded although pyxis cannot unshare the network"
    expect_err "pyxis: error: --container-unshare=net requested but the container is not in a separate network namespace"
    echo "    stderr: $(grep -m1 -F 'container-unshare' "$ERR")"
    [ -s "$OUT" ] && fail "the task ran: $(cat "$OUT")"
    [ -e "$RES/where" ] && fail "the check ran although pyxis refused the step"
    no_drain
}

t_unshared_network_is_an_error_naming_it() {
    ( cd "$REPO" && enroot_unshares_net yes )
    # The control: with the stand-in, real pyxis joins the task to a network namespace of the
    # container's own, with loopback only.
    local host_net t0 dt n
    host_net=$(readlink /proc/self/ns/net)
    as_user "${SRUN_C[@]}" --container-unshare=net sh -c 'readlink /proc/self/ns/net; cat /proc/net/dev'
    [ "$RC" = 0 ] || { fail "srun --container-unshare=net failed (rc $RC): $(tail -5 "$ERR")"; return; }
    grep -qx 'net:\[[0-9]*\]' "$OUT" || fail "no network namespace read in the container: $(cat "$OUT")"
    grep -qxF "$host_net" "$OUT" && fail "the container is in the host's network namespace ($host_net)"
    # /proc/net/dev: the namespace's interfaces, lo and at most the kernel's fallback tunnels.
    grep -q '^ *lo:' "$OUT" || fail "no loopback in the container: $(cat "$OUT")"
    n=$(grep ':' "$OUT" | grep -v '^net:' | grep -cvE '^ *(lo|sit0|tunl0|ip6tnl0|gre0|gretap0|erspan0|ip6gre0|ip_vti0|ip6_vti0):')
    [ "$n" = 0 ] || fail "interfaces other than loopback in the container: $(cat "$OUT")"
    # The check, 2 ranks (one node: two slurmd of one machine would share enroot's data path for
    # pyxis's container name pyxis_JOB.STEP; the plugin decides per task alike on any node). The
    # ERROR names the option on every rank at once (the worker's timeout is 30 s; it never
    # starts), no FAIL, no drain.
    t0=$SECONDS
    as_user srun -N1 -n2 "--container-image=$IMAGE" "--container-mounts=$RES:$RES" --container-unshare=net \
        --nccl-check hostname
    dt=$((SECONDS - t0))
    echo "    srun -n2 --container-unshare=net --nccl-check: rc $RC in $dt s; stderr: $(grep -m1 'nccl-check: ERROR' "$ERR")"
    [ "$RC" != 0 ] || fail "srun succeeded although the check cannot reach its peers"
    expect_err "nccl-check: ERROR on n1 (rank 0 of 2): the container's network is unshared (srun --container-unshare=net)"
    expect_err "nccl-check: ERROR on n1 (rank 1 of 2): the container's network is unshared (srun --container-unshare=net)"
    expect_err "no interface up but loopback (seen: lo"
    expect_err "so the step's 2 ranks cannot meet over the network; the check did not run"
    grep -q 'nccl-check: FAIL' "$ERR" && fail "a FAIL: $(grep -m1 'nccl-check: FAIL' "$ERR")"
    [ "$dt" -lt 25 ] || fail "took $dt s: the check waited for its peers instead of seeing the cut"
    [ -s "$OUT" ] && fail "the task ran: $(cat "$OUT")"
    [ -e "$RES/where" ] && fail "the worker ran: $(tr '\n' ' ' <"$RES/where")"
    no_drain
}

run_test "srun --help lists --container-image [pyxis] and --nccl-check" t_help_lists_both_plugins
run_test "control: pyxis + enroot start the $SUITE image, the worker is mounted in by mounts.d" t_container_starts_without_the_check
run_test "--container-image --nccl-check: the worker runs in the image with the image's NCCL; ERROR no GPU" t_check_runs_in_the_container_with_its_nccl
run_test "plugstack order reversed (nccl-check.conf before pyxis.conf): the check runs on the host" t_reversed_order_checks_the_host
run_test "an image whose NCCL the loader cannot load: ERROR naming the container image" t_image_without_nccl_is_named
run_test "a missing .sqsh: ERROR for the job, no node drained" t_missing_image_is_an_error_not_a_drain
run_test "a corrupt .sqsh: ERROR for the job, no node drained" t_corrupt_image_is_an_error_not_a_drain
run_test "--container-unshare=net with enroot 4.1.2: pyxis refuses the step, the check never runs, no drain" t_unshare_net_refused_by_this_enroot
run_test "--container-unshare=net (a network namespace of loopback alone): ERROR naming it at once on every rank, no FAIL, no drain" t_unshared_network_is_an_error_naming_it

say "wall time $((SECONDS - T0)) s"
harness_tally pyxis/run.sh
