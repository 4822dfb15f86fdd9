// What DistributedOptimizer does when a step cannot be exchanged: a backward that throws on
// one rank, a model changed after construction, a frozen parameter unfrozen, a gradient
// that cannot be exchanged, options that differ between ranks. Each fails promptly, on
// every rank, naming the cause; the user's optimizer is left as it was built.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>

#include "gradwire/comm/collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/distributed_optimizer.h"
#include "torch_test_util.h"

namespace gradwire {
namespace {

using torch::optim::SGD;
using torch::optim::SGDOptions;

// One process on both ranks' batches (16 samples a step), SGD with momentum, with step
// `skipped` left out as the distributed program leaves out a failed step.
std::vector<torch::Tensor> reference_skipping(const Problem& problem, int steps, int skipped) {
  auto reference = problem.fresh_net();
  SGD sgd(reference->parameters(), SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    if (s == skipped) continue;
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(
        reference->forward(problem.x.slice(0, s * 16, s * 16 + 16)),
        problem.y.slice(0, s * 16, s * 16 + 16))
        .backward();
    sgd.step();
  }
  return reference->parameters();
}

// SmallNet whose backward throws on demand, halfway: after the last layer's gradients.
struct FailingNet : SmallNet {
  bool fail = false;
  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::relu(conv(x)).flatten(1);
    if (h.requires_grad()) {
      h.register_hook([this](torch::Tensor g) {
        if (fail) throw std::runtime_error("a bad batch");
        return g;
      });
    }
    return fc(h);
  }
};

TEST(DistributedOptimizerFailureTest, ABackwardThatThrowsOnOneRankFailsTheStepOnEveryRank) {
  const Problem problem;
  constexpr int kBatch = 8, kSteps = 4, kBadStep = 1;
  // The reference skips the bad step on every rank, as the program below does.
  const auto want = reference_skipping(problem, kSteps, kBadStep);
  std::vector<std::vector<torch::Tensor>> results(2);
  std::vector<std::string> errors(2);
  testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, 2, c);
    FailingNet net;
    {
      torch::NoGradGuard no_grad;
      auto params = net.parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(problem.init[i]);
    }
    // Small buckets: the last layer's bucket is exchanged before the failure.
    DistributedOptimizer opt(context, SGD(net.parameters(), SGDOptions(0.1).momentum(0.9)), net,
                             {.compressor = "none", .bucket_bytes = 256, .first_bucket_bytes = 64});
    for (int s = 0; s < kSteps; ++s) {
      const int64_t begin = s * 16 + rank * kBatch;
      opt.zero_grad();
      net.fail = s == kBadStep && rank == 1;
      try {
        torch::nn::functional::cross_entropy(net.forward(problem.x.slice(0, begin, begin + kBatch)),
                                             problem.y.slice(0, begin, begin + kBatch))
            .backward();
      } catch (const std::exception& e) {
        errors[rank] = e.what();
        continue;  // skip the batch, as a program that drops bad batches does
      }
      opt.step();
    }
    results[rank] = std::vector<torch::Tensor>();
    for (auto& p : net.parameters()) results[rank].push_back(p.detach().clone());
  });
  EXPECT_NE(errors[1].find("a bad batch"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("the gradient exchange failed on rank 1: its backward ended before "
                           "every gradient was final"),
            std::string::npos)
      << errors[0];
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(torch::allclose(results[r][i], want[i], /*rtol=*/0, /*atol=*/1e-5))
          << "rank " << r << " tensor " << i;
    }
  }
}

TEST(DistributedOptimizerFailureTest, AModelConvertedAfterConstructionIsNamedBeforeAnyCollective) {
  const Problem problem;
  auto net = problem.fresh_net();
  DistributedOptimizer opt(solo_context(), SGD(net->parameters(), 0.1), *net,
                           {.compressor = "none"});
  net->to(torch::kDouble);  // new data, new gradient accumulators: the hooks are gone
  opt.zero_grad();
  torch::nn::functional::cross_entropy(net->forward(problem.x.to(torch::kDouble)), problem.y)
      .backward();
  const std::string error = error_of([&] { opt.step(); });
  EXPECT_NE(error.find("parameter 'conv.weight' is now Double on cpu"), std::string::npos) << error;
}

TEST(DistributedOptimizerFailureTest, AFrozenParameterThatGetsAGradientIsNamed) {
  const Problem problem;
  auto net = problem.fresh_net();
  net->conv->weight.requires_grad_(false);
  DistributedOptimizer opt(solo_context(), SGD(net->parameters(), 0.1), *net,
                           {.compressor = "none"});
  net->conv->weight.requires_grad_(true);  // unfrozen: it would be trained with local gradients
  opt.zero_grad();
  const std::string error = error_of(
      [&] { torch::nn::functional::cross_entropy(net->forward(problem.x), problem.y).backward(); });
  EXPECT_NE(error.find("parameter 'conv.weight' was frozen"), std::string::npos) << error;
}

