#include "gradwire/torch/momentum_correction.h"

#include <torch/optim/sgd.h>

#include "gradwire/compress/policy.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/spec.h"

namespace gradwire {
namespace {

// The heavy-ball momentum every group of `sgd` uses, or 0 when the groups differ or use
// Nesterov or dampening (then the optimizer is left alone).
double common_heavy_ball_momentum(torch::optim::SGD& sgd) {
  double momentum = -1;
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (o.nesterov() || o.dampening() != 0) return 0;
    if (momentum >= 0 && o.momentum() != momentum) return 0;
    momentum = o.momentum();
  }
  return momentum > 0 ? momentum : 0;
}

}  // namespace

MomentumCorrection MomentumCorrection::plan(torch::optim::Optimizer& optimizer,
                                            const std::string& codec,
                                            const std::vector<compress::TensorInfo>& tensors) {
  MomentumCorrection out;
  out.codec_ = codec;
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (!sgd) return out;
  const auto policy = compress::CodecPolicy::parse(codec);
  bool needed = false;
  for (const auto& tensor : tensors) {
    const std::string spec = policy.spec_for(tensor);
    if (Spec::parse(spec).params.count("momentum")) return out;  // the user chose
    const auto instance = policy.create(tensor);
    if (compress::uses_error_feedback(spec) && !instance->additive_wire() &&
        !instance->low_rank() && !instance->shared_scale()) {
      needed = true;
    }
  }
  const double momentum = needed ? common_heavy_ball_momentum(*sgd) : 0.0;
  if (momentum <= 0) return out;
  out.optimizer_ = sgd;
  out.momentum_ = momentum;
  for (auto& group : sgd->param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (o.weight_decay() == 0) continue;
    for (auto& p : group.params()) out.weight_decay_[p.unsafeGetTensorImpl()] = o.weight_decay();
  }
  out.codec_ = policy.with_momentum(momentum).canonical();
  return out;
}

double MomentumCorrection::weight_decay(const torch::Tensor& param) const {
  const auto it = weight_decay_.find(param.unsafeGetTensorImpl());
  return it == weight_decay_.end() ? 0.0 : it->second;
}

void MomentumCorrection::apply() {
  if (!active() || !saved_.empty()) return;
  for (auto& group : optimizer_->param_groups()) {
    auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
    saved_.push_back({o.momentum(), o.weight_decay()});
    o.momentum(0);
    o.weight_decay(0);
  }
}

void MomentumCorrection::restore() {
  if (saved_.empty()) return;
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size() && g < saved_.size(); ++g) {
    auto& o = static_cast<torch::optim::SGDOptions&>(groups[g].options());
    o.momentum(saved_[g].momentum);
    o.weight_decay(saved_[g].weight_decay);
  }
  saved_.clear();
}

}  // namespace gradwire
