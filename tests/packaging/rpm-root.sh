#!/usr/bin/env bash
# The RPM's scriptlets run for real (issue 46, S3: the RPM had no %post/%postun): Debian's rpm
# installs the package into a root made of this machine's /usr (an overlay: what the package
# writes there stays in the test's upper directory) and fresh /etc and /var, so %post runs
# nccl-check-prolog --check-config, %preun refuses to erase while the root's slurm.conf runs the
# prolog, and %postun removes the prolog's Prometheus textfile and its state on erase.
#
# Usage: bash tests/packaging/rpm-root.sh RPM    (root; needs rpm, overlayfs; prints PASS/FAIL lines)
set -uo pipefail
RPM=${1:?usage: rpm-root.sh RPM}
[ "$(id -u)" = 0 ] || { echo "rpm-root.sh: must run as root" >&2; exit 2; }
command -v rpm >/dev/null || { echo "rpm-root.sh: no rpm (apt-get install rpm)" >&2; exit 2; }
FAILED=0
fail() { echo "FAIL: $*" >&2; FAILED=1; }
W=$(mktemp -d /var/tmp/nccl-check-rpm-root.XXXXXX)
R=$W/root
MOUNTS=()
cleanup() {
    local i; for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount "${MOUNTS[$i]}" 2>/dev/null || umount -l "${MOUNTS[$i]}"; done
    rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/upper" "$W/work" "$R/usr" "$R/dev" "$R/proc" "$R/tmp" "$R/run" "$R/var/lib/rpm" \
    "$R/etc/slurm/plugstack.conf.d" "$R/var/lib/prometheus/node-exporter"
chmod 1777 "$R/tmp"
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$W/upper,workdir=$W/work" "$R/usr" || { echo "rpm-root.sh: no overlayfs" >&2; exit 1; }
MOUNTS+=("$R/usr")
mount --bind /dev "$R/dev" && MOUNTS+=("$R/dev")
mount -t proc proc "$R/proc" && MOUNTS+=("$R/proc")
for d in bin sbin lib lib64; do [ -L "/$d" ] && ln -s "$(readlink "/$d")" "$R/$d"; done
cp /etc/passwd /etc/group /etc/ld.so.cache "$R/etc/" 2>/dev/null
OUT=$W/out
in_root() { "$@" >"$OUT" 2>&1; RC=$?; }

rpm --root "$R" --initdb || { echo "rpm-root.sh: rpm --initdb failed" >&2; exit 1; }
# %post: the install-time check ran (no Slurm configuration in this root: NOT READY, said).
in_root rpm --root "$R" -i --nodeps "$RPM"
[ "$RC" = 0 ] || fail "rpm -i: rc $RC: $(cat "$OUT")"
grep -q "nccl-check: WARNING: nccl-check-prolog --check-config finds the prolog gate not ready" "$OUT" \
    && grep -q "nccl-check:   NOT READY Slurm's configuration could not be read" "$OUT" \
    || fail "%post did not run the check: $(cat "$OUT")"
grep -q "The SPANK plugin is disabled until you uncomment" "$OUT" || fail "%post did not say the plugin is disabled: $(cat "$OUT")"
[ -d "$R/var/lib/nccl-check" ] || fail "%post made no /var/lib/nccl-check"
# The prolog's textfile, as the gate writes it, and a slurm.conf that runs the prolog.
echo 'metrics_file = "/var/lib/prometheus/node-exporter/nccl_check.prom"' >> "$R/etc/nccl-check/prolog.toml"
printf '# HELP nccl_check_gate_state x\nnccl_check_gate_state{state="pass"} 1\n' > "$R/var/lib/prometheus/node-exporter/nccl_check.prom"
printf 'ClusterName=c\nProlog=/usr/sbin/nccl-check-prolog\n' > "$R/etc/slurm/slurm.conf"
name=$(rpm -qp --qf '%{NAME}' "$RPM" 2>/dev/null)
# %preun: refused while Slurm runs the prolog; nothing removed.
in_root rpm --root "$R" -e "$name"
[ "$RC" != 0 ] && grep -q "nccl-check: REFUSED: Slurm still runs nccl-check:" "$OUT" \
    && grep -q "/etc/slurm/slurm.conf:2: Prolog=/usr/sbin/nccl-check-prolog" "$OUT" \
    || fail "rpm -e while Prolog= runs it: rc $RC, $(cat "$OUT")"
rpm --root "$R" -q "$name" >/dev/null || fail "erased anyway"
[ -x "$R/usr/sbin/nccl-check-prolog" ] || fail "the prolog is gone after a refused erase"
# The Prolog= line gone: the erase goes on, and %postun cleans up.
sed -i '/^Prolog=/d' "$R/etc/slurm/slurm.conf"
in_root rpm --root "$R" -e "$name"
[ "$RC" = 0 ] || fail "rpm -e: rc $RC, $(cat "$OUT")"
grep -q "removed the Prometheus textfile /var/lib/prometheus/node-exporter/nccl_check.prom" "$OUT" \
    || fail "%postun did not say it removed the textfile: $(cat "$OUT")"
[ ! -e "$R/var/lib/prometheus/node-exporter/nccl_check.prom" ] || fail "%postun left the textfile"
[ -d "$R/var/lib/prometheus/node-exporter" ] || fail "the exporter's directory went too"
[ ! -e "$R/var/lib/nccl-check" ] || fail "%postun left /var/lib/nccl-check: $(ls -la "$R/var/lib/nccl-check")"
[ ! -e "$R/usr/sbin/nccl-check-prolog" ] || fail "the prolog is still installed"
[ "$FAILED" = 0 ] && echo "PASS: rpm -i/-e in a root: %post checks, %preun refuses, %postun removes the textfile and the state"
exit "$FAILED"
