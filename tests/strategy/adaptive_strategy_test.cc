#include "gradwire/strategy/adaptive/adaptive_strategy.h"
#include "gradwire/strategy/adaptive/fit_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "../common/forwarding_collectives.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/core/statistics.h"
#include "gradwire/strategy/registry.h"

namespace gradwire::strategy {
namespace {

using namespace std::chrono_literals;
using compress::LayerKind;
using compress::TensorInfo;

// --- Accordion's detector on synthetic traces of gradient norms -----------------------

TEST(RegimeDetectorTest, SwitchesWhereTheNormChangesByEtaBetweenWindows) {
  RegimeDetector d(/*window=*/3, /*eta=*/0.5);
  std::vector<bool> critical_after;  // critical() after each step
  const std::vector<double> trace = {
      10,   10,   10,    // window 0: critical (the start)
      12,   12,   12,    // window 1: critical (first comparison at its end: +20% -> normal)
      12,   12,   12,    // window 2: normal
      30,   30,   30,    // window 3: normal; at its end +150% -> critical
      31,   31,   31,    // window 4: critical; at its end +3% -> normal
      15.5, 15.5, 15.5,  // window 5: normal; at its end -50% exactly -> critical (>= eta)
  };
  for (double norm : trace) {
    d.observe(norm);
    critical_after.push_back(d.critical());
  }
  const std::vector<bool> expected = {
      true,  true,  true, true, true, false, false, false, false,
      false, false, true, true, true, false, false, false, true,
  };
  EXPECT_EQ(critical_after, expected);
  ASSERT_TRUE(d.last_change().has_value());
  EXPECT_DOUBLE_EQ(*d.last_change(), 0.5);
}

TEST(RegimeDetectorTest, ObserveReportsWindowEndsAndRestartStartsOver) {
  RegimeDetector d(2, 0.5);
  EXPECT_FALSE(d.observe(1));
  EXPECT_TRUE(d.observe(1));
  EXPECT_FALSE(d.observe(1));
  EXPECT_TRUE(d.observe(1));
  EXPECT_FALSE(d.critical());
  d.restart();  // a learning-rate change
  EXPECT_TRUE(d.critical());
  EXPECT_FALSE(d.observe(1));
  EXPECT_TRUE(d.observe(1));
  EXPECT_TRUE(d.critical());  // one window since the restart: nothing to compare yet
  d.observe(1);
  d.observe(1);
  EXPECT_FALSE(d.critical());
}

TEST(RegimeDetectorTest, ZeroThenNonZeroIsCriticalAndBadSettingsAreRefused) {
  RegimeDetector d(1, 0.5);
  d.observe(0);
  d.observe(0);
  EXPECT_FALSE(d.critical());  // no change
  d.observe(1);
  EXPECT_TRUE(d.critical());
  EXPECT_THROW(RegimeDetector(0, 0.5), ConfigError);
  EXPECT_THROW(RegimeDetector(5, 0), ConfigError);
}

// --- choosing a plan from measured step times ------------------------------------------

TEST(ChoosePlanTest, ScoresPenaliseCompressingPlansAndTiesGoToTheFaithfulPlan) {
  const std::vector<CodecPlan> plans = {make_codec_plan("none", 2), make_codec_plan("fp16", 2),
                                        make_codec_plan("powersgd", 2)};
  // A fast link: none and fp16 cost the same; PowerSGD's compute makes it no faster.
  EXPECT_EQ(choose_plan(plans, std::vector<double>{50, 49.5, 48}, false, 0.2), 0u);
  // fp16 clearly faster than none; PowerSGD faster, but not by the penalty.
  EXPECT_EQ(choose_plan(plans, std::vector<double>{160, 100, 90}, false, 0.2), 1u);
  // A slow link: PowerSGD's steps are far cheaper.
  EXPECT_EQ(choose_plan(plans, std::vector<double>{1600, 1000, 400}, false, 0.2), 2u);
  // ... but never in a critical regime.
  EXPECT_EQ(choose_plan(plans, std::vector<double>{1600, 1000, 400}, true, 0.2), 1u);
  // Unmeasured plans (0) are not chosen; nothing allowed and measured: plans.size().
  EXPECT_EQ(choose_plan(plans, std::vector<double>{0, 0, 400}, false, 0.2), 2u);
  EXPECT_EQ(choose_plan(plans, std::vector<double>{0, 0, 400}, true, 0.2), 3u);
  // int8 is not charged and may run in a critical regime: at 100 Mbit on the CNN it is
  // chosen over fp16 and over a PowerSGD step 12% cheaper (the e2e measurement's ratio).
  const std::vector<CodecPlan> with_int8 = {make_codec_plan("none", 2), make_codec_plan("fp16", 2),
                                            make_codec_plan("int8", 2),
                                            make_codec_plan("powersgd", 2)};
  EXPECT_EQ(choose_plan(with_int8, std::vector<double>{161, 109, 92, 82}, false, 0.2), 2u);
  EXPECT_EQ(choose_plan(with_int8, std::vector<double>{161, 109, 92, 0}, true, 0.2), 2u);
  // cnn-wide at 100 Mbit (RESULTS.md): rank-2 PowerSGD's step is 37% cheaper than int8's
  // but needs 1.65x the steps to 88%; its penalty (0.65) kept int8, as time to 88% says.
  EXPECT_EQ(choose_plan(with_int8, std::vector<double>{1544.6, 999.0, 728.7, 460.3}, false, 0.65),
            2u);
  // Rank 8 (auto's default under SGD) after 2 dense steps needs 1.07x to 1.12x fp32's
  // steps on the CNNs (docs/results/auto-penalty): the default penalty (0.096) takes it on
  // cnn-wide at 100 Mbit (int8 783.6 ms, PowerSGD rank 8 509) and on cnn, where its step is
  // 11% shorter (int8 108, PowerSGD 96: 105.2 scored, beyond the 2% tie of int8's 108); not
  // where its score is within that tie (PowerSGD 100: 109.6 scored).
  const double penalty = AdaptiveOptions{}.penalty;
  EXPECT_EQ(choose_plan(with_int8, std::vector<double>{1590.9, 1049.2, 783.6, 509}, false, penalty),
            3u);
  EXPECT_EQ(choose_plan(with_int8, std::vector<double>{176, 124, 108, 96}, false, penalty), 3u);
  EXPECT_EQ(choose_plan(with_int8, std::vector<double>{176, 124, 108, 100}, false, penalty), 2u);
}

TEST(ChoiceNoiseTest, AMediansStandardErrorComesFromTheSpreadAndIgnoresOneStall) {
  // MAD of {10, 11, 12, 13, 14} about 12 is 1: sigma 1.4826, the median's standard error
  // 1.2533 x 1.4826 / sqrt(5).
  const double expected = 1.2533 * 1.4826 / std::sqrt(5.0);
  EXPECT_NEAR(median_standard_error({10, 11, 12, 13, 14}), expected, 1e-12);
  // One stalled step changes neither the median nor the MAD.
  EXPECT_NEAR(median_standard_error({10, 11, 12, 13, 900}), expected, 1e-12);
  EXPECT_EQ(median_standard_error({12}), 0.0);
  EXPECT_EQ(median_standard_error({12, 12, 12}), 0.0);
}

TEST(ChoiceNoiseTest, AChoiceIsResolvedBeyondTwiceTheCombinedErrorOfItsScores) {
  const std::vector<CodecPlan> plans = {make_codec_plan("none", 8), make_codec_plan("fp16", 8),
                                        make_codec_plan("powersgd", 8)};
  // fp16 (90 +- 1) over powersgd (84 x 1.2 = 100.8 +- 1.2): gap 10.8, noise
  // 2 sqrt(1 + 1.44) = 3.12: resolved.
  const std::vector<double> error = {3, 1, 1};
  ChoiceNoise n = choice_noise(plans, std::vector<double>{120, 90, 84}, error, 1, false, 0.2, 5);
  EXPECT_EQ(n.runner_up, 2u);
  EXPECT_NEAR(n.gap_ms, 84 * 1.2 - 90, 1e-9);
  EXPECT_NEAR(n.noise_ms, 2 * std::sqrt(1 + 1.44), 1e-9);
  EXPECT_TRUE(n.known);
  EXPECT_TRUE(n.resolved);
  EXPECT_EQ(n.steps_to_resolve, 0u);
  // fp16 (90 +- 4) over none (92 +- 3): gap 2, noise 10: not resolved; 5 steps a plan x
  // (10 / 2)^2 = 125 would resolve it.
  n = choice_noise(plans, std::vector<double>{92, 90, 200}, std::vector<double>{3, 4, 1}, 1, false,
                   0.2, 5);
  EXPECT_EQ(n.runner_up, 0u);
  EXPECT_NEAR(n.gap_ms, 2, 1e-9);
  EXPECT_FALSE(n.resolved);
  EXPECT_EQ(n.steps_to_resolve, 125u);
  // The tie rule kept none, 1 ms slower than fp16: a negative gap, judged by its size.
  n = choice_noise(plans, std::vector<double>{91, 90, 200}, std::vector<double>{0.1, 0.1, 1}, 0,
                   false, 0.2, 5);
  EXPECT_EQ(n.runner_up, 1u);
  EXPECT_NEAR(n.gap_ms, -1, 1e-9);
  EXPECT_TRUE(n.resolved);
  // An unknown error (a plan measured on one step): not resolved, never by this noise.
  n = choice_noise(plans, std::vector<double>{92, 90, 200}, std::vector<double>{0, 4, 1}, 1, false,
                   0.2, 5);
  EXPECT_FALSE(n.known);
  EXPECT_FALSE(n.resolved);
  EXPECT_EQ(n.steps_to_resolve, ChoiceNoise::kNever);
  // In a critical regime powersgd is no runner-up; alone, a plan has none.
  n = choice_noise(plans, std::vector<double>{0, 90, 50}, error, 1, true, 0.2, 5);
  EXPECT_EQ(n.runner_up, plans.size());
}

TEST(AdaptiveOptionsTest, ParsesCanonicallyAndRefusesWhatItDoesNotKnow) {
  const auto o = AdaptiveOptions::parse("auto");
  EXPECT_EQ(o.canonical,
            "auto:dense=2,eta=0.5,penalty=0.096,plans=none/fp16/int8/powersgd,prune=2,rank=8,"
            "regimes=off,reprobe=2000,trial=5,trial_max=20,window=50");
  EXPECT_EQ(o.dense, 2u);
  EXPECT_FALSE(o.regimes);
  EXPECT_TRUE(AdaptiveOptions::parse("auto:regimes=on").regimes);
  EXPECT_THROW(AdaptiveOptions::parse("auto:regimes=maybe"), ConfigError);
  EXPECT_THROW(AdaptiveOptions::parse("auto:trial=5,trial_max=4"), ConfigError);
  EXPECT_EQ(AdaptiveOptions::parse("auto:trial=30").trial_max, 30u);
  // fit is not a default plan (it lost to the best uniform plan in every whole run
  // measured, docs/RESULTS.md); plans=none/fit/fp16/int8/powersgd lists it.
  ASSERT_EQ(o.plans.size(), 4u);
  for (const auto& plan : o.plans) EXPECT_FALSE(plan.per_bucket) << plan.name;
  EXPECT_FALSE(o.plans[2].compresses);  // int8
  EXPECT_EQ(o.plans[3].policy, "powersgd:min_rate=2,rank=8");
  EXPECT_TRUE(AdaptiveOptions::parse("auto:plans=none/fit/fp16/int8/powersgd").plans[1].per_bucket);
  EXPECT_EQ(AdaptiveOptions::parse(o.canonical).canonical, o.canonical);
  EXPECT_EQ(AdaptiveOptions::parse("auto:eta=0.50").canonical, o.canonical);
  EXPECT_EQ(AdaptiveOptions::parse("accordion").canonical,
            "accordion:critical=fp16,eta=0.5,normal=powersgd,rank=2,window=50");
  EXPECT_EQ(AdaptiveOptions::parse("accordion:rank=4").canonical,
            "accordion:critical=fp16,eta=0.5,normal=powersgd,rank=4,window=50");
  EXPECT_TRUE(AdaptiveOptions::matches("auto:plans=fp16/int8"));
  EXPECT_FALSE(AdaptiveOptions::matches("fp16"));
  EXPECT_THROW(AdaptiveOptions::parse("auto:plans=none/zip"), ConfigError);
  EXPECT_THROW(AdaptiveOptions::parse("auto:plans=fp16/fp16"), ConfigError);
  EXPECT_THROW(AdaptiveOptions::parse("auto:bogus=1"), ConfigError);
  EXPECT_THROW(AdaptiveOptions::parse("accordion:trial=3"), ConfigError);  // auto's key
  EXPECT_THROW(AdaptiveOptions::parse("auto:window=0"), ConfigError);
  // fit chooses between two or more of none, fp16, bf16 and int8; accordion has none.
  EXPECT_THROW(AdaptiveOptions::parse("auto:plans=fit/fp16/powersgd"), ConfigError);
  EXPECT_NO_THROW(AdaptiveOptions::parse("auto:plans=fp16/fit/int8"));
  EXPECT_THROW(AdaptiveOptions::parse("accordion:critical=fit"), ConfigError);
  EXPECT_EQ(canonical_codec("auto:trial=3"),
            "auto:dense=2,eta=0.5,penalty=0.096,plans=none/fp16/int8/powersgd,prune=2,rank=8,"
            "regimes=off,reprobe=2000,trial=3,trial_max=20,window=50");
}

// --- fit: a codec per bucket ---------------------------------------------------------------

// Two ranks (a ring moves a bucket's bytes once), no latency unless a test sets it, 4000
// bytes in 10 ms; a tensor of n elements sends 4n bytes on rung 0 (fp32), 2n on rung 1,
// n on rung 2; the first bucket holds one 1000-element tensor.
FitInput fit_input(std::vector<std::pair<size_t, double>> elements_and_ready) {
  FitInput input;
  input.collectives = {1, 1, 1};
  input.link = {0, 0.010 / 4000};
  input.world = 2;
  input.first_bucket_bytes = 4000;
  for (const auto& [n, ready] : elements_and_ready) {
    const double b = static_cast<double>(n);
    input.tensors.push_back({n, ready, {4 * b, 2 * b, b}});
  }
  return input;
}

TEST(FitTest, TensorsOnTheSameRungShareABucketUpToTheCaps) {
  FitInput input = fit_input({{1000, 0}, {1000, 0}, {1000, 0}});
  input.first_bucket_bytes = 8000;
  const auto same = fit_buckets(input, std::vector<size_t>{0, 0, 0});
  ASSERT_EQ(same.size(), 2u);  // two fit the first bucket's 8000 bytes, the third does not
  EXPECT_EQ(same[0].end, 2u);
  const auto split = fit_buckets(input, std::vector<size_t>{0, 1, 0});
  ASSERT_EQ(split.size(), 3u);  // another rung breaks the bucket
  EXPECT_EQ(split[1].rung, 1u);
  // A tensor as large as the first bucket (8000 bytes) closes its bucket.
  input.tensors[1].elements = 2000;
  const auto closed = fit_buckets(input, std::vector<size_t>{0, 0, 0});
  ASSERT_EQ(closed.size(), 3u);
  EXPECT_EQ(closed[1].end, 2u);
}

TEST(FitTest, TensorsThatBackwardHidesStayOnTheFirstRung) {
  // 10 ms each, final 50 and 30 ms before backward's end: both done 20 ms before it.
  const FitInput input = fit_input({{1000, 0.050}, {1000, 0.030}});
  EXPECT_EQ(fit_rungs(input), (std::vector<size_t>{0, 0}));
  EXPECT_EQ(fit_exposed_seconds(input, std::vector<size_t>{0, 0}), 0.0);
}

TEST(FitTest, TheExposedTailGoesDownTheLadderAndTheHiddenTensorStaysExact) {
  // Tensor 0 is final 30 ms before backward's end, its 10 ms hide; tensor 1 is final at
  // the end and waits all its 40 ms. Moving tensor 1 cuts most: 40 -> 20 -> 10 ms;
  // moving tensor 0 never cuts anything.
  FitInput input = fit_input({{1000, 0.030}, {4000, 0.0}});
  EXPECT_DOUBLE_EQ(fit_exposed_seconds(input, std::vector<size_t>{0, 0}), 0.040);
  EXPECT_EQ(fit_rungs(input), (std::vector<size_t>{0, 2}));
  // Tensor 0 final only 5 ms before the end holds tensor 1 up until 5 ms after it, so it
  // goes to rung 1 as well (ending at 0), after tensor 1 went to rung 2.
  input.tensors[0].ready_s = 0.005;
  EXPECT_DOUBLE_EQ(fit_exposed_seconds(input, std::vector<size_t>{0, 0}), 0.045);
  EXPECT_EQ(fit_rungs(input), (std::vector<size_t>{1, 2}));
}

TEST(FitTest, AMoveThatCostsMoreThanItSavesIsNotTaken) {
  // 1 ms of latency a message step (2 per collective at two ranks); rung 2 runs two
  // collectives: 4 + 1 ms of latency and bytes, against rung 1's 2 + 2.
  FitInput input = fit_input({{1000, 0.0}});
  input.link = {0.001, 1e-6};
  input.collectives = {1, 1, 2};
  EXPECT_DOUBLE_EQ(fit_exposed_seconds(input, std::vector<size_t>{0}), 0.006);
  EXPECT_EQ(fit_rungs(input), (std::vector<size_t>{1}));
  input.tensors[0].bytes.pop_back();
  EXPECT_THROW(fit_rungs(input), Error);  // bytes for two rungs of three
}

// --- the strategy over in-process ranks --------------------------------------------------

std::vector<TensorInfo> fc_tensors(int64_t rows, int64_t cols) {
  return {{"fc.weight", {rows, cols}, LayerKind::kFcWeight}, {"fc.bias", {rows}, LayerKind::kBias}};
}

// Collectives behind a link of `bytes_per_s`: every allreduce and allgather also waits for
// what its bytes on the wire would take on such a link (a simulated bandwidth).
class ThrottledCollectives : public ForwardingCollectives {
 public:
  ThrottledCollectives(comm::Collectives& inner, double bytes_per_s)
      : ForwardingCollectives(inner), bytes_per_s_(bytes_per_s) {}
  // What this link carried (counted here), not the inner communicator's.
  const comm::CollectiveTraffic& traffic() const override { return Collectives::traffic(); }
  std::unique_ptr<comm::Work> allreduce_sum_async(void* data, size_t count,
                                                  comm::DataType type) override {
    inner().allreduce_sum(data, count, type);
    const size_t bytes = count * comm::data_type_size(type);
    count_allreduce(bytes);
    wait_for(comm::ring_allreduce_wire_bytes(bytes, size()));
    return std::make_unique<comm::CompletedWork>();
  }
  void allreduce_max(float* data, size_t count) override {
    inner().allreduce_max(data, count);
    wait_for(comm::ring_allreduce_wire_bytes(count * sizeof(float), size()));
  }
  using Collectives::allgather_bytes;
  void allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) override {
    inner().allgather_bytes(data, out);
    count_allgather(data.size(), data.size());
    wait_for(comm::ring_allgather_wire_bytes(data.size(), size()));
  }
  void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) override {
    inner().alltoall_bytes(to, out);
    count_alltoall(to);
    uint64_t sent = 0;
    for (size_t r = 0; r < to.size(); ++r) sent += static_cast<int>(r) == rank() ? 0 : to[r].size();
    wait_for(comm::pairwise_alltoall_wire_bytes(sent, size()));
  }

