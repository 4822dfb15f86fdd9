#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install, build, then train the built-in
# CNN on Fashion-MNIST with 4 local workers (default codec). Extra arguments go to
# `gradwire train`, e.g. --compressor topk:density=0.01.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# Only what it runs: the gradwire command (the tests and benchmarks are test.sh's).
GRADWIRE_TARGETS=gradwire_cli bash scripts/build.sh
mkdir -p out
exec ./build/gradwire train --workers 4 --epochs 3 --metrics out/main_job.jsonl "$@"
