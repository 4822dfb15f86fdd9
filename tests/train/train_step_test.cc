// The built-in job's step (job_start.h take_step) on the gpt model with its recipe (AdamW,
// decoupled weight decay on the matrices, warm-up and cosine, global-norm clipping) and
// gradient accumulation under no_sync(), over 2 Gloo ranks, against one process training
// on the union of the ranks' batches; and the tied embedding exchanged once.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../common/gloo_harness.h"
#include "gradwire/context.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/text_corpus.h"
#include "gradwire/train/gpt.h"
#include "gradwire/train/job_start.h"

namespace gradwire::train {
namespace {

constexpr int kWorld = 2, kMicro = 2, kBatch = 3, kSteps = 4;
const GptConfig kConfig{.vocabulary = 13, .context = 6, .width = 16, .layers = 2, .heads = 2};

// The token sequence every rank and the reference train on, drawn once (the ranks run
// as threads: drawing in each would race on libtorch's global generator).
const torch::Tensor& tokens() {
  static const torch::Tensor text = [] {
    torch::manual_seed(5);
    return torch::randint(0, kConfig.vocabulary, {400}, torch::kLong);
  }();
  return text;
}

// Windows of the token sequence, the same on every rank.
class TokenWorkload : public Workload {
 public:
  explicit TokenWorkload(const std::vector<torch::Tensor>& init) {
    windows_ = {tokens(), kConfig.context};
    model_ = std::make_shared<Gpt>(kConfig);
    torch::NoGradGuard no_grad;
    auto params = unique_parameters(*model_);
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(init[i]);
  }
  torch::nn::Module& model() override { return *model_; }
  size_t train_size() const override { return static_cast<size_t>(windows_.size()); }
  torch::Tensor loss(std::span<const size_t> indices) override {
    auto [x, y] = windows_.batch(std::vector<int64_t>(indices.begin(), indices.end()));
    auto logits = model_->forward(x);
    return torch::nn::functional::cross_entropy(logits.view({-1, kConfig.vocabulary}),
                                                y.view({-1}));
  }
  double evaluate(int) override { return 0; }
  Metric metric() const override { return {"val_loss", false}; }
  std::vector<std::string> no_decay() const override { return {"wte.weight", "wpe"}; }

 private:
  TextWindows windows_;
  std::shared_ptr<Gpt> model_;
};

Recipe recipe() {
  Recipe r = model_recipe("gpt");
  r.lr = 0.01;
  r.warmup = 0.25;  // 1 of 4 steps
  r.clip_norm = 0.5;
  r.accumulate = kMicro;
  return r;
}

// Rank r's samples of step s: micro-batch k holds windows ((s K + k) W + r) B + [0, B).
std::vector<size_t> samples_of(int step, int rank) {
  std::vector<size_t> out;
  for (int k = 0; k < kMicro; ++k) {
    for (int b = 0; b < kBatch; ++b)
      out.push_back(((step * kMicro + k) * kWorld + rank) * kBatch + b);
  }
  return out;
}

std::vector<torch::Tensor> initial_weights() {
  torch::manual_seed(11);
  Gpt model(kConfig);
  std::vector<torch::Tensor> out;
  for (const auto& p : unique_parameters(model)) out.push_back(p.detach().clone());
  return out;
}

// One process, the union of the ranks' samples in one batch, the recipe written out.
std::vector<torch::Tensor> reference_run(const std::vector<torch::Tensor>& init) {
  TokenWorkload workload(init);
  const Recipe r = recipe();
  auto optimizer = make_optimizer(r, workload.model(), workload.no_decay());
  for (int s = 0; s < kSteps; ++s) {
    optimizer->zero_grad();
    std::vector<size_t> all;
    for (int rank = 0; rank < kWorld; ++rank) {
      const auto mine = samples_of(s, rank);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    workload.loss(all).backward();
    torch::nn::utils::clip_grad_norm_(unique_parameters(workload.model()), r.clip_norm);
    set_learning_rate(*optimizer, r.lr_at(s, kSteps));
    optimizer->step();
  }
  return copy_parameters(workload.model());
}

TEST(TrainStepTest, AdamWClippingScheduleAndAccumulationEqualOneProcessOnTheUnion) {
  tokens();
  const auto init = initial_weights();
  const auto want = reference_run(init);
  std::vector<std::vector<torch::Tensor>> got(kWorld);
  std::vector<TrafficCounters> traffic(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& collectives) {
    auto context = std::make_shared<Context>(rank, kWorld, rank, std::move(collectives));
    Job job;
    job.workload = std::make_unique<TokenWorkload>(init);
    job.recipe = recipe();
    job.step_samples = kMicro * kBatch;
    job.run_steps = kSteps;
    job.optimizer = std::make_unique<DistributedOptimizer>(
        context, make_optimizer(job.recipe, job.workload->model(), job.workload->no_decay()),
        job.workload->model(), DistributedOptions{.compressor = "none"});
    for (int s = 0; s < kSteps; ++s) {
      const auto samples = samples_of(s, rank);
      const StepDone done = take_step(job, samples, s);
      EXPECT_EQ(done.samples, samples.size());
    }
    got[rank] = copy_parameters(job.workload->model());
    traffic[rank] = job.optimizer->traffic();
  });
  int64_t unique_numel = 0;
  for (const auto& t : init) unique_numel += t.numel();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(got[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(torch::allclose(got[r][i], want[i], 0, 2e-5))
          << "rank " << r << ", tensor " << i << ": max diff "
          << (got[r][i] - want[i]).abs().max().item<float>();
    }
    // One exchange per step (no_sync kept the first micro-batch local), the tied
    // embedding in it once.
    EXPECT_EQ(traffic[r].bytes_contributed, uint64_t(kSteps) * 4 * unique_numel);
  }
}

}  // namespace
}  // namespace gradwire::train
