// What every training loop of the built-in job (trainer.cc, ps_training.cc,
// gossip_training.cc) starts from, built one way for all three.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradwire/context.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/distributed_sampler.h"
#include "gradwire/fashion_mnist.h"
#include "gradwire/train/models.h"
#include "gradwire/train/trainer.h"

namespace gradwire::train {

struct Job {
  Dataset train_set;
  Dataset test_set;  // rank 0's; the other ranks hold none
  std::shared_ptr<Classifier> model;
  std::unique_ptr<DistributedOptimizer> optimizer;
  std::string initial_checksum;  // parameter_crc32 of the model before the first step
};

// Loads the data, seeds libtorch with options.seed and builds the model (the same
// initial weights on every rank, checked and broadcast by the optimizer), then wraps a
// torch::optim::SGD of options.lr, momentum and weight_decay in a DistributedOptimizer
// with options.exchange. Strategy "ps": the servers count the job's length as a budget of
// samples, epochs x the training set.
Job start_job(const TrainOptions& options, std::shared_ptr<Context> context);

// The samples of step `step` of the sampler's current epoch: batch_size of its indices
// from step x batch_size on, fewer at the epoch's end.
std::span<const size_t> batch_of(const DistributedSampler& sampler, size_t step, int batch_size);

// A copy of the model's parameters, and the model set back to such a copy: for the loops
// that keep models during training and evaluate them after it.
std::vector<torch::Tensor> copy_parameters(torch::nn::Module& model);
void load_parameters(torch::nn::Module& model, const std::vector<torch::Tensor>& values);

// Steps in one epoch of `sampler` (the last batch may be short).
size_t steps_per_epoch(const DistributedSampler& sampler, int batch_size);

}  // namespace gradwire::train