 private:
  void wait_for(uint64_t bytes) {
    std::this_thread::sleep_for(std::chrono::duration<double>(bytes / bytes_per_s_));
  }
  double bytes_per_s_;
};

struct RankRun {
  std::vector<std::pair<uint64_t, std::string>> decisions;  // (step, plan)
  std::vector<std::string> reasons;                         // and why, for failures
  std::vector<std::string> plan_per_step;                   // the plan each step used
  std::vector<std::vector<float>> params;
  std::vector<float> first_aggregate;  // fc.bias after step 0's exchange
  std::vector<double> step_ms;         // per step: from the last synchronize()'s return
};

struct RunSettings {
  std::string codec;
  int steps = 0;
  int64_t rows = 16, cols = 32;
  double bytes_per_s = 0;  // 0: no simulated link
  comm::LinkModel link;    // what auto's cost model assumes
  std::chrono::milliseconds compute{0};
  std::function<float(int step)> norm_scale = [](int) { return 1.0f; };
  std::function<double(int rank, int step)> lr = [](int, int) { return 0.1; };
  std::vector<TensorInfo> tensors;  // empty: fc_tensors(rows, cols)
  // Report the gradients through gradient_ready(), last tensor first as backward does,
  // with `backward` of sleep after each but the last (after `compute`).
  bool hooks = false;
  std::chrono::milliseconds backward{0};
  std::string quantized_path = "auto";  // AllreduceOptions::quantized_path of the plans
};

