#!/usr/bin/env bash
# Installs what building and testing Chorus needs on Debian 12, when it is missing.
# Safe to run again: it installs nothing that is already there.
set -euo pipefail

# libhwloc-dev: topology detection (libhwloc is opened at run time; its headers build it).
# python3-venv, python3-dev: the virtual environment with PyTorch 2.x from PyPI that the
# torch.distributed backend (python/) builds and tests against (tools/setup-torch.sh, below).
packages=(cmake g++ make pkg-config libgtest-dev libgmock-dev iproute2 openmpi-bin libopenmpi-dev libgloo-dev
  libhwloc-dev python3-venv python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# PyTorch 2.x from PyPI in <repository>/.venv (about 1.1 GB to download; CHORUS_TORCH=0 skips it).
if [[ ${CHORUS_TORCH:-1} != 0 ]]; then
  "$(dirname "$0")/setup-torch.sh"
fi
