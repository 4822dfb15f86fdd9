#!/usr/bin/env bash
# The test suite, from a fresh Debian 12 machine: install, build, run every test (the Python
# module's by pytest among them), `pip install .` in a virtual environment
# (scripts/test_pip_install.sh), then the sanitizer stage (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "${GRADWIRE_TEST_JOBS:-2}" --timeout 600
# The Python module's tests run as one ctest test (python.pytest); their summary line:
# (echo: the XML file may end without a newline, and so would the line sed prints.)
summary=$(sed -n 's/.*<testsuite [^>]*errors="\([0-9]*\)" failures="\([0-9]*\)" skipped="\([0-9]*\)" tests="\([0-9]*\)" time="\([0-9.]*\)".*/pytest: \4 tests, \2 failures, \1 errors, \3 skipped in \5 s/p' \
  python-tests.xml 2> /dev/null || true)
[ -z "$summary" ] || echo "$summary"
cd ..
# The module built by `pip install --no-build-isolation .` in a virtual environment.
bash scripts/test_pip_install.sh
bash scripts/sanitize.sh
