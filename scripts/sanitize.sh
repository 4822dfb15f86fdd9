#!/usr/bin/env bash
# Three sanitized builds, with clang, each in a directory of its own:
#  1. build-sanitize/: the torch-free layers under AddressSanitizer + UndefinedBehavior-
#     Sanitizer: the unit tests, then every libFuzzer target for a bounded time from its
#     seed corpus (fuzz/corpus/<target>/).
#  2. build-sanitize-torch/: the torch layer (DistributedOptimizer, its exchange, the
#     checkpoints, Gloo collectives) under ASan + UBSan: gradwire's code is instrumented,
#     libtorch is not, and ASan sees every heap access of instrumented code. With gcc:
#     clang 14 does not compile libtorch 1.13's headers in C++20.
#  3. build-tsan/: the threads of the exchange (the allreduce strategy's executor, ordered
#     collectives), gossip and the parameter server under ThreadSanitizer (torch-free).
# Any sanitizer report, escaped exception or fuzz failure fails the script.
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
echo "sanitize: the torch layer under ASan+UBSan"
torch_build=build-sanitize-torch
CC=gcc CXX=g++ cmake -S . -B "$torch_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGRADWIRE_SANITIZE=ON -DGRADWIRE_BUILD_BENCH=OFF
cmake --build "$torch_build" -j "$jobs" --target gradwire_torch_tests
# libtorch keeps allocations until exit and is not instrumented (its std::vector
# annotations would be half-seen): leaks and container overflow are not checked here.
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0:detect_container_overflow=0" \
  "$torch_build/tests/gradwire_torch_tests" \
  --gtest_filter='DistributedOptimizer*:DdpParity*:OptimizerCheckpoint*:DistributedSampler*:Gloo*:ExchangeFaults*:DdpCommHook*'

echo "sanitize: the exchange threads, gossip and the parameter server under TSan"
tsan_build=build-tsan
CC=clang CXX=clang++ cmake -S . -B "$tsan_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGRADWIRE_WITH_TORCH=OFF -DGRADWIRE_TSAN=ON
cmake --build "$tsan_build" -j "$jobs" --target gradwire_unit_tests
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp" \
  "$tsan_build/tests/gradwire_unit_tests" \
  --gtest_filter='AllreduceStrategyTest*:*MeasuredLayoutTest*:SparseAggregationTest*:OrderedCollectives*:LocalCollectives*:Gossip*:ParameterServer*:CheckpointTest*:AutoTest*:AccordionTest*:ZmqTransportTest*:TransportTest*'
echo "sanitize: all passed"
