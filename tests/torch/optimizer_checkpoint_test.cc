// DistributedOptimizer::save_checkpoint / load_checkpoint through the API, per codec family:
// a job stopped after K steps and resumed from its checkpoint on fresh objects (other
// initial weights, empty optimizer) trains on bit for bit like the job that never stopped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <thread>

#include "../common/command_runner.h"
#include "gradwire/distributed_optimizer.h"
#include "torch_test_util.h"

namespace gradwire {
namespace {

using torch::optim::SGD;
using torch::optim::SGDOptions;

constexpr int kWorld = 2, kBatch = 8, kBefore = 4, kAfter = 4;

// Collectives whose fp32 sums take 50 ms more: codec none is then slower than fp16 by far
// on every rank and in every run, so what `auto` measures decides the same way each time.
class SlowFloat32 : public ForwardingCollectives {
 public:
  using ForwardingCollectives::ForwardingCollectives;
  std::unique_ptr<comm::Work> allreduce_sum_async(void* data, size_t count,
                                                  comm::DataType type) override {
    if (type == comm::DataType::kFloat32) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return ForwardingCollectives::allreduce_sum_async(data, count, type);
  }
};

// Parameters and buffers of every rank after the steps [first, last) of a job with `codec`.
template <typename Net>
std::vector<std::vector<torch::Tensor>> run_job(const Problem& problem, const std::string& codec,
                                                const std::string& sparse_aggregation, int first,
                                                int last, const std::string& save_to,
                                                const std::string& load_from, bool slow_fp32,
                                                double link_latency_s) {
  // Both runs from step 0 start from the same weights; the resumed one from others, which
  // the checkpoint replaces.
  torch::manual_seed(load_from.empty() ? 1 : 2);
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < kWorld; ++r) nets.push_back(std::make_shared<Net>());  // main thread
  std::vector<std::vector<torch::Tensor>> out(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    if (slow_fp32) c = std::make_unique<SlowFloat32>(std::move(c));
    auto context = context_for(rank, kWorld, c);
    Net& net = *nets[rank];
    DistributedOptimizer opt(
        context, SGD(net.parameters(), SGDOptions(0.05).momentum(0.9).weight_decay(1e-3)), net,
        {.compressor = codec,
         .sparse_aggregation = sparse_aggregation,
         .link_latency_s = link_latency_s});
    if (!load_from.empty()) {
      const auto user = opt.load_checkpoint(load_from);
      EXPECT_EQ(user.value_or("none"), "step " + std::to_string(first));
    }
    for (int s = first; s < last; ++s) {
      const int64_t begin = (s * kWorld + rank) * kBatch % 64;
      opt.zero_grad();
      torch::nn::functional::cross_entropy(net.forward(problem.x.slice(0, begin, begin + kBatch)),
                                           problem.y.slice(0, begin, begin + kBatch))
          .backward();
      opt.step();
    }
    if (!save_to.empty()) opt.save_checkpoint(save_to, "step " + std::to_string(last));
    for (auto& p : net.parameters()) out[rank].push_back(p.detach().clone());
    for (auto& b : net.buffers()) out[rank].push_back(b.detach().clone());
  });
  return out;
}

template <typename Net>
void expect_exact_resume(const std::string& codec, const std::string& sparse_aggregation = "auto",
                         bool slow_fp32 = false, double link_latency_s = 50e-6) {
  SCOPED_TRACE(codec);
  const Problem problem;
  const std::string path = testing::temp_path("gw_ckpt_", "job.ckpt");
  std::remove(path.c_str());
  const auto whole = run_job<Net>(problem, codec, sparse_aggregation, 0, kBefore + kAfter, "", "",
                                  slow_fp32, link_latency_s);
  run_job<Net>(problem, codec, sparse_aggregation, 0, kBefore, path, "", slow_fp32, link_latency_s);
  const auto resumed = run_job<Net>(problem, codec, sparse_aggregation, kBefore, kBefore + kAfter,
                                    "", path, slow_fp32, link_latency_s);
  std::remove(path.c_str());
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(resumed[r].size(), whole[r].size());
    for (size_t i = 0; i < whole[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(resumed[r][i], whole[r][i]))
          << "rank " << r << " tensor " << i << ": max diff "
          << (resumed[r][i] - whole[r][i]).abs().max().template item<double>();
    }
  }
}

TEST(OptimizerCheckpointTest, NoneRestoresTheOptimizersMomentum) {
  expect_exact_resume<SmallNet>("none");
}
TEST(OptimizerCheckpointTest, AdditiveAndSharedScaleCodecs) {
  expect_exact_resume<SmallNet>("fp16");
  expect_exact_resume<SmallNet>("int8");
}
TEST(OptimizerCheckpointTest, PowerSgdKeepsItsFactorsAndDenseStart) {
  expect_exact_resume<SmallNet>("powersgd:rank=2,start=2");
}
TEST(OptimizerCheckpointTest, ErrorFeedbackCodecsKeepTheirResidualsAndMomentum) {
  expect_exact_resume<SmallNet>("2bit");
  expect_exact_resume<SmallNet>("topk:density=0.1", "split");
}
TEST(OptimizerCheckpointTest, AutoSavedInTheMiddleOfATrialGoesOnWithIt) {
  // fp16 (the least predicted exchange) opens the trial: its warm-up, a lead-in and a
  // sample (steps 0-2); round 1: fp16's lead-in and sample (3, 4), none's warm-up (5);
  // round 2 a lead-in and a sample each (6-9). Saved after step 3, mid-turn: the resumed job
  // must take fp16's sample at step 4 (the first after the resume, timed from the load) and
  // go on as the job that never stopped did. What the trial decides from its timings must
  // not depend on them within the 8 steps: a link of 50 ms a message step keeps lead-ins on
  // (every predicted exchange far above 15% of a step), prune=0 keeps the model from ruling
  // none out on that prediction, and none's fp32 sums take 50 ms more than fp16's.
  expect_exact_resume<SmallNet>("auto:plans=none/fp16,trial=2,prune=0", "auto",
                                /*slow_fp32=*/true, /*link_latency_s=*/0.05);
}
TEST(OptimizerCheckpointTest, AccordionKeepsItsRegime) {
  expect_exact_resume<SmallNet>("accordion:window=2");
}
TEST(OptimizerCheckpointTest, BatchNormBuffersAreRestored) {
  expect_exact_resume<BatchNormNet>("none");
}

// SmallNet whose conv is frozen (given to the optimizer all the same, as PyTorch programs
// do): the resumed job starts from other weights, so only the checkpoint can give the
// frozen conv back.
struct FrozenConvNet : SmallNet {
  FrozenConvNet() {
    for (auto& p : conv->parameters()) p.set_requires_grad(false);
  }
};

TEST(OptimizerCheckpointTest, FrozenParametersAreRestored) {
  expect_exact_resume<FrozenConvNet>("none");
}

}  // namespace
}  // namespace gradwire