// Every rank: `steps` SGD steps on rank-specific Gaussian gradients scaled by
// norm_scale(step), with `compute` of sleep standing in for forward and backward.
std::vector<RankRun> run_ranks(int world, const RunSettings& settings,
                               std::vector<std::vector<float>>* first_inputs = nullptr) {
  const auto tensors =
      settings.tensors.empty() ? fc_tensors(settings.rows, settings.cols) : settings.tensors;
  std::vector<RankRun> runs(world);
  if (first_inputs) first_inputs->assign(world, {});
  comm::run_local_ranks(world, 20s, [&](comm::Collectives& local) {
    std::unique_ptr<ThrottledCollectives> throttled;
    comm::Collectives* c = &local;
    if (settings.bytes_per_s > 0) {
      throttled = std::make_unique<ThrottledCollectives>(local, settings.bytes_per_s);
      c = throttled.get();
    }
    const int rank = c->rank();
    std::vector<std::vector<float>> params, grads;
    std::mt19937 rng(31 + rank);
    std::normal_distribution<float> normal;
    FloatSpans param_spans, grad_spans;
    for (const auto& t : tensors) {
      params.emplace_back(t.numel(), 0.5f);
      grads.emplace_back(t.numel());
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      param_spans.emplace_back(params[t]);
      grad_spans.emplace_back(grads[t]);
    }
    auto strategy = create_allreduce_strategy(*c, {.codec = settings.codec,
                                                   .quantized_path = settings.quantized_path,
                                                   .link = settings.link});
    auto* adaptive = dynamic_cast<AdaptiveStrategy*>(strategy.get());
    ASSERT_NE(adaptive, nullptr);
    strategy->start(tensors, param_spans);
    RankRun& run = runs[rank];
    auto last_end = std::chrono::steady_clock::now();
    for (int s = 0; s < settings.steps; ++s) {
      for (auto& g : grads) {
        for (float& v : g) v = settings.norm_scale(s) * normal(rng);
      }
      if (s == 0 && first_inputs) (*first_inputs)[rank] = grads[1];
      run.plan_per_step.push_back(adaptive->active_plan().name);
      strategy->set_learning_rate(settings.lr(rank, s));
      std::this_thread::sleep_for(settings.compute);
      if (settings.hooks) {
        for (size_t k = tensors.size(); k-- > 0;) {
          strategy->gradient_ready(k, grad_spans[k]);
          if (k > 0) std::this_thread::sleep_for(settings.backward);
        }
      }
      strategy->synchronize(grad_spans);
      const auto now = std::chrono::steady_clock::now();
      run.step_ms.push_back(std::chrono::duration<double, std::milli>(now - last_end).count());
      last_end = now;
      if (s == 0 && grads.size() > 1) run.first_aggregate = grads[1];
      for (size_t t = 0; t < tensors.size(); ++t) {
        for (size_t i = 0; i < params[t].size(); ++i) params[t][i] -= 0.1f * grads[t][i];
      }
      for (const auto& d : strategy->take_decisions()) {
        run.decisions.emplace_back(d.step, d.plan);
        run.reasons.push_back(d.reason);
      }
    }
    run.params = params;
  });
  return runs;
}

