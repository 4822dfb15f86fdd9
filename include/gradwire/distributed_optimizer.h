// DistributedOptimizer: data-parallel training by wrapping any torch::optim::Optimizer.
//
//   auto dist = gradwire::init();
//   gradwire::DistributedOptimizer optimizer(
//       dist, torch::optim::SGD(model->parameters(), 0.05), *model, {.compressor = "fp16"});
//   ... optimizer.zero_grad(); loss.backward(); optimizer.step();
//
// Construction makes every rank start from rank 0's parameters and buffers, and fails
// (MismatchError) when ranks disagree on the strategy, the codec or the model's shapes.
// step() exchanges gradients through the strategy, then steps the wrapped optimizer.
// Every parameter that requires grad takes part; a parameter without a gradient in a step
// contributes zeros.
//
// Momentum correction: codecs with error feedback (topk, 2bit) and heavy-ball momentum
// applied after aggregation do not mix: the residual delays large coordinates and momentum
// turns that delay into divergence (2bit) or lost accuracy (topk). So when the codec uses
// error feedback on the allgather path and the optimizer is torch::optim::SGD with plain
// heavy-ball momentum m (no Nesterov, no dampening, the same m in every group), the momentum
// moves into the codec (`momentum=m`: u = m u + g is compressed, with DGC's momentum factor
// masking) and the SGD's groups get momentum 0. codec_spec() shows the result; set
// DistributedOptions::momentum_correction = false to keep the optimizer untouched.
#pragma once

#include <memory>
#include <string>
#include <type_traits>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "gradwire/context.h"

namespace gradwire {

struct DistributedOptions {
  std::string strategy = "allreduce";  // later: "ps", "gossip"
  std::string compressor = "none";     // codec spec, e.g. "topk:density=0.01"
  size_t bucket_bytes = 25u << 20;
  bool momentum_correction = true;  // see above
};

struct TrafficCounters {
  uint64_t steps = 0;
  uint64_t bytes_sent = 0;   // this rank's bytes handed to the network for exchange
  uint64_t bytes_dense = 0;  // what dense fp32 exchange would have handed
};

class DistributedOptimizer {
 public:
  DistributedOptimizer(std::shared_ptr<Context> context,
                       std::shared_ptr<torch::optim::Optimizer> optimizer,
                       const torch::nn::Module& model, const DistributedOptions& options = {});

  // Takes ownership of an optimizer given by value: DistributedOptimizer(ctx, SGD(...), ...).
  template <typename OptimizerT, typename = std::enable_if_t<std::is_base_of_v<
                                     torch::optim::Optimizer, std::decay_t<OptimizerT>>>>
  DistributedOptimizer(std::shared_ptr<Context> context, OptimizerT&& optimizer,
                       const torch::nn::Module& model, const DistributedOptions& options = {})
      : DistributedOptimizer(std::move(context),
                             std::make_shared<std::decay_t<OptimizerT>>(std::move(optimizer)),
                             model, options) {}

  ~DistributedOptimizer();

  void zero_grad();
  // Averages gradients across ranks, then steps the wrapped optimizer.
  torch::Tensor step();
  // Only the exchange: afterwards every parameter's .grad holds the aggregated gradient
  // (use it to clip or inspect gradients before stepping the inner optimizer yourself).
  void synchronize();

  torch::optim::Optimizer& optimizer();
  // The codec spec in use, canonical (after momentum correction, if any).
  const std::string& codec_spec() const;
  TrafficCounters traffic() const;
  const Context& context() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradwire
