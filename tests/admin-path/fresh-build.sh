#!/usr/bin/env bash
# The admin page's step 1 (the build, docs/admin.md) on a fresh Debian 12 build machine: not in tests/run.sh
# (about 10 minutes on 2 cores); run by hand after changing build.sh's prerequisites.
#
# The machine is an overlay of the cached "bookworm-fresh" root (tests/lib/roots.sh: minbase plus
# Slurm and munge from apt) with what admin step 1 asks for and nothing else: libslurm-dev from
# apt, and cargo (this machine's rustup stable toolchain, bound read-only at /opt/rust, with an
# empty CARGO_HOME). The repository is copied in without target/ and dist/, and block 1.1
# runs there as root, exactly as shown. Passes when dist/ then holds the .deb and the .rpm.
# Where this machine reaches the registries through a TLS proxy, its CA bundle ($SSL_CERT_FILE,
# else /etc/ssl/certs/ca-certificates.crt) is handed to cargo and pip: network, not the page.
#
# Usage: bash tests/admin-path/fresh-build.sh   (root; network to deb.debian.org, crates.io, PyPI)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/roots.sh"
# shellcheck disable=SC1091
. "$REPO/tests/admin-path/readme.sh"
say() { echo "fresh-build: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }
TOOLCHAIN=$(rustup toolchain list 2>/dev/null | awk '/^stable/ { print $1; exit }')
TC_DIR=${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$TOOLCHAIN
[ -x "$TC_DIR/bin/cargo" ] || { say "no rustup stable toolchain ($TC_DIR)"; exit 2; }
ROOT=$(roots_ensure bookworm-fresh) || exit 1

W=$(mktemp -d /var/tmp/nccl-check-fresh-build.XXXXXX) || exit 2
trap 'rm -rf --one-file-system "$W"' EXIT
readme_blocks "$REPO/$ADMIN_DOC" "$W/blocks" >"$W/blocks.txt"
grep -q '^PROBLEM' "$W/blocks.txt" && { cat "$W/blocks.txt" >&2; exit 1; }
[ -s "$W/blocks/1.1.sh" ] || { say "no block 1.1 in $ADMIN_DOC"; exit 1; }
cp -L "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$W/ca.crt"
mkdir -p "$W/src" && tar -C "$REPO" --exclude=./target --exclude=./dist --exclude=./.git -cf - . | tar -C "$W/src" -xf -
cat > "$W/inner.sh" <<'EOF'
set -u
export PATH=/opt/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
export CARGO_HOME=/root/.cargo DEBIAN_FRONTEND=noninteractive
export SSL_CERT_FILE=/w/ca.crt CARGO_HTTP_CAINFO=/w/ca.crt PIP_CERT=/w/ca.crt
echo "fresh-build: apt-get install libslurm-dev (admin step 1's prerequisite)" >&2
{ apt-get -q update && apt-get install -y -q --no-install-recommends libslurm-dev; } >/w/apt.log 2>&1 || exit 1
cd /w/src || exit 1
echo "fresh-build: admin block 1.1:" >&2; sed 's/^/    | /' /w/blocks/1.1.sh >&2
s=$SECONDS
bash /w/blocks/1.1.sh >/w/build.log 2>&1; rc=$?
echo "fresh-build: block 1.1 exited $rc after $((SECONDS - s)) s" >&2
grep -E '^build.sh|^build-portable|Finished' /w/build.log >&2
ls dist/nccl-check-slurm22.05_*.deb dist/nccl-check-slurm22.05-*.rpm >&2 || rc=1
exit "$rc"
EOF
s=$SECONDS
timeout 3600 unshare --mount --propagation private -- /bin/bash -c '
    lower=$1 w=$2 tc=$3; m=$w/merged
    me=$(readlink /proc/$$/ns/mnt)
    # On exit: every process left in this namespace (none expected) goes with it.
    trap '\''for p in /proc/[0-9]*; do [ "${p#/proc/}" != $$ ] && [ "$(readlink $p/ns/mnt 2>/dev/null)" = "$me" ] && kill -KILL ${p#/proc/} 2>/dev/null; done'\'' EXIT
    mkdir -p "$w"/upper "$w"/work "$m" || exit 1
    mount -t overlay overlay -o "lowerdir=$lower,upperdir=$w/upper,workdir=$w/work" "$m" || exit 1
    mount -t proc proc "$m/proc" && mount --rbind /dev "$m/dev" && mount --rbind /sys "$m/sys" \
        && mount -t tmpfs tmpfs "$m/run" || exit 1
    mkdir -p "$m/opt/rust" "$m/w" && mount --bind -o ro "$tc" "$m/opt/rust" && mount --bind "$w" "$m/w" || exit 1
    cp /etc/hosts "$m/etc/hosts"; cp -L /etc/resolv.conf "$m/etc/resolv.conf"
    chroot "$m" /usr/bin/env -i /bin/bash /w/inner.sh' fresh-build "$ROOT" "$W" "$TC_DIR"
rc=$?
say "$([ "$rc" = 0 ] && echo PASS || echo "FAIL (rc $rc)"): admin step 1 on a fresh Debian 12 in $((SECONDS - s)) s"
[ "$rc" = 0 ] || tail -20 "$W/build.log" "$W/apt.log" 2>/dev/null >&2
exit "$rc"
