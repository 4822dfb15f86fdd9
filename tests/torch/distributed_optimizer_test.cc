#include "gradwire/distributed_optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "../common/gloo_harness.h"
#include "gradwire/comm/collectives.h"
#include "gradwire/comm/zmq_transport.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/ps/server.h"
#include "gradwire/strategy/registry.h"
#include "torch_test_util.h"

namespace gradwire {
namespace {

TEST(DistributedOptimizerTest, TwoRanksOfBatchBMatchOneRankOfBatch2B) {
  const Problem problem;
  constexpr int kBatch = 8, kSteps = 4;
  auto reference_net = problem.fresh_net();
  torch::optim::SGD reference_opt(reference_net->parameters(),
                                  torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto expected = train(
      problem, *reference_net, [&] { reference_opt.zero_grad(); }, [&] { reference_opt.step(); }, 0,
      1, 2 * kBatch, kSteps);

  std::vector<std::vector<torch::Tensor>> results(2);
  testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, 2, c);
    auto net = problem.fresh_net(/*perturb=*/rank * 0.5f);  // rank 1 starts elsewhere
    DistributedOptimizer opt(
        context, torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)),
        *net, {.compressor = "none"});
    results[rank] = train(
        problem, *net, [&] { opt.zero_grad(); }, [&] { opt.step(); }, rank, 2, kBatch, kSteps);
  });
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(results[rank][i], expected[i], /*rtol=*/0, /*atol=*/1e-5))
          << "rank " << rank << " tensor " << i << " max diff "
          << (results[rank][i] - expected[i]).abs().max().item<float>();
    }
  }
}

// Parameter servers on threads over real ZeroMQ sockets; workers are Gloo ranks whose
// Context knows the servers, as gradwire::init() builds it in a job with servers.
class ServerThreads {
 public:
  ServerThreads(int count, uint64_t token) {
    for (int s = 0; s < count; ++s) {
      transports_.push_back(
          std::make_unique<comm::ZmqServerTransport>("server" + std::to_string(s), "127.0.0.1"));
      servers_.endpoints.push_back(transports_.back()->endpoint());
    }
    servers_.token = token;
    for (int s = 0; s < count; ++s) {
      threads_.emplace_back([this, s, token] {
        strategy::ps::ServerOptions o;
        o.index = s;
        o.token = token;
        o.first_hello_timeout = std::chrono::seconds(30);
        strategy::ps::ParameterServer(*transports_[s], o).run();
      });
    }
  }
  ~ServerThreads() {
    for (auto& t : threads_) t.join();
  }
  const ParameterServers& servers() const { return servers_; }

 private:
  ParameterServers servers_;
  std::vector<std::unique_ptr<comm::ZmqServerTransport>> transports_;
  std::vector<std::thread> threads_;
};

TEST(DistributedOptimizerTest, ParameterServerBspMatchesAllreduceStepForStep) {
  const Problem problem;
  constexpr int kBatch = 8, kSteps = 6;
  auto run = [&](bool ps) {
    std::vector<std::vector<torch::Tensor>> results(2);
    std::unique_ptr<ServerThreads> servers;
    if (ps) servers = std::make_unique<ServerThreads>(2, 0x5eed);
    testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, 2, c);
      if (ps) context->set_parameter_servers(servers->servers());
      auto net = problem.fresh_net();
      DistributedOptimizer opt(
          context,
          torch::optim::SGD(net->parameters(),
                            torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3)),
          *net, {.strategy = ps ? "ps" : "allreduce", .compressor = "none"});
      results[rank] = train(
          problem, *net, [&] { opt.zero_grad(); }, [&] { opt.step(); }, rank, 2, kBatch, kSteps);
      const auto summary = opt.finish();
      EXPECT_EQ(summary.has_value(), ps);
      if (ps && rank == 0) EXPECT_EQ(summary->version, static_cast<uint64_t>(kSteps));
    });
    return results;
  };
  const auto allreduce = run(false);
  const auto ps = run(true);
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < allreduce[0].size(); ++i) {
      EXPECT_TRUE(torch::allclose(ps[rank][i], allreduce[0][i], /*rtol=*/0, /*atol=*/1e-5))
          << "rank " << rank << " tensor " << i << " max diff "
          << (ps[rank][i] - allreduce[0][i]).abs().max().item<float>();
    }
  }
}

