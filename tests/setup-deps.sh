#!/usr/bin/env bash
# Install the Debian 12 packages the Slurm integration suite needs (tests/slurm/run.sh).
# Idempotent: installs only what is missing; safe to run twice. Must run as root.
#   slurm-wlm      slurmctld + slurmd + client commands (Slurm 22.05 on Debian 12)
#   munge          authentication daemon every Slurm daemon and command needs
#   libslurm-dev   <slurm/slurm_version.h>, which spank-plugin/build.rs reads the plugin version from
#   procps         ps/pgrep for the tests' process checks (no broad kills)
#   clang-16       regenerates bench-core/kernels/check.ptx to prove the committed PTX is current
#   unzip, python3-pip  fetch a real libnccl (nvidia-nccl-cu12 wheel) for the no-GPU worker tests
set -euo pipefail

pkgs=(slurm-wlm munge libslurm-dev procps clang-16 unzip python3-pip)
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
timeout 600 apt-get update -q
timeout 900 apt-get install -y -q --no-install-recommends "${missing[@]}"
