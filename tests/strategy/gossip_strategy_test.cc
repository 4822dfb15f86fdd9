#include "gradwire/strategy/gossip/gossip_strategy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <random>
#include <thread>

#include "gradwire/comm/inproc_transport.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/error.h"

namespace gradwire::strategy::gossip {
namespace {

using namespace std::chrono_literals;
using compress::LayerKind;
using compress::TensorInfo;

std::vector<TensorInfo> small_model() {
  return {{"fc.weight", {4, 8}, LayerKind::kFcWeight}, {"fc.bias", {4}, LayerKind::kBias}};
}

struct Worker {
  std::vector<std::vector<float>> params;
  FloatSpans spans;
  explicit Worker(const std::vector<TensorInfo>& tensors) {
    for (const auto& t : tensors) params.emplace_back(t.numel(), 0.0f);
    for (auto& p : params) spans.emplace_back(p);
  }
};

struct RunResult {
  std::vector<std::vector<std::vector<float>>> before_finish, after_finish;
  std::vector<GossipStats> stats;
};

// Every rank starts gossip, then sets its model to `initial(rank)` (as if it had trained on
// its own), and runs `steps` steps with zero gradients (`pause` of compute each), then
// finish(). `before` sees each step's model.
RunResult run_gossip(
    int world, GossipOptions options, int steps,
    const std::function<float(int rank, size_t i)>& initial,
    std::function<std::chrono::microseconds(int rank, int step)> pause = [](int, int) {
      return std::chrono::microseconds(200);
    }) {
  const auto tensors = small_model();
  auto network = comm::InprocNetwork::create();
  RunResult result;
  result.before_finish.resize(world);
  result.after_finish.resize(world);
  result.stats.resize(world);
  comm::run_local_ranks(world, 30s, [&](comm::Collectives& c) {
    Worker w(tensors);
    GossipStrategy strategy(
        c, [&](comm::Collectives& cc) { return network->endpoint(peer_name(cc.rank())); }, options);
    strategy.start(tensors, w.spans);
    size_t i = 0;
    for (auto& p : w.params) {
      for (float& v : p) v = initial(c.rank(), i++);
    }
    std::vector<std::vector<float>> zero_grads = w.params;
    for (auto& g : zero_grads) std::fill(g.begin(), g.end(), 0.0f);
    FloatSpans grads;
    for (auto& g : zero_grads) grads.emplace_back(g);
    for (int s = 0; s < steps; ++s) {
      std::this_thread::sleep_for(pause(c.rank(), s));
      strategy.synchronize(grads);
      strategy.after_update(w.spans);
    }
    result.before_finish[c.rank()] = w.params;
    strategy.finish();
    result.after_finish[c.rank()] = w.params;
    result.stats[c.rank()] = strategy.stats();
  });
  return result;
}

// Dyadic values (multiples of 1/8): averages of a few of them are exact in float.
float dyadic(int rank, size_t i) {
  return static_cast<float>((rank * 37 + static_cast<int>(i) * 11) % 64) / 8.0f;
}

std::vector<float> flat(const std::vector<std::vector<float>>& model) {
  std::vector<float> out;
  for (const auto& t : model) out.insert(out.end(), t.begin(), t.end());
  return out;
}

TEST(GossipStrategyTest, PairwiseMergesPreserveTheSumExactly) {
  // Two workers, a few exchanges: whatever merges happened, finish()'s average of the
  // models equals the average of the starting models exactly, which holds only if every
  // merge moved as much into one model as out of the other.
  GossipOptions options;
  options.trigger = "every";
  const auto r = run_gossip(2, options, 5, dyadic);
  const auto a = flat(r.after_finish[0]);
  const auto b = flat(r.after_finish[1]);
  ASSERT_EQ(a, b);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], (dyadic(0, i) + dyadic(1, i)) / 2) << i;
  }
  EXPECT_GT(r.stats[0].merges + r.stats[1].merges, 0u);
}