std::vector<std::string> plans_by_step(std::initializer_list<std::pair<int, std::string>> spans,
                                       int steps) {
  std::vector<std::string> out;
  auto it = spans.begin();
  for (int s = 0; s < steps; ++s) {
    if (std::next(it) != spans.end() && s >= std::next(it)->first) ++it;
    out.push_back(it->second);
  }
  return out;
}

TEST(AccordionTest, SwitchesAtTheDocumentedStepsOnEveryRank) {
  // Windows of 2 steps: w0 = steps 0-1, w1 = 2-3, ... The norm is steady, jumps 4x in
  // w4 (steps 8-9) and stays there: w0, w1 critical; normal from step 4; critical for
  // w5 (steps 10-11) after the jump; normal again from step 12.
  RunSettings settings;
  settings.codec = "accordion:critical=none,normal=powersgd,window=2,eta=0.5";
  settings.steps = 14;
  settings.norm_scale = [](int s) { return s >= 8 ? 4.0f : 1.0f; };
  std::vector<std::vector<float>> inputs;
  const auto runs = run_ranks(2, settings, &inputs);
  const auto expected_plans =
      plans_by_step({{0, "none"}, {4, "powersgd"}, {10, "none"}, {12, "powersgd"}}, 14);
  const std::vector<std::pair<uint64_t, std::string>> expected_decisions = {
      {0, "none"}, {4, "powersgd"}, {10, "none"}, {12, "powersgd"}};
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(runs[r].plan_per_step, expected_plans) << "rank " << r;
    EXPECT_EQ(runs[r].decisions, expected_decisions) << "rank " << r;
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
  // Step 0 ran plan none: the exact mean of the ranks' gradients.
  for (size_t i = 0; i < inputs[0].size(); ++i) {
    EXPECT_FLOAT_EQ(runs[0].first_aggregate[i], (inputs[0][i] + inputs[1][i]) / 2) << i;
  }
}

