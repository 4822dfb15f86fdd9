// Helpers shared by the DiLoCo strategy tests: a toy model, every rank's inner SGD step
// on a loss of its own, the options the references use, and a run through the strategy.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gradwire/comm/local_collectives.h"
#include "gradwire/strategy/diloco/diloco_strategy.h"

namespace gradwire::strategy::diloco {

using compress::LayerKind;
using compress::TensorInfo;

inline std::vector<TensorInfo> toy_tensors() {
  return {{"embed.weight", {20, 8}, LayerKind::kOther},
          {"block.weight", {8, 8}, LayerKind::kFcWeight},
          {"block.bias", {8}, LayerKind::kBias},
          {"head.weight", {8, 30}, LayerKind::kFcWeight},
          {"head.bias", {30}, LayerKind::kBias}};
}

using Model = std::vector<std::vector<float>>;

inline Model initial_model(uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal;
  Model m;
  for (const auto& t : toy_tensors()) {
    m.emplace_back(t.numel());
    for (float& v : m.back()) v = normal(rng);
  }
  return m;
}

inline FloatSpans spans(Model& m) {
  FloatSpans out;
  for (auto& t : m) out.emplace_back(t);
  return out;
}

// One inner SGD step of rank r at step s on the loss sum_i (x_i - c_{r,s,i})^2 / 2: the
// gradient depends on the parameters, so where a rank starts a step matters.
inline void inner_step(Model& m, int rank, uint64_t step, float lr = 0.1f) {
  for (size_t t = 0; t < m.size(); ++t) {
    for (size_t i = 0; i < m[t].size(); ++i) {
      const float c = std::sin(0.37f * static_cast<float>(i + 13 * t) +
                               1.3f * static_cast<float>(rank) + 0.11f * static_cast<float>(step));
      m[t][i] -= lr * (m[t][i] - c);
    }
  }
}

inline DiLoCoOptions options(uint64_t h, int fragments = 1, uint64_t delay = 0,
                             const std::string& codec = "none") {
  DiLoCoOptions o;
  o.codec = codec;
  o.inner_steps = h;
  o.fragments = fragments;
  o.delay = delay;
  o.outer_lr = 0.7;        // the papers' Nesterov step, not the defaults' plain average: the
  o.outer_momentum = 0.9;  // reference checks the momentum's path too
  o.nesterov = true;
  return o;
}

// Trains every rank `steps` inner steps through the strategy; with `finish`, then finish().
inline std::vector<Model> train(int world, const DiLoCoOptions& o, uint64_t steps,
                                bool finish = false) {
  std::vector<Model> out(static_cast<size_t>(world));
  comm::run_local_ranks(world, std::chrono::seconds(20), [&](comm::Collectives& c) {
    Model m = initial_model(c.rank() + 1);  // start() must give every rank rank 0's
    DiLoCoStrategy strategy(c, o);
    strategy.start(toy_tensors(), spans(m));
    for (uint64_t t = 1; t <= steps; ++t) {
      inner_step(m, c.rank(), t);
      strategy.after_update(spans(m));
    }
    if (finish) strategy.finish();
    // The exchange in flight, if any, completes (unmerged) on every rank before the
    // strategy goes: destroyed unstarted on one rank, it would keep the others waiting for
    // the collectives' timeout.
    strategy.wait_for_exchange();
    out[static_cast<size_t>(c.rank())] = m;
  });
  return out;
}

inline double max_difference(const Model& a, const Model& b) {
  double d = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    for (size_t i = 0; i < a[t].size(); ++i) d = std::max(d, std::fabs(double(a[t][i]) - b[t][i]));
  }
  return d;
}

}  // namespace gradwire::strategy::diloco