double spread(const std::vector<std::vector<std::vector<float>>>& models,
              std::vector<double> mean) {
  double worst = 0;
  for (const auto& m : models) {
    const auto x = flat(m);
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - mean[i]));
  }
  return worst;
}

class GossipConsensusTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
};

TEST_P(GossipConsensusTest, ZeroGradientsDriveEveryModelToTheInitialAverage) {
  const auto& [topology, merge] = GetParam();
  const int world = 4;
  GossipOptions options;
  options.topology = topology;
  options.merge = merge;
  options.trigger = "every";
  const auto r = run_gossip(world, options, 150, dyadic);
  std::vector<double> mean(flat(r.after_finish[0]).size(), 0.0);
  for (size_t i = 0; i < mean.size(); ++i) {
    for (int w = 0; w < world; ++w) mean[i] += dyadic(w, i) / world;
  }
  double initial = 0;
  for (int w = 0; w < world; ++w) {
    for (size_t i = 0; i < mean.size(); ++i)
      initial = std::max(initial, std::fabs(dyadic(w, i) - mean[i]));
  }
  // Gossip alone (before the final consensus) brought the models together ...
  EXPECT_LT(spread(r.before_finish, mean), 1e-3 * initial) << topology << " " << merge;
  // ... and finish() leaves one model, the average.
  for (int w = 1; w < world; ++w) EXPECT_EQ(r.after_finish[w], r.after_finish[0]);
  EXPECT_LT(spread(r.after_finish, mean), 1e-5);
  for (const auto& s : r.stats) EXPECT_GT(s.offers, 10u);
}

INSTANTIATE_TEST_SUITE_P(Topologies, GossipConsensusTest,
                         ::testing::Combine(::testing::Values("ring", "exponential",
                                                              "random:seed=3"),
                                            ::testing::Values("pairwise", "push-sum")),
                         [](const auto& info) {
                           std::string name =
                               std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(GossipStrategyTest, PeriodicTriggerOffersEveryKSteps) {
  GossipOptions options;
  options.trigger = "period:4";
  const auto r = run_gossip(3, options, 40, dyadic);
  for (const auto& s : r.stats) {
    ASSERT_GE(s.offers, 5u);
    for (size_t j = 1; j < s.steps_between.size(); ++j) EXPECT_GE(s.steps_between[j], 4u);
  }
}

// --gossip-wait: a fast worker paired with a slow one still offers at every step, because
// each step ends only once its offer is answered; without waiting it goes on and offers
// only when the slow one has answered. Either way the merges keep the sum.
TEST(GossipStrategyTest, AWaitingWorkerHasEveryOfferAnsweredWithinItsStep) {
  constexpr int kSteps = 20;
  const auto pause = [](int rank, int) {
    return std::chrono::microseconds(rank == 1 ? 20000 : 200);
  };
  for (const bool wait : {true, false}) {
    GossipOptions options;
    options.trigger = "every";
    options.wait = wait;
    const auto r = run_gossip(2, options, kSteps, dyadic, pause);
    const GossipStats& fast = r.stats[0];
    if (wait) {
      EXPECT_EQ(fast.offers, static_cast<uint64_t>(kSteps));
      for (const auto between : fast.steps_between) EXPECT_EQ(between, 1u);
    } else {
      EXPECT_LT(fast.offers, static_cast<uint64_t>(kSteps / 2));
    }
    const auto a = flat(r.after_finish[0]);
    ASSERT_EQ(a, flat(r.after_finish[1])) << wait;
    // Many merges: halves of halves leave float's precision, so the sum is kept to rounding.
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], (dyadic(0, i) + dyadic(1, i)) / 2, 1e-5) << i << " " << wait;
    }
  }
}

