// References the codecs are measured against, on the same Laplace input (b = 1e-3):
//   ref/torch_topk/<size>   torch::topk (k = 0.001 N, by magnitude) on one thread
// ref/memcpy and ref/nth_element live in sparsifier_bench.cc.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

namespace {

at::Tensor laplace_tensor(int64_t n) {
  std::mt19937_64 rng(7);
  std::exponential_distribution<float> exp(1.0f / 1e-3f);
  std::bernoulli_distribution sign(0.5);
  at::Tensor t = at::empty({n}, at::kFloat);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = sign(rng) ? exp(rng) : -exp(rng);
  return t;
}

void BM_TorchTopK(benchmark::State& state, int64_t n) {
  at::set_num_threads(1);  // the targets are per core
  const at::Tensor input = laplace_tensor(n);
  const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(0.001 * n)));
  for (auto _ : state) {
    auto [values, indices] = at::topk(input.abs(), k);
    benchmark::DoNotOptimize(indices.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

const bool registered = [] {
  const std::pair<const char*, int64_t> sizes[] = {{"1M", 1000000}, {"25M", 25000000}};
  for (const auto& [label, n] : sizes) {
    benchmark::RegisterBenchmark((std::string("ref/torch_topk/") + label).c_str(), BM_TorchTopK, n)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
