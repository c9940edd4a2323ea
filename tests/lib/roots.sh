# Sourced by the Slurm matrix (tests/matrix/run.sh): one Debian root filesystem per Slurm major,
# holding that release's own slurmctld, slurmd, slurm-client, munge and libslurm-dev, and a way
# to run a command inside one (a private mount namespace, so no mount can outlive the command).
#
#   22.05  bookworm: the host itself (Debian 12), no root filesystem
#   24.11  trixie    (Debian 13)
#   26.05  sid       (Debian unstable)
#
# Fresh roots, one per major, are no part of the matrix: "bookworm-fresh", "trixie-fresh" and
# "sid-fresh", a fresh Debian 12 / 13 / sid (minbase) on which slurmd, slurmctld, slurm-client and
# munge are then installed with apt-get, as a site's node gets them and nothing else
# (tests/admin-path/run.sh follows the admin path of docs/admin.md there; roots_fresh_suite MAJOR names it).
#
# Roots are cached under $NCCL_CHECK_SLURM_ROOTS (default <repo>/target/slurm-roots; never in
# git). A root is complete only with its marker file, so an interrupted debootstrap is redone.
# sid moves: its roots (sid, sid-fresh) are rebuilt when older than $NCCL_CHECK_ROOT_MAX_AGE_DAYS (default 7).
# Every run works on an overlay of the cached root, which therefore never changes.

ROOTS_MIRROR=${NCCL_CHECK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOTS_DIR=${NCCL_CHECK_SLURM_ROOTS:-$REPO/target/slurm-roots}
# What each root holds besides minbase: Slurm and munge, and what the suites call inside it
# (ps, python3 for the prolog fixtures, man for the packaging suite, useradd/runuser).
ROOTS_PACKAGES=slurmd,slurmctld,slurm-client,munge,libslurm-dev,procps,python3,man-db,passwd,util-linux,hostname,ca-certificates
ROOTS_MARKER=.nccl-check-slurm-root

roots_say() { echo "roots: $*" >&2; }

# roots_suite MAJOR.MINOR: the Debian suite that ships it ("host" for the host's own).
roots_suite() {
    case "$1" in
        22.05) echo host ;;
        24.11) echo trixie ;;
        26.05) echo sid ;;
        *) roots_say "no Debian release ships Slurm $1 (known: 22.05 24.11 26.05)"; return 1 ;;
    esac
}

# The packages apt-get installs into a fresh root after debootstrap: a site's Slurm node.
ROOTS_FRESH_PACKAGES="slurmd slurmctld slurm-client munge"

# roots_fresh_suite MAJOR.MINOR: the fresh root (a site's node, nothing else) of that major.
roots_fresh_suite() {
    case "$1" in
        22.05) echo bookworm-fresh ;;
        24.11) echo trixie-fresh ;;
        26.05) echo sid-fresh ;;
        *) roots_say "no fresh root for Slurm $1 (known: 22.05 24.11 26.05)"; return 1 ;;
    esac
}

