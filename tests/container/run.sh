#!/usr/bin/env bash
# Container suite: the nccl-check worker in an older distribution's root filesystem,
# and the enroot files (enroot/) against a real root filesystem, without enroot and without a GPU.
#
#   1. Builds the worker for glibc 2.17 (packaging/build-portable.sh: cargo-zigbuild, objdump proof).
#   2. debootstraps Debian 11 "bullseye" (glibc 2.31, the glibc of Ubuntu 20.04 = NGC PyTorch
#      20.12-23.03) once into a cache, copies it per run, and chroots into the copy: --help,
#      --version, and a check that must end in a clean one-line ERROR: exit 4 (no GPU) with a real
#      libnccl from PyPI, exit 3 without one.
#   3. enroot/mounts.d: parsed by libmount (findmnt), options checked against enroot-mount's list,
#      then performed as enroot-mount would (bind, remount ro/nosuid/nodev, private, x-create,
#      nofail) into the root filesystem, and the worker run from the mounted path inside it.
#   4. enroot/hooks.d: bash -n, shellcheck, and runs with enroot's variables (ENROOT_ROOTFS,
#      ENROOT_ENVIRON, ENROOT_MOUNTS, ENROOT_PID) against the root filesystem with a pip-installed
#      NCCL, with NCCL in ld.so.cache, with LD_LIBRARY_PATH, and with broken inputs; the worker then
#      loads the NCCL the hook chose, inside the root filesystem.
#   5. enroot/environ.d: what survives enroot's formatting is KEY=VALUE only.
#
# Needs root on Debian 12 (installs debootstrap, shellcheck, binutils with apt; ziglang from PyPI
# and cargo-zigbuild from crates.io on first use). Idempotent; the root filesystem is cached in
# $NCCL_CHECK_ROOTFS_CACHE (default /var/tmp/nccl-check-rootfs); each run works on a copy and
# leaves no mount behind. Every step is bounded with `timeout`.
#
# Older roots than bullseye (deb.debian.org no longer serves buster) can be added by hand:
#   NCCL_CHECK_CONTAINER_EXTRA="xenial=http://archive.ubuntu.com/ubuntu" bash tests/container/run.sh
# Those are debootstrapped with --no-check-gpg (Debian ships no Ubuntu archive key), so they are
# opt-in, never part of CI.
#
# Usage: bash tests/container/run.sh [TEST_NAME_SUBSTRING]
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FILTER=${1:-}
CACHE=${NCCL_CHECK_ROOTFS_CACHE:-/var/tmp/nccl-check-rootfs}
SUITE=bullseye
MIRROR=http://deb.debian.org/debian
GLIBC_FLOOR=2.17
WORKER_DIR=/usr/libexec/nccl-check   # the package's path and spank-plugin's default worker=
# PASSED FAILED STARTED, fail, harness_run, harness_tally:
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"

say() { echo "container/run.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root (debootstrap, chroot, mount)"; exit 2; }
cd "$REPO" || exit 1

# --- prerequisites --------------------------------------------------------------------------
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v shellcheck >/dev/null || need+=(shellcheck)
command -v objdump >/dev/null || need+=(binutils)
command -v findmnt >/dev/null || need+=(util-linux)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # DPkg::Lock::Timeout: wait for another apt on the machine instead of failing (exit 100).
    if ! { timeout 900 apt-get -o DPkg::Lock::Timeout=600 update -q >&2 \
        && timeout 1200 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${need[@]}" >&2; }; then
        say "apt-get install ${need[*]} failed"; exit 1
    fi
fi

say "building the worker for glibc $GLIBC_FLOOR"
BIN=$(NCCL_CHECK_GLIBC_FLOOR=$GLIBC_FLOOR bash packaging/build-portable.sh) || { say "portable build failed"; exit 1; }
NCCL_LIB=${NCCL_CHECK_TEST_NCCL_LIB:-}
[ -f "$NCCL_LIB" ] || NCCL_LIB=$(bash tests/fetch-nccl.sh) || { say "cannot fetch a libnccl"; exit 1; }

# --- root filesystems (cached) ----------------------------------------------------------------
# ensure_rootfs NAME MIRROR [debootstrap options...]: $CACHE/NAME, complete or absent.
ensure_rootfs() {
    local name=$1 mirror=$2; shift 2
    local dir=$CACHE/$name
    [ -f "$dir/.nccl-check-rootfs-complete" ] && return 0
    mkdir -p "$CACHE"
    rm -rf --one-file-system "$dir.partial" "$dir"
    say "debootstrap --variant=minbase $* $name ($mirror), about a minute"
    if ! timeout 900 debootstrap --variant=minbase "$@" "$name" "$dir.partial" "$mirror" >"$CACHE/$name.log" 2>&1; then
        say "debootstrap $name failed (log: $CACHE/$name.log)"; tail -5 "$CACHE/$name.log" >&2
        rm -rf --one-file-system "$dir.partial"
        return 1
    fi
    rm -f "$dir.partial"/var/cache/apt/archives/*.deb
    touch "$dir.partial/.nccl-check-rootfs-complete"
    mv "$dir.partial" "$dir"
}
exec 9>"${CACHE%/}.lock"                 # one debootstrap at a time on this machine
timeout 1200 flock 9 || { say "cache lock $CACHE.lock busy"; exit 1; }
ensure_rootfs "$SUITE" "$MIRROR" || exit 1
flock -u 9

WORK=$(mktemp -d /var/tmp/nccl-check-container.XXXXXX)
MOUNTS=()                                # mount points to undo, newest last
cleanup() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[i]}" 2>/dev/null; done
    MOUNTS=()
    # Never delete through a mount that is still there.
    if findmnt -rn -o TARGET | grep "^$WORK/" >/dev/null; then
        say "mounts left under $WORK; not removing it"
    else
        rm -rf --one-file-system "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# fresh_root NAME: a private copy of the cached root filesystem; prints its path.
fresh_root() {
    local root=$WORK/root-$1-$RANDOM
    cp -a --reflink=auto "$CACHE/$1" "$root" && echo "$root"
}
ROOT=$(fresh_root "$SUITE") || { say "cannot copy the root filesystem"; exit 1; }
ROOT_GLIBC=$(chroot "$ROOT" /usr/bin/ldd --version 2>/dev/null | head -1 | grep -o '[0-9]*\.[0-9]*$')
say "root filesystem: $SUITE, glibc $ROOT_GLIBC; worker: $BIN"

# --- helpers ----------------------------------------------------------------------------------
OUT=$WORK/out ERR=$WORK/err RC=0
# in_root ROOT [VAR=VALUE...] -- CMD...: runs CMD inside ROOT with only the given environment.
in_root() {
    local root=$1; shift
    local env=(PATH=/usr/local/bin:/usr/bin:/bin HOME=/root)
    while [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    timeout 60 chroot "$root" /usr/bin/env -i "${env[@]}" "$@" >"$OUT" 2>"$ERR"
    RC=$?
}
expect_rc() { [ "$RC" = "$1" ] || fail "expected rc $1, got $RC; stderr: $(tail -3 "$ERR")"; }
# expect_one_error_line REGEX: stderr is exactly one line and it matches.
expect_one_error_line() {
    [ "$(grep -c . "$ERR")" = 1 ] || fail "expected one stderr line, got: $(cat "$ERR")"
    grep -Eq "$1" "$ERR" || fail "stderr does not match '$1': $(cat "$ERR")"
}
run_test() { # name function
    local name=$1
    [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]] && return 0
    harness_run "$name" "$2"
}

# install_worker ROOT: the worker and libnccl at fixed paths inside ROOT (a plain copy).
install_worker() {
    mkdir -p "$1/opt/nccl-check" && cp "$BIN" "$1/opt/nccl-check/nccl-check" \
        && cp "$NCCL_LIB" "$1/opt/nccl-check/libnccl.so.2"
}

# The enroot fstab, as enroot-mount performs it (bin/enroot-mount.c): one line per entry,
# fields SOURCE TARGET FSTYPE OPTIONS, parsed by libmount.
fstab_entries() { findmnt --fstab --tab-file "$1" -n -P -o SOURCE,TARGET,FSTYPE,OPTIONS,PASSNO; }
# Mount options enroot-mount knows (bin/enroot-mount.c mount_opts[]); others would be passed to
# mount(2) as fs data, which a bind mount cannot take.
ENROOT_OPTS=" async atime bind dev diratime dirsync exec iversion loud mand noatime nodev nodiratime noexec
 noiversion nomand norelatime nostrictatime nosuid private rbind relatime remount ro rprivate rshared rslave
 runbindable rw shared silent slave strictatime suid sync unbindable lazytime nolazytime auto defaults group
 noauto nofail nogroup noowner nouser nousers owner user users x-create=dir x-create=file x-create=auto x-move x-detach "
ENROOT_OPTS=${ENROOT_OPTS//$'\n'/ }

# enroot_mount ROOT FSTAB SRC_PREFIX: performs the bind entries of FSTAB under ROOT, with each
# source path looked up below SRC_PREFIX (a staged host tree). Prints "skipped SRC" for nofail
# entries whose source is missing, as enroot-mount warns and goes on.
enroot_mount() {
    local root=$1 fstab=$2 prefix=$3 line SOURCE TARGET FSTYPE OPTIONS PASSNO
    while IFS= read -r line; do
        eval "$line"
        local src=$prefix$SOURCE dst=$root/${TARGET#/} opts=,$OPTIONS, flags=()
        if [ ! -e "$src" ]; then
            [[ $opts == *,nofail,* ]] && { echo "skipped $SOURCE"; continue; }
            return 1
        fi
        [[ $opts == *,x-create=dir,* ]] && mkdir -p "$dst"
        mount --bind "$src" "$dst" || return 1
        MOUNTS+=("$dst")
        local o
        for o in ro nosuid nodev noexec; do [[ $opts == *,$o,* ]] && flags+=("$o"); done
        if [ ${#flags[@]} -gt 0 ]; then
            mount -o "remount,bind,$(IFS=,; echo "${flags[*]}")" "$dst" || return 1
        fi
        [[ $opts == *,private,* ]] && { mount --make-private "$dst" || return 1; }
    done < <(fstab_entries "$fstab")
}
unmount_all() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount "${MOUNTS[i]}" || umount -l "${MOUNTS[i]}"; done
    MOUNTS=()
}

# hook ROOT ENVIRON [VAR=VALUE...]: runs enroot/hooks.d/90-nccl-check.sh as enroot does.
hook() {
    local root=$1 environ=$2; shift 2
    : >"$WORK/mounts.fstab"
    timeout 30 env -u NCCL_CHECK_NCCL_LIB ENROOT_ROOTFS="$root" ENROOT_ENVIRON="$environ" \
        ENROOT_MOUNTS="$WORK/mounts.fstab" ENROOT_PID=$$ "$@" "$REPO/enroot/hooks.d/90-nccl-check.sh"
}
# enroot's formatting of the environment file (src/common.sh common::envfmt).
envfmt() {
    sed -e 's/^[[:space:]]\+//' -e '/^#\|^$/d' -e '/^[[:alpha:]_][[:alnum:]_]*=/!d' -e '/^ENROOT_/d' \
        -e 's/^\([[:alpha:]_][[:alnum:]_]*\)=[\"\x27]\(.*\)[\"\x27][[:space:]]*$/\1=\2/' "$1"
}
# env_args ENVIRON: the file's variables as VAR=VALUE arguments (the container's environment).
env_args() { local l; while IFS= read -r l; do printf '%s\n' "$l"; done < <(envfmt "$1"); }

# --- tests: the worker in an older root filesystem --------------------------------------------
t_glibc_floor() {
    local newest
    newest=$(objdump -T "$BIN" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
    [ -n "$newest" ] || fail "objdump found no GLIBC_ versions"
    [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_FLOOR" | sort -V | tail -1)" = "$GLIBC_FLOOR" ] \
        || fail "the worker needs GLIBC_$newest > $GLIBC_FLOOR"
    echo "    newest GLIBC symbol version: $newest (floor $GLIBC_FLOOR)"
}

t_help_and_version_in_old_root() {
    install_worker "$ROOT" || fail "cannot install the worker"
    in_root "$ROOT" -- /opt/nccl-check/nccl-check --version
    expect_rc 0
    grep -q '^nccl-check [0-9]' "$OUT" || fail "--version printed: $(cat "$OUT" "$ERR")"
    in_root "$ROOT" -- /opt/nccl-check/nccl-check --help
    expect_rc 0
    grep -q 'nccl-check' "$OUT" || fail "--help printed nothing useful"
}

t_no_gpu_is_a_clean_error_in_old_root() {
    install_worker "$ROOT" || fail "cannot install the worker"
    in_root "$ROOT" -- /opt/nccl-check/nccl-check --nccl-lib /opt/nccl-check/libnccl.so.2 --timeout 20
    expect_rc 4
    expect_one_error_line '^nccl-check: ERROR .*GPU'
    in_root "$ROOT" -- /opt/nccl-check/nccl-check --timeout 20
    expect_rc 3
    expect_one_error_line '^nccl-check: ERROR NCCL library'
}

t_host_build_does_not_start_in_old_root() {
    # The control: the same worker built the ordinary way on Debian 12 needs a newer glibc.
    local native=$REPO/target/release/nccl-check
    if [ ! -x "$native" ]; then echo "    (no $native; control skipped)"; return 0; fi
    cp "$native" "$ROOT/opt/nccl-check/nccl-check-native"
    in_root "$ROOT" -- /opt/nccl-check/nccl-check-native --version
    [ "$RC" != 0 ] && grep -q "GLIBC_" "$ERR" \
        || echo "    note: the host build also runs in glibc $ROOT_GLIBC (rc $RC)"
    rm -f "$ROOT/opt/nccl-check/nccl-check-native"
}

# --- tests: enroot/mounts.d -------------------------------------------------------------------
FSTAB=$REPO/enroot/mounts.d/90-nccl-check.fstab

t_fstab_parses_as_enroot_expects() {
    fstab_entries "$FSTAB" >"$OUT" 2>"$ERR" || fail "findmnt cannot parse $FSTAB: $(cat "$ERR")"
    [ "$(grep -c . "$OUT")" = 2 ] || fail "expected 2 entries: $(cat "$OUT")"
    grep -q '[$][{]' "$FSTAB" && fail "unexpected \${VAR} (enroot substitutes the host's value)"
    local line SOURCE TARGET FSTYPE OPTIONS PASSNO o
    while IFS= read -r line; do
        eval "$line"
        [ "$SOURCE" = "$TARGET" ] || fail "$SOURCE is mounted at another path ($TARGET)"
        [[ $TARGET == /* ]] || fail "target $TARGET is not absolute"
        [ "$FSTYPE" = none ] || fail "$TARGET: fstype $FSTYPE, expected none (a bind mount)"
        [ "$PASSNO" = 0 ] || fail "$TARGET: fs_passno $PASSNO (enroot: 0 = after the hooks)"
        for o in ${OPTIONS//,/ }; do
            [[ $ENROOT_OPTS == *" $o "* ]] || fail "$TARGET: option '$o' unknown to enroot-mount"
        done
        for o in bind ro nosuid nodev private nofail x-create=dir; do
            [[ ,$OPTIONS, == *,$o,* ]] || fail "$TARGET: option $o missing"
        done
    done <"$OUT"
    grep -q "^SOURCE=\"$WORKER_DIR\" .*OPTIONS=\"[^\"]*\"" "$OUT" || fail "no entry for $WORKER_DIR"
    grep "^SOURCE=\"$WORKER_DIR\"" "$OUT" | grep -q noexec && fail "$WORKER_DIR must stay executable"
    grep -q "PathBuf::from(\"$WORKER_DIR/nccl-check\")" "$REPO/spank-plugin/src/config.rs" \
        || fail "the plugin's default worker= is not under $WORKER_DIR"
    true
}

stage_host_tree() { # the host side of the mounts: $WORK/host$WORKER_DIR and /etc/nccl-check
    rm -rf "$WORK/host" && mkdir -p "$WORK/host$WORKER_DIR" "$WORK/host/etc/nccl-check" \
        && cp "$BIN" "$WORK/host$WORKER_DIR/nccl-check" \
        && echo '# site config' >"$WORK/host/etc/nccl-check/nccl-check.toml"
}

t_fstab_mounted_worker_runs_inside_root() {
    stage_host_tree || fail "cannot stage the host tree"
    cp "$NCCL_LIB" "$ROOT/opt/libnccl.so.2"
    enroot_mount "$ROOT" "$FSTAB" "$WORK/host" >"$WORK/mount.log" 2>&1 || fail "mount failed: $(cat "$WORK/mount.log")"
    in_root "$ROOT" -- "$WORKER_DIR/nccl-check" --version
    expect_rc 0
    in_root "$ROOT" -- "$WORKER_DIR/nccl-check" --nccl-lib /opt/libnccl.so.2 --timeout 20
    expect_rc 4
    expect_one_error_line '^nccl-check: ERROR .*GPU'
    in_root "$ROOT" -- /bin/sh -c "echo x > $WORKER_DIR/written"
    [ "$RC" != 0 ] || fail "$WORKER_DIR is writable inside the container"
    in_root "$ROOT" -- /bin/cat /etc/nccl-check/nccl-check.toml
    expect_rc 0
    unmount_all
    [ -e "$ROOT$WORKER_DIR/nccl-check" ] && fail "the worker is still visible after unmounting"
    # nofail: a node without /etc/nccl-check still gets the worker.
    rm -rf "$WORK/host/etc/nccl-check"
    enroot_mount "$ROOT" "$FSTAB" "$WORK/host" >"$WORK/mount.log" 2>&1 || fail "mount without config failed"
    grep -q "skipped /etc/nccl-check" "$WORK/mount.log" || fail "missing /etc/nccl-check was not skipped"
    in_root "$ROOT" -- "$WORKER_DIR/nccl-check" --version
    expect_rc 0
    unmount_all
    rm -f "$ROOT/opt/libnccl.so.2"
}

# --- tests: enroot/hooks.d --------------------------------------------------------------------
HOOK=$REPO/enroot/hooks.d/90-nccl-check.sh

t_hook_is_valid_bash_and_executable() {
    [ -x "$HOOK" ] || fail "$HOOK is not executable (enroot runs only executable hooks)"
    bash -n "$HOOK" || fail "bash -n failed"
    timeout 60 shellcheck "$HOOK" || fail "shellcheck found problems"
    timeout 60 shellcheck "$REPO/tests/container/run.sh" "$REPO/packaging/build-portable.sh" || fail "shellcheck (scripts)"
}

# A container environment as enroot writes it before the hooks (image /etc/environment first).
new_environ() { printf 'PATH=/usr/local/bin:/usr/bin:/bin\nLANG=C.UTF-8\n' >"$1"; }
PIP_SITE=/usr/local/lib/python3.9/dist-packages

t_hook_picks_the_pip_nccl_next_to_torch() {
    local r; r=$(fresh_root "$SUITE") || fail "copy"
    install_worker "$r"; rm -f "$r/opt/nccl-check/libnccl.so.2"
    mkdir -p "$r$PIP_SITE/torch" "$r$PIP_SITE/nvidia/nccl/lib" "$r/usr/lib/python3/dist-packages/nvidia/nccl/lib"
    cp "$NCCL_LIB" "$r$PIP_SITE/nvidia/nccl/lib/libnccl.so.2"
    cp "$NCCL_LIB" "$r/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2"   # no torch there
    local e=$WORK/environ; new_environ "$e"
    hook "$r" "$e" || fail "hook exited $?"
    grep -qx "NCCL_CHECK_NCCL_LIB=$PIP_SITE/nvidia/nccl/lib/libnccl.so.2" "$e" \
        || fail "hook wrote: $(grep NCCL "$e")"
    local args; mapfile -t args < <(env_args "$e")
    in_root "$r" "${args[@]}" -- /opt/nccl-check/nccl-check --timeout 20
    expect_rc 4     # NCCL loaded from the path the hook chose; then no GPU
    expect_one_error_line '^nccl-check: ERROR .*GPU'
    in_root "$r" -- /opt/nccl-check/nccl-check --timeout 20
    expect_rc 3     # the control: without the hook's variable the loader finds no NCCL
    rm -rf --one-file-system "$r"
}

t_hook_leaves_a_loader_visible_nccl_alone() {
    local r; r=$(fresh_root "$SUITE") || fail "copy"
    install_worker "$r"; rm -f "$r/opt/nccl-check/libnccl.so.2"
    # An NGC-style image: NCCL in the system library directory, in ld.so.cache; a pip NCCL
    # without torch must not win over it.
    cp "$NCCL_LIB" "$r/usr/lib/x86_64-linux-gnu/libnccl.so.2"
    timeout 60 chroot "$r" /sbin/ldconfig || fail "ldconfig in the root failed"
    mkdir -p "$r$PIP_SITE/nvidia/nccl/lib" && cp "$NCCL_LIB" "$r$PIP_SITE/nvidia/nccl/lib/libnccl.so.2"
    local e=$WORK/environ; new_environ "$e"
    hook "$r" "$e" || fail "hook exited $?"
    grep -q NCCL_CHECK_NCCL_LIB "$e" && fail "hook set NCCL_CHECK_NCCL_LIB over ld.so.cache: $(grep NCCL "$e")"
    in_root "$r" -- /opt/nccl-check/nccl-check --timeout 20
    expect_rc 4
    # LD_LIBRARY_PATH of the image: same.
    rm -f "$r/usr/lib/x86_64-linux-gnu/libnccl.so.2"; timeout 60 chroot "$r" /sbin/ldconfig
    mkdir -p "$r/opt/nccl/lib" && cp "$NCCL_LIB" "$r/opt/nccl/lib/libnccl.so.2"
    new_environ "$e"; echo 'LD_LIBRARY_PATH="/usr/local/nvidia/lib64:/opt/nccl/lib"' >>"$e"
    hook "$r" "$e" || fail "hook exited $?"
    grep -q NCCL_CHECK_NCCL_LIB "$e" && fail "hook set NCCL_CHECK_NCCL_LIB over LD_LIBRARY_PATH"
    local args; mapfile -t args < <(env_args "$e")
    in_root "$r" "${args[@]}" -- /opt/nccl-check/nccl-check --timeout 20
    expect_rc 4
    # Nothing else: the pip NCCL is the only one, so it is used.
    new_environ "$e"
    hook "$r" "$e" || fail "hook exited $?"
    grep -qx "NCCL_CHECK_NCCL_LIB=$PIP_SITE/nvidia/nccl/lib/libnccl.so.2" "$e" || fail "pip NCCL not chosen"
    rm -rf --one-file-system "$r"
}

t_hook_respects_choices_and_never_fails_the_container() {
    local e=$WORK/environ r=$ROOT
    mkdir -p "$r$PIP_SITE/torch" "$r$PIP_SITE/nvidia/nccl/lib" && cp "$NCCL_LIB" "$r$PIP_SITE/nvidia/nccl/lib/libnccl.so.2"
    new_environ "$e"; echo 'NCCL_CHECK_NCCL_LIB=/image/choice.so' >>"$e"
    hook "$r" "$e" || fail "rc $?"
    [ "$(grep -c NCCL_CHECK_NCCL_LIB "$e")" = 1 ] || fail "the image's choice was overridden"
    new_environ "$e"
    hook "$r" "$e" NCCL_CHECK_NCCL_LIB=/job/choice.so || fail "rc $?"
    grep -q NCCL_CHECK_NCCL_LIB "$e" && fail "the job's own NCCL_CHECK_NCCL_LIB was overridden"
    new_environ "$e"
    timeout 30 env -u ENROOT_ROOTFS ENROOT_ENVIRON="$e" "$HOOK" || fail "unset ENROOT_ROOTFS: rc $?"
    timeout 30 env ENROOT_ROOTFS=/nonexistent ENROOT_ENVIRON="$e" "$HOOK" || fail "missing rootfs: rc $?"
    timeout 30 env ENROOT_ROOTFS="$r" ENROOT_ENVIRON="$WORK/none" "$HOOK" || fail "missing environ: rc $?"
    timeout 30 env -i "$HOOK" || fail "empty environment: rc $?"
    [ "$(cat "$e")" = "$(printf 'PATH=/usr/local/bin:/usr/bin:/bin\nLANG=C.UTF-8')" ] || fail "environ changed: $(cat "$e")"
    rm -rf "${r:?}$PIP_SITE"
}

# --- tests: enroot/environ.d ------------------------------------------------------------------
t_environ_file_is_valid_after_enroot_formatting() {
    local f
    for f in "$REPO"/enroot/environ.d/*.env; do
        envfmt "$f" >"$OUT"
        grep -v '^[A-Za-z_][A-Za-z0-9_]*=' "$OUT" && fail "$f: ill-formed lines survive"
        grep -q '[$][{]' "$OUT" && fail "$f: \${VAR} would take the host's value"
        grep -E '^(PATH|LD_LIBRARY_PATH|NCCL_[A-Z_]*)=' "$OUT" && fail "$f: overrides the image's PATH/LD_LIBRARY_PATH/NCCL settings"
        sed -n 's/^#\(NCCL_CHECK_[A-Z_]*=.*\)/\1/p' "$f" | grep -q . || fail "$f: no commented example"
    done
    true
}

# --- optional older roots -------------------------------------------------------------------
t_extra_roots() {
    local spec name mirror r
    for spec in ${NCCL_CHECK_CONTAINER_EXTRA:-}; do
        name=${spec%%=*} mirror=${spec#*=}
        exec 9>"${CACHE%/}.lock"; timeout 1200 flock 9
        ensure_rootfs "$name" "$mirror" --no-check-gpg || { fail "debootstrap $name failed"; continue; }
        flock -u 9
        r=$(fresh_root "$name") || { fail "copy $name"; continue; }
        install_worker "$r"
        in_root "$r" -- /opt/nccl-check/nccl-check --version
        expect_rc 0
        in_root "$r" -- /opt/nccl-check/nccl-check --nccl-lib /opt/nccl-check/libnccl.so.2 --timeout 20
        # exit 3 when the PyPI libnccl needs a newer glibc than the root has (it needs 2.27).
        [ "$RC" = 4 ] || [ "$RC" = 3 ] || fail "$name: expected exit 4 or 3, got $RC"
        expect_one_error_line '^nccl-check: ERROR '
        echo "    $name (glibc $(chroot "$r" /usr/bin/ldd --version | head -1 | grep -o '[0-9]*\.[0-9]*$')): exit $RC: $(cat "$ERR")"
        rm -rf --one-file-system "$r"
    done
}

run_test "the worker needs at most GLIBC_$GLIBC_FLOOR (objdump -T)" t_glibc_floor
run_test "--help and --version run in $SUITE (glibc $ROOT_GLIBC)" t_help_and_version_in_old_root
run_test "in $SUITE without a GPU the worker ends with one ERROR line: exit 4, or 3 without NCCL" t_no_gpu_is_a_clean_error_in_old_root
run_test "control: the ordinary Debian 12 build needs a newer glibc than $SUITE has" t_host_build_does_not_start_in_old_root
run_test "enroot mounts.d: parses as fstab, enroot-mount options only, worker at $WORKER_DIR" t_fstab_parses_as_enroot_expects
run_test "enroot mounts.d performed into the root: the worker runs from $WORKER_DIR, read-only; nofail" t_fstab_mounted_worker_runs_inside_root
run_test "enroot hook: executable, bash -n and shellcheck clean" t_hook_is_valid_bash_and_executable
run_test "enroot hook: a pip NCCL next to torch becomes NCCL_CHECK_NCCL_LIB and the worker loads it" t_hook_picks_the_pip_nccl_next_to_torch
run_test "enroot hook: NCCL in ld.so.cache or LD_LIBRARY_PATH is left to the loader" t_hook_leaves_a_loader_visible_nccl_alone
run_test "enroot hook: keeps the image's and the job's choice; never fails a container start" t_hook_respects_choices_and_never_fails_the_container
run_test "enroot environ.d: only valid KEY=VALUE lines after enroot's formatting" t_environ_file_is_valid_after_enroot_formatting
[ -n "${NCCL_CHECK_CONTAINER_EXTRA:-}" ] && run_test "extra roots: $NCCL_CHECK_CONTAINER_EXTRA" t_extra_roots

harness_tally container/run.sh
