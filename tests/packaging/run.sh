#!/usr/bin/env bash
# Packaging suite: builds the DEB and RPM with packaging/build.sh, then lives through an admin's
# whole package lifecycle on this Debian 12 machine against the real Slurm test cluster
# (slurm/test-cluster/up.sh --plugstack /etc/slurm/plugstack.conf, i.e. the plugstack a real node
# reads): install with apt, plugin installed disabled, enable it as packaging/README.md says,
# srun --help and srun --nccl-check with the installed worker (no GPU here: ERROR) and with the
# fake worker (PASS), upgrade to a rebuilt revision keeping edited config files, remove (srun
# keeps working), reinstall, purge. Then the RPM's metadata with rpm -qp: files, scripts,
# requires, provides, conflicts, config files, and its payload against the DEB's.
#
# Needs root on Debian 12 (tests/setup-deps.sh; rpm, help2man, dpkg-dev are installed here).
# Leaves the machine as it found it: the package is purged and the cluster torn down on any exit.
# Refuses to run while a nccl-check package is installed (it would remove the admin's package).
# Every wait is bounded with `timeout`. Own cluster dir and ports, so other suites may run at once.
#
# tests/matrix/run.sh also runs it inside the 24.11 (trixie) and 26.05 (sid) root filesystems,
# with that major's packages built on the host beforehand (NCCL_CHECK_PKG_PREBUILT): there the
# DEB lifecycle runs against the root's own Slurm; the build.sh and RPM tests run on the host only.
#
# Usage: bash tests/packaging/run.sh
# Env:   NCCL_CHECK_PKG_BINARIES=default|portable|host (build.sh --binaries for the lifecycle
#        packages; default: default)
#        NCCL_CHECK_PKG_PREBUILT=DIR with DIR/r1/*.deb and DIR/r2/*.deb (revisions 1 and 2) and
#        NCCL_CHECK_PKG_VERSION: use those instead of building (no cargo in a root filesystem).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export NCCL_CHECK_CLUSTER_DIR=${NCCL_CHECK_PKG_CLUSTER_DIR:-/var/tmp/nccl-check-pkg-cluster}
export NCCL_CHECK_CLUSTER_PORT=${NCCL_CHECK_PKG_CLUSTER_PORT:-19817}
CL=$NCCL_CHECK_CLUSTER_DIR
SNIPPET=/etc/slurm/plugstack.conf.d/zz-nccl-check.conf
# The prolog's alert rules, their promtool tests and the Grafana dashboard (docs/admin.md, "Monitoring").
MONITORING=(/usr/share/nccl-check/monitoring/nccl-check.rules.yml /usr/share/nccl-check/monitoring/nccl-check.rules.test.yml
            /usr/share/nccl-check/monitoring/nccl-check.dashboard.json)
CONTROL=/etc/slurm/plugstack.conf.d/zz-nccl-check-pkgtest-control.conf
# PASSED FAILED STARTED, fail, harness_run, harness_tally:
# shellcheck disable=SC1091  # followed with shellcheck -x
. "$REPO/tests/lib/harness.sh"
export DEBIAN_FRONTEND=noninteractive
say() { echo "packaging: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root"; exit 2; }
cd "$REPO" || exit 1

# --- prerequisites ----------------------------------------------------------------------------
PREBUILT=${NCCL_CHECK_PKG_PREBUILT:-}
# Every apt call waits for the dpkg lock (another apt on the machine) instead of failing.
APT=(apt-get -o DPkg::Lock::Timeout=600)
[ -z "$PREBUILT" ] && { timeout 1800 bash tests/setup-deps.sh >&2 || { say "tests/setup-deps.sh failed"; exit 1; }; }
missing=()
[ -z "$PREBUILT" ] && for p in rpm help2man dpkg-dev binutils cpio; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    timeout 900 "${APT[@]}" install -y -q --no-install-recommends "${missing[@]}" >&2 \
        || { timeout 900 "${APT[@]}" update -q >&2 && timeout 900 "${APT[@]}" install -y -q --no-install-recommends "${missing[@]}" >&2; } \
        || { say "apt-get install ${missing[*]} failed"; exit 1; }
fi
installed=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 'nccl-check*' 2>/dev/null | awk '$1 != "un" { print $2 }')
if [ -n "$installed" ]; then
    say "a nccl-check package is installed ($installed); not touching it. Remove it first."
    exit 2
fi
[ -e "$SNIPPET" ] && { say "$SNIPPET exists without the package; not touching it"; exit 2; }

WORK=$(mktemp -d /var/tmp/nccl-check-pkg-test.XXXXXX)
chmod 755 "$WORK"
LOG=$WORK/log
cleanup() {
    bash "$REPO/slurm/test-cluster/down.sh" --purge >/dev/null 2>&1
    rm -f "$CONTROL"
    local p st
    for p in "$PKG" nccl-check-slurm22.99; do
        st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)
        if [ -n "$st" ] && [ "${st:0:2}" != un ]; then
            timeout 900 "${APT[@]}" purge -y -q "$p" >/dev/null 2>&1 || timeout 120 dpkg --purge "$p" >/dev/null 2>&1
        fi
    done
    rm -rf "$WORK"
    true
}
PKG=nccl-check-none
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build: revision 1 and 2 of the same version (the upgrade) ---------------------------------
BINARIES=${NCCL_CHECK_PKG_BINARIES:-default}
if [ -n "$PREBUILT" ]; then
    say "packages from $PREBUILT (built by tests/matrix/run.sh)"
    cp -r "$PREBUILT/r1" "$PREBUILT/r2" "$WORK/" || { say "no $PREBUILT/r1 or r2"; exit 1; }
else
    say "building revision 1 (packaging/build.sh --binaries $BINARIES)"
    if ! timeout 3600 packaging/build.sh --binaries "$BINARIES" --revision 1 --out "$WORK/r1" >"$LOG" 2>&1; then
        tail -30 "$LOG" >&2; say "build.sh failed"; exit 1
    fi
    say "building revision 2"
    if ! timeout 1800 packaging/build.sh --binaries "$BINARIES" --revision 2 --out "$WORK/r2" >"$LOG" 2>&1; then
        tail -30 "$LOG" >&2; say "build.sh --revision 2 failed"; exit 1
    fi
fi
hex=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' /usr/include/slurm/slurm_version.h)
MM=$(printf '%d.%02d' $(( (hex >> 16) & 255 )) $(( (hex >> 8) & 255 )))
NEXT=$(printf '%d.%02d' $(( (hex >> 16) & 255 )) $(( ((hex >> 8) & 255) + 1 )))
PKG=nccl-check-slurm$MM
VERSION=${NCCL_CHECK_PKG_VERSION:-$(cargo pkgid -p spank-plugin | sed 's/.*[#@]//')}
DEB1=$WORK/r1/${PKG}_$VERSION-1_amd64.deb
DEB2=$WORK/r2/${PKG}_$VERSION-2_amd64.deb
RPM1=$WORK/r1/$PKG-$VERSION-1.x86_64.rpm
SO=/usr/lib/x86_64-linux-gnu/slurm-wlm/nccl_check.so
need_files=("$DEB1" "$DEB2")
[ -z "$PREBUILT" ] && need_files+=("$RPM1")
for f in "${need_files[@]}"; do [ -f "$f" ] || { say "build.sh made no $f"; ls -l "$WORK"/r*/ >&2; exit 1; }; done
say "Slurm $(dpkg-query -W -f='${Version}' slurmd 2>/dev/null) on $(. /etc/os-release && echo "$PRETTY_NAME"); package $PKG $VERSION"

