// The contract of DistributedOptimizer (include/gradwire/distributed_optimizer.h): hooks and
// parameters live no longer than the optimizer, buffers are checked and kept equal,
// synchronize() then step() exchanges once, weight decay under momentum correction acts as
// in the user's SGD, and what cannot be exchanged is refused by name. Each test failed on
// the code before this contract was written down.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <optional>

#include "gradwire/core/error.h"
#include "gradwire/distributed_optimizer.h"
#include "torch_test_util.h"

namespace gradwire {
namespace {

using torch::optim::SGD;
using torch::optim::SGDOptions;

void backward_once(const Problem& problem, SmallNet& net) {
  torch::nn::functional::cross_entropy(net.forward(problem.x), problem.y).backward();
}

TEST(DistributedOptimizerContractTest, BackwardAfterDestructionRunsNoGradwireCode) {
  const Problem problem;
  auto net = problem.fresh_net();
  { DistributedOptimizer opt(solo_context(), SGD(net->parameters(), 0.1), *net); }
  // Its hooks pointed into the destroyed optimizer: a backward now must not reach them
  // (ASan, scripts/sanitize.sh, reports the use after free where it does).
  backward_once(problem, *net);
  for (auto& p : net->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(DistributedOptimizerContractTest, ASecondOptimizerOnHeldParametersFailsUntilTheFirstGoes) {
  const Problem problem;
  auto net = problem.fresh_net();
  auto context = solo_context();
  auto first = std::make_unique<DistributedOptimizer>(context, SGD(net->parameters(), 0.1), *net);
  const std::string error =
      error_of([&] { DistributedOptimizer second(context, SGD(net->parameters(), 0.1), *net); });
  EXPECT_NE(error.find("parameter 'conv.weight' already belongs to another DistributedOptimizer"),
            std::string::npos)
      << error;
  first.reset();
  DistributedOptimizer second(context, SGD(net->parameters(), 0.1), *net);
  const auto before = net->fc->weight.detach().clone();
  second.zero_grad();
  backward_once(problem, *net);
  second.step();
  EXPECT_FALSE(torch::equal(before, net->fc->weight));
  EXPECT_EQ(second.traffic().steps, 1u);
}

TEST(DistributedOptimizerContractTest, ParametersThatCannotBeExchangedAreNamed) {
  auto net = std::make_shared<SmallNet>();
  net->to(torch::kDouble);
  const std::string error = error_of(
      [&] { DistributedOptimizer opt(solo_context(), SGD(net->parameters(), 0.1), *net); });
  EXPECT_NE(error.find("parameter 'conv.weight' is Double on cpu"), std::string::npos) << error;
}

TEST(DistributedOptimizerContractTest, TheOptimizerMustUpdateExactlyTheModelsParameters) {
  SmallNet net;
  const std::string missing = error_of(
      [&] { DistributedOptimizer opt(solo_context(), SGD(net.fc->parameters(), 0.1), net); });
  EXPECT_NE(missing.find("parameter 'conv.weight' of the model is not in the optimizer"),
            std::string::npos)
      << missing;
  auto params = net.parameters();
  params.push_back(torch::zeros({3}, torch::requires_grad()));
  const std::string extra =
      error_of([&] { DistributedOptimizer opt(solo_context(), SGD(params, 0.1), net); });
  EXPECT_NE(extra.find("a tensor of shape [3] that is not a parameter of the model"),
            std::string::npos)
      << extra;
}

struct NetWithBuffer : SmallNet {
  explicit NetWithBuffer(int64_t n, torch::Dtype dtype) {
    register_buffer("scale", torch::ones({n}, dtype));
  }
};

TEST(DistributedOptimizerContractTest, BuffersThatDifferAcrossRanksAreAMismatchNamingBothSides) {
  for (const bool dtype_differs : {false, true}) {
    std::mutex mu;
    std::vector<std::string> errors;
    testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, 2, c);
      NetWithBuffer net(rank == 1 && !dtype_differs ? 4 : 3,
                        rank == 1 && dtype_differs ? torch::kDouble : torch::kFloat);
      try {
        DistributedOptimizer opt(context, SGD(net.parameters(), 0.1), net);
      } catch (const MismatchError& e) {
        std::lock_guard lock(mu);
        errors.push_back(e.what());
      }
    });
    ASSERT_EQ(errors.size(), 2u);
    const std::string theirs = dtype_differs ? "rank 1 has 'buffer scale Double [3]'"
                                             : "rank 1 has 'buffer scale Float [4]'";
    for (const auto& e : errors) {
      EXPECT_NE(e.find("rank 0 has 'buffer scale Float [3]'"), std::string::npos) << e;
      EXPECT_NE(e.find(theirs), std::string::npos) << e;
    }
  }
}

std::vector<torch::Tensor> buffers_of(torch::nn::Module& net) {
  std::vector<torch::Tensor> out;
  for (auto& b : net.buffers()) out.push_back(b.detach().clone());
  return out;
}

TEST(DistributedOptimizerContractTest, RankZerosBuffersReachEveryRankAfterEveryStep) {
  const Problem problem;
  constexpr int kBatch = 8, kSteps = 3;
  for (const bool broadcast : {true, false}) {
    std::vector<std::vector<std::vector<torch::Tensor>>> buffers(2);  // [rank][step][buffer]
    std::vector<torch::Tensor> rank0_initial;
    testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, 2, c);
      BatchNormNet net;
      DistributedOptimizer opt(context, SGD(net.parameters(), 0.05), net,
                               {.broadcast_buffers = broadcast});
      if (rank == 0) {
        for (auto& p : net.parameters()) rank0_initial.push_back(p.detach().clone());
      }
      for (int s = 0; s < kSteps; ++s) {
        const int64_t begin = (s * 2 + rank) * kBatch;  // each rank its own samples
        opt.zero_grad();
        torch::nn::functional::cross_entropy(net.forward(problem.x.slice(0, begin, begin + kBatch)),
                                             problem.y.slice(0, begin, begin + kBatch))
            .backward();
        opt.step();
        buffers[rank].push_back(buffers_of(net));
      }
    });
    // Reference: rank 0's first step alone, in one process: its forward updated the
    // running statistics from the (equal) initial state.
    BatchNormNet reference;
    {
      torch::NoGradGuard no_grad;
      auto params = reference.parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(rank0_initial[i]);
      reference.forward(problem.x.slice(0, 0, kBatch));
    }
    const auto expected = buffers_of(reference);
    for (size_t b = 0; b < expected.size(); ++b) {
      EXPECT_TRUE(torch::allclose(buffers[0][0][b], expected[b])) << "buffer " << b;
    }
    for (int s = 0; s < kSteps; ++s) {
      bool all_equal = true;
      for (size_t b = 0; b < expected.size(); ++b) {
        all_equal = all_equal && torch::equal(buffers[1][s][b], buffers[0][s][b]);
      }
      EXPECT_EQ(all_equal, broadcast) << "step " << s << (broadcast ? "" : " without broadcast");
    }
  }
}

