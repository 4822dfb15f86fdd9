// Encode and decode throughput of every codec on the inputs of bench_inputs.h, one core.
// bytes/s counts the float32 input (4 bytes per element), so every row compares directly
// with ref/memcpy on the same input (reference_bench.cc).
//
//   <codec>/encode/<size>     encode() of the bare codec (ef=0)
//   <codec>/encode_ef/<size>  encode() with error feedback (ef=1: r += g, encode, r = a -
//                             D(C(a))), for the codecs whose design has it
//   <codec>/decode/<size>     decode_add() of one payload into an accumulator
//   <codec>/to_wire/<size>    the additive face (allreduce path): scale and convert
//
// Sparsifiers run at density 0.001 (the design's targets); every other codec at its
// defaults, and PowerSGD also at rank 16 (what auto and the e2e matrices run on gpt; its
// products cost n m r). Counters: payload_bytes, ratio (input bytes / payload bytes) and, for the
// threshold sparsifiers, the selected count against k and the passes over the input.
//
//   gradwire bench codecs --filter 'laplace-topk|ref' --size 25M
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "bench_inputs.h"
#include "gradwire/compress/registry.h"
#include "gradwire/compress/sparsify/sparsifiers.h"

namespace gradwire::bench {
namespace {

using compress::Codec;
using compress::create_codec;

struct CodecBench {
  const char* name;     // benchmark name prefix: the codec's spec name
  const char* spec;     // the bare codec
  const char* spec_ef;  // with error feedback; nullptr when the design has none
  bool additive;        // also time to_wire
};

const CodecBench kCodecs[] = {
    {"none", "none", nullptr, true},
    {"fp16", "fp16", nullptr, true},
    {"bf16", "bf16", nullptr, false},
    {"topk", "topk:density=0.001,ef=0", "topk:density=0.001,ef=1", false},
    {"laplace-topk", "laplace-topk:density=0.001,ef=0", "laplace-topk:density=0.001,ef=1", false},
    {"gaussiank", "gaussiank:density=0.001,ef=0", "gaussiank:density=0.001,ef=1", false},
    {"dgc", "dgc:density=0.001,ef=0", "dgc:density=0.001,ef=1", false},
    {"randomk", "randomk:density=0.001,ef=0", "randomk:density=0.001,ef=1", false},
    {"filter-topk", "filter-topk:ef=0", "filter-topk:ef=1", false},
    {"2bit", "2bit:ef=0", "2bit:ef=1", false},
    {"qsgd", "qsgd", nullptr, false},
    {"int8", "int8:ef=0", "int8:ef=1", false},
    {"int4", "int4:ef=0", "int4:ef=1", false},
    {"terngrad", "terngrad", nullptr, false},
    {"signsgd", "signsgd:ef=0", "signsgd:ef=1", false},
    {"spectral", "spectral:ef=0", "spectral:ef=1", false},
    {"powersgd", "powersgd:ef=0", "powersgd:ef=1", false},
    {"powersgd-r16", "powersgd:rank=16,ef=0", "powersgd:rank=16,ef=1", false},  // gpt's rank
    {"sparseloco", "sparseloco:ef=0", "sparseloco", false},  // DiLoCo's outer gradient
};

void set_throughput(benchmark::State& state, size_t n) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n) * 4);
}

void report_payload(benchmark::State& state, const Codec& codec, size_t n, size_t bytes) {
  state.counters["payload_bytes"] = static_cast<double>(bytes);
  state.counters["ratio"] = 4.0 * static_cast<double>(n) / static_cast<double>(bytes);
  if (const auto* s = compress::selection_stats(codec)) {
    state.counters["selected"] = static_cast<double>(s->selected);
    state.counters["k"] = static_cast<double>(s->target);
    state.counters["passes"] = s->full_passes;
  }
}

// Each iteration encodes a random n-long span of the input's 2n window (bench_inputs.h).
void BM_Encode(benchmark::State& state, const BenchInput* input, std::string spec) {
  const size_t n = input->n;
  const auto data = window_or_skip(state, *input);
  if (!data) return;
  auto codec = create_codec(spec, input->tensor);
  std::mt19937_64 rng(7);
  const auto gradient = [&] { return data->subspan(rng() % (n + 1), n); };
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
  report_payload(state, *codec, n, out.size());
  set_throughput(state, n);
}

void BM_Decode(benchmark::State& state, const BenchInput* input, std::string spec) {
  const auto data = window_or_skip(state, *input);
  if (!data) return;
  const auto g = data->first(input->n);
  auto codec = create_codec(spec, input->tensor);
  Bytes payload;
  codec->encode(g, payload);
  std::vector<float> accum(input->n, 0.0f);
  for (auto _ : state) {
    codec->decode_add(payload, accum);
    benchmark::DoNotOptimize(accum.data());
  }
  report_payload(state, *codec, input->n, payload.size());
  set_throughput(state, input->n);
}

void BM_ToWire(benchmark::State& state, const BenchInput* input, std::string spec) {
  const auto data = window_or_skip(state, *input);
  if (!data) return;
  const auto g = data->first(input->n);
  auto codec = create_codec(spec, input->tensor);
  std::vector<float> wire(input->n);  // large enough for every wire type
  for (auto _ : state) {
    codec->to_wire(g, 0.25f, wire.data());
    benchmark::DoNotOptimize(wire.data());
  }
  set_throughput(state, input->n);
}

const bool kRegistered = [] {
  for (const BenchInput& input : bench_inputs()) {
    const std::string size = "/" + input.label;
    const auto add = [&](const std::string& name, auto fn, const char* spec) {
      benchmark::RegisterBenchmark(name.c_str(), fn, &input, std::string(spec))
          ->Unit(benchmark::kMillisecond);
    };
    for (const CodecBench& c : kCodecs) {
      const std::string prefix = c.name;
      add(prefix + "/encode" + size, BM_Encode, c.spec);
      if (c.spec_ef != nullptr) add(prefix + "/encode_ef" + size, BM_Encode, c.spec_ef);
      add(prefix + "/decode" + size, BM_Decode, c.spec);
      if (c.additive) add(prefix + "/to_wire" + size, BM_ToWire, c.spec);
    }
  }
  return true;
}();

}  // namespace
}  // namespace gradwire::bench
