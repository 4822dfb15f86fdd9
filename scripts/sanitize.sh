#!/usr/bin/env bash
# The torch-free layers under AddressSanitizer + UndefinedBehaviorSanitizer, built with
# clang into build-sanitize/: runs the unit tests, then every libFuzzer target for a bounded
# time from its seed corpus (fuzz/corpus/<target>/). Any sanitizer report, escaped
# exception or fuzz failure fails the script.
#
#   GRADWIRE_FUZZ_SECONDS  seconds per fuzz target (default 5; run longer by hand, e.g. 600)
#   GRADWIRE_JOBS          build parallelism (default 2)
#
# Crashing inputs are kept under build-sanitize/fuzz-findings/<target>/ for reproduction:
#   build-sanitize/fuzz/fuzz_codec_sparse build-sanitize/fuzz-findings/fuzz_codec_sparse/crash-*
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${GRADWIRE_JOBS:-2}"
seconds="${GRADWIRE_FUZZ_SECONDS:-5}"
build=build-sanitize

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGRADWIRE_WITH_TORCH=OFF -DGRADWIRE_SANITIZE=ON -DGRADWIRE_BUILD_FUZZERS=ON
cmake --build "$build" -j "$jobs"

symbolizer="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
[ -n "$symbolizer" ] || symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
export ASAN_SYMBOLIZER_PATH="$symbolizer"
export ASAN_OPTIONS="abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

echo "sanitize: unit tests under ASan+UBSan"
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600)

echo "sanitize: fuzzing each target for ${seconds} s"
for target in fuzz_codec_float fuzz_codec_sparse fuzz_codec_quantizer fuzz_codec_spectral \
              fuzz_codec_lowrank fuzz_spec fuzz_ps_message fuzz_gossip_message \
              fuzz_server_checkpoint; do
  seeds="fuzz/corpus/${target#fuzz_codec_}"
  [ "$target" = fuzz_spec ] && seeds=fuzz/corpus/spec
  [ "$target" = fuzz_ps_message ] && seeds=fuzz/corpus/ps
  [ "$target" = fuzz_gossip_message ] && seeds=fuzz/corpus/gossip
  [ "$target" = fuzz_server_checkpoint ] && seeds=fuzz/corpus/server_checkpoint
  findings="$build/fuzz-findings/$target"
  work="$(mktemp -d)"
  mkdir -p "$findings"
  # New inputs go to a scratch directory; the committed seeds are only read.
  if ! "$build/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$findings/" "$work" "$seeds" \
       >"$findings/log.txt" 2>&1; then
    tail -n 60 "$findings/log.txt"
    echo "sanitize: $target failed; the crashing input is in $findings/" >&2
    rm -rf "$work"
    exit 1
  fi
  echo "  $target: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$findings/log.txt" \
                     | awk '{print $2}') inputs, no failure"
  rm -rf "$work"
done
echo "sanitize: all passed"