TEST(DistributedOptimizerContractTest, StepAfterSynchronizeDoesNotExchangeAgain) {
  const Problem problem;
  // Error feedback makes a second exchange visible: the residual would be fed twice.
  auto run = [&](bool synchronize_first) {
    std::vector<std::vector<torch::Tensor>> results(2);
    std::vector<TrafficCounters> traffic(2);
    testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, 2, c);
      auto net = problem.fresh_net();
      DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.05).momentum(0.9)),
                               *net, {.compressor = "topk:density=0.1"});
      results[rank] = train(
          problem, *net, [&] { opt.zero_grad(); },
          [&] {
            if (synchronize_first) {
              opt.synchronize();  // Horovod's pattern: exchange, clip, step
              torch::nn::utils::clip_grad_norm_(net->parameters(), 1e9);
            }
            opt.step();
          },
          rank, 2, 8, 4);
      traffic[rank] = opt.traffic();
    });
    return std::make_pair(results[0], traffic[0]);
  };
  const auto [plain, plain_traffic] = run(false);
  const auto [synced, synced_traffic] = run(true);
  EXPECT_EQ(plain_traffic.steps, 4u);
  EXPECT_EQ(synced_traffic.steps, 4u);
  EXPECT_EQ(synced_traffic.bytes_on_wire, plain_traffic.bytes_on_wire);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], synced[i])) << i;
}

