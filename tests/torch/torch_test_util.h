// Shared by the DistributedOptimizer tests: a small model, a deterministic problem that
// every rank and the single-process reference train on, and contexts over real Gloo.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../common/forwarding_collectives.h"
#include "../common/gloo_harness.h"
#include "gradwire/context.h"

namespace gradwire {

struct SmallNet : torch::nn::Module {
  SmallNet() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    fc = register_module("fc", torch::nn::Linear(4 * 6 * 6, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(torch::relu(conv(x)).flatten(1)); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};

// SmallNet with a BatchNorm: buffers to keep equal and to checkpoint.
struct BatchNormNet : torch::nn::Module {
  BatchNormNet() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * 6 * 6, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(torch::relu(bn(conv(x))).flatten(1)); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

// Deterministic data and initial weights shared by every rank and the reference run.
struct Problem {
  torch::Tensor x, y;
  std::vector<torch::Tensor> init;
  Problem() {
    torch::manual_seed(42);
    x = torch::randn({64, 1, 8, 8});
    y = torch::randint(0, 5, {64});
    SmallNet net;
    for (auto& p : net.parameters()) init.push_back(p.detach().clone());
  }
  std::shared_ptr<SmallNet> fresh_net(float perturb = 0) const {
    auto net = std::make_shared<SmallNet>();
    torch::NoGradGuard no_grad;
    auto params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(init[i] + perturb);
    return net;
  }
};

// Rank `rank`'s share of step `step` when every step takes `batch` samples a rank from the
// problem's 64 in order, `world` ranks: samples [(step world + rank) batch, + batch), mod 64.
inline torch::Tensor rank_batch_x(const Problem& p, int step, int rank, int world = 2,
                                  int batch = 8) {
  const int64_t begin = (step * world + rank) * batch % 64;
  return p.x.slice(0, begin, begin + batch);
}
inline torch::Tensor rank_batch_y(const Problem& p, int step, int rank, int world = 2,
                                  int batch = 8) {
  const int64_t begin = (step * world + rank) * batch % 64;
  return p.y.slice(0, begin, begin + batch);
}

template <typename Net>
std::vector<torch::Tensor> train(const Problem& problem, Net& net,
                                 const std::function<void()>& zero_grad,
                                 const std::function<void()>& step, int rank, int world, int batch,
                                 int steps) {
  for (int s = 0; s < steps; ++s) {
    // Step s uses samples [s*batch*world, (s+1)*batch*world); rank r takes its slice.
    const int64_t begin = (s * batch * world + rank * batch) % 64;
    auto x = problem.x.slice(0, begin, begin + batch);
    auto y = problem.y.slice(0, begin, begin + batch);
    zero_grad();
    torch::nn::functional::cross_entropy(net.forward(x), y).backward();
    step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : net.parameters()) out.push_back(p.detach().clone());
  return out;
}

inline std::shared_ptr<Context> context_for(int rank, int world,
                                            std::unique_ptr<comm::Collectives>& collectives) {
  return std::make_shared<Context>(rank, world, rank, std::move(collectives));
}

// The message of what `fn` throws; "" when it returns.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline std::shared_ptr<Context> solo_context() {
  return std::make_shared<Context>(0, 1, 0,
                                   comm::connect(comm::WorldInfo{}, testing::quick_timeouts()));
}

}  // namespace gradwire
