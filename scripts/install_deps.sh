#!/usr/bin/env bash
# Installs every Debian 12 package gradwire needs to build, test and run. Idempotent and
# non-interactive; run as root (or through sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates dpkg-dev file
  libtorch-dev libopenblas0-pthread libgloo-dev zlib1g-dev
  libzmq3-dev cppzmq-dev libfftw3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  dataset-fashion-mnist bible-kjv iproute2 procps
  python3-torch python3-matplotlib python3-dev pybind11-dev python3-pytest python3-pip python3-venv
  clang libclang-rt-14-dev llvm-14
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
else
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The gpt job's corpus, as plain text once (include/gradwire/text_corpus.h).
$SUDO bash "$(dirname "$0")/prepare_corpus.sh"
