#!/usr/bin/env bash
# The test suite, from a fresh Debian 12 machine: install, build, run every test (the Python
# module's by pytest among them), then the sanitizer stage (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "${GRADWIRE_TEST_JOBS:-2}" --timeout 600
# The Python module's tests run as one ctest test (python.pytest); their summary line:
grep -E "^=* ?[0-9]+ passed" Testing/Temporary/LastTest.log | tail -n 1 | sed 's/^/pytest: /' || true
cd ..
bash scripts/sanitize.sh
