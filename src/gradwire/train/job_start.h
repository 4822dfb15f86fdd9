// What every training loop of the built-in job (trainer.cc, ps_training.cc,
// gossip_training.cc) starts from and how each of them takes a step: built one way for all.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "gradwire/context.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/distributed_sampler.h"
#include "gradwire/train/recipe.h"
#include "gradwire/train/trainer.h"
#include "gradwire/train/workload.h"

namespace gradwire::train {

struct Job {
  std::unique_ptr<Workload> workload;  // rank 0 alone holds the evaluation data
  Recipe recipe;
  std::unique_ptr<DistributedOptimizer> optimizer;
  std::string initial_checksum;  // parameter_crc32 of the model before the first step
  // Samples a step takes per worker (batch size x micro-batches), and the steps of the
  // run, which the learning-rate schedule spans: epochs x steps per epoch of a worker.
  size_t step_samples = 0;
  uint64_t run_steps = 0;
  double speed = 1;  // TrainOptions::worker_speed's, this worker's
};

// Loads the data, seeds libtorch with options.seed and builds the model (the same
// initial weights on every rank, checked and broadcast by the optimizer), then wraps the
// recipe's optimizer (recipe_of(options)) in a DistributedOptimizer with
// options.exchange. Strategy "ps": the servers count the job's length as a budget of
// samples, epochs x the training set.
Job start_job(const TrainOptions& options, std::shared_ptr<Context> context);

// "model gpt, codec fp16, 30842 training samples, batch 8 per worker, adamw lr 0.005
// (cosine, warm-up 0.05), clip 1": for the line each loop prints first.
std::string describe_job(const TrainOptions& options, const Job& job);
// The same for the metrics' summary line: model, metric, batch, the recipe, the initial
// checksum.
nlohmann::json job_fields(const TrainOptions& options, const Job& job);

// What one step did on this rank.
struct StepDone {
  double loss_sum = 0;  // the training loss summed over the step's samples
  size_t samples = 0;
};

// One step, the same under every strategy: the schedule's learning rate for step `step` of
// the run; zero_grad(); per micro-batch of the recipe
// (batch_size samples each; the step's `batch` holds up to accumulate of them), forward
// and backward of its loss weighted by its share of the batch, all but the last inside
// no_sync(), so the gradient is the batch's mean; a worker slower than 1 then sleeps
// (1/speed - 1) x the computation; the samples counted for the parameter servers; the
// gradient clipped to the recipe's norm (allreduce: the exchanged average, as DDP's users
// clip; ps and gossip exchange in step(), so there the local gradient); step().
StepDone take_step(Job& job, std::span<const size_t> batch, uint64_t step);

// The samples of step `step` of the sampler's current epoch: `samples` of its indices from
// step x samples on, fewer at the epoch's end.
std::span<const size_t> batch_of(const DistributedSampler& sampler, size_t step, size_t samples);

// A copy of the model's parameters (each tensor once), and the model set back to such a
// copy: for the loops that keep models during training and evaluate them after it.
std::vector<torch::Tensor> copy_parameters(torch::nn::Module& model);
void load_parameters(torch::nn::Module& model, const std::vector<torch::Tensor>& values);

// Steps in one epoch of `sampler` (the last batch may be short).
size_t steps_per_epoch(const DistributedSampler& sampler, size_t samples);

}  // namespace gradwire::train