TEST(DistributedOptimizerContractTest, OverlapMatchesTheSerialPathAndAcceptsASecondBackward) {
  const Problem problem;
  auto run = [&](bool overlap) {
    std::vector<std::vector<torch::Tensor>> results(2);
    testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, 2, c);
      auto net = problem.fresh_net();
      DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.05).momentum(0.9)),
                               *net,
                               {.compressor = "conv=topk:density=0.1,other=fp16",
                                .bucket_bytes = 1024,
                                .overlap = overlap});
      results[rank] = train(
          problem, *net, [&] { opt.zero_grad(); }, [&] { opt.step(); }, rank, 2, 8, 4);
    });
    return results;
  };
  const auto overlapped = run(true);
  const auto serial = run(false);
  for (size_t i = 0; i < serial[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(overlapped[0][i], serial[0][i])) << i;  // bit for bit
    EXPECT_TRUE(torch::equal(overlapped[1][i], serial[0][i])) << i;
  }

  // Two backward passes before a step: each exchanges what .grad holds (DDP's
  // accumulation); alone, .grad is the sum of both backward passes.
  auto net = problem.fresh_net();
  DistributedOptimizer opt(solo_context(), SGD(net->parameters(), 0.1), *net);
  backward_once(problem, *net);
  const auto once = net->fc->weight.grad().clone();
  backward_once(problem, *net);
  EXPECT_TRUE(torch::allclose(net->fc->weight.grad(), 2 * once));
}

TEST(DistributedOptimizerContractTest, WeightDecayUnderMomentumCorrectionActsAsInTheUsersSgd) {
  // In SGD, weight_decay wd adds wd x w to the gradient before momentum. With momentum
  // moved into the codec, weight_decay must still train exactly as wd = 0 with that term
  // added to the gradient by hand.
  const Problem problem;
  constexpr double kDecay = 0.05;
  auto run = [&](bool as_option) {
    auto net = problem.fresh_net();
    // By hand, the term is added after a backward under no_sync(): step() exchanges.
    DistributedOptimizer opt(
        solo_context(),
        SGD(net->parameters(), SGDOptions(0.1).momentum(0.9).weight_decay(as_option ? kDecay : 0)),
        *net, {.compressor = "topk:density=0.5"});
    EXPECT_NE(opt.codec_spec().find("momentum=0.9"), std::string::npos) << opt.codec_spec();
    const auto& group = static_cast<SGDOptions&>(opt.optimizer().param_groups()[0].options());
    EXPECT_EQ(group.weight_decay(), 0.0);
    std::optional<DistributedOptimizer::NoSync> guard;
    return train(
        problem, *net,
        [&] {
          opt.zero_grad();
          if (!as_option) guard.emplace(opt.no_sync());
        },
        [&] {
          guard.reset();
          if (!as_option) {
            torch::NoGradGuard no_grad;
            for (auto& p : net->parameters()) p.mutable_grad().add_(p, kDecay);
          }
          opt.step();
        },
        0, 1, 16, 5);
  };
  const auto with_option = run(true);
  const auto by_hand = run(false);
  for (size_t i = 0; i < by_hand.size(); ++i) {
    EXPECT_TRUE(torch::allclose(with_option[i], by_hand[i], /*rtol=*/0, /*atol=*/1e-6))
        << "tensor " << i << " max diff "
        << (with_option[i] - by_hand[i]).abs().max().item<float>();
  }
}

}  // namespace
}  // namespace gradwire
