// DiLoCo against a reference: the algorithm of diloco_strategy.h simulated in one process
// (every rank's inner SGD in turn, the exact mean of the outer gradients), for plain and
// streaming schedules; the codecs' outer exchange against the exact mean; finish(),
// checkpoints, the ranks' agreement and auto's choice.
#include "gradwire/strategy/diloco/diloco_strategy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "diloco_test_util.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/error.h"

namespace gradwire::strategy::diloco {
namespace {

using namespace std::chrono_literals;

// The algorithm in one process, in double: every rank's model, the fragments' global
// parameters and momenta, the exchange in flight.
std::vector<Model> reference(int world, const DiLoCoOptions& o, uint64_t steps) {
  const auto tensors = toy_tensors();
  std::vector<size_t> numels;
  for (const auto& t : tensors) numels.push_back(t.numel());
  const auto fragments = split_fragments(numels, o.fragments);
  const Schedule schedule{o.inner_steps, o.delay, o.fragments, 0};
  std::vector<Model> ranks(static_cast<size_t>(world), initial_model(1));  // rank 0's start
  std::vector<std::vector<std::vector<double>>> global(fragments.size()),
      momentum(fragments.size());
  for (size_t f = 0; f < fragments.size(); ++f) {
    for (size_t k : fragments[f]) {
      global[f].emplace_back(ranks[0][k].begin(), ranks[0][k].end());
      momentum[f].emplace_back(numels[k], 0.0);
    }
  }
  std::vector<uint64_t> outer_steps(fragments.size(), 0);  // per fragment, for the warm-up
  int flying = -1;
  uint64_t land_at = 0;
  std::vector<std::vector<std::vector<double>>> sent(static_cast<size_t>(world));
  std::vector<std::vector<double>> mean;
  const auto land = [&] {
    const auto f = static_cast<size_t>(flying);
    const uint64_t k_outer = outer_steps[f]++;
    const double lr = o.outer_warmup > 0 && k_outer + 1 < o.outer_warmup
                          ? o.outer_lr * double(k_outer + 1) / double(o.outer_warmup)
                          : o.outer_lr;
    for (size_t j = 0; j < fragments[f].size(); ++j) {
      const size_t k = fragments[f][j];
      for (size_t i = 0; i < numels[k]; ++i) {
        const double d = mean[j][i];
        momentum[f][j][i] = o.outer_momentum * momentum[f][j][i] + d;
        global[f][j][i] -= lr * (d + o.outer_momentum * momentum[f][j][i]);
        for (int r = 0; r < world; ++r) {
          float& x = ranks[r][k][i];
          x = static_cast<float>(o.delay > 0 ? global[f][j][i] + (x - sent[r][j][i])
                                             : global[f][j][i]);
        }
      }
    }
    flying = -1;
  };
  for (uint64_t t = 1; t <= steps; ++t) {
    for (int r = 0; r < world; ++r) inner_step(ranks[r], r, t);
    if (flying >= 0 && t >= land_at) land();
    if (const auto f = schedule.sent_at(t)) {
      flying = *f;
      land_at = t + o.delay;
      mean.assign(fragments[*f].size(), {});
      for (int r = 0; r < world; ++r) {
        sent[r].clear();
        for (size_t j = 0; j < fragments[*f].size(); ++j) {
          const size_t k = fragments[*f][j];
          sent[r].emplace_back(ranks[r][k].begin(), ranks[r][k].end());
          mean[j].resize(numels[k], 0.0);
          for (size_t i = 0; i < numels[k]; ++i)
            mean[j][i] += (global[*f][j][i] - ranks[r][k][i]) / world;
        }
      }
      if (o.delay == 0) land();
    }
  }
  return ranks;
}

TEST(DiLoCoFragments, SplitInOrderByShareWithNoneEmpty) {
  const std::vector<size_t> numels{160, 64, 8, 240, 30};
  EXPECT_EQ(split_fragments(numels, 1), (std::vector<std::vector<size_t>>{{0, 1, 2, 3, 4}}));
  EXPECT_EQ(split_fragments(numels, 2), (std::vector<std::vector<size_t>>{{0, 1, 2}, {3, 4}}));
  EXPECT_EQ(split_fragments(numels, 5),
            (std::vector<std::vector<size_t>>{{0}, {1}, {2}, {3}, {4}}));
  EXPECT_THROW(split_fragments(numels, 6), ConfigError);
  EXPECT_THROW(split_fragments(numels, 0), ConfigError);
}

TEST(DiLoCoFragments, ScheduleSpacesTheFragmentsOverTheRound) {
  const Schedule s{12, 2, 3, 0};
  s.check();
  std::vector<std::pair<uint64_t, int>> sends;
  for (uint64_t t = 0; t <= 24; ++t) {
    if (auto f = s.sent_at(t)) sends.emplace_back(t, *f);
  }
  EXPECT_EQ(sends, (std::vector<std::pair<uint64_t, int>>{
                       {4, 0}, {8, 1}, {12, 2}, {16, 0}, {20, 1}, {24, 2}}));
  const Schedule shifted{4, 0, 1, 7};  // auto resolved after step 7
  EXPECT_FALSE(shifted.sent_at(7));
  EXPECT_EQ(shifted.sent_at(11), 0);
  EXPECT_THROW((Schedule{12, 5, 3, 0}.check()), ConfigError);  // delay > H / F
  EXPECT_THROW((Schedule{2, 0, 3, 0}.check()), ConfigError);   // H < F
}

struct ScheduleCase {
  uint64_t h;
  int fragments;
  uint64_t delay;
};

class DiLoCoReferenceTest : public ::testing::TestWithParam<ScheduleCase> {};

// fp32 exchanged exactly: every rank's model is the reference's within float rounding at
// every point (checked after 3.5 rounds, the last one in flight), equal across ranks where
// the reference's are.
TEST_P(DiLoCoReferenceTest, MatchesTheSimulatedAlgorithm) {
  const auto [h, fragments, delay] = GetParam();
  const auto o = options(h, fragments, delay);
  for (const uint64_t steps : {3 * h + h / 2, 3 * h}) {
    const auto want = reference(3, o, steps);
    const auto got = train(3, o, steps);
    for (int r = 0; r < 3; ++r) {
      EXPECT_LT(max_difference(got[r], want[r]), 2e-5) << "rank " << r << ", step " << steps;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, DiLoCoReferenceTest,
                         ::testing::Values(ScheduleCase{1, 1, 0}, ScheduleCase{5, 1, 0},
                                           ScheduleCase{6, 3, 0}, ScheduleCase{6, 2, 1},
                                           ScheduleCase{8, 2, 4}, ScheduleCase{5, 1, 5}));

// The outer warm-up: each fragment's k-th outer step takes lr min(1, (k + 1) / W), as the
// reference's; streaming and not.
TEST(DiLoCo, OuterWarmUpRampsEachFragmentsRate) {
  EXPECT_DOUBLE_EQ(outer_lr_at(options(4), 0), 0.7);
  auto warm = options(4);
  warm.outer_warmup = 4;
  EXPECT_DOUBLE_EQ(outer_lr_at(warm, 0), 0.7 * 0.25);
  EXPECT_DOUBLE_EQ(outer_lr_at(warm, 2), 0.7 * 0.75);
  EXPECT_DOUBLE_EQ(outer_lr_at(warm, 3), 0.7);
  EXPECT_DOUBLE_EQ(outer_lr_at(warm, 9), 0.7);
  for (auto o : {options(4, 1, 0), options(6, 2, 1)}) {
    o.outer_warmup = 3;
    const uint64_t steps = 5 * o.inner_steps;
    const auto want = reference(3, o, steps);
    const auto got = train(3, o, steps);
    auto unwarmed = o;
    unwarmed.outer_warmup = 0;
    EXPECT_GT(max_difference(reference(3, unwarmed, steps)[0], want[0]), 1e-3);
    for (int r = 0; r < 3; ++r) {
      EXPECT_LT(max_difference(got[r], want[r]), 2e-5) << "rank " << r << ", F " << o.fragments;
    }
  }
}

// H = 1, outer rate 1, no momentum: DiLoCo is synchronous SGD (the mean of the ranks' steps
// from one point is the step on the mean gradient).
TEST(DiLoCo, OneInnerStepWithPlainOuterStepIsSynchronousSgd) {
  auto o = options(1);
  o.outer_lr = 1;
  o.outer_momentum = 0;
  const auto got = train(4, o, 5);
  Model want = initial_model(1);
  for (uint64_t t = 1; t <= 5; ++t) {
    std::vector<Model> stepped(4, want);
    for (int r = 0; r < 4; ++r) inner_step(stepped[r], r, t);
    for (size_t k = 0; k < want.size(); ++k) {
      for (size_t i = 0; i < want[k].size(); ++i) {
        double mean = 0;
        for (int r = 0; r < 4; ++r) mean += stepped[r][k][i] / 4.0;
        want[k][i] = static_cast<float>(mean);
      }
    }
  }
  for (int r = 0; r < 4; ++r) EXPECT_LT(max_difference(got[r], want), 1e-5) << r;
}

// finish() mid-round, nothing in flight: every rank ends with the same model, the mean of
// the ranks' models (for fp32: theta_g - mean(theta_g - theta_r)), streaming or not.
TEST(DiLoCo, FinishLeavesEveryRankTheMeanModel) {
  for (const auto& [o, steps] :
       {std::pair{options(6), uint64_t{10}}, std::pair{options(6, 2, 2), uint64_t{8}}}) {
    const auto before = reference(3, o, steps);
    const auto got = train(3, o, steps, /*finish=*/true);
    Model mean = before[0];
    for (size_t k = 0; k < mean.size(); ++k) {
      for (size_t i = 0; i < mean[k].size(); ++i) {
        double s = 0;
        for (int r = 0; r < 3; ++r) s += before[r][k][i] / 3.0;
        mean[k][i] = static_cast<float>(s);
      }
    }
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(got[r], got[0]) << "rank " << r << " differs after finish()";
      EXPECT_LT(max_difference(got[r], mean), 2e-5) << r;
    }
  }
}

// The codecs' outer exchange: within the codec's error of fp32's run, and the ranks' models
// bitwise equal after finish().
TEST(DiLoCo, CodecsStayNearFp32AndRanksEndEqual) {
  const auto exact = train(4, options(4, 2, 1), 14, true);
  for (const auto& [codec, tolerance] : std::vector<std::pair<std::string, double>>{
           {"fp16", 5e-3}, {"bf16", 3e-2}, {"int8", 3e-2}, {"int4", 0.15}}) {
    const auto got = train(4, options(4, 2, 1, codec), 14, true);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r], got[0]) << codec << " rank " << r;
    EXPECT_LT(max_difference(got[0], exact[0]), tolerance) << codec;
  }
}

// int4's reduce-scatter: the mean of W vectors within a step of each quantization (two: the
// ranks' and the owner's), every rank bitwise equal, and the bytes on the wire as predicted:
// 2(W-1)/W of a payload per rank, about an eighth of fp32's ring allreduce.
TEST(OuterExchange, Int4MeanIsCloseAndCostsAnEighthOfFp32) {
  const size_t n = 5000;
  const int world = 4;
  std::vector<std::vector<float>> inputs(world), outputs(world);
  std::vector<uint64_t> wire(world), predicted(world);
  for (int r = 0; r < world; ++r) {
    std::mt19937 rng(r + 3);
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < n; ++i) inputs[r].push_back(normal(rng));
  }
  comm::run_local_ranks(world, 10s, [&](comm::Collectives& c) {
    OuterExchange exchange(c, "int4:ef=0", "fragment", n);
    auto v = inputs[c.rank()];
    const auto before = c.traffic().on_wire;
    exchange.average(v);
    wire[c.rank()] = c.traffic().on_wire - before;
    predicted[c.rank()] = exchange.wire_bytes();
    outputs[c.rank()] = v;
  });
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double mean = 0;
    for (int r = 0; r < world; ++r) mean += inputs[r][i] / world;
    worst = std::max(worst, std::fabs(outputs[0][i] - mean));
  }
  // Block maxima of normals are about 3: a step is 3/7, half of it per quantization.
  EXPECT_LT(worst, 0.6);
  for (int r = 1; r < world; ++r) EXPECT_EQ(outputs[r], outputs[0]) << r;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(wire[r], predicted[r]) << r;
    EXPECT_LT(wire[r] * 7, comm::ring_allreduce_wire_bytes(4 * n, world)) << r;
  }
}

