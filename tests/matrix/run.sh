#!/usr/bin/env bash
# The Slurm version matrix: runs the real-Slurm suites (SPANK plugin, prolog, packaging) against
# the real daemons of one Slurm major, with the plugin built against that major's headers.
#
#   22.05  Debian 12 bookworm: the host's own Slurm (tests/setup-deps.sh installs it)
#   24.11  Debian 13 trixie:   a debootstrapped root filesystem (tests/lib/roots.sh)
#   26.05  Debian sid:         a debootstrapped root filesystem
#
# For a root the suite runs inside it (private mount namespace, overlay of the cached root,
# chroot): the test cluster's munged, slurmctld and slurmd are that release's binaries. Built on
# the host: the plugin, against <root>/usr/include (its plugin_version is checked against the
# root's Slurm, which refuses any other major.minor), and a second plugin with the test-only
# fault-injection feature (slurm_spank_init fails in slurmstepd; tests/slurm/run.sh proves no
# drain on 25.05+); the worker and the prolog as `cargo build --release` builds them (glibc 2.36
# binaries run in trixie and sid); the prolog suite's fake libnvidia-ml.so.1 (a root has no compiler);
# the packages with packaging/build.sh --slurm-version MAJOR.
#
# Usage (root): bash tests/matrix/run.sh --slurm MAJOR.MINOR [slurm|prolog|packaging]...
#   default suites: slurm prolog packaging. Exit status: non-zero when any suite failed.
# Env: NCCL_CHECK_SLURM_ROOTS (root cache, default target/slurm-roots), NCCL_CHECK_DEBIAN_MIRROR.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/roots.sh"
say() { echo "matrix: $*" >&2; }
die() { say "ERROR: $*"; exit 2; }
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot, mounts)"

MM=
SUITES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --slurm) MM=${2:-}; shift 2 ;;
        slurm|prolog|packaging) SUITES+=("$1"); shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[ -n "$MM" ] || die "--slurm MAJOR.MINOR is required (22.05, 24.11 or 26.05)"
