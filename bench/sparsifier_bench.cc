// Sparsifier throughput at density 0.001 on Laplace-distributed input (b = 1e-3), 1M and 25M
// floats. Bytes/s counts the float32 input (4 bytes per element) everywhere.
//
//   <codec>/encode/<size>     encode() of the bare codec (ef=0): selection + payload
//   <codec>/encode_ef/<size>  encode() with error feedback (the default spec): r += g first
//   <codec>/decode/<size>     decode_add() of one payload
//   ref/memcpy/<size>         copy of the same array (the streaming floor)
//   ref/nth_element/<size>    exact top-k by std::nth_element on |a| (TopKSelector)
//
//   gradwire_bench_codecs --benchmark_filter='^(ref/(memcpy|nth_element)|laplace)'
// Counters: selected (entries sent), counts (threshold counts), passes (streaming passes).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/registry.h"
#include "gradwire/compress/sparsifiers.h"
#include "gradwire/compress/topk_select.h"

namespace gradwire::compress {
namespace {

constexpr double kDensity = 0.001;
constexpr const char* kDensitySpec = "density=0.001";
constexpr float kScale = 1e-3f;  // Laplace b

// Laplace(0, b) by inversion; generated once per size and shared by every benchmark.
const std::vector<float>& laplace_input(size_t n) {
  static std::map<size_t, std::vector<float>> cache;
  auto it = cache.find(n);
  if (it == cache.end()) {
    std::mt19937_64 rng(2024);
    std::vector<float> v(n);
    for (auto& x : v) {
      // u uniform in (-0.5, 0.5): x = -b sgn(u) ln(1 - 2|u|)
      const double u = (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53 - 0.5;
      x = static_cast<float>(-kScale * std::copysign(std::log1p(-2.0 * std::fabs(u)), u));
    }
    it = cache.emplace(n, std::move(v)).first;
  }
  return it->second;
}

TensorInfo tensor_of(size_t n) {
  return TensorInfo{"bench.weight", {static_cast<int64_t>(n)}, LayerKind::kOther};
}

void set_throughput(benchmark::State& state, size_t n) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n) * 4);
}

void report_selection(benchmark::State& state, const Codec& codec) {
  if (const SelectionStats* s = selection_stats(codec)) {
    state.counters["selected"] = static_cast<double>(s->selected);
    state.counters["k"] = static_cast<double>(s->target);
    state.counters["counts"] = s->counts;
    state.counters["passes"] = s->full_passes;
  }
}

// With error feedback a constant gradient would drive the residual to a sawtooth that no
// gradient has, so each step reads a window of twice-as-long input at a random offset: every
// coordinate then sees a fresh Laplace draw (up to the window's overlap) per step.
void BM_Encode(benchmark::State& state, std::string spec, size_t n) {
  auto codec = create_codec(spec, tensor_of(n));
  const auto& input = laplace_input(2 * n);
  std::mt19937_64 rng(7);
  const auto gradient = [&] { return std::span<const float>(input).subspan(rng() % n, n); };
  Bytes out;
  for (int warm = 0; warm < 3; ++warm) {  // steady state: buffers grown, residual allocated
    out.clear();
    codec->encode(gradient(), out);
  }
  for (auto _ : state) {
    const auto g = gradient();
    out.clear();
    codec->encode(g, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["payload_bytes"] = static_cast<double>(out.size());
  report_selection(state, *codec);
  set_throughput(state, n);
}

void BM_Decode(benchmark::State& state, std::string spec, size_t n) {
  auto codec = create_codec(spec, tensor_of(n));
  Bytes payload;
  codec->encode(std::span<const float>(laplace_input(2 * n)).first(n), payload);
  std::vector<float> accum(n, 0.0f);
  for (auto _ : state) {
    codec->decode_add(payload, accum);
    benchmark::DoNotOptimize(accum.data());
  }
  set_throughput(state, n);
}

void BM_Memcpy(benchmark::State& state, size_t n) {
  const auto g = std::span<const float>(laplace_input(2 * n)).first(n);
  std::vector<float> copy(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(copy.data(), g.data(), 4 * n);
    benchmark::DoNotOptimize(copy.data());
    benchmark::ClobberMemory();
  }
  set_throughput(state, n);
}

void BM_NthElement(benchmark::State& state, size_t n) {
  const auto g = std::span<const float>(laplace_input(2 * n)).first(n);
  const size_t k = static_cast<size_t>(std::ceil(kDensity * static_cast<double>(n)));
  TopKSelector selector;
  std::vector<uint32_t> indices;
  selector.select_nth_element(g, k, indices);
  for (auto _ : state) {
    selector.select_nth_element(g, k, indices);
    benchmark::DoNotOptimize(indices.data());
  }
  set_throughput(state, n);
}

const bool kRegistered = [] {
  const std::pair<const char*, size_t> sizes[] = {{"1M", 1000000}, {"25M", 25000000}};
  const char* codecs[] = {"laplace-topk", "gaussiank", "randomk", "dgc", "topk"};
  for (const auto& [label, n] : sizes) {
    const std::string size = std::string("/") + label;
    benchmark::RegisterBenchmark(("ref/memcpy" + size).c_str(), BM_Memcpy, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("ref/nth_element" + size).c_str(), BM_NthElement, n)
        ->Unit(benchmark::kMillisecond);
    for (const char* name : codecs) {
      const std::string base = std::string(name) + ":" + kDensitySpec;
      benchmark::RegisterBenchmark((name + std::string("/encode") + size).c_str(), BM_Encode,
                                   base + ",ef=0", n)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark((name + std::string("/encode_ef") + size).c_str(), BM_Encode,
                                   base, n)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark((name + std::string("/decode") + size).c_str(), BM_Decode,
                                   base + ",ef=0", n)
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

}  // namespace
}  // namespace gradwire::compress
