// DiLoCoModel: DiLoCo (strategy/diloco) over a model's tensors, for a program that steps
// its own optimizer: the Python module's gradwire.DiLoCo (python/gradwire/diloco.py), the
// counterpart of DistributedOptimizer's --strategy diloco for libtorch programs. Same
// strategy, same options, same checkpoint state: on the same job both give the same
// parameters.
//
//   construction   ranks agree on the options and shapes, every rank takes rank 0's
//                  parameters (collectives on the caller's thread)
//   after_step()   after every inner optimizer step: on schedule, a fragment's outer
//                  gradient goes out on the strategy's exchange thread and lands `delay`
//                  steps later with the outer step
//   finish()       lands what is in flight and averages what every fragment did since:
//                  one model on every rank
// Buffers (BatchNorm's statistics) follow rank 0's whenever a round's last fragment lands
// (carried on that exchange) and at finish(); the agreed buffers are rank 0's as of then
// (agreed_buffers()), as the agreed parameters are theta_g as of each fragment's landing.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/core/bytes.h"
#include "gradwire/strategy/diloco/diloco_strategy.h"

namespace gradwire {

class DiLoCoModel {
 public:
  // `params` and `buffers`: contiguous float32 CPU tensors (ConfigError otherwise), named
  // `names` (the parameters'). The tensors may be given new storage later: every call takes
  // them where they are then.
  DiLoCoModel(std::unique_ptr<comm::Collectives> collectives,
              strategy::diloco::DiLoCoOptions options, std::vector<std::string> names,
              const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& buffers);
  ~DiLoCoModel();

  void after_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& buffers);
  // Collective; afterwards every rank holds the same parameters and buffers.
  void finish(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& buffers);
  // The model the ranks agree on (theta_g), into `out` (tensors shaped as the parameters).
  void global_parameters(const std::vector<at::Tensor>& out) const;
  // The buffers the ranks agree on: rank 0's when the last round's last fragment landed
  // (at the start: rank 0's then; after finish(): the model's), into `out` (shaped as the
  // buffers). set_agreed_buffers() puts them back from a checkpoint.
  void agreed_buffers(const std::vector<at::Tensor>& out) const;
  void set_agreed_buffers(const std::vector<at::Tensor>& in);
  // Waits for the exchange in flight (it still lands at its step): see the strategy's.
  void wait_for_exchange() const { strategy_->wait_for_exchange(); }
  // True when the last after_step() landed a round's last fragment.
  bool just_synchronized() const { return strategy_->just_synchronized(); }

  strategy::diloco::DiLoCoStats stats() const { return strategy_->stats(); }
  strategy::TrafficStats traffic() const { return strategy_->traffic(); }
  std::vector<std::string> take_decisions();
  int rank() const { return collectives_->rank(); }
  int world_size() const { return collectives_->size(); }

  // Checkpoints (waits for the exchange in flight, which the state then holds): the same
  // bytes as the strategy's in DistributedOptimizer's checkpoint.
  Bytes save_state() const;
  void load_state(const Bytes& bytes);

 private:
  strategy::FloatSpans spans(const std::vector<at::Tensor>& tensors, const char* what) const;
  void set_buffers(const std::vector<at::Tensor>& buffers);

  std::unique_ptr<comm::Collectives> collectives_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<at::Tensor> buffers_;  // as of the last call; the carried broadcast uses them
  Bytes agreed_buffers_;             // rank 0's buffers as of the last synchronization
  std::unique_ptr<strategy::diloco::DiLoCoStrategy> strategy_;
};

}  // namespace gradwire