TEST(AccordionTest, ALearningRateChangeSeenByOneRankIsCriticalOnAll) {
  // Steady norm: normal from step 4. Rank 1 alone lowers its learning rate at step 5; the
  // window ending at step 5 agrees on it: critical from step 6, for two windows.
  RunSettings settings;
  settings.codec = "accordion:critical=fp16,normal=powersgd,window=2";
  settings.steps = 12;
  settings.lr = [](int rank, int s) { return rank == 1 && s >= 5 ? 0.01 : 0.1; };
  const auto runs = run_ranks(3, settings);
  const auto expected =
      plans_by_step({{0, "fp16"}, {4, "powersgd"}, {6, "fp16"}, {10, "powersgd"}}, 12);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(runs[r].plan_per_step, expected) << "rank " << r;
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
}

TEST(AccordionTest, ADecayOnAWindowsFirstStepIsSeen) {
  // Windows of 2 end at steps 1, 3, 5: the rate falls at step 4, the first of a window;
  // measured against the rate that ended the window before, it is critical from step 6.
  RunSettings settings;
  settings.codec = "accordion:critical=fp16,normal=powersgd,window=2";
  settings.steps = 12;
  settings.lr = [](int, int s) { return s >= 4 ? 0.01 : 0.1; };
  const auto runs = run_ranks(2, settings);
  EXPECT_EQ(runs[0].plan_per_step,
            plans_by_step({{0, "fp16"}, {4, "powersgd"}, {6, "fp16"}, {10, "powersgd"}}, 12));
}

TEST(AccordionTest, ASmoothScheduleIsNotALearningRateChange) {
  // The rate falls 2% a step (a cosine-like schedule): no window sees it halve.
  RunSettings settings;
  settings.codec = "accordion:critical=fp16,normal=powersgd,window=2";
  settings.steps = 12;
  settings.lr = [](int, int s) { return 0.1 * std::pow(0.98, s); };
  const auto runs = run_ranks(2, settings);
  EXPECT_EQ(runs[0].plan_per_step, plans_by_step({{0, "fp16"}, {4, "powersgd"}}, 12));
}

TEST(AccordionTest, AWarmUpIsNotALearningRateChange) {
  // A linear warm-up over 8 steps multiplies the rate by up to 2 within a window, then it
  // stays: a rise, not a decay, so the normal regime comes as with a constant rate.
  RunSettings settings;
  settings.codec = "accordion:critical=fp16,normal=powersgd,window=2";
  settings.steps = 12;
  settings.lr = [](int, int s) { return 0.1 * std::min(s + 1, 8) / 8.0; };
  const auto runs = run_ranks(2, settings);
  EXPECT_EQ(runs[0].plan_per_step, plans_by_step({{0, "fp16"}, {4, "powersgd"}}, 12));
}

TEST(AutoTest, ASlowLinkSelectsPowerSgdAfterTheDenseStartInAnInterleavedTrial) {
  // A 256 x 1024 weight (1 MiB of fp32) over a simulated 0.5 MB/s link that the model
  // knows: a step of none waits about 2.1 s for the wire, fp16 half that, PowerSGD (rank
  // 8: 40 KB) about 80 ms.
  // - Steps 0 and 1 are the dense start: the trial's turns (least predicted exchange first:
  //   PowerSGD, fp16, none) skip PowerSGD: fp16, then none, each a warm-up.
  // - Steps 2-4: PowerSGD (its warm-up), fp16, none. At the round's end PowerSGD's warm-up
  //   step (a few ms of compute and its exchange: at most a few hundred ms on a loaded
  //   sanitizer run) bounds the fastest step: fp16's and none's predicted exchange alone
  //   exceed twice it, both are ruled out and PowerSGD, alone, is chosen at step 5.
  RunSettings settings;
  settings.codec = "auto:trial=3,plans=none/fp16/powersgd";
  settings.steps = 8;
  settings.rows = 256;
  settings.cols = 1024;
  settings.bytes_per_s = 0.5e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 0.5e6);
  settings.compute = 5ms;
  const auto runs = run_ranks(2, settings);
  const std::vector<std::string> expected = {"fp16", "none",     "powersgd", "fp16",
                                             "none", "powersgd", "powersgd", "powersgd"};
  const std::vector<std::pair<uint64_t, std::string>> decisions = {{5, "powersgd"}};
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(runs[r].plan_per_step, expected) << "rank " << r;
    EXPECT_EQ(runs[r].decisions, decisions)
        << "rank " << r << ": " << (runs[r].reasons.empty() ? "" : runs[r].reasons.back());
    ASSERT_FALSE(runs[r].reasons.empty());
    EXPECT_NE(runs[r].reasons[0].find("ruled out by the model: none fp16"), std::string::npos)
        << runs[r].reasons[0];
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
}

