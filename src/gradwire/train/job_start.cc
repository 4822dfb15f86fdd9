#include "gradwire/train/job_start.h"

#include <torch/torch.h>

#include <algorithm>

#include "gradwire/train/job_output.h"

namespace gradwire::train {

Job start_job(const TrainOptions& options, std::shared_ptr<Context> context) {
  Job job;
  const std::string dir = options.data_dir.empty() ? kFashionMnistDir : options.data_dir;
  job.train_set = load_fashion_mnist(dir, /*train=*/true, options.train_limit);
  if (context->is_root()) {
    job.test_set = load_fashion_mnist(dir, /*train=*/false, options.test_limit);
  }
  DistributedOptions exchange = options.exchange;
  if (exchange.strategy == "ps") {
    exchange.ps.sample_budget = job.train_set.size() * static_cast<uint64_t>(options.epochs);
  }
  torch::manual_seed(options.seed);
  job.model = make_model(options.model);
  job.optimizer = std::make_unique<DistributedOptimizer>(
      std::move(context),
      torch::optim::SGD(job.model->parameters(), torch::optim::SGDOptions(options.lr)
                                                     .momentum(options.momentum)
                                                     .weight_decay(options.weight_decay)),
      *job.model, exchange);
  job.initial_checksum = parameter_crc32(*job.model);
  return job;
}

std::span<const size_t> batch_of(const DistributedSampler& sampler, size_t step, int batch_size) {
  const auto& all = sampler.indices();
  const size_t begin = std::min(all.size(), step * static_cast<size_t>(batch_size));
  const size_t end = std::min(all.size(), begin + static_cast<size_t>(batch_size));
  return std::span<const size_t>(all.data() + begin, end - begin);
}

std::vector<torch::Tensor> copy_parameters(torch::nn::Module& model) {
  std::vector<torch::Tensor> copy;
  for (const auto& p : model.parameters()) copy.push_back(p.detach().clone());
  return copy;
}

void load_parameters(torch::nn::Module& model, const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  auto parameters = model.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(values[i]);
}

size_t steps_per_epoch(const DistributedSampler& sampler, int batch_size) {
  return (sampler.indices().size() + batch_size - 1) / batch_size;
}

}  // namespace gradwire::train
