#!/usr/bin/env bash
# The ten-minute admin path (docs/admin.md, "For the admin with ten minutes"), followed as written, from
# a fresh Debian machine to a working gate, for one Slurm major of the matrix. Every command of
# that section is a ```sh block (tests/admin-path/readme.sh extracts them; a command shown any
# other way fails the first test), and this suite runs exactly those blocks, in order, and nothing
# the page does not say:
#   step 1 (build) on this machine, in the repository: packaging/build.sh into dist/ (a dist/
#     that was there is put aside and restored). For 22.05 the host's own headers (Debian 12's
#     libslurm-dev); for 24.11 and 26.05 the step's documented way for another major than the
#     build machine's: SLURM_INCLUDE_DIR set to that major's headers (the matrix's trixie / sid
#     root, tests/lib/roots.sh). The cargo target dir is the matrix's (NCCL_CHECK_PKG_TARGET_DIR,
#     where tests/matrix/run.sh built that major's packages): where it ran first, nothing is
#     compiled again;
#   steps 2-5 as root in /root of a fresh root filesystem of that major (tests/lib/roots.sh
#     roots_fresh_suite: bookworm-fresh, trixie-fresh, sid-fresh: debootstrap minbase, then
#     Slurm and munge with apt-get; cached under $NCCL_CHECK_SLURM_ROOTS), with the built dist/
#     copied there, after the site's own one-node Slurm was configured and started
#     (tests/admin-path/site.sh: the "before" state, not a step of the page). After each block, site.sh
#     checks what the page says it does on a node without GPU or NCCL; then, as a labelled test
#     fixture, the prolog runs the prolog suite's fake worker and a FAIL must drain the node with
#     the reason the page shows.
#
# Needs root on Debian 12 (tests/setup-deps.sh, debootstrap, network to deb.debian.org for the
# first roots). Real-Slurm suite: fixed ports (20817, 20818; NCCL_CHECK_ADMIN_PORT), so run it
# under the suites' lock: flock -w 2400 /work/slurm-suite.lock bash tests/admin-path/run.sh --slurm 24.11
# Leaves the machine as it found it: the node is an overlay in a private mount namespace (gone
# with it, every process in it killed), dist/ is restored, the work dir removed.
#
# Usage: bash tests/admin-path/run.sh [--slurm 22.05|24.11|26.05]   (default 22.05)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"
# shellcheck disable=SC1091
. "$REPO/tests/lib/roots.sh"
# shellcheck disable=SC1091
. "$REPO/tests/admin-path/readme.sh"
MM=22.05
while [ $# -gt 0 ]; do
    case "$1" in
        --slurm) MM=${2:-}; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "admin-path: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