TEST(DistributedOptimizerTest, ParameterServerStrategyNeedsServersAndSgd) {
  testing::run_gloo_ranks(1, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, 1, c);
    auto net = Problem().fresh_net();
    try {
      DistributedOptimizer opt(context, torch::optim::SGD(net->parameters(), 0.1), *net,
                               {.strategy = "ps"});
      FAIL() << "expected ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--servers"), std::string::npos) << e.what();
    }
    context->set_parameter_servers({{"tcp://127.0.0.1:1"}, 1});
    try {
      DistributedOptimizer opt(context, torch::optim::Adam(net->parameters()), *net,
                               {.strategy = "ps"});
      FAIL() << "expected ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("torch::optim::SGD"), std::string::npos) << e.what();
    }
  });
}

TEST(DistributedOptimizerTest, AnUnknownStrategyIsRefusedNamingTheStrategiesThereAre) {
  testing::run_gloo_ranks(1, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, 1, c);
    auto net = Problem().fresh_net();
    try {
      DistributedOptimizer opt(context, torch::optim::SGD(net->parameters(), 0.1), *net,
                               {.strategy = "ring"});
      FAIL() << "expected ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("unknown strategy 'ring'; available: allreduce, ps, "
                                           "gossip"),
                std::string::npos)
          << e.what();
    }
  });
}

class CodecOverGlooTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CodecOverGlooTest, EveryRankEndsWithIdenticalParameters) {
  const auto& [codec, world] = GetParam();
  const Problem problem;
  std::vector<std::vector<torch::Tensor>> results(world);
  std::vector<TrafficCounters> traffic(world);
  testing::run_gloo_ranks(world, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, world, c);
    auto net = problem.fresh_net();
    DistributedOptimizer opt(
        context, torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)),
        *net, {.compressor = codec, .bucket_bytes = 1024});
    results[rank] = train(
        problem, *net, [&] { opt.zero_grad(); }, [&] { opt.step(); }, rank, world, 4, 5);
    traffic[rank] = opt.traffic();
  });
  for (int rank = 1; rank < world; ++rank) {
    for (size_t i = 0; i < results[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(results[rank][i], results[0][i])) << "rank " << rank;
    }
  }
  EXPECT_EQ(traffic[0].steps, 5u);
  EXPECT_GT(traffic[0].bytes_contributed, 0u);
  EXPECT_GT(traffic[0].bytes_on_wire, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, CodecOverGlooTest,
    ::testing::Combine(::testing::Values("none", "fp16", "topk:density=0.01", "2bit", "int8",
                                         "auto:trial=1,window=1", "accordion:window=1"),
                       ::testing::Values(2, 4)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param);
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name + "_" + std::to_string(std::get<1>(info.param));
    });

// auto sees the rate of each step's update wherever the loop sets it. Here the loop sets
// it after backward (the exchange ran during backward), from an optimizer built with the
// peak rate: a warm-up from 0.0125 to 0.1 starts no new trial; a decay to a tenth does
// (auto's regimes=on: Accordion's detector, off by default).
TEST(DistributedOptimizerTest, AutoTakesAWarmUpSetAfterBackwardForNoDecay) {
  const Problem problem;
  const auto reasons = [&](double decay_at) {
    std::vector<std::string> out;
    testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, 2, c);
      auto net = problem.fresh_net();
      DistributedOptimizer opt(context, torch::optim::SGD(net->parameters(), 0.1), *net,
                               {.compressor = "auto:trial=1,window=2,plans=none/fp16,regimes=on"});
      int step = 0;
      train(
          problem, *net, [&] { opt.zero_grad(); },
          [&] {
            const double lr = step >= decay_at ? 0.01 : 0.1 * std::min(step + 1, 8) / 8.0;
            static_cast<torch::optim::SGDOptions&>(opt.optimizer().param_groups()[0].options())
                .lr(lr);
            ++step;
            opt.step();
          },
          rank, 2, 4, 40);  // the decay's trial ends well before: its steps vary with timing
      if (rank != 0) return;
      for (const auto& d : opt.take_codec_decisions()) out.push_back(d.reason);
    });
    return out;
  };
  const auto mentions_decay = [](const std::vector<std::string>& reasons) {
    return std::any_of(reasons.begin(), reasons.end(), [](const std::string& r) {
      return r.find("learning-rate decay") != std::string::npos;
    });
  };
  const auto warm_up = reasons(1e9);
  EXPECT_FALSE(mentions_decay(warm_up)) << ::testing::PrintToString(warm_up);
  const auto decayed = reasons(8);
  EXPECT_TRUE(mentions_decay(decayed)) << ::testing::PrintToString(decayed);
}

