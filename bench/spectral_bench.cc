// `spectral` codec throughput at its defaults (theta 0.9, chunk 65536, 8 bits) on
// Laplace-distributed input (b = 1e-3), 1M and 25M floats. Bytes/s counts the float32 input.
//
//   spectral/encode/<size>     encode() of the bare codec (ef=0): FFT, selection, payload
//   spectral/encode_ef/<size>  encode() with ef=1: r += g, then encode_residual (one more
//                              inverse FFT per chunk)
//   spectral/decode/<size>     decode_add() of one payload
//
//   gradwire bench codecs --filter spectral
// Counters: payload_bytes, ratio (input bytes / payload bytes).
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gradwire/compress/registry.h"

namespace gradwire::compress {
namespace {

// Laplace(0, b) by inversion; generated once per size.
const std::vector<float>& laplace_input(size_t n) {
  static std::map<size_t, std::vector<float>> cache;
  auto it = cache.find(n);
  if (it == cache.end()) {
    std::mt19937_64 rng(2024);
    std::vector<float> v(n);
    for (auto& x : v) {
      // u uniform in (-0.5, 0.5): x = -b sgn(u) ln(1 - 2|u|)
      const double u = (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53 - 0.5;
      x = static_cast<float>(-1e-3 * std::copysign(std::log1p(-2.0 * std::fabs(u)), u));
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

void BM_Encode(benchmark::State& state, const std::string& spec, size_t n) {
  auto codec = create_codec(spec, tensor_of(n));
  const auto& g = laplace_input(n);
  Bytes out;
  codec->encode(g, out);  // steady state: residual allocated, output buffer grown
  for (auto _ : state) {
    out.clear();
    codec->encode(g, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["payload_bytes"] = static_cast<double>(out.size());
  state.counters["ratio"] = 4.0 * static_cast<double>(n) / static_cast<double>(out.size());
  set_throughput(state, n);
}

void BM_Decode(benchmark::State& state, const std::string& spec, size_t n) {
  auto codec = create_codec(spec, tensor_of(n));
  Bytes payload;
  codec->encode(laplace_input(n), payload);
  std::vector<float> accum(n, 0.0f);
  for (auto _ : state) {
    codec->decode_add(payload, accum);
    benchmark::DoNotOptimize(accum.data());
  }
  set_throughput(state, n);
}

const bool kRegistered = [] {
  const std::pair<const char*, size_t> sizes[] = {{"1M", 1000000}, {"25M", 25000000}};
  for (const auto& [label, n] : sizes) {
    const std::string size = std::string("/") + label;
    benchmark::RegisterBenchmark(("spectral/encode" + size).c_str(), BM_Encode,
                                 std::string("spectral:ef=0"), n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("spectral/encode_ef" + size).c_str(), BM_Encode,
                                 std::string("spectral:ef=1"), n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("spectral/decode" + size).c_str(), BM_Decode,
                                 std::string("spectral:ef=0"), n)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace gradwire::compress