[ ${#SUITES[@]} -gt 0 ] || SUITES=(slurm prolog packaging)
SUITE=$(roots_suite "$MM") || exit 2
cd "$REPO" || exit 2

# --- the release's Slurm ------------------------------------------------------------------------
if [ "$SUITE" = host ]; then
    ROOT=
    INCLUDE=/usr/include
else
    ROOT=$(roots_ensure "$SUITE") || die "no $SUITE root filesystem"
    INCLUDE=$ROOT/usr/include
fi
have=$(roots_slurm_version "${ROOT:-}") || die "no Slurm headers in ${ROOT:-/}"
[ "${have%.*}" = "$MM" ] || die "${ROOT:-the host} has Slurm $have, not $MM"
say "Slurm $have ($SUITE${ROOT:+, $ROOT})"

# --- the plugin for this major (and its fault-injection twin), the host binaries ----------------
T=$REPO/target/slurm-matrix
OUT=$T/$MM
mkdir -p "$OUT"
build_plugin() { # DEST [cargo args...]
    local dest=$1; shift
    SLURM_INCLUDE_DIR=$INCLUDE timeout 1800 cargo build -q --release -p spank-plugin --target-dir "$T" "$@" >&2 \
        && install -m 0755 "$T/release/libnccl_check.so" "$dest"
}
t0=$SECONDS
build_plugin "$OUT/libnccl_check-fault.so" --features fault-injection || die "fault-injection plugin build failed"
build_plugin "$OUT/libnccl_check.so" || die "plugin build failed"
# The admin's plugin-line check (a binary of the plugin's crate; glibc 2.36 runs in trixie, sid).
install -m 0755 "$T/release/nccl-check-plugstack" "$OUT/nccl-check-plugstack" || die "no nccl-check-plugstack"
# Always through cargo (a second or two when up to date): a binary left from older sources
# would be tested in their place (it once failed the prolog suite's shared-node test here).
timeout 2400 cargo build -q --release -p bench-core -p nccl-check-prolog >&2 || die "release build failed"
# The loader compares major.minor of plugin_version with its own (plugin.c _verify_syms).
for so in "$OUT/libnccl_check.so" "$OUT/libnccl_check-fault.so"; do
    addr=$(nm -D --defined-only "$so" | awk '$3 == "plugin_version" { print $1 }')
    [ -n "$addr" ] || die "$so exports no plugin_version"
    pv=$(objdump -s --start-address=$((16#$addr)) --stop-address=$((16#$addr + 4)) "$so" \
        | awk '/^ [0-9a-f]+ / { print $2; exit }' | sed -E 's/(..)(..)(..)(..)/\4\3\2\1/')
    got=$(printf '%d.%02d' $(( (16#$pv >> 16) & 255 )) $(( (16#$pv >> 8) & 255 )))
    [ "$got" = "$MM" ] || die "$so has plugin_version $got, the root's Slurm is $MM"
    # 25.05+ read this int when slurm_spank_init fails: ESPANK_JOB_FAILURE fails the job, never the node.
    nm -D --defined-only "$so" | grep ' slurm_spank_init_failure_mode$' >/dev/null \
        || die "$so does not export slurm_spank_init_failure_mode"
done
want=$(awk '/ESPANK_ERROR *= *[0-9]+/ { n = $NF + 0; sub(/,/, "", n); on = 1; next }
            on && /^[[:space:]]*ESPANK_/ { n++; if ($1 ~ /^ESPANK_JOB_FAILURE/) { print n; exit } }' \
            "$INCLUDE/slurm/slurm_errno.h")
if [ -n "$want" ]; then
    [ "$want" = 3012 ] || die "$INCLUDE/slurm/slurm_errno.h: ESPANK_JOB_FAILURE = $want, compat.rs says 3012"
fi
say "plugins for Slurm $MM built and checked in $((SECONDS - t0)) s: $OUT"
# The prolog suite's fake NVML, built here: a root has no compiler (glibc 2.36 runs in trixie, sid).
cc -shared -fPIC -o "$OUT/libnvidia-ml.so.1" "$REPO/prolog/tests/data/fake-nvml.c" || die "cc fake-nvml.c failed"

# --- the suites -------------------------------------------------------------------------------
# in_release VAR=VALUE... -- CMD...: on the host for 22.05, else inside the root.
in_release() {
    if [ -z "$ROOT" ]; then
        local env=()
        while [ "$1" != -- ]; do env+=("$1"); shift; done
        shift
        env "${env[@]}" "$@"
    else
        roots_run "$ROOT" "$@"
    fi
}
COMMON=(NCCL_CHECK_SLURM_RELEASE="$MM" NCCL_CHECK_PLUGIN_SO="$OUT/libnccl_check.so"
        NCCL_CHECK_FAULT_PLUGIN_SO="$OUT/libnccl_check-fault.so" NCCL_CHECK_FAKE_NVML_SO="$OUT/libnvidia-ml.so.1")
failed=()
for s in "${SUITES[@]}"; do
    t0=$SECONDS
    say "=== $s suite on Slurm $MM"
    case "$s" in
        slurm) in_release "${COMMON[@]}" -- bash "$REPO/tests/slurm/run.sh" ;;
        prolog) in_release "${COMMON[@]}" -- bash "$REPO/tests/prolog/run.sh" ;;
        packaging)
            if [ -z "$ROOT" ]; then
                bash "$REPO/tests/packaging/run.sh"
            else
                # Built here (cargo, rpmbuild, zig live on the host), installed in the root.
                pkgs=$OUT/packages
                rm -rf "$pkgs" && mkdir -p "$pkgs"
                ok=1
                for rev in 1 2; do
                    SLURM_INCLUDE_DIR=$INCLUDE NCCL_CHECK_PKG_TARGET_DIR=$T timeout 3600 packaging/build.sh \
                        --slurm-version "$MM" --only deb --revision "$rev" --out "$pkgs/r$rev" >"$pkgs/build.log" 2>&1 \
                        || { tail -20 "$pkgs/build.log" >&2; say "build.sh --slurm-version $MM failed"; ok=; break; }
                done
                [ -n "$ok" ] && in_release "${COMMON[@]}" NCCL_CHECK_PKG_PREBUILT="$pkgs" \
                    NCCL_CHECK_PKG_VERSION="$(cargo pkgid -p spank-plugin | sed 's/.*[#@]//')" \
                    -- bash "$REPO/tests/packaging/run.sh"
            fi ;;
    esac
    rc=$?
    say "=== $s suite on Slurm $MM: $([ "$rc" = 0 ] && echo passed || echo "FAILED (rc $rc)") in $((SECONDS - t0)) s"
    [ "$rc" = 0 ] || failed+=("$s")
done
[ ${#failed[@]} = 0 ] || { say "Slurm $MM: failed: ${failed[*]}"; exit 1; }
say "Slurm $MM: all passed (${SUITES[*]})"