TEST(DistributedOptimizerTest, CodecMismatchFailsAtConstruction) {
  const Problem problem;
  std::mutex mu;
  std::vector<std::string> errors;
  testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, 2, c);
    auto net = problem.fresh_net();
    try {
      DistributedOptimizer opt(context, torch::optim::SGD(net->parameters(), 0.1), *net,
                               {.compressor = rank == 0 ? "fp16" : "none"});
    } catch (const MismatchError& e) {
      std::lock_guard lock(mu);
      errors.push_back(e.what());
    }
  });
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("rank 0 has 'codec fp16"), std::string::npos) << errors[0];
}

// auto under an optimizer that scales each coordinate (Adam, AdamW...) runs its PowerSGD
// plan at the rank that converged under AdamW, with that family's penalty and dense start
// (registry.h); under SGD with its own; a rank, plans, penalty or dense start the user gave
// stay.
TEST(DistributedOptimizerTest, AutoUnderAdamRunsPowerSgdAtTheRankThatConverges) {
  SmallNet net;
  // "KEY=VALUE" of a canonical spec, "" where it has no KEY.
  const auto param_of = [](const std::string& spec, const std::string& key) {
    const auto at = spec.find(key + "=");
    return at == std::string::npos ? std::string() : spec.substr(at, spec.find(',', at) - at);
  };
  const auto rank_of = [&](const std::string& spec) { return param_of(spec, "rank"); };
  const std::string adam_rank = "rank=" + std::to_string(strategy::kPerCoordinateRank);
  {
    DistributedOptimizer opt(solo_context(), torch::optim::AdamW(net.parameters()), net,
                             {.compressor = "auto"});
    EXPECT_EQ(rank_of(opt.codec_spec()), adam_rank) << opt.codec_spec();
  }
  {
    DistributedOptimizer opt(solo_context(), torch::optim::Adam(net.parameters()), net);
    EXPECT_EQ(rank_of(opt.codec_spec()), adam_rank) << opt.codec_spec();
  }
  {
    DistributedOptimizer opt(solo_context(), torch::optim::SGD(net.parameters(), 0.1), net);
    EXPECT_EQ(rank_of(opt.codec_spec()), "rank=8") << opt.codec_spec();
  }
  {
    DistributedOptimizer opt(solo_context(), torch::optim::AdamW(net.parameters()), net,
                             {.compressor = "auto:rank=4"});
    EXPECT_EQ(rank_of(opt.codec_spec()), "rank=4") << opt.codec_spec();
  }
  {
    // Plans given, no rank: the rank that converges under AdamW still.
    DistributedOptimizer opt(solo_context(), torch::optim::AdamW(net.parameters()), net,
                             {.compressor = "auto:plans=int8/powersgd"});
    EXPECT_EQ(rank_of(opt.codec_spec()), adam_rank) << opt.codec_spec();
  }
  // The penalty and the dense start under Adam's family are kPerCoordinatePenalty (0: rank
  // 16 needed no more steps than fp32 on gpt) and kPerCoordinateDense (PowerSGD from the
  // first step stalled gpt), unless given; under SGD the defaults (the CNNs' penalty, no
  // dense start).
  const auto spec_under = [&](bool adam, const std::string& codec) {
    if (adam) {
      return DistributedOptimizer(solo_context(), torch::optim::AdamW(net.parameters()), net,
                                  {.compressor = codec})
          .codec_spec();
    }
    return DistributedOptimizer(solo_context(), torch::optim::SGD(net.parameters(), 0.1), net,
                                {.compressor = codec})
        .codec_spec();
  };
  EXPECT_EQ(param_of(spec_under(true, "auto"), "penalty"), "penalty=0");
  EXPECT_EQ(param_of(spec_under(true, "auto:penalty=0.2"), "penalty"), "penalty=0.2");
  EXPECT_EQ(param_of(spec_under(false, "auto"), "penalty"), "penalty=0.096");
  EXPECT_EQ(param_of(spec_under(true, "auto"), "dense"), "dense=2");
  EXPECT_EQ(param_of(spec_under(true, "auto:dense=5"), "dense"), "dense=5");
  EXPECT_EQ(param_of(spec_under(false, "auto"), "dense"), "dense=0");
}

double sgd_momentum(DistributedOptimizer& opt) {
  return static_cast<torch::optim::SGDOptions&>(opt.optimizer().param_groups()[0].options())
      .momentum();
}

