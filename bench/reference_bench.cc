// The references every codec is measured against, on the same inputs (bench_inputs.h):
//   ref/memcpy/<size>        copy of the gradient: one read and one write at memory speed,
//                            the floor for any codec that reads its input once
//   ref/nth_element/<size>   exact top-k (k = ceil(0.001 N), by magnitude) with
//                            std::nth_element, what a hand-written C++ top-k does
//   ref/torch_topk/<size>    torch::topk of |g| (same k) on one thread, what a libtorch user
//                            would call
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench_inputs.h"
#include "gradwire/compress/sparsify/topk_select.h"

namespace gradwire::bench {
namespace {

constexpr double kDensity = 0.001;

size_t k_of(size_t n) { return static_cast<size_t>(std::ceil(kDensity * static_cast<double>(n))); }

void set_throughput(benchmark::State& state, size_t n) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n) * 4);
}

// Runs `body(gradient)` as the benchmark loop, or skips when the input cannot be made.
template <typename Body>
void with_input(benchmark::State& state, const BenchInput& input, Body body) {
  const auto data = window_or_skip(state, input);
  if (!data) return;
  body(data->first(input.n));
  set_throughput(state, input.n);
}

void BM_Memcpy(benchmark::State& state, const BenchInput* input) {
  with_input(state, *input, [&](std::span<const float> g) {
    std::vector<float> copy(g.size(), 0.0f);
    for (auto _ : state) {
      std::memcpy(copy.data(), g.data(), g.size_bytes());
      benchmark::DoNotOptimize(copy.data());
      benchmark::ClobberMemory();
    }
  });
}

void BM_NthElement(benchmark::State& state, const BenchInput* input) {
  with_input(state, *input, [&](std::span<const float> g) {
    compress::TopKSelector selector;
    std::vector<uint32_t> indices;
    selector.select_nth_element(g, k_of(g.size()), indices);
    for (auto _ : state) {
      selector.select_nth_element(g, k_of(g.size()), indices);
      benchmark::DoNotOptimize(indices.data());
    }
  });
}

void BM_TorchTopK(benchmark::State& state, const BenchInput* input) {
  with_input(state, *input, [&](std::span<const float> g) {
    at::set_num_threads(1);  // the targets are per core
    const at::Tensor t =
        at::from_blob(const_cast<float*>(g.data()), {static_cast<int64_t>(g.size())}, at::kFloat);
    const auto k = static_cast<int64_t>(k_of(g.size()));
    for (auto _ : state) {
      auto [values, indices] = at::topk(t.abs(), k);
      benchmark::DoNotOptimize(indices.data_ptr());
    }
  });
}

const bool kRegistered = [] {
  for (const BenchInput& input : bench_inputs()) {
    const std::string size = "/" + input.label;
    benchmark::RegisterBenchmark(("ref/memcpy" + size).c_str(), BM_Memcpy, &input)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("ref/nth_element" + size).c_str(), BM_NthElement, &input)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("ref/torch_topk" + size).c_str(), BM_TorchTopK, &input)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace gradwire::bench
