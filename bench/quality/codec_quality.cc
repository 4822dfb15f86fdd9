// Prints, for every codec on the same inputs, the compression ratio (dense fp32 bytes /
// payload bytes) and the relative L2 error ||x - D(C(x))|| / ||x|| of one encode without
// error feedback, as a Markdown table. Inputs: Laplace noise (b = 1e-3, the shape of real
// gradients) shaped as a 1024 x 1024 fully-connected weight, and a smooth low-frequency
// signal of the same size.
//
// Usage: gradwire_codec_quality   (or `gradwire bench quality`)
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gradwire/compress/registry.h"

using namespace gradwire;
using namespace gradwire::compress;

namespace {

std::vector<float> laplace(size_t n) {
  std::mt19937_64 rng(11);
  std::exponential_distribution<float> exp(1.0f / 1e-3f);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> x(n);
  for (float& v : x) v = sign(rng) ? exp(rng) : -exp(rng);
  return x;
}

std::vector<float> smooth(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(n);
    x[i] =
        static_cast<float>(1e-3 * (std::sin(2 * M_PI * 3 * t) + 0.5 * std::cos(2 * M_PI * 17 * t)));
  }
  return x;
}

struct Quality {
  double ratio;
  double error;
};

Quality measure(const std::string& spec, const std::vector<float>& x) {
  const TensorInfo tensor{
      "fc.weight", {1024, static_cast<int64_t>(x.size() / 1024)}, LayerKind::kFcWeight};
  auto codec = create_codec(spec, tensor);
  Bytes payload;
  codec->encode(x, payload);
  std::vector<float> y(x.size(), 0.0f);
  codec->decode_add(payload, y);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    norm += double(x[i]) * x[i];
  }
  return {static_cast<double>(x.size() * sizeof(float)) / static_cast<double>(payload.size()),
          std::sqrt(diff / norm)};
}

}  // namespace

int main() {
  const size_t n = 1 << 20;
  const auto noise = laplace(n);
  const auto wave = smooth(n);
  const char* specs[] = {"none",
                         "fp16",
                         "bf16",
                         "int8",
                         "int4",
                         "topk:density=0.01",
                         "topk:density=0.001",
                         "laplace-topk:density=0.01",
                         "laplace-topk:density=0.001",
                         "gaussiank:density=0.001",
                         "dgc:density=0.001",
                         "randomk:density=0.001",
                         "filter-topk:rate=0.1",
                         "2bit",
                         "2bit:threshold=0.001",
                         "qsgd",
                         "terngrad",
                         "signsgd",
                         "spectral",
                         "spectral:theta=0.99",
                         "powersgd:rank=2",
                         "sparseloco"};
  std::printf("| codec (ef=0) | ratio | rel. L2 error, Laplace | rel. L2 error, smooth |\n");
  std::printf("|---|---|---|---|\n");
  for (const char* base : specs) {
    std::string spec = base;
    spec += std::string(spec.find(':') == std::string::npos ? ":" : ",") + "ef=0";
    const Quality a = measure(spec, noise);
    const Quality b = measure(spec, wave);
    std::printf("| `%s` | %.1f | %.3f | %.3f |\n", base, a.ratio, a.error, b.error);
  }
}