TEST(DistributedOptimizerTest, MomentumMovesIntoErrorFeedbackCodecs) {
  SmallNet net;
  auto sgd = [&] {
    return torch::optim::SGD(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  {
    DistributedOptimizer opt(solo_context(), sgd(), net, {.compressor = "topk:density=0.01"});
    EXPECT_EQ(opt.codec_spec(), "topk:density=0.01,ef=1,momentum=0.9,warmup=0");
    EXPECT_EQ(sgd_momentum(opt), 0.0);
  }
  {
    DistributedOptimizer opt(solo_context(), sgd(), net, {.compressor = "fp16"});
    EXPECT_EQ(opt.codec_spec(), "fp16:ef=0");
    EXPECT_DOUBLE_EQ(sgd_momentum(opt), 0.9);
  }
  {
    DistributedOptimizer opt(solo_context(), sgd(), net,
                             {.compressor = "2bit", .momentum_correction = false});
    EXPECT_EQ(opt.codec_spec(), "2bit:alpha=1,ef=1,threshold=auto");
    EXPECT_DOUBLE_EQ(sgd_momentum(opt), 0.9);
  }
  {
    DistributedOptimizer opt(
        solo_context(),
        torch::optim::SGD(net.parameters(),
                          torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true)),
        net, {.compressor = "2bit"});
    EXPECT_EQ(opt.codec_spec(), "2bit:alpha=1,ef=1,threshold=auto");  // Nesterov: untouched
  }
}

// No codec given: allreduce measures and picks (auto); the parameter server and gossip,
// which run fixed codecs, send fp32. A codec given is kept as given.
TEST(DistributedOptimizerTest, TheDefaultCodecIsAutoForAllreduceAndNoneElsewhere) {
  const Problem problem;
  auto net = problem.fresh_net();
  DistributedOptimizer opt(solo_context(), torch::optim::SGD(net->parameters(), 0.1), *net);
  EXPECT_EQ(opt.codec_spec(), strategy::canonical_codec("auto"));
  EXPECT_EQ(strategy::codec_or_default("", "allreduce"), "auto");
  EXPECT_EQ(strategy::codec_or_default("", "ps"), "none");
  EXPECT_EQ(strategy::codec_or_default("", "gossip"), "none");
  EXPECT_EQ(strategy::codec_or_default("fp16", "allreduce"), "fp16");
}

TEST(DistributedOptimizerTest, AutoReportsItsDecisionsAndLeavesMomentumAlone) {
  const Problem problem;
  auto net = problem.fresh_net();
  DistributedOptimizer opt(
      solo_context(),
      torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)), *net,
      {.compressor = "auto:trial=1"});
  EXPECT_EQ(opt.codec_spec(),
            "auto:dense=0,eta=0.5,penalty=0.096,plans=none/fp16/int8/powersgd,prune=2,rank=8,"
            "regimes=off,reprobe=2000,trial=1,trial_max=20,window=50");
  EXPECT_DOUBLE_EQ(sgd_momentum(opt), 0.9);  // no plan needs momentum correction
  train(
      problem, *net, [&] { opt.zero_grad(); }, [&] { opt.step(); }, 0, 1, 8, 10);
  // One rank: nothing to exchange, so nothing to measure: none from the start, one
  // decision (fit is not a default plan).
  const auto decisions = opt.take_codec_decisions();
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].step, 0u);
  EXPECT_EQ(decisions[0].plan, "none");
  EXPECT_NE(decisions[0].reason.find("one rank"), std::string::npos) << decisions[0].reason;
  EXPECT_NE(decisions[0].reason.find("start of training"), std::string::npos);
  EXPECT_NE(decisions[0].inputs_json.find("\"step_ms\""), std::string::npos);
  EXPECT_EQ(decisions[0].reason.find("fit"), std::string::npos) << decisions[0].reason;
  EXPECT_TRUE(opt.take_codec_decisions().empty());  // taken once
}

TEST(DistributedOptimizerTest, AdaptiveCodecsNeedTheAllreduceStrategy) {
  SmallNet net;
  try {
    DistributedOptimizer opt(solo_context(), torch::optim::SGD(net.parameters(), 0.1), net,
                             {.strategy = "ps", .compressor = "auto"});
    FAIL() << "accepted auto with a parameter server";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fixed codec"), std::string::npos) << e.what();
  }
}

TEST(DistributedOptimizerTest, UnknownCodecListsTheKnownOnes) {
  auto context = solo_context();
  SmallNet net;
  try {
    DistributedOptimizer opt(context, torch::optim::SGD(net.parameters(), 0.1), net,
                             {.compressor = "zip"});
    FAIL() << "accepted an unknown codec";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("topk"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradwire
