#!/usr/bin/env bash
# Configures and builds gradwire into build/ (Release, Ninja, ccache). Extra arguments go
# to cmake's configure step, e.g. -DGRADWIRE_BUILD_BENCH=OFF. GRADWIRE_TARGETS (space-
# separated) builds only those targets, e.g. gradwire_cli (what the main job runs).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${GRADWIRE_JOBS:-2}"
# ccache keys on paths relative to the tree, so that setup.py's build (build-pip-SOABI, `pip
# install .`) reuses these objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${GRADWIRE_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build -j "$jobs" "${targets[@]}"