TEST(DistributedOptimizerFailureTest, ASparseGradientIsNamed) {
  struct EmbeddingNet : torch::nn::Module {
    EmbeddingNet() {
      emb = register_module("emb",
                            torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 4).sparse(true)));
    }
    torch::nn::Embedding emb{nullptr};
  } net;
  DistributedOptimizer opt(solo_context(), SGD(net.parameters(), 0.1), net, {.compressor = "none"});
  const std::string error = error_of([&] { net.emb(torch::tensor({1, 2, 3})).sum().backward(); });
  EXPECT_NE(error.find("the gradient of parameter 'emb.weight' is Float on cpu, not dense"),
            std::string::npos)
      << error;
  opt.zero_grad();  // the optimizer stays usable
}

double group_momentum(torch::optim::Optimizer& optimizer) {
  return static_cast<SGDOptions&>(optimizer.param_groups()[0].options()).momentum();
}

TEST(DistributedOptimizerFailureTest, OptionsThatDifferAcrossRanksFailAndLeaveTheOptimizerAlone) {
  const Problem problem;
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<double> momentum(2);
  testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, 2, c);
    auto net = problem.fresh_net();
    SGD sgd(net->parameters(), SGDOptions(0.1).momentum(0.9));
    try {
      DistributedOptimizer opt(
          context, sgd, *net,
          {.compressor = "topk:density=0.1", .bucket_bytes = rank == 0 ? 1024u : 2048u});
    } catch (const MismatchError& e) {
      std::lock_guard lock(mu);
      errors.push_back(e.what());
    }
    momentum[rank] = group_momentum(sgd);
  });
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& e : errors) {
    EXPECT_NE(e.find("rank 0 has 'bucket bytes 1024'"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1 has 'bucket bytes 2048'"), std::string::npos) << e;
  }
  EXPECT_EQ(momentum[0], 0.9);
  EXPECT_EQ(momentum[1], 0.9);
}

TEST(DistributedOptimizerFailureTest, MomentumCorrectionIsUndoneWhenTheOptimizerGoes) {
  auto net = Problem().fresh_net();
  SGD sgd(net->parameters(), SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  {
    DistributedOptimizer opt(solo_context(), sgd, *net, {.compressor = "topk:density=0.1"});
    EXPECT_EQ(group_momentum(sgd), 0.0);  // moved into the codec
  }
  EXPECT_EQ(group_momentum(sgd), 0.9);
  EXPECT_EQ(static_cast<SGDOptions&>(sgd.param_groups()[0].options()).weight_decay(), 0.01);
  DistributedOptimizer again(solo_context(), sgd, *net, {.compressor = "topk:density=0.1"});
  EXPECT_NE(again.codec_spec().find("momentum=0.9"), std::string::npos) << again.codec_spec();
}

// Forwards to a real communicator, except that its `fail_at`-th allreduce-sum fails (on
// every rank alike, as a broken connection fails on both of its ends).
class FailingCollectives : public ForwardingCollectives {
 public:
  FailingCollectives(std::unique_ptr<comm::Collectives> inner, int fail_at)
      : ForwardingCollectives(std::move(inner)), fail_at_(fail_at) {}
  std::unique_ptr<comm::Work> allreduce_sum_async(void* data, size_t count,
                                                  comm::DataType type) override {
    if (++calls_ == fail_at_)
      throw Error("injected failure of allreduce " + std::to_string(calls_));
    return ForwardingCollectives::allreduce_sum_async(data, count, type);
  }

 private:
  int fail_at_;
  int calls_ = 0;
};

TEST(DistributedOptimizerFailureTest, AFailedCollectiveDuringBackwardFailsThatStepOnEveryRank) {
  const Problem problem;
  constexpr int kBatch = 8, kSteps = 4;
  std::vector<std::vector<torch::Tensor>> results(2);
  std::vector<std::vector<int>> failed_steps(2);
  std::vector<std::string> errors(2);
  testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    c = std::make_unique<FailingCollectives>(std::move(c), /*fail_at=*/5);
    auto context = context_for(rank, 2, c);
    auto net = problem.fresh_net();
    // Several buckets per step: the failure falls inside a step, with buckets after it.
    DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1).momentum(0.9)), *net,
                             {.compressor = "none", .bucket_bytes = 256, .first_bucket_bytes = 64});
    for (int s = 0; s < kSteps; ++s) {
      const int64_t begin = s * 16 + rank * kBatch;
      opt.zero_grad();
      try {
        torch::nn::functional::cross_entropy(
            net->forward(problem.x.slice(0, begin, begin + kBatch)),
            problem.y.slice(0, begin, begin + kBatch))
            .backward();
      } catch (const std::exception& e) {
        errors[rank] = e.what();
        failed_steps[rank].push_back(s);
        EXPECT_NE(error_of([&] { opt.step(); }).find("injected failure"), std::string::npos);
        continue;
      }
      opt.step();
    }
    for (auto& p : net->parameters()) results[rank].push_back(p.detach().clone());
  });
  ASSERT_EQ(failed_steps[0].size(), 1u) << errors[0];
  EXPECT_EQ(failed_steps[1], failed_steps[0]);
  EXPECT_NE(errors[0].find("injected failure of allreduce 5"), std::string::npos) << errors[0];
  // Every rank went on from the same state: the reference skips the failed step.
  const auto want = reference_skipping(problem, kSteps, failed_steps[0][0]);
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(torch::allclose(results[r][i], want[i], /*rtol=*/0, /*atol=*/1e-5))
          << "rank " << r << " tensor " << i;
    }
  }
}

}  // namespace
}  // namespace gradwire
