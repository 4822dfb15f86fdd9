#include "gradwire/train/job_start.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "gradwire/core/timeline.h"
#include "gradwire/train/job_output.h"

namespace gradwire::train {

Job start_job(const TrainOptions& options, std::shared_ptr<Context> context) {
  Job job;
  job.recipe = recipe_of(options);  // checked by make_optimizer below
  job.speed = worker_speed(options.worker_speed, context->rank(), context->world_size());
  torch::manual_seed(options.seed);
  job.workload = make_workload(options, context->is_root());
  job.step_samples = static_cast<size_t>(options.batch_size) * job.recipe.accumulate;
  const size_t shard = (job.workload->train_size() + context->world_size() - 1) /
                       static_cast<size_t>(context->world_size());
  job.run_steps =
      static_cast<uint64_t>(options.epochs) * ((shard + job.step_samples - 1) / job.step_samples);
  DistributedOptions exchange = options.exchange;
  if (exchange.strategy == "ps") {
    exchange.ps.sample_budget = job.workload->train_size() * static_cast<uint64_t>(options.epochs);
  }
  torch::nn::Module& model = job.workload->model();
  job.optimizer = std::make_unique<DistributedOptimizer>(
      std::move(context), make_optimizer(job.recipe, model, job.workload->no_decay()), model,
      exchange);
  job.initial_checksum = parameter_crc32(model);
  return job;
}

std::string describe_job(const TrainOptions& options, const Job& job) {
  const Recipe& r = job.recipe;
  char text[512];
  int n = std::snprintf(text, sizeof text,
                        "model %s, codec %s, %zu training samples, batch %d per worker",
                        options.model.c_str(), job.optimizer->codec_spec().c_str(),
                        job.workload->train_size(), options.batch_size);
  const auto add = [&](const char* format, auto... values) {
    if (n >= 0 && static_cast<size_t>(n) < sizeof text) {
      n += std::snprintf(text + n, sizeof text - n, format, values...);
    }
  };
  if (r.accumulate > 1) add(" x %d micro-batches", r.accumulate);
  add(", %s lr %g", r.optimizer.c_str(), r.lr);
  if (r.schedule != "constant") add(" (%s, warm-up %g)", r.schedule.c_str(), r.warmup);
  if (r.clip_norm > 0) add(", clip %g", r.clip_norm);
  return text;
}

nlohmann::json job_fields(const TrainOptions& options, const Job& job) {
  const Recipe& r = job.recipe;
  nlohmann::json recipe = {
      {"optimizer", r.optimizer},  {"lr", r.lr},         {"weight_decay", r.weight_decay},
      {"schedule", r.schedule},    {"warmup", r.warmup}, {"clip_norm", r.clip_norm},
      {"accumulate", r.accumulate}};
  if (r.optimizer == "sgd") {
    recipe["momentum"] = r.momentum;
  } else {
    recipe["betas"] = {r.beta1, r.beta2};
  }
  return {{"model", options.model},
          {"metric", job.workload->metric().name},
          {"batch_size", options.batch_size},
          {"recipe", recipe},
          {"initial_checksum", job.initial_checksum}};
}

StepDone take_step(Job& job, std::span<const size_t> batch, uint64_t step) {
  DistributedOptimizer& optimizer = *job.optimizer;
  const size_t micro = std::max<size_t>(1, job.step_samples / job.recipe.accumulate);
  StepDone done;
  done.samples = batch.size();
  // The step's rate is set before its exchange, which passes it to the strategy (auto's
  // regime detector looks for a decay); the optimizer as built holds the peak rate.
  if (job.recipe.schedule != "constant") {
    set_learning_rate(optimizer.optimizer(), job.recipe.lr_at(step, job.run_steps));
  }
  optimizer.zero_grad();
  const auto compute_start = Clock::now();
  for (size_t begin = 0; begin < batch.size(); begin += micro) {
    const auto part = batch.subspan(begin, std::min(micro, batch.size() - begin));
    const bool last = begin + micro >= batch.size();
    std::optional<DistributedOptimizer::NoSync> local;
    if (!last) local.emplace(optimizer.no_sync());
    torch::Tensor loss;
    {
      TimelineSpan span("forward", "compute");
      loss = job.workload->loss(part);
    }
    done.loss_sum += loss.item<double>() * static_cast<double>(part.size());
    TimelineSpan span("backward", "compute");
    if (part.size() < batch.size()) {
      loss = loss * (static_cast<double>(part.size()) / static_cast<double>(batch.size()));
    }
    loss.backward();
  }
  if (job.speed < 1) {
    const double computed = seconds_since(compute_start);
    std::this_thread::sleep_for(std::chrono::duration<double>(computed * (1 / job.speed - 1)));
  }
  optimizer.count_samples(done.samples, done.loss_sum);
  if (job.recipe.clip_norm > 0) {
    std::vector<torch::Tensor> with_grad;
    for (const auto& group : optimizer.optimizer().param_groups()) {
      for (const auto& p : group.params()) {
        if (p.grad().defined()) with_grad.push_back(p);
      }
    }
    torch::nn::utils::clip_grad_norm_(with_grad, job.recipe.clip_norm);
  }
  TimelineSpan span("step", "step");
  optimizer.step();
  return done;
}

std::span<const size_t> batch_of(const DistributedSampler& sampler, size_t step, size_t samples) {
  const auto& all = sampler.indices();
  const size_t begin = std::min(all.size(), step * samples);
  const size_t end = std::min(all.size(), begin + samples);
  return std::span<const size_t>(all.data() + begin, end - begin);
}

std::vector<torch::Tensor> copy_parameters(torch::nn::Module& model) {
  std::vector<torch::Tensor> copy;
  for (const auto& p : unique_parameters(model)) copy.push_back(p.detach().clone());
  return copy;
}

void load_parameters(torch::nn::Module& model, const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  auto parameters = unique_parameters(model);
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(values[i]);
}

size_t steps_per_epoch(const DistributedSampler& sampler, size_t samples) {
  return (sampler.indices().size() + samples - 1) / samples;
}

}  // namespace gradwire::train