void checkpoint_resumes_exactly(const DiLoCoOptions& o) {
  const uint64_t saved_at = 13, steps = 30;  // step 12 sent fragment 0... in flight at 13
  std::vector<Model> straight(3), resumed(3);
  comm::run_local_ranks(3, 20s, [&](comm::Collectives& c) {
    Model m = initial_model(1);
    DiLoCoStrategy a(c, o);
    a.start(toy_tensors(), spans(m));
    Bytes state;
    Model at_save;
    for (uint64_t t = 1; t <= steps; ++t) {
      inner_step(m, c.rank(), t);
      a.after_update(spans(m));
      if (t == saved_at) {
        a.save_state(state);
        at_save = m;
      }
    }
    a.finish();
    straight[c.rank()] = m;

    Model n = initial_model(7);
    DiLoCoStrategy b(c, o);
    b.start(toy_tensors(), spans(n));
    n = at_save;  // the torch layer restores each rank's own parameters
    ByteReader in(state);
    b.load_state(in);
    in.expect_end("state");
    for (uint64_t t = saved_at + 1; t <= steps; ++t) {
      inner_step(n, c.rank(), t);
      b.after_update(spans(n));
    }
    b.finish();
    resumed[c.rank()] = n;
    EXPECT_EQ(a.stats().exchanges, b.stats().exchanges);
    EXPECT_EQ(a.traffic().bytes_on_wire, b.traffic().bytes_on_wire);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(resumed[r], straight[r]) << r;
}

// Saved mid-flight (a fragment sent, not merged) and restored into a fresh strategy on a
// model set back to the saved one: the following steps are the saved run's, bit for bit;
// int4 (the reduce-scatter's residuals) and sparseloco (each rank's own accumulator).
TEST(DiLoCo, CheckpointResumesExactly) {
  for (const std::string codec : {"int4", "sparseloco:chunk=16,density=0.25"}) {
    SCOPED_TRACE(codec);
    checkpoint_resumes_exactly(options(8, 2, 2, codec));
  }
}

TEST(DiLoCo, StateOfAnotherScheduleIsRefused) {
  comm::run_local_ranks(1, 10s, [&](comm::Collectives& c) {
    Model m = initial_model(1);
    DiLoCoStrategy a(c, options(8, 2));
    a.start(toy_tensors(), spans(m));
    Bytes state;
    a.save_state(state);
    DiLoCoStrategy b(c, options(6, 2));
    b.start(toy_tensors(), spans(m));
    ByteReader in(state);
    EXPECT_THROW(b.load_state(in), PayloadError);
    Bytes truncated(state.begin(), state.begin() + state.size() / 2);
    DiLoCoStrategy d(c, options(8, 2));
    d.start(toy_tensors(), spans(m));
    ByteReader short_in(truncated);
    EXPECT_THROW(d.load_state(short_in), PayloadError);
  });
}

TEST(DiLoCo, RanksThatDisagreeFailNamingTheOption) {
  comm::run_local_ranks(2, 10s, [&](comm::Collectives& c) {
    Model m = initial_model(1);
    DiLoCoStrategy s(c, options(c.rank() == 0 ? 10 : 20));
    try {
      s.start(toy_tensors(), spans(m));
      ADD_FAILURE() << "no mismatch reported";
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("inner steps 10"), std::string::npos) << e.what();
    }
  });
}

TEST(DiLoCo, BadOptionsAreConfigErrors) {
  comm::run_local_ranks(1, 10s, [&](comm::Collectives& c) {
    auto bad = options(10);
    bad.outer_lr = 0;
    EXPECT_THROW(DiLoCoStrategy(c, bad), ConfigError);
    bad = options(10);
    bad.outer_momentum = 1;
    EXPECT_THROW(DiLoCoStrategy(c, bad), ConfigError);
    EXPECT_THROW(DiLoCoStrategy(c, options(10, 2, 6)), ConfigError);  // delay > H / F
    EXPECT_THROW(DiLoCoStrategy(c, options(10, 1, 0, "conv=int8,other=fp16")), ConfigError);
    EXPECT_THROW(DiLoCoStrategy(c, options(10, 1, 0, "powersgd:rank=4")), ConfigError);
  });
}

// What two ranks ran with auto H: each rank's decisions, stats and model after `steps`
// inner steps of `step` each (then finish()).
struct AutoRun {
  std::vector<std::vector<CodecDecision>> decisions = std::vector<std::vector<CodecDecision>>(2);
  std::vector<DiLoCoStats> stats = std::vector<DiLoCoStats>(2);
  std::vector<Model> models = std::vector<Model>(2);
};

AutoRun run_auto(const DiLoCoOptions& o, uint64_t steps, std::chrono::milliseconds step) {
  AutoRun out;
  comm::run_local_ranks(2, 20s, [&](comm::Collectives& c) {
    Model m = initial_model(1);
    DiLoCoStrategy s(c, o);
    s.start(toy_tensors(), spans(m));
    for (uint64_t t = 1; t <= steps; ++t) {
      std::this_thread::sleep_for(step);
      inner_step(m, c.rank(), t);
      s.after_update(spans(m));
    }
    s.finish();
    out.decisions[c.rank()] = s.take_decisions();
    out.stats[c.rank()] = s.stats();
    out.models[c.rank()] = m;
  });
  return out;
}

// auto: after the probe steps, tau = ceil(1.25 T / t) and H = F tau (at least 10), from the
// agreed step time and the predicted exchange, the same decision on every rank.
TEST(DiLoCo, AutoPicksTheSmallestHiddenInnerSteps) {
  auto o = options(0, 2);
  o.link = comm::LinkModel::from_bandwidth(1e-3, 2e6);  // 2 Mbit/s
  const AutoRun run = run_auto(o, 40, 2ms);
  const auto& decisions = run.decisions;
  ASSERT_EQ(decisions[0].size(), 1u);
  EXPECT_EQ(decisions[0][0].plan, decisions[1][0].plan);
  const std::string& inputs = decisions[0][0].inputs_json;
  const auto field = [&](const std::string& key) {
    const auto at = inputs.find("\"" + key + "\":");
    EXPECT_NE(at, std::string::npos) << key << " in " << inputs;
    return std::strtod(inputs.c_str() + at + key.size() + 3, nullptr);
  };
  const double t = field("step_s"), exchange = field("exchange_s");
  const auto tau = static_cast<uint64_t>(std::max(1.0, std::ceil(1.25 * exchange / t)));
  EXPECT_EQ(run.stats[0].delay, tau);
  EXPECT_EQ(run.stats[0].inner_steps, std::max<uint64_t>(2 * tau, 10));
  EXPECT_EQ(decisions[0][0].step, DiLoCoStrategy::kProbeSteps + 1);
  EXPECT_GT(run.stats[0].exchanges, 0u);
}

// SparseLoCo's auto H has no floor of 10: over a fast link tau = 1 and H = F = 2, the same
// on every rank; the job runs on that schedule and the ranks end with one model.
TEST(DiLoCo, AutoGivesSparseLoCoTheSmallestHiddenInnerSteps) {
  auto o = options(0, 2, 0, "sparseloco:chunk=16,density=0.25");
  o.link = comm::LinkModel::from_bandwidth(1e-4, 10e9);  // 10 Gbit/s
  const AutoRun run = run_auto(o, 20, 10ms);
  ASSERT_EQ(run.decisions[0].size(), 1u);
  EXPECT_EQ(run.decisions[0][0].plan, "diloco:inner_steps=2,delay=1");
  EXPECT_EQ(run.decisions[1][0].plan, run.decisions[0][0].plan);
  EXPECT_EQ(run.stats[0].inner_steps, 2u);
  EXPECT_EQ(run.stats[0].delay, 1u);
  EXPECT_GE(run.stats[0].exchanges, 2u * 6);  // a fragment every step after the probe
  EXPECT_EQ(run.models[0], run.models[1]);
}

}  // namespace
}  // namespace gradwire::strategy::diloco