TEST(AutoTest, AFastLinkSelectsNoneOrFp16) {
  // No simulated link: every plan's step is its 40 ms of compute, PowerSGD cannot win by
  // its penalty (9.6%; the median of 3 steps keeps a noisy machine's hiccups out). The trial
  // ends when its verdicts resolve, the plans fall within the tie, or the budget is spent
  // (trial_max 6: 2 steps of the dense start, then at most 7 rounds of 3 steps: a
  // decision by step 23).
  RunSettings settings;
  settings.codec = "auto:trial=3,trial_max=6,plans=none/fp16/powersgd";
  settings.steps = 27;
  settings.rows = 256;
  settings.cols = 1024;
  settings.compute = 40ms;
  const auto runs = run_ranks(2, settings);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(runs[r].decisions.size(), 1u) << "rank " << r;
    const std::string last = runs[r].decisions.back().second;
    EXPECT_TRUE(last == "none" || last == "fp16") << last << ": " << runs[r].reasons.back();
    EXPECT_EQ(runs[r].decisions, runs[0].decisions) << "rank " << r;
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
    // No PowerSGD in the dense start; after the decision, only the choice.
    EXPECT_NE(runs[r].plan_per_step[0], "powersgd");
    EXPECT_NE(runs[r].plan_per_step[1], "powersgd");
    for (size_t s = runs[r].decisions[0].first; s < runs[r].plan_per_step.size(); ++s) {
      EXPECT_EQ(runs[r].plan_per_step[s], last) << "step " << s;
    }
  }
}

TEST(AutoTest, TheModelRulesOutAPlanWhoseExchangeAloneExceedsTwiceTheBestStep) {
  // A 256 x 256 weight (256 KiB) over a simulated 0.25 MB/s link that the model knows:
  // int8's exchange is predicted at about 0.27 s, none's at 1.05 s. int8 runs first (least
  // predicted), none second, each its warm-up; at the round's end int8's warm-up step
  // (about 0.3 s; under 0.52 s on a loaded machine under sanitizers) bounds the fastest
  // step, none, predicted beyond twice it, is ruled out, and int8 is chosen at step 2:
  // none ran its warm-up step only.
  RunSettings settings;
  settings.codec = "auto:trial=2,plans=none/int8";
  settings.steps = 6;
  settings.rows = 256;
  settings.cols = 256;
  settings.bytes_per_s = 0.25e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 0.25e6);
  settings.compute = 5ms;
  const auto runs = run_ranks(2, settings);
  const std::vector<std::pair<uint64_t, std::string>> decisions = {{2, "int8"}};
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(runs[r].plan_per_step,
              (std::vector<std::string>{"int8", "none", "int8", "int8", "int8", "int8"}))
        << "rank " << r;
    EXPECT_EQ(runs[r].decisions, decisions) << "rank " << r;
    ASSERT_FALSE(runs[r].reasons.empty());
    EXPECT_NE(runs[r].reasons[0].find("ruled out by the model: none"), std::string::npos)
        << runs[r].reasons[0];
    EXPECT_NE(runs[r].reasons[0].find("exchange ms/step predicted: none 1052.7"), std::string::npos)
        << runs[r].reasons[0];
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
}