# roots_ensure SUITE: prints the cached root's path, debootstrapping it first when missing,
# incomplete or (sid) stale. One debootstrap at a time (flock on the cache directory).
# SUITE bookworm-fresh, trixie-fresh, sid-fresh: see the head of this file.
roots_ensure() {
    local suite=$1 dir=$ROOTS_DIR/$1 max_age=${NCCL_CHECK_ROOT_MAX_AGE_DAYS:-7}
    local dist=$1 include=$ROOTS_PACKAGES after=
    case "$suite" in
        *-fresh) dist=${suite%-fresh} include='' after=$ROOTS_FRESH_PACKAGES ;;
    esac
    mkdir -p "$ROOTS_DIR" || return 1
    (
        flock -w 1200 9 || { roots_say "lock $ROOTS_DIR/.lock busy"; exit 1; }
        if [ -f "$dir/$ROOTS_MARKER" ]; then
            if [ "$dist" != sid ] || [ -z "$(find "$dir/$ROOTS_MARKER" -mtime +"$max_age")" ]; then
                exit 0
            fi
            roots_say "$suite root is older than $max_age days; rebuilding"
        fi
        command -v debootstrap >/dev/null || roots_apt_install debootstrap || exit 1
        rm -rf --one-file-system "$dir" "$dir.partial"
        local t0=$SECONDS
        roots_say "debootstrap --variant=minbase $dist${include:+ (Slurm and munge included)}, about a minute"
        if ! timeout 1200 debootstrap --variant=minbase ${include:+--include="$include"} "$dist" "$dir.partial" \
                "$ROOTS_MIRROR" >"$ROOTS_DIR/$suite.log" 2>&1; then
            roots_say "debootstrap $dist failed (log $ROOTS_DIR/$suite.log):"
            tail -5 "$ROOTS_DIR/$suite.log" >&2
            rm -rf --one-file-system "$dir.partial"
            exit 1
        fi
        if [ -n "$after" ]; then
            roots_say "apt-get install $after (in the root)"
            # shellcheck disable=SC2086  # a list of package names
            roots_apt_in "$dir.partial" $after >>"$ROOTS_DIR/$suite.log" 2>&1 \
                || { roots_say "apt-get install $after failed (log $ROOTS_DIR/$suite.log)"; tail -5 "$ROOTS_DIR/$suite.log" >&2
                     rm -rf --one-file-system "$dir.partial"; exit 1; }
        fi
        rm -f "$dir.partial"/var/cache/apt/archives/*.deb
        # munge's postinst makes a key on most releases; make sure there is one (0400 munge).
        if [ ! -s "$dir.partial/etc/munge/munge.key" ]; then
            timeout 60 chroot "$dir.partial" /usr/sbin/mungekey -c -k /etc/munge/munge.key >&2 || exit 1
        fi
        timeout 30 chroot "$dir.partial" /bin/sh -c 'chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key' || exit 1
        if [ -n "$include" ]; then
            roots_slurm_version "$dir.partial" > "$dir.partial/$ROOTS_MARKER" || exit 1
        else    # no libslurm-dev in a site's node: the version is the package's
            chroot "$dir.partial" dpkg-query -W -f='${Version}\n' slurmd > "$dir.partial/$ROOTS_MARKER" || exit 1
        fi
        mv "$dir.partial" "$dir"
        roots_say "$suite root ready: Slurm $(cat "$dir/$ROOTS_MARKER") in $((SECONDS - t0)) s ($(du -sm "$dir" | cut -f1) MB)"
    ) 9>"$ROOTS_DIR/.lock" || return 1
    echo "$dir"
}

# roots_slurm_version ROOT: "MAJOR.MINOR.MICRO" from ROOT's <slurm/slurm_version.h>.
roots_slurm_version() {
    local hex
    hex=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$1/usr/include/slurm/slurm_version.h" 2>/dev/null)
    [[ "$hex" =~ ^0[xX][0-9a-fA-F]+$ ]] || { roots_say "$1: no SLURM_VERSION_NUMBER"; return 1; }
    printf '%d.%02d.%d\n' $(( (hex >> 16) & 255 )) $(( (hex >> 8) & 255 )) $(( hex & 255 ))
}

# roots_apt_in DIR PKG...: apt-get update and install PKG inside the root DIR, as an admin would
# on that machine, in a private mount namespace (/proc mounted there only). No daemon is
# started meanwhile (a policy-rc.d that says no, removed again), so the root is left as a
# freshly installed machine whose daemons nobody started yet. sid's Release file carries a
# Valid-Until a week out: where this machine's clock and the mirror disagree, apt refuses it
# ("is expired"), so the check is off here (a test fixture; debootstrap itself does not check it).
roots_apt_in() {
    local dir=$1; shift
    cp -L /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null
    printf '#!/bin/sh\nexit 101\n' > "$dir/usr/sbin/policy-rc.d" && chmod 755 "$dir/usr/sbin/policy-rc.d" || return 1
    timeout 1200 unshare --mount --propagation private -- /bin/sh -c '
        d=$1; shift
        mount -t proc proc "$d/proc" || exit 1
        chroot "$d" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
            sh -c "apt-get -q -o Acquire::Check-Valid-Until=false update && apt-get install -y -q --no-install-recommends \"\$@\"" sh "$@"
        rc=$?
        umount "$d/proc"
        exit $rc' sh "$dir" "$@"
    local rc=$?
    rm -f "$dir/usr/sbin/policy-rc.d"
    return "$rc"
}

# roots_apt_install PKG...: apt-get install that waits for the dpkg lock (another apt on the
# machine) instead of failing with exit 100.
roots_apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    timeout 900 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2 \
        || { timeout 900 apt-get -o DPkg::Lock::Timeout=600 update -q >&2 \
             && timeout 900 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2; }
}

# roots_run ROOT [VAR=VALUE...] -- CMD...: runs CMD as root inside an overlay of ROOT (the cache
# stays unchanged), in a private mount namespace with /proc, /sys, /dev, a fresh /run and the
# repository at its own path mounted. The mounts live only in that namespace: they vanish with it
# however the command ends, and the inner shell also unmounts them on exit. The environment is
# only PATH, HOME, LANG and the given variables. The exit status is CMD's.
roots_run() {
    local root=$1; shift
    local env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
    while [ $# -gt 0 ] && [ "$1" != -- ]; do env+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    local scratch rc
    scratch=$(mktemp -d /var/tmp/nccl-check-root.XXXXXX) || return 1
    timeout "${NCCL_CHECK_ROOT_TIMEOUT:-3000}" unshare --mount --propagation private -- \
        /bin/bash -c "$(declare -f roots_inner)"'; roots_inner "$@"' roots_inner \
        "$root" "$scratch" "$REPO" "${env[@]}" -- "$@"
    rc=$?
    # The namespace is gone, so nothing is mounted under $scratch any more.
    if findmnt -rn -o TARGET | grep "^$scratch" >/dev/null; then
        roots_say "mounts left under $scratch; not removing it"
    else
        rm -rf --one-file-system "$scratch"
    fi
    return "$rc"
}

# The part of roots_run inside the new mount namespace.
roots_inner() {
    set -u
    local lower=$1 scratch=$2 repo=$3; shift 3
    local env=()
    while [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    local m=$scratch/merged
    ROOTS_MOUNTED=()           # global: the EXIT trap runs after this function returned
    undo() {
        local i p me comm
        # Daemons the command started and left running (a test's slurmd or munged) would keep
        # this namespace, its overlay and the ports alive after we return: every other process
        # of this mount namespace ends with it (each one started inside it, killed by its pid).
        me=$(readlink /proc/$$/ns/mnt)
        for p in /proc/[0-9]*; do
            [ "${p#/proc/}" != $$ ] && [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$me" ] || continue
            comm=$(cat "$p/comm" 2>/dev/null)
            kill -KILL "${p#/proc/}" 2>/dev/null && echo "roots: killed a leftover $comm (pid ${p#/proc/})" >&2
        done
        for ((i = ${#ROOTS_MOUNTED[@]} - 1; i >= 0; i--)); do umount -l "${ROOTS_MOUNTED[i]}" 2>/dev/null; done
    }
    trap undo EXIT
    mkdir -p "$scratch"/{upper,work,merged} || return 1
    mount -t overlay overlay -o "lowerdir=$lower,upperdir=$scratch/upper,workdir=$scratch/work" "$m" \
        || { echo "roots: overlay mount failed" >&2; return 1; }
    ROOTS_MOUNTED+=("$m")
    mount -t proc proc "$m/proc" && ROOTS_MOUNTED+=("$m/proc") || return 1
    mount --rbind /sys "$m/sys" && ROOTS_MOUNTED+=("$m/sys") || return 1
    mount --rbind /dev "$m/dev" && ROOTS_MOUNTED+=("$m/dev") || return 1
    mount -t tmpfs -o mode=0755,size=256m tmpfs "$m/run" && ROOTS_MOUNTED+=("$m/run") || return 1
    mkdir -p "$m$repo" && mount --bind "$repo" "$m$repo" && ROOTS_MOUNTED+=("$m$repo") || return 1
    # Name resolution as on the host (the test cluster's SlurmctldHost is the host name).
    cp /etc/hosts "$m/etc/hosts" && cp -L /etc/resolv.conf "$m/etc/resolv.conf" 2>/dev/null
    chroot "$m" /usr/bin/env -i "${env[@]}" "$@"
}
