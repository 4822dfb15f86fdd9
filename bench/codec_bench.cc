// Codec throughput: bytes/s counts the float32 input (4 bytes per element) for every
// benchmark, so the numbers compare directly across codecs.
//
//   gradwire_codec_bench --benchmark_filter=TopK
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "gradwire/compress/registry.h"
#include "gradwire/compress/topk_select.h"

namespace gradwire::compress {
namespace {

std::vector<float> gradient(size_t n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TensorInfo tensor_of(size_t n) {
  return TensorInfo{"bench", {static_cast<int64_t>(n)}, LayerKind::kOther};
}

void set_throughput(benchmark::State& state, size_t n) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n) * 4);
}

// encode() (with ef=1 this is r += g and encode_residual).
void BM_Encode(benchmark::State& state, const char* spec) {
  const auto n = static_cast<size_t>(state.range(0));
  auto codec = create_codec(spec, tensor_of(n));
  const auto g = gradient(n);
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

void BM_DecodeAdd(benchmark::State& state, const char* spec) {
  const auto n = static_cast<size_t>(state.range(0));
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

// Additive face: to_wire with a scale (fp32 / fp16 allreduce preparation).
void BM_ToWire(benchmark::State& state, const char* spec) {
  const auto n = static_cast<size_t>(state.range(0));
  auto codec = create_codec(spec, tensor_of(n));
  const auto g = gradient(n);
  std::vector<uint8_t> wire(4 * n);
  for (auto _ : state) {
    codec->to_wire(g, 0.25f, wire.data());
    benchmark::DoNotOptimize(wire.data());
  }
  set_throughput(state, n);
}

// Top-k selection alone: nth_element reference vs radix select; range(1) = 1/density.
void BM_TopKNthElement(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  const size_t k = n / static_cast<size_t>(state.range(1));
  const auto g = gradient(n);
  TopKSelector selector;
  std::vector<uint32_t> indices;
  for (auto _ : state) {
    selector.select_nth_element(g, k, indices);
    benchmark::DoNotOptimize(indices.data());
  }
  set_throughput(state, n);
}

void BM_TopKRadix(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  const size_t k = n / static_cast<size_t>(state.range(1));
  const auto g = gradient(n);
  TopKSelector selector;
  std::vector<uint32_t> indices;
  for (auto _ : state) {
    selector.select_radix(g, k, indices);
    benchmark::DoNotOptimize(indices.data());
  }
  set_throughput(state, n);
}

constexpr int64_t kSmall = 1 << 16;
constexpr int64_t kLarge = 1 << 22;

struct CodecCase {
  const char* label;
  const char* spec;
};

// Registered from a table (before benchmark_main's main() runs).
const bool kRegistered = [] {
  const CodecCase encode_cases[] = {{"none", "none"},
                                    {"fp16", "fp16"},
                                    {"topk_0.01_ef0", "topk:density=0.01,ef=0"},
                                    {"topk_0.01_ef1", "topk:density=0.01,ef=1"},
                                    {"topk_0.001_ef1", "topk:density=0.001,ef=1"},
                                    {"topk_0.1_ef1", "topk:density=0.1,ef=1"},
                                    {"2bit_ef0", "2bit:ef=0"},
                                    {"2bit_ef1", "2bit:ef=1"}};
  const CodecCase decode_cases[] = {{"none", "none"},
                                    {"fp16", "fp16"},
                                    {"topk_0.01", "topk:density=0.01"},
                                    {"topk_0.1_bitmap", "topk:density=0.1"},
                                    {"2bit", "2bit"}};
  const CodecCase wire_cases[] = {{"none", "none"}, {"fp16", "fp16"}};
  const auto add = [](const std::string& name, auto fn, const char* spec) {
    benchmark::RegisterBenchmark(name.c_str(), fn, spec)
        ->Arg(kSmall)
        ->Arg(kLarge)
        ->Unit(benchmark::kMicrosecond);
  };
  for (const auto& c : encode_cases) add(std::string("BM_Encode/") + c.label, BM_Encode, c.spec);
  for (const auto& c : decode_cases) {
    add(std::string("BM_DecodeAdd/") + c.label, BM_DecodeAdd, c.spec);
  }
  for (const auto& c : wire_cases) add(std::string("BM_ToWire/") + c.label, BM_ToWire, c.spec);
  return true;
}();

BENCHMARK(BM_TopKNthElement)
    ->ArgsProduct({{1 << 12, 1 << 14, 1 << 15, 3 << 14, kSmall, 1 << 18, kLarge}, {100, 1000}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopKRadix)
    ->ArgsProduct({{1 << 12, 1 << 14, 1 << 15, 3 << 14, kSmall, 1 << 18, kLarge}, {100, 1000}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gradwire::compress
