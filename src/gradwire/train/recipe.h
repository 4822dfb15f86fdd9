// How the built-in job optimizes: the optimizer, its learning-rate schedule, clipping and
// gradient accumulation. Each model has its own recipe (cnn, cnn-wide and mlp: SGD with
// momentum at a constant rate; gpt: AdamW with linear warm-up then cosine decay and
// global-norm clipping, as transformers are trained); TrainOptions overrides any part.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

namespace gradwire::train {

struct Recipe {
  std::string optimizer = "sgd";                 // sgd | adamw
  double lr = 0.05;                              // the peak rate (after warm-up)
  double momentum = 0.9;                         // sgd: heavy ball
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8;  // adamw
  // sgd: on every parameter (added to the gradient before momentum, as torch's SGD);
  // adamw: decoupled, on weight matrices only: not on norms, biases or embeddings.
  double weight_decay = 0;
  // constant, or cosine: the rate rises linearly over the first `warmup` steps from
  // lr / warmup to lr, then follows lr_min + (lr - lr_min)(1 + cos(pi p)) / 2, p going
  // from 0 after the warm-up to 1 at the last step, lr_min = min_lr_ratio x lr.
  std::string schedule = "constant";
  double warmup = 0;  // a fraction of the run's steps
  double min_lr_ratio = 0.1;
  // > 0: the gradient's global 2-norm is clipped to this after the exchange (the clip sees
  // the averaged gradient, as with DDP), before step().
  double clip_norm = 0;
  // Micro-batches per step: a step's batch is `accumulate` micro-batches of the batch
  // size, forward and backward each, all but the last inside no_sync().
  int accumulate = 1;

  // The learning rate of step `step` (from 0) of a run of `steps` steps.
  double lr_at(uint64_t step, uint64_t steps) const;
};

// The recipe of a built-in model (cnn, cnn-wide, mlp, gpt).
Recipe model_recipe(const std::string& model);

// Checks a recipe: ConfigError naming the option at fault.
void check_recipe(const Recipe& recipe);

// The recipe's optimizer over `model`'s parameters, each tensor once (a tied weight too),
// in named_parameters() order. AdamW: two groups, the decayed weights then the rest
// (`decays` says which: by default every parameter of two or more dimensions).
std::shared_ptr<torch::optim::Optimizer> make_optimizer(const Recipe& recipe,
                                                        const torch::nn::Module& model,
                                                        const std::vector<std::string>& no_decay);

// Sets every group's learning rate (SGD or AdamW) to `lr`.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// The model's parameters, each tensor once (a weight tied to two modules is listed under
// its first name), in named_parameters() order: as PyTorch's parameters() lists them.
std::vector<std::pair<std::string, torch::Tensor>> unique_named_parameters(
    const torch::nn::Module& model);
std::vector<torch::Tensor> unique_parameters(const torch::nn::Module& model);

}  // namespace gradwire::train
