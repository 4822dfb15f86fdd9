#!/usr/bin/env bash
# Configures and builds gradwire into build/ (Release, Ninja, ccache). Extra arguments go
# to cmake's configure step, e.g. -DGRADWIRE_BUILD_BENCH=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${GRADWIRE_JOBS:-2}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
