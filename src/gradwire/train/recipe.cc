#include "gradwire/train/recipe.h"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "gradwire/core/error.h"
#include "gradwire/train/trainer.h"

namespace gradwire::train {

double Recipe::lr_at(uint64_t step, uint64_t steps) const {
  if (schedule == "constant") return lr;
  const double warmup_steps = std::floor(warmup * static_cast<double>(steps));
  if (static_cast<double>(step) < warmup_steps) {
    return lr * static_cast<double>(step + 1) / warmup_steps;
  }
  const double decay_steps = static_cast<double>(steps) - warmup_steps;
  const double p =
      decay_steps > 1 ? (static_cast<double>(step) - warmup_steps) / (decay_steps - 1) : 1.0;
  const double lr_min = min_lr_ratio * lr;
  return lr_min + (lr - lr_min) * (1 + std::cos(M_PI * std::min(1.0, p))) / 2;
}

Recipe model_recipe(const std::string& model) {
  Recipe r;
  if (model == "gpt") {
    r.optimizer = "adamw";
    r.lr = 5e-3;
    r.weight_decay = 0.1;
    r.schedule = "cosine";
    r.warmup = 0.05;
    r.clip_norm = 1.0;
  }
  return r;
}

Recipe recipe_of(const TrainOptions& o) {
  Recipe r = model_recipe(o.model);
  if (o.optimizer) r.optimizer = *o.optimizer;
  if (o.lr) r.lr = *o.lr;
  if (o.momentum) r.momentum = *o.momentum;
  if (o.weight_decay) r.weight_decay = *o.weight_decay;
  if (o.lr_schedule) r.schedule = *o.lr_schedule;
  if (o.warmup) r.warmup = *o.warmup;
  if (o.clip_norm) r.clip_norm = *o.clip_norm;
  r.accumulate = o.accumulate;
  return r;
}

void check_recipe(const Recipe& r) {
  if (r.optimizer != "sgd" && r.optimizer != "adamw") {
    throw ConfigError("--optimizer " + r.optimizer + ": expected sgd or adamw");
  }
  if (!(r.lr > 0)) throw ConfigError("--lr must be positive");
  if (!(r.momentum >= 0 && r.momentum < 1)) throw ConfigError("--momentum must be in [0, 1)");
  if (!(r.weight_decay >= 0)) throw ConfigError("--weight-decay must be 0 or more");
  if (r.schedule != "constant" && r.schedule != "cosine") {
    throw ConfigError("--lr-schedule " + r.schedule + ": expected constant or cosine");
  }
  if (!(r.warmup >= 0 && r.warmup < 1)) throw ConfigError("--warmup must be a fraction in [0, 1)");
  if (!(r.clip_norm >= 0)) throw ConfigError("--clip-norm must be 0 (none) or more");
  if (r.accumulate < 1) throw ConfigError("--accumulate must be at least 1");
}

std::vector<std::pair<std::string, torch::Tensor>> unique_named_parameters(
    const torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::unordered_set<const void*> seen;
  for (const auto& item : model.named_parameters()) {
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) {
      out.emplace_back(item.key(), item.value());
    }
  }
  return out;
}

std::vector<torch::Tensor> unique_parameters(const torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (auto& [name, p] : unique_named_parameters(model)) out.push_back(p);
  return out;
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const Recipe& r,
                                                        const torch::nn::Module& model,
                                                        const std::vector<std::string>& no_decay) {
  check_recipe(r);
  const auto named = unique_named_parameters(model);
  if (r.optimizer == "sgd") {
    std::vector<torch::Tensor> all;
    for (const auto& [name, p] : named) all.push_back(p);
    return std::make_shared<torch::optim::SGD>(
        all, torch::optim::SGDOptions(r.lr).momentum(r.momentum).weight_decay(r.weight_decay));
  }
  std::vector<torch::Tensor> decayed, kept;
  for (const auto& [name, p] : named) {
    const bool excluded = std::any_of(no_decay.begin(), no_decay.end(),
                                      [&](const std::string& n) { return name == n; });
    (p.dim() >= 2 && !excluded ? decayed : kept).push_back(p);
  }
  const auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(r.lr).betas({r.beta1, r.beta2}).eps(r.eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decayed.empty()) groups.emplace_back(decayed, options(r.weight_decay));
  if (!kept.empty()) groups.emplace_back(kept, options(0));
  return std::make_shared<torch::optim::AdamW>(std::move(groups), *options(r.weight_decay));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace gradwire::train
