#!/usr/bin/env bash
# Builds the nccl-check packages for compute and login nodes: one .deb (Debian/Ubuntu) and one
# .rpm (RHEL/Rocky/Alma 9) for the Slurm major.minor whose headers are installed here, into dist/.
# See packaging/README.md (what goes where, install, enable, upgrade, remove).
#
# Usage: packaging/build.sh [--slurm-version auto|MAJOR.MINOR] [--revision N]
#                           [--binaries default|portable|host] [--only deb|rpm] [--out DIR]
#   --slurm-version  auto (default): read SLURM_VERSION_NUMBER from <slurm/slurm_version.h> (the
#                    same file spank-plugin/build.rs compiles into the plugin). A value is only a
#                    guard: the build fails unless the headers say that major.minor.
#   --revision N     package revision (DEB 0.1.0-N, RPM Release N); default 1. Bump it to rebuild
#                    the same version (the packaging suite upgrades 1 -> 2).
#   --binaries       default: the worker built for glibc >= 2.17 by build-portable.sh (pyxis/enroot
#                    bind-mount it into users' older containers), the plugin and prolog as
#                    `cargo build --release` builds them here (the artifacts the Slurm suites test;
#                    they need this machine's glibc: 2.34 on Debian 12, so the RPM suits EL9).
#                    portable: all three for glibc >= 2.17 with cargo-zigbuild (an RPM for EL8 too).
#                    host: all three as built here (fast, no zig; the worker then needs this glibc).
#   --only deb|rpm   build one package only.
#   --out DIR        default dist/ (relative to the repository).
# Env: SLURM_INCLUDE_DIR (another Slurm prefix's include dir), NCCL_CHECK_PACKAGER ("Name <mail>"),
#      NCCL_CHECK_PKG_TARGET_DIR (cargo target dir of the plugin and prolog with --binaries
#      default|host; default target: tests/matrix/run.sh builds other majors' plugins elsewhere so
#      target/release keeps the host's).
#
# Why per Slurm major: slurmd/srun load a SPANK plugin only when its plugin_version has the same
# major.minor as the running Slurm (src/common/plugin.c _verify_syms; notes 1.7), so each package
# says its Slurm major in its name (nccl-check-slurm22.05) and its dependencies
# (slurm-wlm-basic-plugins >= 22.05~, << 22.06~; RPM slurm >= 22.05, slurm < 22.06), and all of
# them provide and conflict with the virtual name `nccl-check`: one is installed at a time.
#
# Tools: cargo, dpkg-deb, dpkg-shlibdeps (dpkg-dev), rpmbuild (Debian package `rpm`), help2man,
# strip/objdump (binutils), cc (gcc), libclang (libclang-dev, for bindgen), and for the default
# and portable workers python3 -m pip (python3-pip). As root on Debian, missing ones are
# installed with apt-get.
# Network: the default --binaries fetches ziglang from PyPI and cargo-zigbuild from crates.io
# (build-portable.sh, once; kept under target/), and a cold cargo build fetches the workspace's
# crates from crates.io. Offline: `--binaries host` with a warm cargo cache (~/.cargo/registry).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
say() { echo "build.sh: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

SLURM_WANT=auto REVISION=1 BINARIES=default ONLY='' OUT=dist
while [ $# -gt 0 ]; do
    case "$1" in
        --slurm-version) SLURM_WANT=${2:?}; shift 2 ;;
        --revision) REVISION=${2:?}; shift 2 ;;
        --binaries) BINARIES=${2:?}; shift 2 ;;
        --only) ONLY=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ "$REVISION" =~ ^[1-9][0-9]*$ ]] || die "--revision must be a positive integer, got '$REVISION'"
case "$BINARIES" in default|portable|host) ;; *) die "--binaries must be default, portable or host, got '$BINARIES'" ;; esac
case "$ONLY" in ''|deb|rpm) ;; *) die "--only must be deb or rpm, got '$ONLY'" ;; esac
want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)

# --- tools ------------------------------------------------------------------------------------
need=(dpkg-deb:dpkg help2man:help2man strip:binutils objdump:binutils nm:binutils)
want deb && need+=(dpkg-shlibdeps:dpkg-dev)
want rpm && need+=(rpmbuild:rpm)
missing=()
for t in "${need[@]}"; do command -v "${t%%:*}" >/dev/null || missing+=("${t#*:}"); done
# What cargo itself does not bring: a linker (cc), libclang for the slurm-spank crate's bindgen,
# and pip for zig (PyPI) where the worker is built for old glibc. A fresh Debian 12 has none.
command -v cc >/dev/null || missing+=(gcc)
compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null || compgen -G '/usr/lib/*/libclang*.so*' >/dev/null \
    || [ -n "${LIBCLANG_PATH:-}" ] || missing+=(libclang-dev)
if [ "$BINARIES" != host ] && ! command -v zig >/dev/null \
    && ! PYTHONPATH=$REPO/target/tools/python python3 -m ziglang version >/dev/null 2>&1 \
    && ! python3 -m pip --version >/dev/null 2>&1; then
    missing+=(python3-pip)
