// Exact top-k selection kernels across sizes, the measurement behind
// TopKSelector::kRadixMinSize (topk_select.h):
//   select/nth_element/<n>/<1/density>   std::nth_element on the magnitude keys
//   select/radix/<n>/<1/density>         radix select (two histogram passes)
// on normal draws, one core:  gradwire bench codecs --filter 'select/'
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "gradwire/compress/sparsify/topk_select.h"

namespace gradwire::bench {
namespace {

std::vector<float> normal_draws(size_t n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <bool kRadix>
void BM_Select(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  const size_t k = n / static_cast<size_t>(state.range(1));
  const auto g = normal_draws(n);
  compress::TopKSelector selector;
  std::vector<uint32_t> indices;
  for (auto _ : state) {
    if constexpr (kRadix) {
      selector.select_radix(g, k, indices);
    } else {
      selector.select_nth_element(g, k, indices);
    }
    benchmark::DoNotOptimize(indices.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n) * 4);
}

const bool kRegistered = [] {
  const std::vector<int64_t> sizes{1 << 12, 1 << 14, 1 << 15, 3 << 14, 1 << 16, 1 << 18, 1 << 22};
  benchmark::RegisterBenchmark("select/nth_element", BM_Select<false>)
      ->ArgsProduct({sizes, {100, 1000}})
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("select/radix", BM_Select<true>)
      ->ArgsProduct({sizes, {100, 1000}})
      ->Unit(benchmark::kMicrosecond);
  return true;
}();

}  // namespace
}  // namespace gradwire::bench