# --- helpers (as tests/slurm/run.sh) ------------------------------------------------------------
OUT=$WORK/out ERR=$WORK/err RC=0
run_cmd() { timeout 120 "$@" >"$OUT" 2>"$ERR"; RC=$?; }
expect_rc0() { [ "$RC" = 0 ] || fail "expected rc 0, got $RC; stderr: $(tail -5 "$ERR")"; }
expect_rc_nonzero() { [ "$RC" != 0 ] || fail "expected rc != 0, got 0"; }
expect_err() { grep -qF -- "$1" "$ERR" || fail "stderr lacks '$1'; stderr: $(tail -8 "$ERR")"; }
expect_out() { grep -qF -- "$1" "$OUT" || fail "stdout lacks '$1'; stdout: $(head -5 "$OUT")"; }
# apt-get runs dpkg on a pseudo-terminal: maintainer scripts' stderr arrives on its stdout.
# grep reads the files itself: `cat A B | grep -q` under pipefail fails when grep exits before cat
# has written B (SIGPIPE), which once failed CI although the line was there.
expect_apt_says() { grep -qF -- "$1" "$OUT" "$ERR" || fail "apt output lacks '$1': $(grep nccl-check "$OUT" "$ERR" | head -5)"; }
expect_file() { [ -e "$1" ] || [ -L "$1" ] || fail "missing: $1"; }
expect_no_file() { [ ! -e "$1" ] && [ ! -L "$1" ] || fail "still there: $1"; }
apt_install() { run_cmd "${APT[@]}" install -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"; }
enabled() { grep -Eq "^required[[:space:]]+${SO}[[:space:]]" "$SNIPPET"; }
idle() { timeout 30 bash -c 'until [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge 2 ]; do sleep 0.3; done'; }
# A plain step works and prints nothing about a plugin.
plain_srun_works() {
    idle || true
    run_cmd srun -N2 hostname
    expect_rc0 || return 1
    [ "$(grep -c . "$OUT")" = 2 ] || fail "expected 2 hostname lines: $(cat "$OUT")"
    ! grep -q 'error' "$ERR" || fail "srun printed errors: $(head -5 "$ERR")"
}

run_test() { harness_run "$@"; }

t_build_refuses_a_slurm_version_the_headers_do_not_have() {
    run_cmd "$REPO/packaging/build.sh" --slurm-version 99.01 --out "$WORK/refused"
    expect_rc_nonzero
    expect_err "--slurm-version 99.01, but /usr/include/slurm/slurm_version.h is Slurm $MM."
    [ -z "$(ls -A "$WORK/refused" 2>/dev/null)" ] || fail "it built something: $(ls "$WORK/refused")"
}

t_portable_rpm_needs_glibc_2_17_and_its_plugin_works() {
    # EL8 has glibc 2.28: the RPM must not require more. cargo-zigbuild builds all three binaries.
    if ! timeout 3600 "$REPO/packaging/build.sh" --binaries portable --only rpm --out "$WORK/portable" >"$LOG" 2>&1; then
        fail "build.sh --binaries portable failed: $(tail -5 "$LOG")"; return 1
    fi
    local rpm=$WORK/portable/$PKG-$VERSION-1.x86_64.rpm newest
    newest=$(rpm -qpR "$rpm" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
    [ -n "$newest" ] || { fail "no GLIBC requirement found"; return 1; }
    [ "$(printf '%s\n2.17\n' "$newest" | sort -V | tail -1)" = 2.17 ] || fail "the portable RPM requires GLIBC_$newest"
    # Its plugin, loaded by the real cluster: pass and fail paths with the fake worker.
    local d=$WORK/portable/x
    mkdir -p "$d" && (cd "$d" && rpm2cpio "$rpm" | cpio -idm --quiet) || { fail "rpm2cpio failed"; return 1; }
    [ -n "${SLURM_CONF:-}" ] && [ -f "$CL/run/slurmctld.pid" ] || { fail "no cluster"; return 1; }
    install -m 0755 "$d/usr/lib64/slurm/nccl_check.so" "$CL/lib/nccl_check_portable.so"
    echo "required $CL/lib/nccl_check_portable.so worker=$CL/lib/nccl-check-fake timeout=20" > "$CONTROL"
    idle || true
    run_cmd srun -N2 --nccl-check hostname
    expect_rc0
    expect_err "nccl-check: PASS (quick, 2 ranks)"
    NCCL_CHECK_FAKE=fail run_cmd srun -N2 -w n1,n2 --nccl-check hostname
    expect_rc_nonzero
    expect_err "nccl-check: FAIL on n1 (rank 0 of 2)"
    rm -f "$CONTROL"
}

# --- DEB metadata -------------------------------------------------------------------------------
t_deb_names_and_pins_the_slurm_major() {
    local f; f=$(dpkg-deb -f "$DEB1" Package Version Depends Provides Conflicts Replaces)
    grep -qx "Package: $PKG" <<<"$f" || fail "Package: $(grep Package <<<"$f")"
    grep -qx "Version: $VERSION-1" <<<"$f" || fail "Version: $(grep Version <<<"$f")"
    grep -qF "slurm-wlm-basic-plugins (>= $MM~), slurm-wlm-basic-plugins (<< $NEXT~)" <<<"$f" \
        || fail "Depends lacks the Slurm $MM range: $(grep Depends <<<"$f")"
    grep -q '^Depends: .*libc6 (>= ' <<<"$f" || fail "Depends lacks libc6 (dpkg-shlibdeps)"
    for k in Provides Conflicts Replaces; do
        grep -qx "$k: nccl-check" <<<"$f" || fail "$k is not 'nccl-check': $(grep "^$k" <<<"$f")"
    done
    [ "$(dpkg-deb -f "$DEB2" Version)" = "$VERSION-2" ] || fail "revision 2 has version $(dpkg-deb -f "$DEB2" Version)"
}

t_deb_conffiles_and_files() {
    local conff files
    conff=$(dpkg-deb --ctrl-tarfile "$DEB1" | tar -xO ./conffiles)
    for c in /etc/nccl-check/nccl-check.toml /etc/nccl-check/prolog.toml "$SNIPPET"; do
        grep -qx "$c" <<<"$conff" || fail "not a conffile: $c"
    done
    files=$(dpkg-deb -c "$DEB1" | awk '{ print $6 }' | sed 's#^\.##')
    for p in "$SO" /usr/libexec/nccl-check/nccl-check /usr/bin/nccl-check /usr/sbin/nccl-check-prolog \
             /usr/sbin/nccl-check-recheck /usr/share/man/man1/nccl-check.1.gz /usr/share/man/man8/nccl-check-prolog.8.gz \
             /usr/sbin/nccl-check-plugstack /usr/share/man/man8/nccl-check-plugstack.8.gz \
             "/usr/share/doc/$PKG/README.md" "/usr/share/doc/$PKG/copyright" \
             /usr/share/nccl-check/enroot/mounts.d/90-nccl-check.fstab \
             /usr/share/nccl-check/enroot/hooks.d/90-nccl-check.sh \
             /usr/share/nccl-check/enroot/environ.d/90-nccl-check.env \
             "${MONITORING[@]}"; do
        grep -qx "$p" <<<"$files" || fail "not in the .deb: $p"
    done
}

# --- install, enable, use -----------------------------------------------------------------------
t_apt_installs_the_deb_with_the_plugin_disabled() {
    apt_install "$DEB1"
    expect_rc0 || return 1
    expect_out "The SPANK plugin is disabled until you uncomment"
    # postinst ran nccl-check-prolog --check-config on the shipped prolog.toml: valid, and here
    # (no slurm.conf yet: the test cluster comes up later) NOT READY for that alone, said so.
    ! grep -q '^nccl-check:   INVALID' "$OUT" "$ERR" || fail "postinst found the shipped config invalid: $(cat "$ERR")"
    grep -q "^nccl-check:   NOT READY Slurm's configuration could not be read" "$OUT" "$ERR" \
        || fail "postinst did not say that Slurm's configuration could not be read: $(cat "$OUT" "$ERR")"
    dpkg-query -W -f='${Status} ${Version}\n' "$PKG" | grep -qx "install ok installed $VERSION-1" \
        || fail "dpkg says: $(dpkg-query -W -f='${Status} ${Version}' "$PKG")"
    for p in "$SO" /usr/libexec/nccl-check/nccl-check /usr/sbin/nccl-check-prolog /etc/nccl-check/nccl-check.toml \
             /etc/nccl-check/prolog.toml "$SNIPPET" /var/lib/nccl-check; do expect_file "$p"; done
    [ "$(readlink -f /usr/bin/nccl-check)" = /usr/libexec/nccl-check/nccl-check ] || fail "/usr/bin/nccl-check is not the libexec worker"
    # The monitoring files as installed: docs/admin.md's promtool command works on them where
    # promtool is (the host; the Debian roots have none).
    for p in "${MONITORING[@]}"; do expect_file "$p"; done
    if command -v promtool >/dev/null; then
        (cd /usr/share/nccl-check/monitoring && promtool test rules nccl-check.rules.test.yml) >"$LOG" 2>&1 \
            || fail "promtool test rules on the installed files: $(tail -5 "$LOG")"
    fi
    grep -Eq "^#required[[:space:]]+$SO worker=/usr/libexec/nccl-check/nccl-check " "$SNIPPET" \
        || fail "no disabled plugin line for $SO in $SNIPPET: $(grep -v '^# ' "$SNIPPET")"
    ! enabled || fail "the plugin line is enabled right after install"
    run_cmd /usr/bin/nccl-check --version; expect_rc0; expect_out "nccl-check $VERSION"
    run_cmd /usr/sbin/nccl-check-prolog --help; expect_rc0; expect_out "nccl-check-prolog"
    run_cmd man -w nccl-check nccl-check-prolog; expect_rc0
    # The shipped README names this package (finding 5: it named only the 22.05 one).
    grep -q "^> This is \*\*$PKG\*\*, built for Slurm $MM" "/usr/share/doc/$PKG/README.md" || fail "the shipped README does not name $PKG"
    grep -q "^    apt-get remove $PKG " "/usr/share/doc/$PKG/README.md" || fail "the shipped README's commands do not name $PKG"
    grep -qF "| docs | \`/usr/share/doc/$PKG/\`" "/usr/share/doc/$PKG/README.md" || fail "the shipped README's docs row does not name $PKG"
    grep -qF "named after it: **\`$PKG\`**" "/usr/share/doc/$PKG/README.md" || fail "the shipped README's first line does not name $PKG"
    grep -q "^    # Debian, Slurm $MM " "/usr/share/doc/$PKG/README.md" || fail "the shipped README's install comment does not name Slurm $MM"
    # Every file the installed binaries cite is installed (finding 9: --explain-thresholds and
    # --explain-plan cited shared/notes/... and bench-core/benchmarks/results/...).
    local cited f n=0
    cited=$( { /usr/bin/nccl-check --explain-plan --nodes 64 --gpus-per-node 8
               /usr/bin/nccl-check --explain-thresholds --gpu-model "NVIDIA H200" --gpus 4
               /usr/sbin/nccl-check-prolog --help; } 2>&1 | grep -oE '/usr/share/[A-Za-z0-9_./*-]*[A-Za-z0-9_*-]' | sort -u)
    for f in $cited; do
        n=$((n + 1))
        # shellcheck disable=SC2086  # a cited glob (/usr/share/doc/nccl-check-slurm*/prolog.md)
        compgen -G "$f" >/dev/null || fail "cited but not installed: $f"
    done
    [ "$n" -ge 3 ] || fail "expected the plan's and the rules' cited results and the prolog's docs, found: $cited"
    # The README's validation step on the shipped config: valid, every key at its default.
    # Exit 2 here only for the missing slurm.conf (issue 46: ready was said without one).
    run_cmd /usr/sbin/nccl-check-prolog --check-config; expect_out 'budget_seconds = 30    # default'
    [ "$RC" = 2 ] || fail "--check-config without any Slurm configuration: exit $RC, not 2"
    expect_out "NOT READY Slurm's configuration could not be read"
    [ "$(grep -c '^NOT READY' "$OUT")" = 1 ] || fail "more than the missing slurm.conf is NOT READY: $(grep '^NOT READY' "$OUT")"
    # The shipped (commented-out) plugin line's arguments pass the plugin's own parser.
    run_cmd /usr/sbin/nccl-check-plugstack --check "$SNIPPET"; expect_rc0
    expect_out "commented out; its arguments are valid"
    run_cmd man -w nccl-check-plugstack; expect_rc0
}

# Regression: a typo on the plugin line showed only when a user ran --nccl-check. The
# installed nccl-check-plugstack finds it where Slurm reads it (slurm.conf's PlugStackConfig, its
# include), with file and line, and nccl-check-prolog --check-config runs the same check.
t_plugstack_check_names_a_typo_on_the_installed_line() {
    enabled || { fail "the plugin line is not enabled (the test before enables it)"; return 1; }
    run_cmd /usr/sbin/nccl-check-plugstack --check
    expect_rc0
    expect_out "# plugstack: /etc/slurm/plugstack.conf (PlugStackConfig at $SLURM_CONF:"
    expect_out "worker=/usr/libexec/nccl-check/nccl-check timeout=120"
    local n; n=$(grep -n "^required $SO " "$SNIPPET" | cut -d: -f1)
    sed -i "s|^required $SO \(.*\)timeout=120|required $SO \1timout=120|" "$SNIPPET"
    run_cmd /usr/sbin/nccl-check-plugstack --check
    [ "$RC" = 2 ] || fail "a typo gave exit $RC, not 2"
    expect_out "INVALID $SNIPPET:$n: unknown argument 'timout' (did you mean 'timeout'?)"
    run_cmd /usr/sbin/nccl-check-prolog --check-config
    [ "$RC" = 2 ] || fail "--check-config gave exit $RC with a typo on the plugin line"
    expect_out "NOT READY plugin line: $SNIPPET:$n: unknown argument 'timout'"
    sed -i "s|^required $SO \(.*\)timout=120|required $SO \1timeout=120|" "$SNIPPET"
    run_cmd /usr/sbin/nccl-check-plugstack --check
    expect_rc0
}

t_cluster_reads_the_installed_plugstack() {
    # As a site would: the packaged plugstack, and slurm.conf Prolog= naming the packaged prolog.
    # TEST FIXTURE: the installed prolog's fault pass reads an empty tree, not this CI host's own
    # kernel log (whatever crashed on the host must not change a packaging result).
    mkdir -p "$CL/no-faults"
    printf '# TEST FIXTURE (tests/packaging/run.sh)\nfault_root = "%s"\n' "$CL/no-faults" >> /etc/nccl-check/prolog.toml
    if ! timeout 180 bash "$REPO/slurm/test-cluster/up.sh" --nodes 2 --plugstack /etc/slurm/plugstack.conf \
            --prolog /usr/sbin/nccl-check-prolog --conf PrologEpilogTimeout=120 >"$LOG" 2>&1; then
        tail -20 "$LOG" >&2
        fail "cluster did not come up (logs in $CL/log)"
        return 1
    fi
    export SLURM_CONF=$CL/slurm.conf
    grep -qx 'PlugStackConfig=/etc/slurm/plugstack.conf' "$SLURM_CONF" || fail "cluster does not read /etc/slurm/plugstack.conf"
    install -m 0755 "$REPO/tests/fake-worker/nccl-check-fake" "$CL/lib/nccl-check-fake"
    mkdir -p "$CL/work" && chmod 1777 "$CL/work"
    export NCCL_CHECK_FAKE_MARKER=$CL/work/fake.log
    install -m 0666 /dev/null "$NCCL_CHECK_FAKE_MARKER"
    cd "$CL/work" || return 1
    plain_srun_works
    run_cmd srun --help
    ! grep -q -- '--nccl-check' "$OUT" || fail "srun --help shows --nccl-check while the plugin is disabled"
}

t_enabling_as_the_readme_says_adds_the_option() {
    local help
    # packaging/README.md, "Enable the plugin": exactly this line.
    sed -i "s|^#required $SO|required $SO|" "$SNIPPET"
    enabled || { fail "the README's sed did not enable $SNIPPET"; return 1; }
    for cmd in srun sbatch salloc; do
        # Captured first: `cmd --help | grep -q` under pipefail fails when grep exits early and
        # cmd dies of SIGPIPE (seen with 24.11's longer sbatch --help).
        help=$(timeout 20 "$cmd" --help 2>&1)
        grep -q -- '--nccl-check=mode' <<<"$help" || fail "$cmd --help lacks --nccl-check"
    done
    plain_srun_works
}

t_real_worker_reports_error_without_gpu() {
    idle || true
    local before; before=$(wc -l < "$(ls -1 "$CL"/log/slurmd-n1.log)")
    run_cmd runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun -N2 -w n1,n2 --nccl-check hostname
    expect_rc_nonzero
    expect_err "nccl-check: ERROR on n1 (rank 0 of 2)"
    expect_err "nccl-check: ERROR on n2 (rank 1 of 2)"
    grep -Eq 'NCCL library not found|no usable GPU|no GPU' "$ERR" || fail "no missing-NCCL/GPU reason: $(grep nccl-check "$ERR" | head -2)"
    ! grep -q '^vm$' "$OUT" || fail "the tasks ran although the check failed"
    # The slurmstepd of this step loaded the plugin from the plugstack line naming the installed path.
    local ln; ln=$(grep -n "^required $SO " "$SNIPPET" | cut -d: -f1)
    tail -n +"$before" "$CL/log/slurmd-n1.log" | grep "spank: $SNIPPET:$ln: Loaded plugin nccl_check.so" >/dev/null \
        || fail "slurmd-n1.log lacks 'spank: $SNIPPET:$ln: Loaded plugin nccl_check.so'"
    [ ! -e "$CL/lib/nccl_check.so" ] || fail "a plugin copy exists in the cluster dir"
}

t_fake_worker_passes_through_the_installed_plugin() {
    idle || true
    sed -i -E "s#^(required $SO .*)worker=[^[:space:]]+#\1worker=$CL/lib/nccl-check-fake#" "$SNIPPET"
    grep -q "worker=$CL/lib/nccl-check-fake" "$SNIPPET" || { fail "could not set worker="; return 1; }
    local before; before=$(grep -c '^rank=' "$NCCL_CHECK_FAKE_MARKER")
    run_cmd srun -N2 --nccl-check hostname
    expect_rc0
    expect_err "nccl-check: PASS (quick, 2 ranks)"
    [ "$(grep -c '^rank=' "$NCCL_CHECK_FAKE_MARKER")" = $((before + 2)) ] || fail "expected 2 worker runs"
}

t_prolog_gate_runs_the_installed_worker() {
    # gpus = "all": check every GPU even without gres/gpu (here: none, so the worker says ERROR).
    # Appended, as configuration management does (the shipped file ends with no [table]).
    echo 'gpus = "all"' >> /etc/nccl-check/prolog.toml
    # The documented metrics_file in the real prometheus-node-exporter package's
    # directory (Debian: /var/lib/prometheus is prometheus:prometheus, node-exporter/ root's)
    # was refused, and every job then ran unchecked.
    # Where the exporter is not installed (the debootstrapped roots of 24.11 and 26.05): its
    # package's layout made here, as its postinst makes it (the host's is the real package's).
    if [ ! -e /var/lib/prometheus ] && ! dpkg-query -W prometheus-node-exporter >/dev/null 2>&1; then
        id prometheus >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /var/lib/prometheus prometheus \
            || { fail "cannot add the prometheus user"; return 1; }
        install -d -o prometheus -g prometheus -m 0755 /var/lib/prometheus
        install -d -o root -g root -m 0755 /var/lib/prometheus/node-exporter
    fi
    [ "$(stat -c %U /var/lib/prometheus 2>&1)" = prometheus ] && [ "$(stat -c %U /var/lib/prometheus/node-exporter 2>&1)" = root ] \
        || { fail "prometheus-node-exporter is not installed as the package does it (tests/setup-deps.sh): $(stat -c '%U:%G %a %n' /var/lib/prometheus /var/lib/prometheus/node-exporter 2>&1)"; return 1; }
    echo 'metrics_file = "/var/lib/prometheus/node-exporter/nccl_check.prom"' >> /etc/nccl-check/prolog.toml
    rm -f /var/lib/prometheus/node-exporter/nccl_check*.prom
    run_cmd /usr/sbin/nccl-check-prolog --check-config; expect_rc0; expect_out 'gpus = "all"    # /etc/nccl-check/prolog.toml:'
    rm -rf /var/lib/nccl-check/runs
    plain_srun_works
    local r; for r in /var/lib/nccl-check/runs/job-*/report.json; do [ -f "$r" ] && break; done
    [ -f "$r" ] || { fail "the prolog wrote no /var/lib/nccl-check/runs/job-*/report.json"; return 1; }
    grep -q '"verdict": *"ERROR"' "$r" || fail "report is not ERROR: $(head -c 300 "$r")"
    grep -q '"state": "error"' /var/lib/nccl-check/gate.json || fail "gate.json: $(cat /var/lib/nccl-check/gate.json)"
    grep -q '"metrics_error"' /var/lib/nccl-check/gate.json && fail "the documented metrics_file was refused: $(cat /var/lib/nccl-check/gate.json)"
    grep -qx 'nccl_check_gate_state{state="error"} 1' /var/lib/prometheus/node-exporter/nccl_check.prom \
        || fail "no metrics in the package's textfile directory: $(ls -l /var/lib/prometheus/node-exporter/ 2>&1)"
    expect_file /var/lib/prometheus/node-exporter/nccl_check-faults.prom
    [ -z "$(sinfo -h -N -t drain,drained,draining -o %N)" ] || fail "an ERROR drained a node: $(sinfo -N -o '%N %T %E')"
}

# The issue's item 7: the shipped HealthCheckProgram wrapper. A FAIL drains n1; once the GPUs
# pass again, slurmd's health check (every 5 s here) runs /usr/sbin/nccl-check-recheck, which
# resumes nccl-check's own drain (auto_resume): no hand-written script.
t_recheck_wrapper_as_health_check_resumes_our_drain() {
    expect_file /usr/sbin/nccl-check-recheck
    local fx=$CL/lib/prolog-fake saved=$WORK/prolog.toml.saved conf_saved=$WORK/slurm.conf.saved
    mkdir -p "$fx"
    install -m 0755 "$REPO/tests/prolog/fake-worker" "$fx/fake-worker"
    cp -r "$REPO/tests/prolog/data" "$fx/data"
    # TEST FIXTURE: slurmd gives its health check no SLURM_CONF, and this cluster's slurm.conf is
    # not where a node's is (/etc/slurm): scontrol through a wrapper that names it.
    printf '#!/bin/sh\nexec env SLURM_CONF=%s /usr/bin/scontrol "$@"\n' "$SLURM_CONF" > "$fx/scontrol"
    chmod 0755 "$fx/scontrol"
    # squeue is taken from scontrol's directory (whose GPUs are whose, for gpus = "all").
    printf '#!/bin/sh\nexec env SLURM_CONF=%s /usr/bin/squeue "$@"\n' "$SLURM_CONF" > "$fx/squeue"
    chmod 0755 "$fx/squeue"
    cp /etc/nccl-check/prolog.toml "$saved"
    cp "$SLURM_CONF" "$conf_saved"
    printf '# TEST FIXTURE\nworker = "%s"\nscontrol = "%s"\nauto_resume = true\nenv = { NCCL_CHECK_FAKE = "fail", NCCL_CHECK_FAKE_MARKER = "%s" }\n' \
        "$fx/fake-worker" "$fx/scontrol" "$fx/marker" >> /etc/nccl-check/prolog.toml
    idle || true
    run_cmd srun -N1 -w n1 hostname
    expect_rc_nonzero
    local reason; reason=$(sinfo -h -R -n n1 -o '%E')
    [[ "$reason" == nccl-check:* ]] || { fail "n1 not drained by the FAIL: '$reason'"; cp "$saved" /etc/nccl-check/prolog.toml; return 1; }
    sed -i 's/NCCL_CHECK_FAKE = "fail"/NCCL_CHECK_FAKE = "pass"/' /etc/nccl-check/prolog.toml
    printf 'HealthCheckProgram=/usr/sbin/nccl-check-recheck\nHealthCheckInterval=5\nHealthCheckNodeState=ANY\n' >> "$SLURM_CONF"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure failed"
    timeout 60 bash -c 'while [ -n "$(sinfo -h -R -n n1 -o %E)" ]; do sleep 1; done' \
        || fail "the health check did not resume n1 within 60 s: $(sinfo -R -n n1); gate.json: $(cat /var/lib/nccl-check/gate.json 2>&1 | head -5)"
    grep -q 'recheck' "$fx/marker" 2>/dev/null || grep -q '^node=' "$fx/marker" 2>/dev/null || fail "the wrapper never ran the worker"
    cp "$conf_saved" "$SLURM_CONF"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure failed"
    cp "$saved" /etc/nccl-check/prolog.toml
    plain_srun_works
}

# --- upgrade ------------------------------------------------------------------------------------
t_upgrade_keeps_edited_config_files() {
    echo "# site edit: kept on upgrade" >> /etc/nccl-check/nccl-check.toml
    local snip_before; snip_before=$(md5sum < "$SNIPPET")
    apt_install "$DEB2"
    expect_rc0 || return 1
    dpkg-query -W -f='${Status} ${Version}\n' "$PKG" | grep -qx "install ok installed $VERSION-2" \
        || fail "after upgrade dpkg says: $(dpkg-query -W -f='${Status} ${Version}' "$PKG")"
    grep -q '^# site edit: kept on upgrade$' /etc/nccl-check/nccl-check.toml || fail "nccl-check.toml edit lost"
    grep -qx 'gpus = "all"' /etc/nccl-check/prolog.toml || fail "prolog.toml edit (gpus = \"all\") lost"
    [ "$(md5sum < "$SNIPPET")" = "$snip_before" ] || fail "$SNIPPET changed by the upgrade"
    ! grep -q 'commented out' "$OUT" || fail "the upgrade disabled the plugin: $(grep 'commented out' "$OUT")"
    local leftovers; leftovers=$(find /etc/nccl-check /etc/slurm -name '*.dpkg-*')
    [ -z "$leftovers" ] || fail "dpkg left: $leftovers"
    idle || true
    run_cmd srun -N2 --nccl-check hostname
    expect_rc0
    expect_err "nccl-check: PASS (quick, 2 ranks)"
}

# --- remove, reinstall, purge -------------------------------------------------------------------
t_remove_disables_the_plugin_and_srun_keeps_working() {
    # slurm.conf still says Prolog=/usr/sbin/nccl-check-prolog: removing the prolog now would
    # make slurmd drain the node at its next job, so the package refuses (and never edits it).
    run_cmd "${APT[@]}" remove -y -q "$PKG"
    expect_rc_nonzero
    expect_apt_says "nccl-check: REFUSED: Slurm still runs nccl-check:"
    expect_apt_says "$SLURM_CONF:"
    expect_apt_says "scontrol show config: Prolog=/usr/sbin/nccl-check-prolog"
    dpkg-query -W -f='${db:Status-Abbrev}\n' "$PKG" | grep -q '^ii' || fail "not installed after the refusal: $(dpkg-query -W -f='${db:Status-Abbrev}' "$PKG")"
    expect_file /usr/sbin/nccl-check-prolog
    enabled || fail "the refused removal disabled the plugin"
    plain_srun_works
    [ -z "$(sinfo -h -N -t drain,drained,draining -o %N)" ] || fail "a node drained: $(sinfo -N -o '%N %T %E')"
    # ... and the admin does what it says (README, "Remove").
    sed -i -E '/^(Prolog|PrologFlags|PrologEpilogTimeout)=/d' "$SLURM_CONF"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure failed"
    run_cmd apt-get remove -y -q "$PKG"
    expect_rc0 || return 1
    expect_out "nccl-check: commented out the plugin line in $SNIPPET"
    dpkg-query -W -f='${db:Status-Abbrev}\n' "$PKG" | grep -q '^rc' || fail "not in state rc: $(dpkg-query -W -f='${db:Status-Abbrev}' "$PKG")"
    for p in "$SO" /usr/libexec/nccl-check/nccl-check /usr/bin/nccl-check /usr/sbin/nccl-check-prolog; do expect_no_file "$p"; done
    # dpkg -r keeps conffiles (and the site's edits); purge removes them.
    grep -q '^# site edit: kept on upgrade$' /etc/nccl-check/nccl-check.toml || fail "remove lost the edited nccl-check.toml"
    ! enabled || fail "the plugin line is still active after removal"
    grep -q "^#required $SO worker=$CL/lib/nccl-check-fake " "$SNIPPET" || fail "the admin's line was not kept (commented): $(tail -1 "$SNIPPET")"
    plain_srun_works
    run_cmd srun --help
    ! grep -q -- '--nccl-check' "$OUT" || fail "srun --help still shows --nccl-check"
    # Control: the same line left active would have broken every srun (why prerm disables it).
    echo "required $SO" > "$CONTROL"
    run_cmd srun -N1 true
    rm -f "$CONTROL"
    expect_rc_nonzero
    expect_err "Failed to load plugin $SO"
}

t_reinstall_after_remove_keeps_it_disabled() {
    apt_install "$DEB2"
    expect_rc0 || return 1
    expect_file "$SO"
    ! enabled || fail "reinstall re-enabled the plugin behind the admin's back"
    expect_out "nccl-check: the SPANK plugin is still disabled (its line is commented out"
    plain_srun_works
}

# The prolog named by an Include'd file or only in a configless node's cache (the issue's
# finding 1: 24.11 prints `Prolog[0] = ...`, which the old prerm's grep missed, and a node
# without a slurm.conf of its own had nothing else to look at): the removal is refused, names the
# file and line, and no node drains.
refused_and_nothing_drained() { # WHERE-LINE...
    expect_rc_nonzero
    expect_apt_says "nccl-check: REFUSED: Slurm still runs nccl-check:"
    local w; for w in "$@"; do expect_apt_says "$w"; done
    dpkg-query -W -f='${db:Status-Abbrev}\n' "$PKG" | grep -q '^ii' || fail "removed anyway: $(dpkg-query -W -f='${db:Status-Abbrev}' "$PKG")"
    expect_file /usr/sbin/nccl-check-prolog
    plain_srun_works
    [ -z "$(sinfo -h -N -t drain,drained,draining -o %N)" ] || fail "a node drained: $(sinfo -N -o '%N %T %E')"
}

# Regression: on a glob layout the refusal said "Remove that Prolog= entry", the site's own
# Prolog=/etc/slurm/prolog.d/*; with only Epilog= left it still spoke of the prolog; it ignored
# HealthCheckProgram=nccl-check-recheck (after removal: status:127 every interval). No job runs
# here: the refusal is the point (the Epilog would run the gate at every job's end).
t_glob_epilog_and_health_check_removal_names_what_reaches_it() {
    local d=$CL/epilog.d saved=$WORK/slurm.conf.glob
    rm -rf "$d"; mkdir -p "$d"
    printf '#!/bin/sh\nexit 0\n' > "$d/10-site"; chmod 0755 "$d/10-site"
    ln -s /usr/sbin/nccl-check-prolog "$d/50-nccl-check"
    cp "$SLURM_CONF" "$saved"
    # The include test's Include (a Prolog= of its own) goes too; $saved brings it back.
    sed -i -E '/^(Prolog|Epilog|HealthCheck[A-Za-z]*)=/d; /^Include /d' "$SLURM_CONF"
    printf 'Epilog=%s/*\nHealthCheckProgram=/usr/sbin/nccl-check-recheck\n' "$d" >> "$SLURM_CONF"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure failed"
    run_cmd "${APT[@]}" remove -y -q "$PKG"
    expect_rc_nonzero
    expect_apt_says "nccl-check: REFUSED: Slurm still runs nccl-check:"
    expect_apt_says "Epilog=$d/* -> through $d/50-nccl-check: remove that file, keep the Epilog= line"
    expect_apt_says "HealthCheckProgram=/usr/sbin/nccl-check-recheck -> remove the HealthCheckProgram= line"
    expect_apt_says "would make slurmd fail every job's epilog and DRAIN this node"
    expect_apt_says "slurmd's health check fails every HealthCheckInterval (status:127)"
    ! grep -q "job's prolog\|Prolog= entry\|Prolog=.*-> remove" "$OUT" "$ERR" || fail "the refusal speaks of a prolog: $(grep nccl-check "$OUT" "$ERR")"
    dpkg-query -W -f='${db:Status-Abbrev}\n' "$PKG" | grep -q '^ii' || fail "removed anyway: $(dpkg-query -W -f='${db:Status-Abbrev}' "$PKG")"
    expect_file "$d/10-site"
    cp "$saved" "$SLURM_CONF"
    rm -rf "$d"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure failed"
    plain_srun_works
}

t_include_remove_is_refused_when_an_included_file_runs_the_prolog() {
    local inc=$CL/gate.conf
    printf '# the site gate\nProlog=/usr/sbin/nccl-check-prolog\nPrologFlags=Alloc\n' > "$inc"
    echo "Include $inc" >> "$SLURM_CONF"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure failed"
    run_cmd "${APT[@]}" remove -y -q "$PKG"
    refused_and_nothing_drained "$inc:2: Prolog=/usr/sbin/nccl-check-prolog" \
        "scontrol show config: Prolog=/usr/sbin/nccl-check-prolog"
}

t_configless_remove_is_refused_from_the_conf_cache_with_or_without_the_controller() {
    # What a configless slurmd (slurmd --conf-server) leaves: no /etc/slurm/slurm.conf and no
    # SLURM_CONF, the controller's files in <SlurmdSpoolDir>/conf-cache, /run/slurm/conf a link
    # to it (Slurm 22.05+). The controller runs the Include of the test above.
    [ ! -e /etc/slurm/slurm.conf ] || { fail "/etc/slurm/slurm.conf exists here; not a configless node"; return 1; }
    [ ! -e /run/slurm/conf ] || { fail "/run/slurm/conf exists on this machine; not touching it"; return 1; }
    local cache=$CL/spool/d/n1/conf-cache
    mkdir -p "$cache" /run/slurm
    cp "$SLURM_CONF" "$CL/gate.conf" "$cache/"
    sed -i "s#^Include .*/gate.conf\$#Include gate.conf#" "$cache/slurm.conf"   # relative to the cache
    ln -s "$cache" /run/slurm/conf
    # scontrol finds the controller through /run/slurm/conf/slurm.conf, as on a configless node.
    run_cmd env -u SLURM_CONF "${APT[@]}" remove -y -q "$PKG"
    refused_and_nothing_drained "/run/slurm/conf/gate.conf:2: Prolog=/usr/sbin/nccl-check-prolog" \
        "scontrol show config: Prolog=/usr/sbin/nccl-check-prolog"
    # The controller does not answer (scontrol has no config source): the cache alone decides.
    run_cmd env SLURM_CONF=/nonexistent/slurm.conf "${APT[@]}" remove -y -q "$PKG"
    refused_and_nothing_drained "/run/slurm/conf/gate.conf:2: Prolog=/usr/sbin/nccl-check-prolog"
    # Undone as the admin would: the controller stops running it; the cache follows.
    rm -f /run/slurm/conf && rmdir /run/slurm 2>/dev/null
    rm -rf "$cache"
    sed -i "\\#^Include $CL/gate.conf\$#d" "$SLURM_CONF"
    rm -f "$CL/gate.conf"
    timeout 30 scontrol reconfigure || fail "scontrol reconfigure failed"
    run_cmd /usr/sbin/nccl-check-prolog --where-configured
    expect_rc0
}

t_purge_removes_everything() {
    run_cmd "${APT[@]}" purge -y -q "$PKG"
    expect_rc0 || return 1
    dpkg-query -W -f='${db:Status-Abbrev}\n' "$PKG" 2>/dev/null | grep -q '^[ri]' && fail "still known to dpkg as installed/config-files"
    for p in /etc/nccl-check "$SNIPPET" /var/lib/nccl-check "$SO" /usr/libexec/nccl-check /usr/share/nccl-check \
             "/usr/share/doc/$PKG"; do expect_no_file "$p"; done
    # Regression: node_exporter kept exporting the removed tool's last state.
    for p in /var/lib/prometheus/node-exporter/nccl_check.prom /var/lib/prometheus/node-exporter/nccl_check-faults.prom; do
        expect_no_file "$p"
    done
    expect_file /var/lib/prometheus/node-exporter   # the exporter's directory stays
    expect_file /etc/slurm/plugstack.conf.d        # Slurm's directory stays
    plain_srun_works
}

t_another_majors_package_replaces_this_one() {
    # The same package renamed as if built for another Slurm major (the dependencies stay
    # satisfiable here): apt must swap them, keep the site's config, and purging the old one
    # must not delete what the new one owns.
    local x=$WORK/other other=nccl-check-slurm22.99
    dpkg-deb -R "$DEB1" "$x" || { fail "dpkg-deb -R failed"; return 1; }
    sed -i "s/^Package: $PKG\$/Package: $other/" "$x/DEBIAN/control"
    mv "$x/usr/share/doc/$PKG" "$x/usr/share/doc/$other"
    sed -i "s#usr/share/doc/$PKG/#usr/share/doc/$other/#" "$x/DEBIAN/md5sums"
    dpkg-deb --root-owner-group -b "$x" "$WORK/other.deb" >/dev/null || { fail "repack failed"; return 1; }
    apt_install "$DEB1"
    expect_rc0 || return 1
    sed -i "s|^#required $SO|required $SO|" "$SNIPPET"
    echo "# site edit: kept across majors" >> /etc/nccl-check/nccl-check.toml
    apt_install "$WORK/other.deb"
    expect_rc0 || return 1
    dpkg-query -W -f='${db:Status-Abbrev}\n' "$PKG" | grep -q '^rc' || fail "$PKG was not removed"
    dpkg-query -W -f='${db:Status-Abbrev}\n' "$other" | grep -q '^ii' || fail "$other is not installed"
    grep -q '^# site edit: kept across majors$' /etc/nccl-check/nccl-check.toml || fail "the edit was lost"
    ! enabled || fail "the plugin line stayed enabled across the swap"
    run_cmd dpkg --purge "$PKG"
    expect_rc0
    for p in /var/lib/nccl-check /etc/nccl-check/nccl-check.toml /etc/nccl-check/prolog.toml "$SNIPPET" "$SO"; do
        expect_file "$p"
    done
    run_cmd "${APT[@]}" purge -y -q "$other"
    expect_rc0
    expect_no_file /etc/nccl-check
    expect_no_file /var/lib/nccl-check
}

# --- RPM ----------------------------------------------------------------------------------------
t_rpm_files_scripts_and_dependencies() {
    run_cmd rpm -qp --qf '%{NAME} %{VERSION} %{RELEASE} %{ARCH}\n' "$RPM1"
    expect_out "$PKG $VERSION 1 x86_64"
    local files; files=$(rpm -qpl "$RPM1" 2>/dev/null)
    for p in /usr/lib64/slurm/nccl_check.so /usr/libexec/nccl-check/nccl-check /usr/bin/nccl-check \
             /usr/sbin/nccl-check-prolog /etc/nccl-check/nccl-check.toml /etc/nccl-check/prolog.toml "$SNIPPET" \
             /usr/share/man/man1/nccl-check.1.gz /usr/share/man/man8/nccl-check-prolog.8.gz \
             /usr/sbin/nccl-check-plugstack /usr/share/man/man8/nccl-check-plugstack.8.gz \
             "/usr/share/doc/$PKG/README.md" /usr/share/nccl-check/enroot/mounts.d/90-nccl-check.fstab /var/lib/nccl-check \
             "${MONITORING[@]}"; do
        grep -qx "$p" <<<"$files" || fail "rpm -qpl lacks $p"
    done
    ! grep -q x86_64-linux-gnu <<<"$files" || fail "Debian paths in the RPM"
    local conf; conf=$(rpm -qpc "$RPM1" 2>/dev/null)
    for c in /etc/nccl-check/nccl-check.toml /etc/nccl-check/prolog.toml "$SNIPPET"; do
        grep -qx "$c" <<<"$conf" || fail "not %config: $c"
    done
    # noreplace: the file flags of the three config files carry RPMFILE_NOREPLACE (1<<4).
    local flags; flags=$(rpm -qp --qf '[%{FILEFLAGS} %{FILENAMES}\n]' "$RPM1" 2>/dev/null | grep ' /etc/.*\.\(toml\|conf\)$')
    local fl fname
    while read -r fl fname; do
        (( (fl & 16) != 0 )) || fail "$fname is %config without noreplace (flags $fl)"
    done <<<"$flags"
    local req; req=$(rpm -qpR "$RPM1" 2>/dev/null)
    grep -qx "slurm >= $MM" <<<"$req" || fail "rpm -qpR lacks 'slurm >= $MM'"
    grep -qx "slurm < $NEXT" <<<"$req" || fail "rpm -qpR lacks 'slurm < $NEXT'"
    grep -q '^libc.so.6' <<<"$req" || fail "rpm -qpR lacks libc (auto requires)"
    local prov; prov=$(rpm -qp --provides "$RPM1" 2>/dev/null)
    grep -qx "nccl-check = $VERSION-1" <<<"$prov" || fail "rpm --provides lacks nccl-check = $VERSION-1"
    ! grep -q 'nccl_check.so' <<<"$prov" || fail "the plugin is provided as a library"
    [ "$(rpm -qp --conflicts "$RPM1" 2>/dev/null)" = nccl-check ] || fail "rpm --conflicts: $(rpm -qp --conflicts "$RPM1" 2>/dev/null)"
    local scripts; scripts=$(rpm -qp --scripts "$RPM1" 2>/dev/null)
    grep -q '^preuninstall scriptlet' <<<"$scripts" || fail "no %preun"
    grep -q 'if \[ "\$1" = 0 \]' <<<"$scripts" || fail "%preun does not test for erase (\$1 = 0)"
    grep -qF '/usr/lib64/slurm/nccl_check\.so' <<<"$scripts" || fail "%preun does not name the RPM plugin path"
    # Issue 46: the same install and remove checks as the DEB.
    grep -q '^postinstall scriptlet' <<<"$scripts" && grep -q 'nccl-check-prolog --check-config' <<<"$scripts" \
        || fail "no %post running --check-config"
    grep -q '^postuninstall scriptlet' <<<"$scripts" && grep -q 'textfiles.purge' <<<"$scripts" \
        || fail "no %postun removing the prolog's textfiles"
}

# The scriptlets run for real: rpm -i/-e into a root (tests/packaging/rpm-root.sh).
t_rpm_scriptlets_check_refuse_and_clean_up_in_a_root() {
    timeout 300 bash "$REPO/tests/packaging/rpm-root.sh" "$RPM1" >"$LOG" 2>&1 || fail "rpm-root.sh: $(cat "$LOG")"
}

t_rpm_preun_disables_the_plugin_line() {
    # Run the real scriptlet against a copy of /etc: only its paths are redirected.
    local sb=$WORK/rpm-sandbox script
    mkdir -p "$sb/etc/slurm/plugstack.conf.d" "$sb/etc/enroot/mounts.d"
    printf 'include %s/etc/slurm/plugstack.conf.d/*.conf\n' "$sb" > "$sb/etc/slurm/plugstack.conf"
    printf '# site\nrequired /usr/lib64/slurm/nccl_check.so worker=/x timeout=9\noptional /usr/lib64/slurm/other.so\n' \
        > "$sb$SNIPPET"
    ln -s /usr/share/nccl-check/enroot/mounts.d/90-nccl-check.fstab "$sb/etc/enroot/mounts.d/90-nccl-check.fstab"
    ln -s /usr/share/other.fstab "$sb/etc/enroot/mounts.d/other.fstab"
    script=$(rpm -qp --qf '%{PREUN}' "$RPM1" 2>/dev/null | sed "s#/etc/#$sb/etc/#g")
    sh -n <<<"$script" || { fail "%preun is not valid sh"; return 1; }
    run_cmd sh -c "$script" sh 1          # upgrade: nothing changes
    expect_rc0
    grep -q '^required /usr/lib64/slurm/nccl_check.so' "$sb$SNIPPET" || fail "upgrade (\$1 = 1) disabled the plugin"
    run_cmd sh -c "$script" sh 0          # erase
    expect_rc0
    grep -q '^#required /usr/lib64/slurm/nccl_check.so worker=/x timeout=9$' "$sb$SNIPPET" || fail "erase did not comment the line: $(cat "$sb$SNIPPET")"
    grep -q '^optional /usr/lib64/slurm/other.so$' "$sb$SNIPPET" || fail "erase touched another plugin's line"
    [ ! -L "$sb/etc/enroot/mounts.d/90-nccl-check.fstab" ] || fail "erase kept the enroot link into the package"
    [ -L "$sb/etc/enroot/mounts.d/other.fstab" ] || fail "erase removed a link that is not ours"
}

t_rpm_payload_matches_the_deb() {
    local d=$WORK/cmp
    mkdir -p "$d/deb" "$d/rpm"
    dpkg-deb -x "$DEB1" "$d/deb"
    (cd "$d/rpm" && rpm2cpio "$RPM1" | cpio -idm --quiet) || { fail "rpm2cpio failed"; return 1; }
    # Same bytes at each distribution's own path; only docs differ (Debian's copyright, changelog).
    cmp -s "$d/deb$SO" "$d/rpm/usr/lib64/slurm/nccl_check.so" || fail "the plugins differ"
    local f
    for f in usr/libexec/nccl-check/nccl-check usr/sbin/nccl-check-prolog usr/sbin/nccl-check-plugstack etc/nccl-check/nccl-check.toml \
             etc/nccl-check/prolog.toml usr/share/man/man1/nccl-check.1.gz; do
        cmp -s "$d/deb/$f" "$d/rpm/$f" || fail "differs between DEB and RPM: $f"
    done
    diff -r "$d/deb/usr/share/nccl-check" "$d/rpm/usr/share/nccl-check" >/dev/null || fail "enroot files differ"
    diff <(sed 's#/usr/lib/x86_64-linux-gnu/slurm-wlm/#/usr/lib64/slurm/#g' "$d/deb$SNIPPET") "$d/rpm$SNIPPET" >/dev/null \
        || fail "the plugstack snippets differ beyond the plugin directory"
}

[ -z "$PREBUILT" ] && run_test "build.sh refuses a --slurm-version the installed headers do not have" t_build_refuses_a_slurm_version_the_headers_do_not_have
run_test "the .deb is named for Slurm $MM and depends on exactly that major" t_deb_names_and_pins_the_slurm_major
run_test "the .deb holds the plugin, worker, prolog, man pages, enroot files, monitoring files and three conffiles" t_deb_conffiles_and_files
run_test "apt installs the .deb; the plugin is installed disabled" t_apt_installs_the_deb_with_the_plugin_disabled
if [ "$TEST_FAILED" = 0 ]; then
    run_test "the test cluster reads /etc/slurm/plugstack.conf; disabled plugin changes nothing" t_cluster_reads_the_installed_plugstack
    run_test "enabling as the README says adds --nccl-check to srun, sbatch, salloc" t_enabling_as_the_readme_says_adds_the_option
    run_test "nccl-check-plugstack --check and --check-config name a typo on the installed plugin line" t_plugstack_check_names_a_typo_on_the_installed_line
    run_test "srun --nccl-check loads the installed plugin; the installed worker reports ERROR (no GPU)" t_real_worker_reports_error_without_gpu
    run_test "srun --nccl-check with the fake worker passes through the installed plugin" t_fake_worker_passes_through_the_installed_plugin
    run_test "slurm.conf Prolog=/usr/sbin/nccl-check-prolog runs the installed worker; ERROR drains nothing" t_prolog_gate_runs_the_installed_worker
    run_test "nccl-check-recheck as HealthCheckProgram resumes nccl-check's own drain once the GPUs pass" t_recheck_wrapper_as_health_check_resumes_our_drain
    run_test "upgrade to revision 2 keeps the edited config files and the enabled plugin" t_upgrade_keeps_edited_config_files
    run_test "remove is refused while Prolog= runs the prolog (no drain); then disables the plugin line; srun keeps working" t_remove_disables_the_plugin_and_srun_keeps_working
    run_test "reinstall after remove keeps the plugin disabled" t_reinstall_after_remove_keeps_it_disabled
    run_test "include: remove is refused while an Include'd file runs the prolog; nothing drains" t_include_remove_is_refused_when_an_included_file_runs_the_prolog
    run_test "glob Epilog= and HealthCheckProgram=: the refusal names the link and the health check, not the site's glob or a prolog" t_glob_epilog_and_health_check_removal_names_what_reaches_it
    run_test "configless: remove is refused from /run/slurm/conf, with and without the controller; nothing drains" t_configless_remove_is_refused_from_the_conf_cache_with_or_without_the_controller
    run_test "purge removes config, state and every file" t_purge_removes_everything
    run_test "another Slurm major's package replaces this one; purging the old keeps the new" t_another_majors_package_replaces_this_one
else
    say "install failed; skipping the cluster tests"
fi
if [ -z "$PREBUILT" ]; then
    run_test "rpm -qp: files, %config(noreplace), scripts, requires, provides, conflicts" t_rpm_files_scripts_and_dependencies
    run_test "the RPM's %preun disables only our plugin line and our enroot links, on erase only" t_rpm_preun_disables_the_plugin_line
    run_test "the RPM installed into a root: %post checks the gate, %preun refuses while Prolog= runs it, %postun removes its textfile and state" t_rpm_scriptlets_check_refuse_and_clean_up_in_a_root
    run_test "the RPM's payload is the DEB's at RHEL paths" t_rpm_payload_matches_the_deb
    run_test "--binaries portable: an RPM for glibc 2.17 whose plugin loads and checks in Slurm" t_portable_rpm_needs_glibc_2_17_and_its_plugin_works
else
    say "RPM and build.sh tests: on the host only (tests/packaging/run.sh without NCCL_CHECK_PKG_PREBUILT)"
fi

if ! harness_tally packaging; then
    for f in "$CL"/log/*.log; do [ -f "$f" ] && { echo "== tail $f"; tail -15 "$f"; }; done >&2
    exit 1
fi
