#!/usr/bin/env bash
# The README's ten-minute admin path ("For the admin with ten minutes"), followed as written, from
# a fresh Debian 12 machine to a working gate. Every command of that section is a ```sh block
# (tests/admin-path/readme.sh extracts them; a command shown any other way fails the first test),
# and this suite runs exactly those blocks, in order, and nothing the README does not say:
#   step 1 (build) on this machine, in the repository: packaging/build.sh into dist/ (a dist/
#     that was there is put aside and restored);
#   steps 2-5 as root in /root of a fresh Debian 12 root filesystem (tests/lib/roots.sh
#     "bookworm-fresh": debootstrap minbase, then Slurm 22.05 and munge with apt-get; cached under
#     target/slurm-roots/), with the built dist/ copied there, after the site's own one-node
#     Slurm was configured and started (tests/admin-path/site.sh: the "before" state, not a
#     README step). After each block, site.sh checks what the README says it does on a node
#     without GPU or NCCL; then, as a labelled test fixture, the prolog runs the prolog suite's
#     fake worker and a FAIL must drain the node with the reason the README shows.
#
# Needs root on Debian 12 (tests/setup-deps.sh, debootstrap, network to deb.debian.org for the
# first root). Real-Slurm suite: fixed ports (20817, 20818; NCCL_CHECK_ADMIN_PORT), so run it
# under the suites' lock: flock -w 2400 /work/slurm-suite.lock bash tests/admin-path/run.sh
# Leaves the machine as it found it: the node is an overlay in a private mount namespace (gone
# with it, every process in it killed), dist/ is restored, the work dir removed.
#
# Usage: bash tests/admin-path/run.sh
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"
# shellcheck disable=SC1091
. "$REPO/tests/lib/roots.sh"
# shellcheck disable=SC1091
. "$REPO/tests/admin-path/readme.sh"
say() { echo "admin-path: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }
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

t_readme_section_is_blocks_this_suite_runs() {
    local got
    got=$(readme_blocks README.md "$WORK/blocks") || { fail "extraction failed"; return 1; }
    BLOCKS=$(sed -n 's/^BLOCK //p' <<<"$got" | tr '\n' ' ')
    ! grep '^PROBLEM' <<<"$got" >&2 || fail "the README shows commands this suite cannot run as shown (above)"
    [ "$(sed -n 's/^BLOCK \(1\.[0-9]*\)$/\1/p' <<<"$got" | tr '\n' ' ')" = "1.1 " ] \
        || fail "step 1 (the build, on this machine) must be exactly one block: $BLOCKS"
    say "README blocks: $BLOCKS"
}

BUILD_S=
t_step_1_builds_the_packages() {
    [ -s "$WORK/blocks/1.1.sh" ] || { fail "no block 1.1"; return 1; }
    [ -e dist ] && { mv dist "$WORK/dist.saved" || { fail "cannot put dist/ aside"; return 1; }; }
    touch "$WORK/dist.made"
    say "README block 1.1 (on this machine, in $REPO):"; sed 's/^/    | /' "$WORK/blocks/1.1.sh" >&2
    local t0=$SECONDS
    timeout 3600 bash "$WORK/blocks/1.1.sh" >"$OUT" 2>&1
    RC=$? BUILD_S=$((SECONDS - t0))
    say "block 1.1 took $BUILD_S s (rc $RC)"
    [ "$RC" = 0 ] || { fail "rc $RC: $(tail -15 "$OUT")"; return 1; }
    local debs rpms
    debs=$(compgen -G 'dist/nccl-check-slurm22.05_*.deb' | wc -l)
    rpms=$(compgen -G 'dist/nccl-check-slurm22.05-*.rpm' | wc -l)
    [ "$debs" = 1 ] && [ "$rpms" = 1 ] || { fail "dist/ has $debs .deb and $rpms .rpm: $(ls dist)"; return 1; }
    mkdir -p "$WORK/dist" && cp dist/*.deb "$WORK/dist/"
}

ROOT='' ROOT_S=''
t_a_fresh_debian_12_with_slurm_from_apt() {
    local t0=$SECONDS
    ROOT=$(roots_ensure bookworm-fresh) || { fail "no bookworm-fresh root"; return 1; }
    ROOT_S=$((SECONDS - t0))
    say "root $ROOT: Slurm $(cat "$ROOT/$ROOTS_MARKER") ($ROOT_S s)"
}

NODE_S=
t_readme_steps_on_the_node() {
    local t0=$SECONDS
    NCCL_CHECK_ROOT_TIMEOUT=1200 roots_run "$ROOT" ADMIN_WORK="$WORK" ADMIN_BLOCKS="$BLOCKS" ADMIN_CTLD_PORT="$PORT" \
        -- /bin/bash -c 'mkdir -p /root && cp -r "$ADMIN_WORK/dist" /root/dist && exec bash "$0"' \
        "$REPO/tests/admin-path/site.sh"
    RC=$? NODE_S=$((SECONDS - t0))
    [ "$RC" = 0 ] || fail "the node's tests failed (rc $RC; above; Slurm's logs were in $WORK/node)"
    if [ "$RC" != 0 ]; then
        for f in "$WORK"/node/*.log; do [ -f "$f" ] && { echo "== tail $f"; tail -15 "$f"; }; done >&2
    fi
}

harness_run 'the extractor finds every ```sh block of the section and flags commands shown otherwise' t_extractor_sees_every_command
harness_run "every command of the README's admin section is a block this suite runs" t_readme_section_is_blocks_this_suite_runs
if [ "$TEST_FAILED" = 0 ]; then
    harness_run "README step 1 on this machine: packaging/build.sh puts one .deb and one .rpm into dist/" t_step_1_builds_the_packages
fi
if [ "$TEST_FAILED" = 0 ]; then
    harness_run "a fresh Debian 12 root filesystem, Slurm 22.05 and munge installed with apt-get" t_a_fresh_debian_12_with_slurm_from_apt
fi
if [ "$TEST_FAILED" = 0 ]; then
    harness_run "README steps 2-5 as root on that node, each block checked (the lines above)" t_readme_steps_on_the_node
fi
say "times: build ${BUILD_S:-?} s, root ${ROOT_S:-?} s, node ${NODE_S:-?} s, suite $((SECONDS - T_START)) s"
harness_tally admin-path