TEST(GossipStrategyTest, RandomStepTimesNeverDeadlock) {
  // Workers of very different speeds, every topology: all finish (run_local_ranks bounds
  // the time) with one model.
  for (const std::string topology : {"ring", "exponential", "random", "ring+wait"}) {
    GossipOptions options;
    options.topology = topology.substr(0, topology.find('+'));
    options.wait = topology.find("+wait") != std::string::npos;  // all wait on one another
    options.trigger = "every";
    std::mt19937 rng(5);
    std::vector<std::vector<int>> pauses(4, std::vector<int>(60));
    for (auto& p : pauses) {
      for (int& v : p) v = static_cast<int>(rng() % 2000);
    }
    const auto r = run_gossip(4, options, 60, dyadic, [&](int rank, int step) {
      return std::chrono::microseconds(pauses[rank][step]);
    });
    for (int w = 1; w < 4; ++w) EXPECT_EQ(r.after_finish[w], r.after_finish[0]) << topology;
  }
}

TEST(GossipStrategyTest, StrangersAndGarbageAreDroppedAndCounted) {
  const auto tensors = small_model();
  auto network = comm::InprocNetwork::create();
  auto intruder = network->endpoint("intruder");
  std::vector<GossipStats> stats(2);
  comm::run_local_ranks(2, 30s, [&](comm::Collectives& c) {
    Worker w(tensors);
    GossipOptions options;
    options.trigger = "every";
    options.token = 77;
    GossipStrategy strategy(
        c, [&](comm::Collectives& cc) { return network->endpoint(peer_name(cc.rank())); }, options);
    strategy.start(tensors, w.spans);
    c.barrier();
    if (c.rank() == 0) {
      Message forged;
      forged.type = MessageType::kOffer;
      forged.token = 77;
      forged.sender = 1;  // claims to be worker1, but comes from "intruder"
      const Bytes garbage{1, 2, 3};
      intruder->send(peer_name(0), encode(forged));
      intruder->send(peer_name(0), garbage);
    }
    c.barrier();
    for (int s = 0; s < 5; ++s) {
      strategy.synchronize(w.spans);
      strategy.after_update(w.spans);
    }
    strategy.finish();
    stats[c.rank()] = strategy.stats();
  });
  EXPECT_EQ(stats[0].dropped_messages, 2u);
  EXPECT_GT(stats[0].merges + stats[1].merges, 0u);  // the workers still talked
}

TEST(GossipStrategyTest, AReportGivesRankZeroTheExactAverageAndConsensusDistance) {
  // No exchange (the period is never reached): the view is of the models as set.
  const int world = 3;
  const auto tensors = small_model();
  auto network = comm::InprocNetwork::create();
  std::optional<JobView> view;
  comm::run_local_ranks(world, 30s, [&](comm::Collectives& c) {
    Worker w(tensors);
    GossipOptions options;
    options.trigger = "period:1000000";
    GossipStrategy strategy(
        c, [&](comm::Collectives& cc) { return network->endpoint(peer_name(cc.rank())); }, options);
    strategy.start(tensors, w.spans);
    size_t i = 0;
    for (auto& p : w.params) {
      for (float& v : p) v = dyadic(c.rank(), i++);
    }
    for (int s = 0; s < 3; ++s) {
      strategy.synchronize(w.spans);
      strategy.after_update(w.spans);
    }
    const std::string note = "worker " + std::to_string(c.rank());
    auto mine = strategy.report(Bytes(note.begin(), note.end()));
    EXPECT_EQ(mine.has_value(), c.rank() == 0);
    if (mine) view = std::move(mine);
    strategy.finish();
  });
  ASSERT_TRUE(view);
  EXPECT_EQ(view->reported, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(view->lost.empty());
  EXPECT_EQ(view->totals.steps, 9u);
  EXPECT_EQ(view->totals.offers, 0u);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(std::string(view->notes[r].begin(), view->notes[r].end()),
              "worker " + std::to_string(r));
  }
  const auto average = flat(view->average);
  double distance = 0;
  for (int r = 0; r < world; ++r) {
    double sq = 0;
    for (size_t i = 0; i < average.size(); ++i) {
      const double mean = (dyadic(0, i) + dyadic(1, i) + dyadic(2, i)) / 3.0;
      EXPECT_EQ(average[i], static_cast<float>(mean)) << i;
      const double d = static_cast<double>(dyadic(r, i)) - average[i];
      sq += d * d;
    }
    distance += std::sqrt(sq) / world;
  }
  EXPECT_NEAR(view->consensus_distance, distance, 1e-9 * distance);
}