say() { echo "admin-path $MM: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }
FRESH=$(roots_fresh_suite "$MM") || exit 2
HEADERS_SUITE=$(roots_suite "$MM") || exit 2
cd "$REPO" || exit 2
T_START=$SECONDS

PORT=${NCCL_CHECK_ADMIN_PORT:-20817}
for p in "$PORT" $((PORT + 1)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then say "port $p is in use (another cluster?)"; exit 2; fi
done
timeout 1800 bash tests/setup-deps.sh >&2 || { say "tests/setup-deps.sh failed"; exit 1; }

mkdir -p "$REPO/target"
WORK=$(mktemp -d "$REPO/target/admin-path.XXXXXX") || exit 2
chmod 755 "$WORK"
cleanup() {
    if [ -e "$WORK/dist.saved" ]; then
        rm -rf "$REPO/dist" && mv "$WORK/dist.saved" "$REPO/dist"
    elif [ -e "$WORK/dist.made" ]; then
        rm -rf "$REPO/dist"
    fi
    rm -rf "$WORK"
    true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

OUT=$WORK/out RC=0
BLOCKS=

t_extractor_sees_every_command() {
    # The extractor itself, on a section that shows commands the wrong ways.
    local md=$WORK/extract-test.md got
    printf '%s\n' "$ADMIN_SECTION" '' '1. Build:' '' '   ```sh' '   make \' '       all' '   ```' '' \
        '2. Install:' '' '       apt-get install x' '' '   ```bash' '   echo hi' '   ```' '' '## Next' '' '   ```sh' '   not ours' '   ```' > "$md"
    got=$(readme_blocks "$md" "$WORK/extract-test")
    grep -qx 'BLOCK 1.1' <<<"$got" && grep -qx 'BLOCK 2.1' <<<"$got" || fail "blocks: $got"
    [ "$(cat "$WORK/extract-test/1.1.sh")" = "$(printf 'make \\\n    all')" ] || fail "1.1 is: $(cat "$WORK/extract-test/1.1.sh")"
    grep -q '^PROBLEM an indented code line outside a ```sh block:  *apt-get install x$' <<<"$got" || fail "the indented command went unnoticed: $got"
    grep -q '^PROBLEM a ```bash block' <<<"$got" || fail "the bash block went unnoticed: $got"
    [ "$(grep -c '^BLOCK' <<<"$got")" = 2 ] || fail "a block outside the section was taken: $got"
}

t_admin_section_is_blocks_this_suite_runs() {
    local got
    got=$(readme_blocks "$ADMIN_DOC" "$WORK/blocks") || { fail "extraction failed"; return 1; }
    BLOCKS=$(sed -n 's/^BLOCK //p' <<<"$got" | tr '\n' ' ')
    ! grep '^PROBLEM' <<<"$got" >&2 || fail "$ADMIN_DOC shows commands this suite cannot run as shown (above)"
    [ "$(sed -n 's/^BLOCK \(1\.[0-9]*\)$/\1/p' <<<"$got" | tr '\n' ' ')" = "1.1 " ] \
        || fail "step 1 (the build, on this machine) must be exactly one block: $BLOCKS"
    say "$ADMIN_DOC blocks: $BLOCKS"
}

BUILD_S=
# The build machine's environment for block 1.1: none for the host's own major; for another,
# SLURM_INCLUDE_DIR as step 1 says, and the matrix's cargo target dir (where that major's plugin
# is built already; not the page's matter: only where cargo keeps its files).
BUILD_ENV=()
t_step_1_builds_the_packages() {
    [ -s "$WORK/blocks/1.1.sh" ] || { fail "no block 1.1"; return 1; }
    if [ "$HEADERS_SUITE" != host ]; then
        local hroot
        hroot=$(roots_ensure "$HEADERS_SUITE") || { fail "no $HEADERS_SUITE root for Slurm $MM's headers"; return 1; }
        BUILD_ENV=(SLURM_INCLUDE_DIR="$hroot/usr/include" NCCL_CHECK_PKG_TARGET_DIR="$REPO/target/slurm-matrix")
    fi
    [ -e dist ] && { mv dist "$WORK/dist.saved" || { fail "cannot put dist/ aside"; return 1; }; }
    touch "$WORK/dist.made"
    say "$ADMIN_DOC block 1.1 (on this machine, in $REPO${BUILD_ENV[0]:+, with ${BUILD_ENV[0]}}):"
    sed 's/^/    | /' "$WORK/blocks/1.1.sh" >&2
    local t0=$SECONDS
    env "${BUILD_ENV[@]}" timeout 3600 bash "$WORK/blocks/1.1.sh" >"$OUT" 2>&1
    RC=$? BUILD_S=$((SECONDS - t0))
    say "block 1.1 took $BUILD_S s (rc $RC)"
    [ "$RC" = 0 ] || { fail "rc $RC: $(tail -15 "$OUT")"; return 1; }
    local debs rpms
    debs=$(compgen -G "dist/nccl-check-slurm${MM}_*.deb" | wc -l)
    rpms=$(compgen -G "dist/nccl-check-slurm$MM-*.rpm" | wc -l)
    [ "$debs" = 1 ] && [ "$rpms" = 1 ] || { fail "dist/ has $debs .deb and $rpms .rpm for Slurm $MM: $(ls dist)"; return 1; }
    [ "$(compgen -G 'dist/*' | wc -l)" = 2 ] || fail "dist/ holds more than this major's two packages: $(ls dist)"
    mkdir -p "$WORK/dist" && cp dist/*.deb "$WORK/dist/"
}

ROOT='' ROOT_S=''
t_a_fresh_debian_with_slurm_from_apt() {
    local t0=$SECONDS have
    ROOT=$(roots_ensure "$FRESH") || { fail "no $FRESH root"; return 1; }
    ROOT_S=$((SECONDS - t0))
    have=$(cat "$ROOT/$ROOTS_MARKER")
    say "root $ROOT: Slurm $have ($ROOT_S s)"
    [[ "$have" == "$MM".* ]] || fail "$FRESH has Slurm $have, not $MM"
}

NODE_S=
t_admin_steps_on_the_node() {
    local t0=$SECONDS
    NCCL_CHECK_ROOT_TIMEOUT=1200 roots_run "$ROOT" ADMIN_WORK="$WORK" ADMIN_BLOCKS="$BLOCKS" ADMIN_CTLD_PORT="$PORT" ADMIN_MM="$MM" \
        -- /bin/bash -c 'mkdir -p /root && cp -r "$ADMIN_WORK/dist" /root/dist && exec bash "$0"' \
        "$REPO/tests/admin-path/site.sh"
    RC=$? NODE_S=$((SECONDS - t0))
    [ "$RC" = 0 ] || fail "the node's tests failed (rc $RC; above; Slurm's logs were in $WORK/node)"
    if [ "$RC" != 0 ]; then
        for f in "$WORK"/node/*.log; do [ -f "$f" ] && { echo "== tail $f"; tail -15 "$f"; }; done >&2
    fi
}

harness_run 'the extractor finds every ```sh block of the section and flags commands shown otherwise' t_extractor_sees_every_command
harness_run "every command of the admin page's ten-minute section is a block this suite runs" t_admin_section_is_blocks_this_suite_runs
if [ "$TEST_FAILED" = 0 ]; then
    harness_run "admin step 1 on this machine: packaging/build.sh puts one .deb and one .rpm for Slurm $MM into dist/" t_step_1_builds_the_packages
fi
if [ "$TEST_FAILED" = 0 ]; then
    harness_run "a fresh $FRESH root filesystem, Slurm $MM and munge installed with apt-get" t_a_fresh_debian_with_slurm_from_apt
fi
if [ "$TEST_FAILED" = 0 ]; then
    harness_run "admin steps 2-5 as root on that node, each block checked (the lines above)" t_admin_steps_on_the_node
fi
say "times: build ${BUILD_S:-?} s, root ${ROOT_S:-?} s, node ${NODE_S:-?} s, suite $((SECONDS - T_START)) s"
harness_tally "admin-path $MM"
