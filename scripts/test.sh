#!/usr/bin/env bash
# The test suite, from a fresh Debian 12 machine: install, build, run every test, then the
# torch-free layers again under ASan+UBSan with a few seconds of each fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "${GRADWIRE_TEST_JOBS:-2}" --timeout 600
cd ..
bash scripts/sanitize.sh