TEST(AutoTest, TheCallersStatusIsCarriedOrExchangedWhicheverPlanRuns) {
  // fp16 on the reduce-scatter cannot carry the caller's status words on its collectives,
  // none can: auto takes them either way (no collective of the caller's per step), and
  // every step leaves in them the OR over the ranks, whichever plan ran it.
  std::vector<std::vector<std::string>> plans(2);
  std::vector<std::vector<std::vector<float>>> seen(2);
  comm::run_local_ranks(2, 20s, [&](comm::Collectives& c) {
    const int rank = c.rank();
    const auto tensors = fc_tensors(8, 8);
    std::vector<std::vector<float>> params, grads;
    FloatSpans param_spans, grad_spans;
    for (const auto& t : tensors) {
      params.emplace_back(t.numel(), 0.5f);
      grads.emplace_back(t.numel(), 1.0f);
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      param_spans.emplace_back(params[t]);
      grad_spans.emplace_back(grads[t]);
    }
    auto strategy = create_allreduce_strategy(
        c, {.codec = "auto:plans=none/fp16,trial=1", .quantized_path = "reduce-scatter"});
    auto* adaptive = dynamic_cast<AdaptiveStrategy*>(strategy.get());
    strategy->start(tensors, param_spans);
    std::vector<float> status(3, 0.0f);
    ASSERT_TRUE(strategy->carry_status(status));
    for (int s = 0; s < 8; ++s) {
      // Rank 1 sets word 1 on even steps, rank 0 word 2 on odd ones; rank 1 alone fails
      // (word 0, the failure word) at steps 4 and 5.
      std::fill(status.begin(), status.end(), 0.0f);
      if (rank == 1 && (s == 4 || s == 5)) status[0] = 1.0f;
      if (rank == 1 && s % 2 == 0) status[1] = 1.0f;
      if (rank == 0 && s % 2 == 1) status[2] = 1.0f;
      plans[rank].push_back(adaptive->active_plan().name);
      strategy->synchronize(grad_spans);
      seen[rank].push_back(status);
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(std::find(plans[r].begin(), plans[r].end(), "fp16"), plans[r].end());
    EXPECT_NE(std::find(plans[r].begin(), plans[r].end(), "none"), plans[r].end());
    for (int s = 0; s < 8; ++s) {
      std::vector<float> expected =
          s % 2 == 0 ? std::vector<float>{0, 1, 0} : std::vector<float>{0, 0, 1};
      if (s == 4 || s == 5) expected[0] = 1;  // rank 1's failure, seen by every rank
      EXPECT_EQ(seen[r][s], expected)
          << "rank " << r << " step " << s << " (" << plans[r][s] << ")";
    }
  }
}

TEST(AutoTest, Int8IsLeftOutBeyond127RanksOnlyOnItsRing) {
  // int8's ring sums the ranks' levels in int8: at 128 ranks it has none. Forced onto the
  // ring, auto goes on without it instead of failing (the first decision comes after fp16
  // and none, 2 steps each); on the default quantized path int8's buckets take the
  // reduce-scatter there and it stays a plan.
  RunSettings settings;
  settings.codec = "auto:window=2,trial=1";
  settings.steps = 7;
  settings.rows = 4;
  settings.cols = 4;
  settings.quantized_path = "ring";
  const auto runs = run_ranks(128, settings);
  for (int r = 0; r < 128; ++r) {
    for (const auto& plan : runs[r].plan_per_step) EXPECT_NE(plan, "int8") << "rank " << r;
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
  ASSERT_FALSE(runs[0].reasons.empty());
  EXPECT_NE(runs[0].reasons[0].find("int8 left out"), std::string::npos) << runs[0].reasons[0];
  EXPECT_THROW(run_ranks(128, {.codec = "auto:plans=int8", .steps = 1, .quantized_path = "ring"}),
               ConfigError);
  const auto scattered =
      run_ranks(128, {.codec = "auto:plans=int8", .steps = 2, .rows = 4, .cols = 4});
  for (int r = 0; r < 128; ++r) {
    EXPECT_EQ(scattered[r].plan_per_step, std::vector<std::string>(2, "int8")) << "rank " << r;
    EXPECT_EQ(scattered[r].params, scattered[0].params) << "rank " << r;
  }
}

TEST(AutoTest, FitKeepsTheTensorBackwardHidesExactAndCompressesTheExposedOne) {
  // Two 512 x 384 weights (768 KiB each: one bucket each, the first being at most 1 MiB)
  // over a simulated 7.8 MB/s link the model knows: each takes about 0.1 s in fp32, 25 ms
  // in int8. backward reports b.weight 300 ms before a.weight: b's exchange hides under
  // it, a's is all exposed. fit keeps b in fp32 and sends a in int8; it is built when the
  // uniform plans' trial settles (at most trial_max 3 samples a plan) and interleaved with
  // that trial's choice in a trial of its own.
  RunSettings settings;
  settings.codec = "auto:window=100,trial=2,trial_max=3,plans=none/fit/fp16/int8";
  settings.steps = 21;
  settings.tensors = {{"a.weight", {512, 384}, LayerKind::kFcWeight},
                      {"b.weight", {512, 384}, LayerKind::kFcWeight}};
  settings.bytes_per_s = 7.8e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 7.8e6);
  settings.hooks = true;
  settings.backward = 300ms;
  const auto runs = run_ranks(2, settings);
  for (int r = 0; r < 2; ++r) {
    // int8, fp16, none (least predicted exchange first) in turns, 3 rounds at least.
    EXPECT_EQ(
        std::vector<std::string>(runs[r].plan_per_step.begin(), runs[r].plan_per_step.begin() + 9),
        (std::vector<std::string>{"int8", "fp16", "none", "int8", "fp16", "none", "int8", "fp16",
                                  "none"}))
        << "rank " << r;
    EXPECT_NE(std::find(runs[r].plan_per_step.begin(), runs[r].plan_per_step.end(), "fit"),
              runs[r].plan_per_step.end())
        << "rank " << r;
    ASSERT_EQ(runs[r].reasons.size(), 1u) << "rank " << r;
    EXPECT_NE(runs[r].reasons[0].find("fit: none: b.weight; int8: a.weight"), std::string::npos)
        << runs[r].reasons[0];
    EXPECT_EQ(runs[r].decisions, runs[0].decisions) << "rank " << r;
    EXPECT_EQ(runs[r].plan_per_step, runs[0].plan_per_step) << "rank " << r;
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
}

TEST(AutoTest, APlainLoserLeavesTheTrialAfterThreeStepsOfItsOwn) {
  // Two 256 x 256 weights (256 KiB each in fp32: one first bucket of 512 KiB) over a
  // simulated 1.25 MB/s link; backward reports b.weight 250 ms before a.weight. On their
  // first layouts a step of none takes about 250 + 2 x 210 ms, fp16's 250 + 2 x 105: none
  // is slower by far more than twice the noise, and leaves the trial once each plan has 3
  // steps after its warm-up (round 4, step 8), before `trial` (5) and before its own
  // layout could propose anything (after its 6th step). fp16, alone, is chosen then; a
  // loaded machine may take the full verdict (step 12) or a round more.
  RunSettings settings;
  settings.codec = "auto:window=100,trial=5,plans=none/fp16";
  settings.steps = 16;
  settings.tensors = {{"a.weight", {256, 256}, LayerKind::kFcWeight},
                      {"b.weight", {256, 256}, LayerKind::kFcWeight}};
  settings.bytes_per_s = 1.25e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 1.25e6);
  settings.hooks = true;
  settings.backward = 250ms;
  std::vector<std::vector<float>> inputs;
  const auto runs = run_ranks(2, settings, &inputs);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(runs[r].decisions.size(), 1u) << "rank " << r;
    const std::string& reason = runs[r].reasons[0];
    const size_t decided = runs[r].decisions[0].first;
    EXPECT_EQ(runs[r].decisions[0].second, "fp16") << reason;
    EXPECT_GE(decided, 8u) << reason;
    EXPECT_LE(decided, 14u) << reason;
    for (size_t s = 0; s < runs[r].plan_per_step.size(); ++s) {
      const std::string expected = s >= decided ? "fp16" : s % 2 ? "none" : "fp16";
      EXPECT_EQ(runs[r].plan_per_step[s], expected) << "rank " << r << " step " << s;
    }
    EXPECT_NE(reason.find("standard error ms: none "), std::string::npos) << reason;
    EXPECT_EQ(runs[r].decisions, runs[0].decisions) << "rank " << r;
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
    // Step 0 (fp16): b.weight's aggregate is the mean of the ranks' inputs, to fp16's
    // rounding.
    ASSERT_EQ(runs[r].first_aggregate.size(), inputs[0].size());
    for (size_t i = 0; i < inputs[0].size(); ++i) {
      const float mean = (inputs[0][i] + inputs[1][i]) / 2;
      ASSERT_NEAR(runs[r].first_aggregate[i], mean, 2e-3f * (1 + std::abs(mean))) << i;
    }
  }
}

TEST(AutoTest, APlanFitBuiltComesBackFromACheckpoint) {
  // Two ranks run the scenario above for 8 steps (int8, none, fit measured, then chosen),
  // save, and a fresh strategy on each rank loads it: the same plan, fit's policy, and the
  // same aggregate of the next step's gradients as the strategy that saved.
  const std::vector<TensorInfo> tensors = {{"a.weight", {512, 384}, LayerKind::kFcWeight},
                                           {"b.weight", {512, 384}, LayerKind::kFcWeight}};
  const std::string codec = "auto:window=100,trial=1,plans=none/fit/int8";
  std::vector<std::string> saved_plan(2), loaded_plan(2), saved_reason(2), loaded_reason(2);
  std::vector<std::vector<float>> saved_after(2), loaded_after(2);
  comm::run_local_ranks(2, 20s, [&](comm::Collectives& local) {
    ThrottledCollectives c(local, 7.8e6);
    const int rank = c.rank();
    const comm::LinkModel link = comm::LinkModel::from_bandwidth(0, 8 * 7.8e6);
    std::vector<std::vector<float>> params(2, std::vector<float>(512 * 384, 0.5f)),
        grads(2, std::vector<float>(512 * 384));
    FloatSpans param_spans{params[0], params[1]}, grad_spans{grads[0], grads[1]};
    std::mt19937 rng(7 + rank);
    std::normal_distribution<float> normal;
    const auto step = [&](Strategy& s) {
      for (auto& g : grads) {
        for (float& v : g) v = normal(rng);
      }
      s.gradient_ready(1, grad_spans[1]);
      std::this_thread::sleep_for(300ms);
      s.gradient_ready(0, grad_spans[0]);
      s.synchronize(grad_spans);
    };
    auto first = create_allreduce_strategy(c, {.codec = codec, .link = link});
    first->start(tensors, param_spans);
    for (int i = 0; i < 8; ++i) step(*first);
    Bytes state;
    first->save_state(state);
    auto second = create_allreduce_strategy(c, {.codec = codec, .link = link});
    second->start(tensors, param_spans);
    // A state of the format before (ADP3) is refused, naming it, and changes nothing.
    Bytes older = state;
    const char tag3[4] = {'A', 'D', 'P', '3'};
    std::memcpy(older.data(), tag3, 4);
    ByteReader older_reader(older);
    try {
      second->load_state(older_reader);
      ADD_FAILURE() << "an ADP3 state loaded";
    } catch (const PayloadError& e) {
      EXPECT_NE(std::string(e.what()).find("ADP3"), std::string::npos) << e.what();
    }
    // The formats before: ADP5 held a trial as a queue of plans measured one after another
    // where ADP6 holds PlanTrial's state; with no trial in progress (the decision came at
    // step 8) that is an empty queue, position 0, no steps, no samples and no reason where
    // ADP6 has "no trial" and the turn's plan. ADP4 is ADP5 without the noise at its end.
    // Both load, ADP4's noise unknown.
    // tag, plan count, active, step; regime and rate; detector; measured ms and trial
    // steps per plan (3 plans); ruled out.
    constexpr size_t kTrialAt = 4 + 3 * 8 + (1 + 1 + 8 + 1) + 35 + 2 * (8 + 3 * 8) + (8 + 3);
    ASSERT_EQ(state[kTrialAt], 0) << "a trial in progress at step 8";
    Bytes older5(state.begin(), state.begin() + kTrialAt);
    older5.insert(older5.end(), 5 * 8 + 4, 0);
    older5.insert(older5.end(), state.begin() + kTrialAt + 1 + 8, state.end());
    // A fresh strategy that loads `bytes` under the 4-byte `tag`, every byte read.
    const auto load_as = [&](Bytes bytes, const char* tag) {
      std::memcpy(bytes.data(), tag, 4);
      auto loaded = create_allreduce_strategy(c, {.codec = codec, .link = link});
      loaded->start(tensors, param_spans);
      ByteReader reader(bytes);
      loaded->load_state(reader);
      reader.expect_end(tag);
      return loaded;
    };
    auto fourth = load_as(older5, "ADP5");
    EXPECT_EQ(dynamic_cast<AdaptiveStrategy*>(fourth.get())->active_plan().name,
              dynamic_cast<AdaptiveStrategy*>(first.get())->active_plan().name);
    auto third = load_as(
        Bytes(older5.begin(), older5.end() - static_cast<std::ptrdiff_t>(8 + 8 * 3)), "ADP4");
    if (rank == 0) {
      const auto resumed = third->take_decisions();
      EXPECT_EQ(dynamic_cast<AdaptiveStrategy*>(third.get())->active_plan().name,
                dynamic_cast<AdaptiveStrategy*>(first.get())->active_plan().name);
      EXPECT_NE(resumed.back().reason.find("standard error ms: none - "), std::string::npos)
          << resumed.back().reason;
    }
    ByteReader reader(state);
    second->load_state(reader);
    reader.expect_end("ADP6 state");
    auto* a = dynamic_cast<AdaptiveStrategy*>(first.get());
    auto* b = dynamic_cast<AdaptiveStrategy*>(second.get());
    saved_plan[rank] = a->active_plan().name + " " + a->active_plan().policy;
    loaded_plan[rank] = b->active_plan().name + " " + b->active_plan().policy;
    const auto decisions = second->take_decisions();
    if (!decisions.empty()) loaded_reason[rank] = decisions.back().reason;
    // The same gradients through both: the same aggregate.
    const auto rng_state = rng;
    const auto normal_state = normal;
    step(*first);
    saved_after[rank] = grads[0];
    rng = rng_state;
    normal = normal_state;
    step(*second);
    loaded_after[rank] = grads[0];
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(loaded_plan[r], saved_plan[r]) << "rank " << r;
    EXPECT_NE(loaded_reason[r].find("fit: "), std::string::npos) << loaded_reason[r];
    EXPECT_EQ(loaded_after[r], saved_after[r]) << "rank " << r;
  }
}

}  // namespace
}  // namespace gradwire::strategy