TEST(GossipStrategyTest, AWorkerThatStopsAnsweringIsDroppedAndTheOthersFinish) {
  // Worker 2 hangs after a few steps (its transport stays up, it answers nothing and sends
  // no heartbeat). Its ring neighbours drop it after the peer timeout, rank 0 leaves it out
  // of the reports and of the consensus, and the three others end with one model.
  const int world = 4;
  const auto tensors = small_model();
  auto network = comm::InprocNetwork::create();
  std::atomic<bool> done{false};
  std::optional<JobView> report_view, final_view;
  std::vector<std::vector<std::vector<float>>> after(world);
  std::vector<GossipStats> stats(world);
  comm::run_local_ranks(world, 60s, [&](comm::Collectives& c) {
    Worker w(tensors);
    GossipOptions options;
    options.trigger = "every";
    options.peer_timeout = 400ms;
    GossipStrategy strategy(
        c, [&](comm::Collectives& cc) { return network->endpoint(peer_name(cc.rank())); }, options);
    strategy.start(tensors, w.spans);
    size_t i = 0;
    for (auto& p : w.params) {
      for (float& v : p) v = dyadic(c.rank(), i++);
    }
    for (int s = 0; s < 60; ++s) {
      if (c.rank() == 2 && s == 5) {
        const auto give_up = std::chrono::steady_clock::now() + 30s;
        while (!done && std::chrono::steady_clock::now() < give_up)
          std::this_thread::sleep_for(5ms);
        return;  // never finishes
      }
      std::this_thread::sleep_for(20ms);
      strategy.synchronize(w.spans);
      strategy.after_update(w.spans);
      if (s == 40) {
        auto view = strategy.report({});
        if (view) report_view = std::move(view);
      }
    }
    auto view = strategy.finish_job({});
    if (view) {
      final_view = std::move(view);
      done = true;
    }
    after[c.rank()] = w.params;
    stats[c.rank()] = strategy.stats();
  });
  ASSERT_TRUE(report_view);
  EXPECT_EQ(report_view->reported, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(report_view->lost, (std::vector<int>{2}));
  ASSERT_TRUE(final_view);
  EXPECT_EQ(final_view->reported, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(final_view->lost, (std::vector<int>{2}));
  EXPECT_EQ(final_view->totals.dropped_peers, (std::vector<int>{2}));
  EXPECT_EQ(after[1], after[0]);
  EXPECT_EQ(after[3], after[0]);
  EXPECT_EQ(flat(after[0]), flat(final_view->average));
}

TEST(GossipStrategyTest, BadOptionsAreRefused) {
  comm::run_local_ranks(1, 5s, [&](comm::Collectives& c) {
    const auto factory = [](comm::Collectives&) { return std::unique_ptr<comm::Transport>(); };
    EXPECT_THROW(GossipStrategy(c, factory, {.topology = "star"}), ConfigError);
    EXPECT_THROW(GossipStrategy(c, factory, {.trigger = "never"}), ConfigError);
    EXPECT_THROW(GossipStrategy(c, factory, {.merge = "max"}), ConfigError);
    EXPECT_THROW(GossipStrategy(c, factory, {.codec = "zip"}), ConfigError);
  });
}

}  // namespace
}  // namespace gradwire::strategy::gossip
