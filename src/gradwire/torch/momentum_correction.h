// Momentum correction (distributed_optimizer.h says why): heavy-ball momentum, and with it
// weight decay, move from the user's torch::optim::SGD into the codecs when a codec feeds
// error feedback through an allgather.
//
// Planned first (nothing changes), applied once every check across ranks has passed, and
// undone when the DistributedOptimizer goes, so that a failed construction or a second
// wrapper finds the optimizer as the user built it.
#pragma once

#include <torch/optim/optimizer.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire {

class MomentumCorrection {
 public:
  // The plan for `codec` on `tensors` with `optimizer`: inactive (codec unchanged) unless
  // some tensor's codec uses error feedback on the allgather path and the optimizer is an
  // SGD whose groups share one plain heavy-ball momentum (no Nesterov, no dampening) and
  // the user set no momentum in the codec.
  static MomentumCorrection plan(torch::optim::Optimizer& optimizer, const std::string& codec,
                                 const std::vector<compress::TensorInfo>& tensors);

  bool active() const { return momentum_ > 0; }
  // The codec to use: the user's, with `momentum=m` when active.
  const std::string& codec() const { return codec_; }
  // Weight decay of `param` moved out of the optimizer (0 if none): each rank adds
  // wd x w to the gradient before the exchange, inside the corrected momentum.
  double weight_decay(const torch::Tensor& param) const;

  // Sets momentum and weight decay of every group to 0 (when active), remembering them.
  void apply();
  // Gives the groups back what apply() took. Idempotent.
  void restore();

 private:
  torch::optim::Optimizer* optimizer_ = nullptr;
  double momentum_ = 0;
  std::string codec_;
  std::unordered_map<const void*, double> weight_decay_;  // by TensorImpl*
  struct Saved {
    double momentum, weight_decay;
  };
  std::vector<Saved> saved_;  // per group, while applied
};

}  // namespace gradwire
