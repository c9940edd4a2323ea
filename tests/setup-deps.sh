#!/usr/bin/env bash
# Install the Debian 12 packages the Slurm integration suite needs (tests/slurm/run.sh).
# Idempotent: installs only what is missing; safe to run twice. Must run as root.
#   slurm-wlm      slurmctld + slurmd + client commands (Slurm 22.05 on Debian 12)
#   munge          authentication daemon every Slurm daemon and command needs
#   libslurm-dev   <slurm/slurm_version.h>, which spank-plugin/build.rs reads the plugin version from
#   procps         ps/pgrep for the tests' process checks (no broad kills)
#   clang-16       regenerates bench-core/kernels/check.ptx to prove the committed PTX is current
#   unzip, python3-pip  fetch a real libnccl (nvidia-nccl-cu12 wheel) for the no-GPU worker tests
#   debootstrap    the Slurm 24.11 (trixie) and 26.05 (sid) root filesystems of tests/matrix/run.sh
#   prometheus, prometheus-node-exporter  the prolog's alert rules and dashboard against the real
#                  thing (tests/prometheus/run.sh)
set -euo pipefail

pkgs=(slurm-wlm munge libslurm-dev procps clang-16 unzip python3-pip debootstrap prometheus prometheus-node-exporter)
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup-deps: all present: ${pkgs[*]}"
    exit 0
fi
echo "setup-deps: installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# DPkg::Lock::Timeout: wait (up to 10 min) for another apt on the machine, e.g. a second suite or
# an admin, instead of failing with exit 100.
timeout 900 apt-get -o DPkg::Lock::Timeout=600 update -q
timeout 1200 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
