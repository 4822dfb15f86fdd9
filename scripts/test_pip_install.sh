#!/usr/bin/env bash
# `pip install --no-build-isolation .` as a Python user would run it: in a virtual environment
# made over Debian's python3-torch (--system-site-packages), nothing fetched (--no-index),
# then some of the module's tests against the installed package (not build/python): the hook
# against DDP's allreduce, each codec's bound, DiLoCo against its reference. setup.py builds
# in build-pip-SOABI/ with ccache's objects of build/ (scripts/build.sh first makes it quick).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv=$(mktemp -d /tmp/gradwire-venv.XXXXXX)
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --no-build-isolation --no-index --quiet "$root"
cd "$root/tests/python"
"$venv/bin/python" - "$venv" <<'PY'
import sys
import gradwire
import torch
assert gradwire.__file__.startswith(sys.argv[1]), gradwire.__file__
print(f"pip install: gradwire from {gradwire.__file__}, torch {torch.__version__}")
PY
OMP_NUM_THREADS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  test_ddp_hook.py::test_none_equals_ddp_allreduce \
  test_ddp_hook.py::test_each_codec_averages_within_its_bound \
  test_diloco.py::test_outer_steps_match_the_reference
