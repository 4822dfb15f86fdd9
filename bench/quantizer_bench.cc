// Quantizer throughput on Laplace-distributed gradients (b = 1e-3), one core:
//
//   <spec-name>/encode/<size>   encode() of a fresh gradient (with the spec's default error
//                               feedback: r += g, then encode_residual(r))
//   <spec-name>/decode/<size>   decode_add() of one payload into an accumulator
//   (ref/memcpy/<size>, copying the input once, is registered by sparsifier_bench.cc)
//
// bytes/s counts the float32 input (4 bytes per element) everywhere, so rows compare
// directly; the issue target is 2bit/encode/25M no slower than 4x ref/memcpy/25M.
//
//   gradwire_codec_bench --benchmark_filter='^(ref|2bit|qsgd|terngrad|signsgd|bf16)/'
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gradwire/compress/registry.h"

namespace gradwire::compress {
namespace {

constexpr size_t k1M = 1'000'000;
constexpr size_t k25M = 25'000'000;

// Laplace(0, b) by inverse CDF from the raw 32-bit mt19937 stream (no std:: distributions,
// so every standard library produces the same gradient).
std::vector<float> laplace_gradient(size_t n, double b = 1e-3) {
  std::mt19937 rng(42);
  std::vector<float> v(n);
  for (auto& x : v) {
    const double u = (static_cast<double>(rng()) + 0.5) / 4294967296.0 - 0.5;  // (-0.5, 0.5)
    x = static_cast<float>(-b * std::copysign(1.0, u) * std::log(1.0 - 2.0 * std::fabs(u)));
  }
  return v;
}

// One gradient per size, drawn on first use and shared by every benchmark (25M floats take
// a while to draw).
const std::vector<float>& gradient(size_t n) {
  if (n == k1M) {
    static const std::vector<float> small = laplace_gradient(k1M);
    return small;
  }
  static const std::vector<float> large = laplace_gradient(k25M);
  return large;
}

TensorInfo tensor_of(size_t n) {
  return TensorInfo{"bench.weight", {static_cast<int64_t>(n)}, LayerKind::kOther};
}

void set_throughput(benchmark::State& state, size_t n) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n) * 4);
}

void BM_Encode(benchmark::State& state, const std::string& spec, size_t n) {
  auto codec = create_codec(spec, tensor_of(n));
  const auto& g = gradient(n);
  Bytes out;
  codec->encode(g, out);  // steady state: residual allocated, output buffer grown
  for (auto _ : state) {
    out.clear();
    codec->encode(g, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["payload_bytes"] = static_cast<double>(out.size());
  set_throughput(state, n);
}

void BM_Decode(benchmark::State& state, const std::string& spec, size_t n) {
  auto codec = create_codec(spec, tensor_of(n));
  Bytes payload;
  codec->encode(gradient(n), payload);
  std::vector<float> accum(n, 0.0f);
  for (auto _ : state) {
    codec->decode_add(payload, accum);
    benchmark::DoNotOptimize(accum.data());
  }
  set_throughput(state, n);
}

// Registered from a table (before benchmark_main's main() runs).
const bool kRegistered = [] {
  const struct {
    size_t n;
    const char* label;
  } sizes[] = {{k1M, "1M"}, {k25M, "25M"}};
  const char* specs[] = {"2bit", "qsgd", "terngrad", "signsgd", "bf16"};
  for (const auto& size : sizes) {
    for (const char* spec : specs) {
      const std::string name = std::string(spec) + "/";
      benchmark::RegisterBenchmark((name + "encode/" + size.label).c_str(), BM_Encode,
                                   std::string(spec), size.n)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark((name + "decode/" + size.label).c_str(), BM_Decode,
                                   std::string(spec), size.n)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return true;
}();

}  // namespace
}  // namespace gradwire::compress
