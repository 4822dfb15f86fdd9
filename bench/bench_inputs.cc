#include "bench_inputs.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <mutex>
#include <random>

#include "gradwire/fashion_mnist.h"
#include "gradwire/train/models.h"

namespace gradwire::bench {
namespace {

constexpr double kLaplaceScale = 1e-3;
constexpr int kCnnSteps = 200;
constexpr int64_t kCnnBatch = 32;

std::vector<float> laplace_draws(size_t n) {
  std::mt19937_64 rng(2024);
  std::vector<float> v(n);
  for (auto& x : v) {
    // u uniform in (-0.5, 0.5): x = -b sgn(u) ln(1 - 2|u|)
    const double u = (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53 - 0.5;
    x = static_cast<float>(-kLaplaceScale * std::copysign(std::log1p(-2.0 * std::fabs(u)), u));
  }
  return v;
}

// Trains the CNN for kCnnSteps steps, then appends fc1.weight's gradient on two more
// batches.
std::vector<float> cnn_fc1_gradients() {
  torch::manual_seed(0);
  at::set_num_threads(1);
  const Dataset data = load_fashion_mnist(kFashionMnistDir, true);
  auto model = train::make_classifier("cnn");
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto batch = [&](int64_t step) {
    const int64_t start = (step * kCnnBatch) % (static_cast<int64_t>(data.size()) - kCnnBatch);
    return std::pair{data.images.narrow(0, start, kCnnBatch),
                     data.labels.narrow(0, start, kCnnBatch)};
  };
  const auto backward = [&](int64_t step) {
    sgd.zero_grad();
    auto [x, y] = batch(step);
    torch::nll_loss(torch::log_softmax(model->forward(x), 1), y).backward();
  };
  for (int step = 0; step < kCnnSteps; ++step) {
    backward(step);
    sgd.step();
  }
  at::Tensor fc1;
  for (const auto& p : model->named_parameters()) {
    if (p.key() == "fc1.weight") fc1 = p.value();
  }
  std::vector<float> out;
  for (int extra = 0; extra < 2; ++extra) {
    backward(kCnnSteps + extra);
    const at::Tensor g = fc1.grad().contiguous();
    out.insert(out.end(), g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
  }
  return out;
}

}  // namespace

const std::vector<BenchInput>& bench_inputs() {
  using compress::LayerKind;
  static const std::vector<BenchInput> inputs{
      {"1M", 1000000, {"bench.weight", {1000, 1000}, LayerKind::kFcWeight}},
      {"25M", 25000000, {"bench.weight", {1000, 25000}, LayerKind::kFcWeight}},
      {"cnn_fc1", 128 * 1024, {"fc1.weight", {128, 1024}, LayerKind::kFcWeight}},
  };
  return inputs;
}

std::span<const float> window(const BenchInput& input) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<float>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(input.label);
  if (it == cache.end()) {
    auto data = input.label == "cnn_fc1" ? cnn_fc1_gradients() : laplace_draws(2 * input.n);
    it = cache.emplace(input.label, std::move(data)).first;
  }
  return it->second;
}

std::optional<std::span<const float>> window_or_skip(benchmark::State& state,
                                                     const BenchInput& input) {
  try {
    return window(input);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return std::nullopt;
  }
}

}  // namespace gradwire::bench
