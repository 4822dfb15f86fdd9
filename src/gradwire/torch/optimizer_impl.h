// DistributedOptimizer's private state, shared by the files that implement it:
// distributed_optimizer.cc (construction, hooks, the step), optimizer_checkpoint.cc
// (save_checkpoint, load_checkpoint).
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/optim/optimizer.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradwire/core/bytes.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire {

struct DistributedOptimizer::Impl {
  std::shared_ptr<Context> context;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> params;
  std::vector<double> weight_decay;  // per parameter, added to its gradient (see above)
  std::vector<torch::Tensor> buffers;
  Bytes buffer_staging;  // all buffers' bytes, for one broadcast per step
  bool broadcast_buffers = true;
  std::unique_ptr<strategy::Strategy> strategy;
  std::string codec_spec;
  bool claimed = false;
  std::optional<GossipSummary> gossip_final;  // rank 0, after a gossip finish
  // hooks[i]: the post-hook on params[i]'s gradient accumulator (runs once .grad holds the
  // backward's gradient), as DDP's Reducer registers them.
  struct GradientHook {
    std::shared_ptr<torch::autograd::Node> accumulator;
    uintptr_t key = 0;
  };
  std::vector<GradientHook> hooks;
  // Per parameter: its gradient was reported to the strategy by the hook this step (its
  // weight decay is then already added). Hooks run on the thread that called backward().
  std::vector<uint8_t> reported;
  // synchronize() ran and no gradient was produced since: step() does not exchange again.
  std::atomic<bool> exchanged{false};

  // Removes the hooks (they point at this object) and releases the parameters.
  ~Impl();
  // Backward has accumulated params[i]'s gradient into .grad. With an overlapping
  // strategy the gradient is finished here (weight decay) and handed over at once.
  void on_gradient(size_t i);
  // Rank 0's buffers to every rank, in one broadcast.
  void broadcast_buffers_from_rank0();
};

}  // namespace gradwire
