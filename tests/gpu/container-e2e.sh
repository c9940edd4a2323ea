#!/usr/bin/env bash
# The container path on GPUs: `srun --container-image=IMAGE.sqsh --nccl-check` through real Slurm
# 22.05, real pyxis 0.24.0 and real enroot 4.1.2, the check running inside the image with the
# image's own NCCL (not the host's). One slurmd "node" n1 with both GPUs; jobs run as an
# unprivileged user, as on a site.
#
#   bash tests/gpu/container-e2e.sh [--rehearsal] RELEASE_DIR HOST_LIBNCCL CARRY_DIR [OUTDIR]
#
# RELEASE_DIR: nccl-check and libnccl_check.so (the carry's release/). HOST_LIBNCCL: the host's
# libnccl.so.2 (its version must differ from the image's). CARRY_DIR: what
# tests/gpu/fetch-container-carry.sh made (target/gpu-carry/container: debs, pyxis, enroot, the two
# images). OUTDIR (default /tmp/nccl-check-container-e2e): every srun's output, the worker's
# report and where it ran, summary.txt.
# --rehearsal: no GPU (this CI machine): the same Slurm + pyxis + enroot + image + hooks path, with
# Slurm from the host (tests/setup-deps.sh) and no gres; the worker then ends in its documented
# no-GPU ERROR (exit 4) instead of PASS/FAIL, and each test checks what holds without a GPU. Fixed
# ports: run it under `flock /tmp/nccl-check-slurm.lock`.
#
# GPU access: the GPU machine has no libnvidia-container (enroot's 98-nvidia.sh needs
# nvidia-container-cli), so a test-only mounts.d file, written here from the host's `ldconfig -p`,
# binds the host driver's libcuda.so.1 and libnvidia-ml.so.1 into the container's library folder;
# the device nodes come with enroot's default /dev (10-system.fstab, ENROOT_RESTRICT_DEV unset).
# What a real site uses instead: enroot/README.md.
#
# Root only; every step bounded; all traffic on 127.0.0.1. NVLS/multicast stay off everywhere
# (exported here, so srun's --export=ALL gives them to the job, and in the image's /etc/environment).
set -u
REHEARSAL=0
[ "${1:-}" = --rehearsal ] && { REHEARSAL=1; shift; }
[ $# -ge 3 ] || { sed -n '7,8p' "$0" >&2; exit 2; }
REL=$(readlink -f "$1") HOST_NCCL=$(readlink -f "$2") CARRY=$(readlink -f "$3")
OUTDIR=${4:-/tmp/nccl-check-container-e2e}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CI_USER=${NCCL_CHECK_E2E_USER:-nccle2e}
ENR=/opt/nccl-check-e2e/enroot         # the prefix the carried enroot was installed with
IMAGE_LIBDIR=/usr/lib/x86_64-linux-gnu
say() { echo "container-e2e: $*" >&2; }
die() { say "ERROR: $*"; exit 2; }
# shellcheck disable=SC1091  # PASSED FAILED STARTED fail harness_run harness_tally
. "$REPO/tests/lib/harness.sh"
T0=$SECONDS

[ "$(id -u)" = 0 ] || die "must run as root"
for f in "$REL/nccl-check" "$REL/libnccl_check.so" "$HOST_NCCL" "$CARRY/spank_pyxis.so" "$CARRY/enroot.tar.gz" \
         "$CARRY/image-nccl.sqsh" "$CARRY/image-no-nccl.sqsh" "$CARRY/BUILT_FROM"; do
    [ -f "$f" ] || die "$f missing (tests/gpu/fetch-container-carry.sh builds the carry)"
done
if [ "$REHEARSAL" = 0 ]; then
    [ "$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c ^GPU)" -ge 2 ] || die "needs 2 GPUs (--rehearsal without)"
fi
mkdir -p "$OUTDIR" || die "cannot create $OUTDIR"
# The image's NCCL, as the carry built it ("NCCL v2.27.7-1 ..." -> 2.27.7).
IMAGE_NCCL_VERSION=$(sed -n 's/^NCCL v\([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p' "$CARRY/BUILT_FROM")
[ -n "$IMAGE_NCCL_VERSION" ] || die "no NCCL line in $CARRY/BUILT_FROM"

# --- 1. the host: Slurm + MUNGE, squashfs-tools, jq from the carried .debs (slurm-e2e.sh's way:
# only programs and libraries are copied, never over an existing file; slurmd under its own name).
install_debs() {
    local scratch sub d b
    scratch=$(mktemp -d)
    for d in "$CARRY"/debs/*.deb; do dpkg-deb -x "$d" "$scratch" || return 1; done
    for sub in usr/sbin usr/bin usr/lib/x86_64-linux-gnu sbin bin; do
        [ -d "$scratch/$sub" ] && cp -a --update=none "$scratch/$sub/." "/usr/${sub#usr/}/"
    done
    [ -d "$scratch/lib/x86_64-linux-gnu" ] && cp -a --update=none "$scratch/lib/x86_64-linux-gnu/." /usr/lib/x86_64-linux-gnu/
    for b in slurmd slurmctld slurmstepd; do
        [ -e "/usr/sbin/$b" ] || ln -s "$b-wlm" "/usr/sbin/$b" 2>/dev/null || true
    done
    rm -rf "$scratch"
    ldconfig
}
if [ "$REHEARSAL" = 0 ] || ! command -v slurmd >/dev/null; then
    install_debs || die "unpacking the carried .debs failed"
fi
for t in slurmd slurmctld srun munged unsquashfs dpkg-deb runuser; do
    command -v "$t" >/dev/null || die "$t missing after unpacking $CARRY/debs"
done
id slurm >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin slurm
id munge >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin munge
mkdir -p /etc/munge /var/lib/munge /var/log/munge
[ -s /etc/munge/munge.key ] || /usr/sbin/mungekey -c -k /etc/munge/munge.key
chown munge:munge /etc/munge /etc/munge/munge.key /var/lib/munge /var/log/munge
chmod 0400 /etc/munge/munge.key
getent hosts "$(hostname)" >/dev/null || echo "127.0.0.1 $(hostname)" >>/etc/hosts
# The worker resolves the step's first node by name (enroot binds the host's /etc/hosts in).
[ "$REHEARSAL" = 1 ] || getent hosts n1 >/dev/null || echo "127.0.0.1 n1" >>/etc/hosts
CREATED_USER=
if ! id "$CI_USER" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$CI_USER" && CREATED_USER=1
fi
# enroot puts a user's container in a user namespace. Ubuntu 24.04 may forbid unprivileged ones
# (kernel.apparmor_restrict_unprivileged_userns=1); this test changes no such setting: the jobs
# then run as root (enroot remaps root the same way), and the summary says so.
# NCCL_CHECK_E2E_JOB_USER=root forces that path (to rehearse it).
JOB_USER=${NCCL_CHECK_E2E_JOB_USER:-$CI_USER}
if [ "$JOB_USER" != root ] && ! timeout 10 runuser -u "$CI_USER" -- unshare -U true 2>/dev/null; then
    say "no unprivileged user namespaces here (apparmor_restrict_unprivileged_userns=$(sysctl -n kernel.apparmor_restrict_unprivileged_userns 2>/dev/null || echo ?)): jobs run as root"
    JOB_USER=root
fi

# --- 2. enroot (the carried install under $ENR), its state under the cluster directory.
export NCCL_CHECK_CLUSTER_DIR
NCCL_CHECK_CLUSTER_DIR=$(mktemp -d /var/tmp/nccl-check-cont-e2e.XXXXXX)
CL=$NCCL_CHECK_CLUSTER_DIR SITE=$NCCL_CHECK_CLUSTER_DIR/site
chmod 755 "$CL"
CREATED_ENR=
cleanup() {
    bash "$REPO/slurm/test-cluster/down.sh" >/dev/null 2>&1
    cp "$CL"/log/*.log "$OUTDIR/" 2>/dev/null
    if findmnt -rn -o TARGET | grep -q "^$CL/"; then
        say "mounts left under $CL; not removing it"
    else
        rm -rf --one-file-system "$CL"
    fi
    [ -n "$CREATED_ENR" ] && rm -rf "$ENR"
    [ -n "$CREATED_USER" ] && userdel -r "$CI_USER" 2>/dev/null
    true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[ -e "$ENR" ] && [ ! -f "$ENR/.nccl-check-e2e" ] && die "$ENR exists and is not this test's"
rm -rf "$ENR"
if ! tar -xzf "$CARRY/enroot.tar.gz" -C / || ! touch "$ENR/.nccl-check-e2e"; then
    die "cannot unpack $CARRY/enroot.tar.gz"
fi
CREATED_ENR=1
mkdir -p "$CL/enroot-state/tmp" && chmod 1777 "$CL/enroot-state" "$CL/enroot-state/tmp"
cat >"$ENR/etc/enroot/enroot.conf" <<CONF
ENROOT_RUNTIME_PATH $CL/enroot-state/runtime-\$(id -u)
ENROOT_CONFIG_PATH  $CL/enroot-state/config-\$(id -u)
ENROOT_CACHE_PATH   $CL/enroot-state/cache-\$(id -u)
ENROOT_DATA_PATH    $CL/enroot-state/data-\$(id -u)
ENROOT_TEMP_PATH    $CL/enroot-state/tmp
ENROOT_MAX_PROCESSORS 2
CONF
# No libnvidia-container here: enroot's own 98-nvidia.sh would run for any job whose environment
# has NVIDIA_VISIBLE_DEVICES (the GPU machine's does) and fail on the missing nvidia-container-cli,
# so the container never starts. The test-only driver mount below stands in for it.
rm -f "$ENR/etc/enroot/hooks.d/98-nvidia.sh"
unset NVIDIA_VISIBLE_DEVICES NVIDIA_DRIVER_CAPABILITIES
# The project's enroot files as a site installs them; the fstab's host paths moved under $SITE
# (source = target and every option unchanged), as tests/pyxis/run.sh does.
install -m 0755 "$REPO/enroot/hooks.d/90-nccl-check.sh" "$ENR/etc/enroot/hooks.d/"
install -m 0644 "$REPO/enroot/environ.d/90-nccl-check.env" "$ENR/etc/enroot/environ.d/"
sed -e "s#/usr/libexec/nccl-check#$SITE/libexec/nccl-check#g" -e "s#/etc/nccl-check#$SITE/etc/nccl-check#g" \
    "$REPO/enroot/mounts.d/90-nccl-check.fstab" >"$ENR/etc/enroot/mounts.d/90-nccl-check.fstab"
grep -q "^$SITE/libexec/nccl-check  *$SITE/libexec/nccl-check " "$ENR/etc/enroot/mounts.d/90-nccl-check.fstab" \
    || die "the fstab rewrite missed the worker line"

# The host driver's libraries for the container (test-only stand-in for libnvidia-container,
# whose "compute" and "utility" capabilities mount these): libcuda, NVML, and the PTX JIT
# compiler the driver loads for the check kernels' PTX (without it: CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
# seen on 2x H200); libnvidia-nvvm where the driver ships it.
DRIVER_LIBS=(libcuda.so.1 libnvidia-ml.so.1 libnvidia-ptxjitcompiler.so.1)
ldconfig -p | grep -q 'libnvidia-nvvm.so.4 ' && DRIVER_LIBS+=(libnvidia-nvvm.so.4)
driver_fstab=$ENR/etc/enroot/mounts.d/95-nccl-check-e2e-driver.fstab
: >"$driver_fstab"
if [ "$REHEARSAL" = 1 ]; then
    # No driver here: a stand-in file proves the same mount line reaches the container.
    mkdir -p "$CL/driver" && echo "driver-stand-in-$RANDOM$RANDOM" >"$CL/driver/stand-in.so.1"
    chmod -R go+rX "$CL/driver"
    DRIVER_LIBS=(nccl-check-e2e-stand-in.so.1)
    echo "$CL/driver/stand-in.so.1 $IMAGE_LIBDIR/nccl-check-e2e-stand-in.so.1 none x-create=file,bind,ro,nosuid,nodev,private" >>"$driver_fstab"
else
    for so in "${DRIVER_LIBS[@]}"; do
        # The driver's own copy, not a CUDA forward-compatibility one (.../compat/).
        src=$(ldconfig -p | awk -v n="$so" '$1 == n && /x86-64/ && $NF !~ /\/compat\// { print $NF; exit }')
        [ -n "$src" ] || die "the host has no $so in ldconfig -p"
        echo "$(readlink -f "$src") $IMAGE_LIBDIR/$so none x-create=file,bind,ro,nosuid,nodev,private" >>"$driver_fstab"
    done
fi
cp "$driver_fstab" "$OUTDIR/driver.fstab"

# --- 3. the site: worker (mounted into containers by mounts.d), plugins, plugstack.
mkdir -p "$SITE/libexec/nccl-check" "$SITE/etc/nccl-check" "$SITE/lib" "$SITE/plugstack.conf.d"
install -m 0755 "$REL/nccl-check" "$SITE/libexec/nccl-check/nccl-check"
install -m 0755 "$REPO/tests/pyxis/where-worker" "$SITE/libexec/nccl-check/where-worker"
echo '# test site config' >"$SITE/etc/nccl-check/nccl-check.toml"
install -m 0755 "$CARRY/spank_pyxis.so" "$SITE/lib/spank_pyxis.so"
install -m 0755 "$REL/libnccl_check.so" "$SITE/lib/nccl_check.so"
install -m 0644 "$CARRY/image-nccl.sqsh" "$CL/image-nccl.sqsh"
install -m 0644 "$CARRY/image-no-nccl.sqsh" "$CL/image-no-nccl.sqsh"
chmod -R go+rX "$SITE" "$ENR"
echo "include $SITE/plugstack.conf.d/*.conf" >"$SITE/plugstack.conf"
echo "required $SITE/lib/spank_pyxis.so runtime_path=$CL/pyxis-run" >"$SITE/plugstack.conf.d/pyxis.conf"
plugstack_check() { # extra plugin arguments (allow_sharp=1); read by srun and slurmstepd per step
    echo "required $SITE/lib/nccl_check.so worker=$SITE/libexec/nccl-check/where-worker timeout=60 $*" \
        >"$SITE/plugstack.conf.d/zz-nccl-check.conf"
}
plugstack_check

# The versions: the host's NCCL as the worker reads it (on the host, with HOST_LIBNCCL).
timeout 120 "$REL/nccl-check" --nccl-lib "$HOST_NCCL" --timeout 30 --json "$OUTDIR/host-nccl.json" \
    >"$OUTDIR/host-check.txt" 2>&1
HOST_NCCL_VERSION=$(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$OUTDIR/host-nccl.json" 2>/dev/null | head -1)
[ -n "$HOST_NCCL_VERSION" ] || die "the worker cannot read $HOST_NCCL's version ($(tail -1 "$OUTDIR/host-check.txt"))"
[ "$HOST_NCCL_VERSION" != "$IMAGE_NCCL_VERSION" ] || die "host and image NCCL are both $HOST_NCCL_VERSION: the test could not tell them apart"

# --- 4. the cluster: one node; on GPUs with both GPUs as gres (no device cgroups: Slurm sets
# CUDA_VISIBLE_DEVICES=0,1); cgroup v2 without systemd needs slurm-e2e's cgroup.conf.
SRUN=(srun -N1 -n1 -t 5)
UP_EXTRA=()
if [ "$REHEARSAL" = 0 ]; then
    printf 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\nCgroupAutomount=yes\n' >"$CL/cgroup.conf"
    # The first two GPU device nodes (not always 0 and 1 on a larger host's slice).
    minors=$(find /dev -maxdepth 1 -regex '/dev/nvidia[0-9]+' -printf '%f\n' | sed 's/nvidia//' | sort -n | head -2 | paste -sd,)
    printf 'NodeName=n1 Name=gpu File=/dev/nvidia[%s]\n' "$minors" >"$CL/gres.conf"
    cp "$CL/gres.conf" "$OUTDIR/gres.conf"
    mkdir -p /sys/fs/cgroup/system.slice 2>/dev/null
    export NCCL_CHECK_CLUSTER_NODE_EXTRA="Gres=gpu:2"
    UP_EXTRA=(--conf "GresTypes=gpu")
    SRUN+=(--gres=gpu:2)
fi
export PATH=$ENR/bin:$PATH             # slurmstepd inherits slurmd's PATH; pyxis runs `enroot` from it
bash "$REPO/slurm/test-cluster/down.sh" >/dev/null 2>&1
if ! timeout 120 bash "$REPO/slurm/test-cluster/up.sh" --nodes 1 --plugstack "$SITE/plugstack.conf" \
        --munge-socket "$CL/munge/munge.socket" "${UP_EXTRA[@]}" >"$OUTDIR/up.txt" 2>&1; then
    for f in "$CL"/log/*.log; do echo "== $f"; tail -20 "$f"; done >&2
    die "the cluster did not come up: $(tail -3 "$OUTDIR/up.txt")"
fi
export SLURM_CONF=$CL/slurm.conf
mkdir -p "$CL/work" && chmod 1777 "$CL/work"
cd "$CL/work" || exit 2

# --- helpers ----------------------------------------------------------------------------------
RES=$CL/work/results NAME="" RC=0
# as_user NAME CMD...: CMD as the unprivileged user, bounded; output kept in $OUTDIR/NAME.{out,err}.
as_user() {
    NAME=$1; shift
    rm -rf "$RES" && mkdir -p "$RES" && chmod 0777 "$RES"
    timeout -k 5 240 runuser -u "$JOB_USER" -- env SLURM_CONF="$SLURM_CONF" NCCL_CHECK_TEST_RESULTS="$RES" \
        NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PATH="$PATH" "$@" \
        >"$OUTDIR/$NAME.out" 2>"$OUTDIR/$NAME.err"
    RC=$?
    cp "$RES/where" "$OUTDIR/$NAME.where" 2>/dev/null
    cp "$RES/report.json" "$OUTDIR/$NAME.report.json" 2>/dev/null
    return 0
}
with_image() { echo "--container-image=$CL/$1" "--container-mounts=$RES:$RES"; }
where() { sed -n "s/^$1=//p" "$RES/where" 2>/dev/null; }
report() { jq -r "$1" "$RES/report.json" 2>/dev/null; }
err_has() { grep -qF -- "$1" "$OUTDIR/$NAME.err" || fail "stderr lacks '$1': $(tail -5 "$OUTDIR/$NAME.err")"; }
# The worker ran inside the image (its os-release and marker) with the image's NCCL, not the host's.
ran_in_image() { # marker
    [ -s "$RES/where" ] || { fail "the worker left no record (did it run?): $(tail -5 "$OUTDIR/$NAME.err")"; return; }
    echo "    where: $(tr '\n' ' ' <"$RES/where")"
    [ "$(where os)" = "nccl-check-image-${IMAGE_NCCL_VERSION}-1" ] || [ "$(where os)" = "nccl-check-image-$IMAGE_NCCL_VERSION" ] \
        || fail "the worker ran on '$(where os)', not in the image"
    [ "$(where marker)" = "$1" ] || fail "marker '$(where marker)', expected $1"
}
image_nccl() {
    local lib ver
    lib=$(report '.nccl.library // empty') ver=$(report '.nccl.version // empty')
    echo "    report: nccl.library=$lib nccl.version=$ver (host: $HOST_NCCL_VERSION at $HOST_NCCL)"
    # The soname link or the file it names (libnccl.so.2 -> libnccl.so.2.27.7, as in NGC images);
    # /lib is /usr/lib in a merged-/usr root.
    case "$lib" in
        "$IMAGE_LIBDIR/libnccl.so.2" | "$IMAGE_LIBDIR/libnccl.so.$IMAGE_NCCL_VERSION") ;;
        "${IMAGE_LIBDIR#/usr}/libnccl.so.2" | "${IMAGE_LIBDIR#/usr}/libnccl.so.$IMAGE_NCCL_VERSION") ;;
        *) fail "the worker loaded '$lib', not the image's $IMAGE_LIBDIR/libnccl.so.2" ;;
    esac
    [ "$ver" = "$IMAGE_NCCL_VERSION" ] || fail "NCCL version '$ver', expected the image's $IMAGE_NCCL_VERSION"
}
# GPU: the verdict; rehearsal: the documented no-GPU ERROR (exit 4) in place of any verdict.
verdict_is() { # PASS|FAIL
    if [ "$REHEARSAL" = 1 ]; then
        [ "$(where worker_rc)" = 4 ] || fail "worker exit $(where worker_rc), expected 4 (no GPU)"
        [ "$(report '.reasons[0].code')" = no_gpu ] || fail "reason $(report '.reasons[0].code'), expected no_gpu"
    else
        [ "$(report .verdict)" = "$1" ] || fail "verdict $(report .verdict), expected $1: $(report .summary)"
    fi
}
env_has() { # KEY VALUE: the worker's NCCL environment in its report
    [ "$(report ".nccl_env.$1 // empty")" = "$2" ] || fail "report nccl_env.$1 = '$(report ".nccl_env.$1 // empty")', expected $2"
}
no_drain() {
    local d; d=$(sinfo -h -R -o '%N %E' 2>/dev/null)
    [ -z "$d" ] || fail "nodes drained: $d"
}
run_test() { plugstack_check; harness_run "$@"; }

# --- tests ------------------------------------------------------------------------------------
t_healthy() {
    # shellcheck disable=SC2046  # with_image's two words
    as_user healthy "${SRUN[@]}" $(with_image image-nccl.sqsh) --nccl-check sh -c 'echo task-ran'
    ran_in_image "nccl-$IMAGE_NCCL_VERSION-1"
    image_nccl
    verdict_is PASS
    echo "    verdict: $(report .verdict) $(report .summary)"
    if [ "$REHEARSAL" = 1 ]; then
        [ "$RC" != 0 ] || fail "srun succeeded without a GPU"
        err_has "nccl-check: ERROR on n1 (rank 0 of 1): no usable GPU"
    else
        [ "$RC" = 0 ] || fail "srun exit $RC: $(tail -3 "$OUTDIR/$NAME.err")"
        grep -qx task-ran "$OUTDIR/$NAME.out" || fail "the task did not run after PASS"
        [ "$(report '.gpus | length')" = 2 ] || fail "the report has $(report '.gpus | length') GPUs, expected 2"
    fi
    env_has NCCL_NVLS_ENABLE 0
    no_drain
}

t_p2p_disabled() {
    # shellcheck disable=SC2046
    as_user p2p-off "${SRUN[@]}" --export=ALL,NCCL_P2P_DISABLE=1 $(with_image image-nccl.sqsh) --nccl-check sh -c 'echo task-ran'
    ran_in_image "nccl-$IMAGE_NCCL_VERSION-1"
    image_nccl
    env_has NCCL_P2P_DISABLE 1
    verdict_is FAIL
    [ "$RC" != 0 ] || fail "srun succeeded with P2P off"
    grep -qx task-ran "$OUTDIR/$NAME.out" && fail "the task ran after the check failed"
    if [ "$REHEARSAL" = 0 ]; then
        err_has "FAIL"
        # The links: GPU0 and GPU1 in the summary or a reason's subject/message.
        jq -r '.summary, (.reasons[] | .subject // "", .message // "")' "$RES/report.json" 2>/dev/null \
            | grep -q 'GPU0.*GPU1' || fail "no reason names GPU0..GPU1: $(report '[.reasons[].message]')"
        echo "    reasons: $(report '[.reasons[] | .code + ": " + .message] | join("; ")')"
    fi
}

t_enroot_files() {
    # The worker's folder is mounted read-only at the host's path (mounts.d); the host driver's
    # libraries are the host's files; the hook leaves an NGC-style image's NCCL alone.
    local script
    script="ls $SITE/libexec/nccl-check; touch $SITE/libexec/nccl-check/x 2>/dev/null && echo WRITABLE;"
    for so in "${DRIVER_LIBS[@]}"; do script+=" md5sum $IMAGE_LIBDIR/$so;"; done
    # shellcheck disable=SC2016  # expanded in the container
    script+=' echo "lib=${NCCL_CHECK_NCCL_LIB:-unset} nvls=${NCCL_NVLS_ENABLE:-unset}"'
    # shellcheck disable=SC2046
    as_user enroot-files "${SRUN[@]}" $(with_image image-nccl.sqsh) sh -c "$script"
    [ "$RC" = 0 ] || fail "srun exit $RC: $(tail -3 "$OUTDIR/$NAME.err")"
    sed 's/^/    in the container: /' "$OUTDIR/$NAME.out"
    if ! grep -qx nccl-check "$OUTDIR/$NAME.out" || ! grep -qx where-worker "$OUTDIR/$NAME.out"; then
        fail "the worker's folder is not mounted into the container"
    fi
    grep -q WRITABLE "$OUTDIR/$NAME.out" && fail "the worker's folder is writable in the container"
    local so real want
    for so in "${DRIVER_LIBS[@]}"; do
        real=$(awk -v t="$IMAGE_LIBDIR/$so" '$2 == t { print $1 }' "$driver_fstab")
        want=$(md5sum <"$real" | cut -d' ' -f1)
        grep -q "^$want  $IMAGE_LIBDIR/$so\$" "$OUTDIR/$NAME.out" || fail "$IMAGE_LIBDIR/$so in the container is not the host's $real"
    done
    grep -qx 'lib=unset nvls=0' "$OUTDIR/$NAME.out" || fail "the hook set NCCL_CHECK_NCCL_LIB or NCCL_NVLS_ENABLE is not 0"
    no_drain
}

t_sharp() {
    # Refused before any allocation where the site does not allow SHARP.
    as_user sharp-refused "${SRUN[@]}" --container-image="$CL/image-nccl.sqsh" --nccl-check=sharp true
    [ "$RC" != 0 ] || fail "--nccl-check=sharp ran with allow_sharp=0"
    err_has "is not allowed on this cluster"
    [ -e "$RES/where" ] && fail "the worker ran although sharp is not allowed"
    plugstack_check allow_sharp=1
    # shellcheck disable=SC2046
    as_user sharp "${SRUN[@]}" $(with_image image-nccl.sqsh) --nccl-check=sharp sh -c 'echo task-ran'
    ran_in_image "nccl-$IMAGE_NCCL_VERSION-1"
    grep -q '^args=.*--expect-collnet' "$RES/where" || fail "the worker was not given --expect-collnet: $(where args)"
    env_has NCCL_COLLNET_ENABLE 1
    # No SHARP fabric: CollNet cannot carry the collectives; documented as FAIL transport_fallback.
    verdict_is FAIL
    if [ "$REHEARSAL" = 0 ]; then
        [ "$RC" != 0 ] || fail "srun succeeded although CollNet was not used"
        jq -e '[.reasons[] | select(.code == "transport_fallback" and .subject == "CollNet")] | length > 0' \
            "$RES/report.json" >/dev/null || fail "no transport_fallback reason for CollNet: $(report '[.reasons[].message]')"
        echo "    reasons: $(report '[.reasons[] | .code + ": " + .message] | join("; ")')"
    fi
    no_drain
}

t_no_nccl() {
    # shellcheck disable=SC2046
    as_user no-nccl "${SRUN[@]}" $(with_image image-no-nccl.sqsh) --nccl-check sh -c 'echo task-ran'
    ran_in_image no-nccl
    [ "$(where worker_rc)" = 3 ] || fail "worker exit $(where worker_rc), expected 3 (NCCL not found)"
    [ "$RC" != 0 ] || fail "srun succeeded without NCCL"
    grep -qx task-ran "$OUTDIR/$NAME.out" && fail "the task ran after the ERROR"
    err_has "nccl-check: ERROR on n1"
    # The plugin sees the task moved into a container (pyxis shows it no image path): the image
    # is named as what lacks NCCL, not the host or the admin's nccl_lib=.
    err_has "NCCL library not found in the job's container image (srun --container-image)"
    err_has "the image has no libnccl.so.2 that its loader can load"
    echo "    stderr: $(grep -m3 'nccl-check' "$OUTDIR/$NAME.err" | tr '\n' ' ')"
    no_drain
}

run_test "1. healthy: the check runs in the image with the image's NCCL $IMAGE_NCCL_VERSION (host: $HOST_NCCL_VERSION)" t_healthy
run_test "2. NCCL_P2P_DISABLE=1 in the job's environment: FAIL naming the links" t_p2p_disabled
run_test "3. enroot files: worker mounted read-only, host driver libraries, hook leaves NGC-style NCCL alone" t_enroot_files
run_test "4. --nccl-check=sharp: refused at allow_sharp=0; at allow_sharp=1 the worker gets CollNet on" t_sharp
run_test "5. an image without NCCL: ERROR naming the image, the task never runs" t_no_nccl

{
    echo "date: $(date -u +%FT%TZ)"
    if [ "$REHEARSAL" = 1 ]; then echo "device: none (rehearsal)"; else
        echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | tr '\n' ' ')"
        echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
    fi
    echo "kernel: $(uname -r); os: $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "host NCCL: $HOST_NCCL_VERSION ($HOST_NCCL); image NCCL: $IMAGE_NCCL_VERSION ($IMAGE_LIBDIR/libnccl.so.2)"
    echo "carry: $(head -2 "$CARRY/BUILT_FROM" | tr '\n' ' ')"
    echo "jobs ran as: $JOB_USER; wall: $((SECONDS - T0)) s; $PASSED passed, $FAILED failed"
} >"$OUTDIR/summary.txt"
cat "$OUTDIR/summary.txt"
harness_tally container-e2e