fi
if [ ${#missing[@]} -gt 0 ]; then
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing ${missing[*]} (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        # DPkg::Lock::Timeout: wait for another apt on the machine instead of failing (exit 100).
        timeout 900 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >&2 \
            || { timeout 900 apt-get -o DPkg::Lock::Timeout=600 update -q >&2 \
                 && timeout 900 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >&2; } \
            || die "apt-get install ${missing[*]} failed"
    else
        die "missing tools; install the Debian packages: ${missing[*]}"
    fi
fi

# --- Slurm version: from the headers, as spank-plugin/build.rs reads it -----------------------
header=
for d in ${SLURM_INCLUDE_DIR:+"$SLURM_INCLUDE_DIR"} /usr/include /usr/local/include; do
    [ -f "$d/slurm/slurm_version.h" ] && { header=$d/slurm/slurm_version.h; break; }
done
[ -n "$header" ] || die "slurm/slurm_version.h not found (Debian: apt-get install libslurm-dev; RHEL: slurm-devel; or set SLURM_INCLUDE_DIR)"
hex=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$header")
[[ "$hex" =~ ^0[xX][0-9a-fA-F]+$ ]] || die "$header: no '#define SLURM_VERSION_NUMBER 0x...' line"
num=$((hex))
S_MAJOR=$(( (num >> 16) & 255 )) S_MINOR=$(( (num >> 8) & 255 )) S_MICRO=$(( num & 255 ))
SLURM_MM=$(printf '%d.%02d' "$S_MAJOR" "$S_MINOR")
# The next major.minor, the upper bound of the dependency: Slurm releases are YY.MM with MM 02,
# 05, 11 (older: 08); any later number is correct as a bound, so use minor + 1.
SLURM_NEXT=$(printf '%d.%02d' "$S_MAJOR" $((S_MINOR + 1)))
if [ "$SLURM_WANT" != auto ] && [ "$SLURM_WANT" != "$SLURM_MM" ]; then
    die "--slurm-version $SLURM_WANT, but $header is Slurm $SLURM_MM.$S_MICRO: install that version's headers or set SLURM_INCLUDE_DIR"
fi
# (build.rs searches the same places; the plugin_version check below proves it read the same file)
say "Slurm $SLURM_MM (headers: $header, $S_MAJOR.$S_MINOR.$S_MICRO)"

VERSION=$(cargo pkgid -p spank-plugin | sed 's/.*[#@]//')
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "cannot read the workspace version (cargo pkgid: '$VERSION')"
NAME=nccl-check-slurm$SLURM_MM
say "package $NAME $VERSION-$REVISION"

# --- build ------------------------------------------------------------------------------------
HAVE_PROLOG=
[ -f prolog/Cargo.toml ] && grep -q '^name = "nccl-check-prolog"' prolog/Cargo.toml && HAVE_PROLOG=1
pkgs=(-p spank-plugin)
[ -n "$HAVE_PROLOG" ] && pkgs+=(-p nccl-check-prolog)
TRIPLE=x86_64-unknown-linux-gnu
if [ "$BINARIES" = portable ]; then
    WORKER_BIN=$(packaging/build-portable.sh)      # also installs zig and cargo-zigbuild if missing
    floor=${NCCL_CHECK_GLIBC_FLOOR:-2.17}
    say "cargo zigbuild --release ${pkgs[*]} --target $TRIPLE.$floor"
    PYTHONPATH=$REPO/target/tools/python${PYTHONPATH:+:$PYTHONPATH} \
        timeout 3600 cargo zigbuild --release "${pkgs[@]}" --target "$TRIPLE.$floor" >&2
    PLUGIN_SO=target/$TRIPLE/release/libnccl_check.so
    PLUGSTACK_BIN=target/$TRIPLE/release/nccl-check-plugstack
    PROLOG_BIN=target/$TRIPLE/release/nccl-check-prolog
    for f in "$PLUGIN_SO" "$PLUGSTACK_BIN" ${HAVE_PROLOG:+"$PROLOG_BIN"}; do   # the same proof build-portable.sh gives
        newest=$(objdump -T "$f" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
        [ "$(printf '%s\n%s\n' "$newest" "$floor" | sort -V | tail -1)" = "$floor" ] \
            || die "$f needs GLIBC_$newest, above $floor"
    done
else
    [ "$BINARIES" = host ] && pkgs+=(-p bench-core)
    TD=${NCCL_CHECK_PKG_TARGET_DIR:-target}
    say "cargo build --release ${pkgs[*]} --target-dir $TD"
    timeout 3600 cargo build --release "${pkgs[@]}" --target-dir "$TD" >&2
    PLUGIN_SO=$TD/release/libnccl_check.so
    PLUGSTACK_BIN=$TD/release/nccl-check-plugstack
    PROLOG_BIN=$TD/release/nccl-check-prolog
    if [ "$BINARIES" = default ]; then
        WORKER_BIN=$(packaging/build-portable.sh)
    else
        WORKER_BIN=$TD/release/nccl-check
    fi
fi
for f in "$PLUGIN_SO" "$PLUGSTACK_BIN" "$WORKER_BIN" ${HAVE_PROLOG:+"$PROLOG_BIN"}; do [ -f "$f" ] || die "not built: $f"; done

# The plugin must carry the headers' major.minor, or Slurm refuses it ("Incompatible plugin version").
read_u32_symbol() { # FILE SYMBOL -> decimal value of a 4-byte little-endian data symbol
    local addr
    addr=$(nm -D --defined-only "$1" | awk -v s="$2" '$3 == s { print $1 }')
    [ -n "$addr" ] || return 1
    objdump -s --start-address=$((16#$addr)) --stop-address=$((16#$addr + 4)) "$1" \
        | awk '/^ [0-9a-f]+ / { print $2; exit }' \
        | sed -E 's/(..)(..)(..)(..)/\4\3\2\1/' | { read -r h; echo $((16#$h)); }
}
pv=$(read_u32_symbol "$PLUGIN_SO" plugin_version) || die "$PLUGIN_SO exports no plugin_version"
[ $(( (pv >> 8) & 0xffff )) = $(( (num >> 8) & 0xffff )) ] \
    || die "$PLUGIN_SO has plugin_version $(printf '%#x' "$pv"), headers say $hex: rebuild (cargo clean --release -p spank-plugin)"
say "plugin_version $(printf '%#x' "$pv") matches Slurm $SLURM_MM"

# --- the files, once per distribution layout ----------------------------------------------------
WORK=$OUT/.work
rm -rf "$WORK"
mkdir -p "$WORK" "$OUT"
WORKER_CONF=bench-core/config/nccl-check.toml            # the lead's default, when it exists
[ -f "$WORKER_CONF" ] || WORKER_CONF=packaging/files/nccl-check.toml
PROLOG_CONF=prolog/prolog.toml

# Man pages from the real binaries' --help (help2man runs them; no GPU needed).
mkdir -p "$WORK/man"
help2man -N -s 1 -n "check NCCL bandwidth of this node's (or a job's) GPUs: PASS, FAIL or ERROR" \
    --version-string="$VERSION" -o "$WORK/man/nccl-check.1" "$WORKER_BIN"
gzip -9n "$WORK/man/nccl-check.1"
help2man -N -s 8 -n "check the nccl_check.so line of Slurm's plugstack.conf with the plugin's own parser" \
    --version-string="$VERSION" -o "$WORK/man/nccl-check-plugstack.8" "$PLUGSTACK_BIN"
gzip -9n "$WORK/man/nccl-check-plugstack.8"
if [ -n "$HAVE_PROLOG" ]; then
    help2man -N -s 8 -n "Slurm prolog gate: check this node's GPUs at job start, drain it on FAIL" \
        --version-string="$VERSION" -o "$WORK/man/nccl-check-prolog.8" "$PROLOG_BIN"
    gzip -9n "$WORK/man/nccl-check-prolog.8"
fi

# stage ROOT PLUGINDIR DOCDIR: the installed tree.
stage() {
    local root=$1 plugindir=$2 docdir=$3
    install -d -m 0755 "$root"/usr/libexec/nccl-check "$root"/usr/bin "$root/$plugindir" \
        "$root"/etc/nccl-check "$root"/etc/slurm/plugstack.conf.d "$root"/usr/share/man/man1 \
        "$root"/usr/sbin "$root"/usr/share/man/man8 \
        "$root/$docdir" "$root"/usr/share/nccl-check/enroot "$root"/var/lib/nccl-check
    # The worker lives in /usr/libexec/nccl-check (the plugin's default worker=, and the directory
    # enroot/mounts.d binds into containers); /usr/bin/nccl-check is a link for people and the prolog.
    install -m 0755 "$WORKER_BIN" "$root"/usr/libexec/nccl-check/nccl-check
    strip --strip-unneeded "$root"/usr/libexec/nccl-check/nccl-check
    ln -s ../libexec/nccl-check/nccl-check "$root"/usr/bin/nccl-check
    install -m 0644 "$PLUGIN_SO" "$root/$plugindir/nccl_check.so"
    strip --strip-unneeded "$root/$plugindir/nccl_check.so"
    install -m 0644 "$WORKER_CONF" "$root"/etc/nccl-check/nccl-check.toml
    install -m 0644 "$WORK/man/nccl-check.1.gz" "$root"/usr/share/man/man1/
    # The admin's check of the plugin line (login nodes too): the plugin's own parser.
    install -m 0755 "$PLUGSTACK_BIN" "$root"/usr/sbin/nccl-check-plugstack
    strip --strip-unneeded "$root"/usr/sbin/nccl-check-plugstack
    install -m 0644 "$WORK/man/nccl-check-plugstack.8.gz" "$root"/usr/share/man/man8/
    if [ -n "$HAVE_PROLOG" ]; then
        install -d -m 0755 "$root"/usr/sbin "$root"/usr/share/man/man8
        install -m 0755 "$PROLOG_BIN" "$root"/usr/sbin/nccl-check-prolog
        strip --strip-unneeded "$root"/usr/sbin/nccl-check-prolog
        # HealthCheckProgram= wrapper: re-checks a drained node so auto_resume needs no script.
        install -m 0755 prolog/files/nccl-check-recheck "$root"/usr/sbin/nccl-check-recheck
        install -m 0644 "$PROLOG_CONF" "$root"/etc/nccl-check/prolog.toml
        install -m 0644 "$WORK/man/nccl-check-prolog.8.gz" "$root"/usr/share/man/man8/
        # The prolog's Prometheus alert rules, their promtool tests and the Grafana dashboard, for
        # the admin to copy into Prometheus' rule_files and Grafana (not active by themselves).
        install -d -m 0755 "$root"/usr/share/nccl-check/monitoring
        install -m 0644 prolog/monitoring/nccl-check.rules.yml prolog/monitoring/nccl-check.rules.test.yml \
            prolog/monitoring/nccl-check.dashboard.json "$root"/usr/share/nccl-check/monitoring/
        # nccl-check-prolog --help cites it ("Docs:").
        install -m 0644 prolog/README.md "$root/$docdir/prolog.md"
    fi
    # Measurements the worker's printed text cites (--explain-plan's model constants, the
    # threshold rules' sources): every /usr/share/nccl-check/results/ path named in its sources,
    # copied from bench-core/benchmarks/results/. A cited file that is missing fails the build
    # (bench-core/tests/cited_files.rs: no printed text cites a file of the source tree).
    local rel
    while read -r rel; do
        [ -f "bench-core/benchmarks/results/$rel" ] || die "cited but missing: bench-core/benchmarks/results/$rel"
        install -D -m 0644 "bench-core/benchmarks/results/$rel" "$root/usr/share/nccl-check/results/$rel"
    done < <(grep -rhoE '/usr/share/nccl-check/results/[A-Za-z0-9_./-]*[A-Za-z0-9_-]' bench-core/src bench-core/config \
             | sed 's#^/usr/share/nccl-check/results/##' | sort -u)
    [ -d "$root/usr/share/nccl-check/results" ] || die "no cited result found in bench-core/src or bench-core/config"
    plugstack_snippet "$plugindir/nccl_check.so" > "$root"/etc/slurm/plugstack.conf.d/zz-nccl-check.conf
    chmod 0644 "$root"/etc/slurm/plugstack.conf.d/zz-nccl-check.conf
    # enroot files: reference copies, enabled by the admin with links into /etc/enroot (README).
    local d f
    for d in enroot/*/; do
        d=${d%/}; d=${d#enroot/}
        install -d -m 0755 "$root/usr/share/nccl-check/enroot/$d"
        for f in enroot/"$d"/*; do
            [ -f "$f" ] || continue
            if [ "$d" = hooks.d ]; then
                install -m 0755 "$f" "$root/usr/share/nccl-check/enroot/$d/"
            else
                install -m 0644 "$f" "$root/usr/share/nccl-check/enroot/$d/"
            fi
        done
    done
    [ -f enroot/README.md ] && install -m 0644 enroot/README.md "$root/usr/share/nccl-check/enroot/README.md"
    # The shipped copy names this package: its commands, the package it describes and its doc
    # directory use the installed package's name and Slurm major; the rows about each major
    # (supported majors, naming) and the record of a past check keep theirs.
    { printf '> This is **%s**, built for Slurm %s; the commands below name it.\n\n' "$NAME" "$SLURM_MM"
      sed -E "/^    /{s/nccl-check-slurm22\.05/$NAME/g; s#Debian 12 / Slurm 22\.05#Debian, Slurm $SLURM_MM#; s/Slurm 22\.05 RPMs/Slurm $SLURM_MM RPMs/}
              /^(One package per|\| docs \|)/s/nccl-check-slurm22\.05/$NAME/g" packaging/README.md; } > "$root/$docdir/README.md"
    chmod 0644 "$root/$docdir/README.md"
    install -m 0644 slurm/plugstack.conf.d/zz-nccl-check.conf "$root/$docdir/zz-nccl-check.conf.example"
    install -m 0644 bench-core/config/network-examples.toml "$root/$docdir/network-examples.toml"
    install -m 0644 bench-core/config/defaults.toml "$root/$docdir/defaults.toml"
}

# plugstack_snippet SO_PATH: slurm/plugstack.conf.d/zz-nccl-check.conf with the plugin line
# pointing at SO_PATH and the worker at the packaged path, commented out (disabled).
plugstack_snippet() {
    local so=/$1 src=slurm/plugstack.conf.d/zz-nccl-check.conf n
    n=$(grep -cE '^(required|optional)[[:space:]]+[^[:space:]]*nccl_check\.so' "$src" || true)
    [ "$n" = 1 ] || die "$src: expected exactly one 'required|optional .../nccl_check.so' line, found $n"
    cat <<EOF
# Installed by the $NAME package. DISABLED: srun, sbatch and salloc are unchanged until an admin
# uncomments the plugin line at the end of this file (on every login and compute node, and the
# same file everywhere). Jobs launched after that see --nccl-check; no daemon restart is needed.
#   sed -i 's|^#required $so|required $so|' /etc/slurm/plugstack.conf.d/zz-nccl-check.conf
# This file is a config file: edits are kept on upgrade. Removing the package comments the line
# out again (the plugin file is gone then, and a 'required' line naming a missing plugin would
# make every srun fail). See /usr/share/doc/$NAME/README.md.
#
EOF
    sed -E "s#^(required|optional)([[:space:]]+)[^[:space:]]*nccl_check\.so#\#required\2$so#; \
            /^#?(required|optional)[[:space:]]/ s#worker=[^[:space:]]*#worker=/usr/libexec/nccl-check/nccl-check#" "$src"
}

# The script that disables active plugin lines before the package's files go (DEB prerm remove,
# RPM %preun on erase). It touches only lines naming this package's plugin path.
disable_script() { # SO_PATH_REGEX (dots escaped)
    cat <<EOF
for f in /etc/slurm/plugstack.conf /etc/slurm/plugstack.conf.d/*.conf; do
    [ -f "\$f" ] || continue
    if grep -Eq '^[[:space:]]*(required|optional)[[:space:]]+$1([[:space:]]|\$)' "\$f"; then
        sed -i -E 's#^([[:space:]]*)(required|optional)([[:space:]]+$1([[:space:]]|\$))#\1\#\2\3#' "\$f"
        echo "nccl-check: commented out the plugin line in \$f (the plugin is being removed)"
    fi
done
# Links an admin made to the enroot files (README): a dangling one would break container starts.
for l in /etc/enroot/mounts.d/* /etc/enroot/environ.d/* /etc/enroot/hooks.d/*; do
    [ -L "\$l" ] || continue
    case "\$(readlink "\$l")" in /usr/share/nccl-check/enroot/*) rm -f "\$l"; echo "nccl-check: removed the link \$l" ;; esac
done
EOF
}

# DEB prerm on remove: the Prometheus textfiles the prolog writes (metrics_file as prolog.toml
# names it, "%n" any node), noted in the state directory for postrm purge, which runs after dpkg
# has deleted prolog.toml. Left behind, node_exporter would export a removed tool's last state.
note_textfiles_script() {
    cat <<'EOF'
m=$(sed -n -E 's/^[[:space:]]*metrics_file[[:space:]]*=[[:space:]]*"([^"]*)".*/\1/p' /etc/nccl-check/prolog.toml 2>/dev/null | tail -1)
if [ -n "$m" ] && [ -d /var/lib/nccl-check ]; then
    printf '%s\n' "$m" > /var/lib/nccl-check/textfiles.purge
fi
EOF
}

# DEB postrm purge: removes the textfiles noted above, metrics_file and the -faults/-node files
# beside it, each only when it is a plain file the prolog wrote (its first HELP names nccl_check_).
purge_textfiles_script() {
    cat <<'EOF'
if [ -f /var/lib/nccl-check/textfiles.purge ]; then
    while IFS= read -r m; do
        case "$m" in /*.prom) ;; *) continue ;; esac
        stem=${m%.prom}
        for f in $(printf '%s\n' "$m" "$stem-faults.prom" "$stem-node.prom" | sed 's/%n/*/g'); do
            if [ -f "$f" ] && [ ! -L "$f" ] && head -1 "$f" | grep -q '^# HELP nccl_check_'; then
                rm -f "$f" && echo "nccl-check: removed the Prometheus textfile $f"
            fi
        done
    done < /var/lib/nccl-check/textfiles.purge
fi
EOF
}

# The script that refuses to remove the prolog while Slurm still runs it (DEB prerm remove,
# RPM %preun on erase): slurmd would fail every job's prolog and DRAIN the node (observed on
# 22.05 and 24.11). The prolog itself reads Slurm's configuration as this node uses it
# (`--where-configured`: the controller's live Prolog list in every scontrol format, each
# slurm.conf with its Include files, a configless node's cache under /run/slurm/conf or the spool
# directory). Should it not run at all, a plain search of the same places decides. slurm.conf is
# the admin's and is never edited here; NCCL_CHECK_FORCE_REMOVE=1 overrides.
refuse_script() {
    cat <<'EOF'
where= rc=0
if [ -x /usr/sbin/nccl-check-prolog ]; then
    # set -e: a non-zero status here is an answer, not the end of the script.
    out=$(timeout 30 /usr/sbin/nccl-check-prolog --where-configured 2>&1) || rc=$?
    where=$(echo "$out" | grep -v '^#' || true)
fi
if [ ! -x /usr/sbin/nccl-check-prolog ] || { [ "$rc" != 0 ] && [ "$rc" != 1 ]; }; then
    # The prolog could not tell: the same places, searched plainly.
    for c in "${SLURM_CONF:-}" /etc/slurm/slurm.conf /run/slurm/conf/slurm.conf /var/spool/slurmd/conf-cache/slurm.conf; do
        [ -n "$c" ] && [ -f "$c" ] || continue
        for f in "$c" "$(dirname "$c")"/*.conf; do
            if grep -Eqs '^[[:space:]]*((Prolog|Epilog)[[:space:]]*=.*nccl-check-prolog|HealthCheckProgram[[:space:]]*=.*nccl-check-recheck)' "$f"; then
                where="$where
$f"
            fi
        done
    done
    if command -v scontrol >/dev/null 2>&1; then
        if timeout 10 scontrol show config 2>/dev/null | grep -Eq '^((Prolog|Epilog)(\[[0-9]+\])? +=.*nccl-check-prolog|HealthCheckProgram +=.*nccl-check-recheck)'; then
            where="$where
scontrol show config"
        fi
    fi
fi
if [ -n "$where" ] && [ "${NCCL_CHECK_FORCE_REMOVE:-}" != 1 ]; then
    echo "nccl-check: REFUSED: Slurm still runs nccl-check:" >&2
    echo "$where" | sed '/^$/d; s/^/nccl-check:   /' >&2
    # Only what the lines above name: an Epilog= alone is no prolog; a health check drains nothing.
    kinds=$(echo "$where" | grep -Eo '(Prolog|Epilog)=' | sort -u | tr -d '=' | tr 'A-Z' 'a-z' | paste -sd/ - || true)
    if [ -n "$kinds" ]; then
        echo "nccl-check: Removing it now would make slurmd fail every job's $kinds and DRAIN this node." >&2
    fi
    if echo "$where" | grep -q 'HealthCheckProgram='; then
        echo "nccl-check: Without nccl-check-recheck slurmd's health check fails every HealthCheckInterval (status:127)." >&2
    fi
    echo "nccl-check: Do what each line says (in the files listed; on a configless node: the controller's)," >&2
    echo "nccl-check: run 'scontrol reconfigure', then remove the package (or set NCCL_CHECK_FORCE_REMOVE=1)." >&2
    exit 1
fi
EOF
}

# The install-time check (DEB postinst configure, RPM %post): the state directory, the gate's
# config validated where slurmd will read it (never failing the install), and whether the plugin
# line is enabled. SO_RE: the plugin path (dots escaped); FIRST: a shell test true on a first
# install (DEB: no previous version in $2; RPM: $1 = 1).
install_check_script() { # SO_RE FIRST
    local so_re=$1 first=$2
    cat <<EOF
install -d -m 0755 /var/lib/nccl-check
# Exit 3: valid, but no Prolog=/Epilog=/HealthCheckProgram= runs the gate yet (a fresh install).
rc=0
if [ -x /usr/sbin/nccl-check-prolog ]; then
    out=\$(timeout 40 /usr/sbin/nccl-check-prolog --check-config 2>&1) || rc=\$?
fi
if [ "\$rc" = 3 ]; then
    echo "nccl-check: the prolog gate is installed, not enabled: no Prolog= of this node's Slurm runs /usr/sbin/nccl-check-prolog (see /usr/share/doc/$NAME/prolog.md)"
elif [ "\$rc" != 0 ]; then
    echo "nccl-check: WARNING: nccl-check-prolog --check-config finds the prolog gate not ready:" >&2
    printf '%s\\n' "\$out" | grep -E '^(INVALID|NOT READY|Until this is fixed)' | sed 's/^/nccl-check:   /' >&2 || true
fi
if ! grep -Eq '^[[:space:]]*(required|optional)[[:space:]]+$so_re' /etc/slurm/plugstack.conf.d/zz-nccl-check.conf 2>/dev/null; then
    if $first; then
        echo "nccl-check: installed. The SPANK plugin is disabled until you uncomment its line in"
    else
        # A reinstall after a removal (which commented the line out) or an upgrade of a
        # disabled plugin: --nccl-check stays off until the admin says otherwise.
        echo "nccl-check: the SPANK plugin is still disabled (its line is commented out, as a removal leaves it); uncomment it in"
    fi
    echo "nccl-check: /etc/slurm/plugstack.conf.d/zz-nccl-check.conf; see /usr/share/doc/$NAME/README.md"
fi
EOF
}

CHANGELOG_DATE=$(date -u -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")
PACKAGER=${NCCL_CHECK_PACKAGER:-nccl-check packagers <nccl-check@localhost>}
SUMMARY="NCCL bandwidth check for Slurm jobs (srun --nccl-check, prolog) for Slurm $SLURM_MM"
read -r -d '' DESCRIPTION <<EOF || true
Proves, before a GPU job starts, that every GPU and NVLink/network path of the
job's nodes delivers the bandwidth it should, and says PASS, FAIL or ERROR.
Contents: the SPANK plugin adding --nccl-check to srun, sbatch and salloc
(installed disabled), the nccl-check worker, the nccl-check-prolog gate that
drains slow nodes, default configs, enroot files and man pages.
Built for Slurm $SLURM_MM only: SPANK plugins load on the Slurm major.minor
they were built for.
EOF

# --- DEB ----------------------------------------------------------------------------------------
build_deb() {
    local root=$WORK/deb/root plugindir=usr/lib/x86_64-linux-gnu/slurm-wlm docdir=usr/share/doc/$NAME
    local so=/$plugindir/nccl_check.so so_re
    so_re=${so//./\\.}
    stage "$root" "$plugindir" "$docdir"
    cat > "$root/$docdir/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nccl-check
Source: $(awk -F'"' '/^repository *=/ { print $2 }' Cargo.toml)

Files: *
Copyright: nccl-check contributors
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
EOF
    printf '%s (%s-%s) stable; urgency=medium\n\n  * Built for Slurm %s by packaging/build.sh.\n\n -- %s  %s\n' \
        "$NAME" "$VERSION" "$REVISION" "$SLURM_MM" "$PACKAGER" "$CHANGELOG_DATE" \
        | gzip -9n > "$root/$docdir/changelog.Debian.gz"
    chmod 0644 "$root/$docdir/copyright" "$root/$docdir/changelog.Debian.gz"

    # Library dependencies, as debhelper computes them (dpkg-shlibdeps wants a debian/control).
    local sd=$WORK/deb/shlibdeps shlibs elfs=()
    mkdir -p "$sd/debian"
    printf 'Source: nccl-check\n\nPackage: %s\nArchitecture: amd64\n' "$NAME" > "$sd/debian/control"
    elfs=("$root"/usr/libexec/nccl-check/nccl-check "$root/$so" "$root"/usr/sbin/nccl-check-plugstack)
    [ -n "$HAVE_PROLOG" ] && elfs+=("$root"/usr/sbin/nccl-check-prolog)
    # -l: no package shlibs to look in; the plugin's undefined spank_* symbols come from slurmd.
    shlibs=$(cd "$sd" && dpkg-shlibdeps -O --warnings=0 "${elfs[@]}" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
    [ -n "$shlibs" ] || die "dpkg-shlibdeps found no dependencies"

    install -d -m 0755 "$root/DEBIAN"
    cat > "$root/DEBIAN/control" <<EOF
Package: $NAME
Version: $VERSION-$REVISION
Architecture: amd64
Maintainer: $PACKAGER
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $shlibs, slurm-wlm-basic-plugins (>= $SLURM_MM~), slurm-wlm-basic-plugins (<< $SLURM_NEXT~)
Provides: nccl-check
Conflicts: nccl-check
Replaces: nccl-check
Section: admin
Priority: optional
Homepage: $(awk -F'"' '/^repository *=/ { print $2 }' Cargo.toml)
Description: $SUMMARY
$(sed 's/^/ /' <<<"$DESCRIPTION")
EOF
    (cd "$root" && find etc -type f | sed 's#^#/#' | sort) > "$root/DEBIAN/conffiles"
    { printf '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
      install_check_script "$so_re" '[ -z "$2" ]' | sed 's/^/    /'
      printf 'fi\nexit 0\n'; } > "$root/DEBIAN/postinst"
    { printf '#!/bin/sh\nset -e\n'
      # "remove in-favour PKG": another Slurm major's package takes over the same prolog path.
      [ -n "$HAVE_PROLOG" ] && { printf 'if [ "$1" = remove ] && [ "$2" != in-favour ]; then\n'
          refuse_script | sed 's/^/    /'; printf 'fi\n'; }
      printf 'if [ "$1" = remove ]; then\n'
      disable_script "$so_re" | sed 's/^/    /'
      [ -n "$HAVE_PROLOG" ] && note_textfiles_script | sed 's/^/    /'
      printf 'fi\nexit 0\n'; } > "$root/DEBIAN/prerm"
    cat > "$root/DEBIAN/postrm" <<EOF
#!/bin/sh
set -e
if [ "\$1" = purge ]; then
    # Reports, cache and drain marker written by nccl-check-prolog; kept when another Slurm
    # major's nccl-check package (which replaced this one) owns the directory now.
    others=\$(dpkg-query -S /var/lib/nccl-check 2>/dev/null | sed 's/: .*//' | tr ', ' '\\n\\n' | grep -vxF -e '' -e '$NAME' || true)
    if [ -z "\$others" ]; then
$(purge_textfiles_script | sed 's/^/        /')
        rm -rf /var/lib/nccl-check
    fi
    rmdir /etc/nccl-check 2>/dev/null || true
fi
exit 0
EOF
    chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
    (cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's#^\./##' | LC_ALL=C sort \
        | xargs md5sum) > "$root/DEBIAN/md5sums"
    chmod 0644 "$root/DEBIAN/"{control,conffiles,md5sums}
    local deb=$OUT/${NAME}_$VERSION-${REVISION}_amd64.deb
    dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
    say "built $deb"
    echo "$deb"
}

# --- RPM ----------------------------------------------------------------------------------------
build_rpm() {
    local root=$WORK/rpm/root plugindir=usr/lib64/slurm docdir=usr/share/doc/$NAME top=$WORK/rpm/top
    local so=/$plugindir/nccl_check.so so_re
    so_re=${so//./\\.}
    stage "$root" "$plugindir" "$docdir"
    mkdir -p "$top"/{BUILD,RPMS,SPECS,SRPMS,SOURCES}
    local spec=$top/SPECS/$NAME.spec
    {
    cat <<EOF
# Generated by packaging/build.sh from the staged tree (binaries built by cargo beforehand).
Name:           $NAME
Version:        $VERSION
Release:        $REVISION
Summary:        $SUMMARY
License:        Apache-2.0
URL:            $(awk -F'"' '/^repository *=/ { print $2 }' Cargo.toml)
ExclusiveArch:  x86_64
# The Slurm major.minor this plugin loads on (the SchedMD RPMs name the package "slurm").
Requires:       slurm >= $SLURM_MM
Requires:       slurm < $SLURM_NEXT
Provides:       nccl-check = %{version}-%{release}
Conflicts:      nccl-check
# Slurm plugins are not libraries for other packages.
%global __provides_exclude_from ^/$plugindir/.*\\.so\$
# Binaries are stripped by build.sh; no debuginfo subpackage, no build-id links.
%global debug_package %{nil}
%global _build_id_links none
%global __os_install_post %{nil}

%description
$DESCRIPTION

%install
mkdir -p %{buildroot}
cp -a $root/. %{buildroot}/

%post
EOF
    # (%% in a scriptlet: rpmbuild expands % macros)
    install_check_script "$so_re" '[ "$1" = 1 ]' | sed 's/%/%%/g'
    cat <<EOF
exit 0

%preun
# \$1 = 0: erase (not upgrade). Disable the plugin before its file goes, so srun keeps working.
if [ "\$1" = 0 ]; then
EOF
    [ -n "$HAVE_PROLOG" ] && refuse_script | sed 's/^/    /'
    disable_script "$so_re" | sed 's/^/    /'
    [ -n "$HAVE_PROLOG" ] && note_textfiles_script | sed 's/^/    /'
    cat <<EOF
fi
exit 0

%postun
# \$1 = 0: erase. RPM has no purge: the prolog's Prometheus textfiles (node_exporter would
# export a removed tool's last state) and its state go now, unless another Slurm major's
# nccl-check package owns /var/lib/nccl-check.
if [ "\$1" = 0 ]; then
    others=\$(timeout 10 rpm -qf --qf '%%{NAME}\\n' /var/lib/nccl-check 2>/dev/null | grep -vxF -e '$NAME' | grep -v ' ' || true)
    if [ -z "\$others" ]; then
EOF
    purge_textfiles_script | sed 's/%/%%/g; s/^/        /'
    cat <<EOF
        rm -rf /var/lib/nccl-check
    fi
fi
exit 0

%files
%defattr(-,root,root,-)
%dir /usr/libexec/nccl-check
/usr/libexec/nccl-check/nccl-check
/usr/bin/nccl-check
/$plugindir/nccl_check.so
%dir /etc/nccl-check
%config(noreplace) /etc/nccl-check/nccl-check.toml
%dir /etc/slurm/plugstack.conf.d
%config(noreplace) /etc/slurm/plugstack.conf.d/zz-nccl-check.conf
/usr/share/nccl-check
/usr/share/man/man1/nccl-check.1.gz
/usr/sbin/nccl-check-plugstack
/usr/share/man/man8/nccl-check-plugstack.8.gz
%doc /$docdir
%dir /var/lib/nccl-check
EOF
    if [ -n "$HAVE_PROLOG" ]; then
        printf '%s\n' /usr/sbin/nccl-check-prolog /usr/sbin/nccl-check-recheck '%config(noreplace) /etc/nccl-check/prolog.toml' \
            /usr/share/man/man8/nccl-check-prolog.8.gz
    fi
    printf '\n%%changelog\n* %s %s - %s-%s\n- Built for Slurm %s by packaging/build.sh.\n' \
        "$(LC_ALL=C date -u -d "$CHANGELOG_DATE" '+%a %b %d %Y')" "$PACKAGER" "$VERSION" "$REVISION" "$SLURM_MM"
    } > "$spec"
    timeout 600 rpmbuild -bb --quiet --define "_topdir $top" --define "_rpmdir $top/RPMS" \
        --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" "$spec" >&2
    local rpm=$OUT/$NAME-$VERSION-$REVISION.x86_64.rpm
    mv "$top/RPMS/$(basename "$rpm")" "$rpm"
    say "built $rpm"
    echo "$rpm"
}

want deb && build_deb
want rpm && build_rpm
rm -rf "$WORK"
