// auto and accordion over in-process ranks (adaptive_ranks.h): the plans each step runs,
// the decisions and their reasons, identical parameters on every rank, checkpoints. What
// they decide from figures alone is tested in adaptive_choice_test.cc.
#include "gradwire/strategy/adaptive/adaptive_strategy.h"
#include "gradwire/strategy/adaptive/fit_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "adaptive_ranks.h"
#include "gradwire/core/error.h"
#include "gradwire/core/statistics.h"
#include "gradwire/strategy/registry.h"

namespace gradwire::strategy {
namespace {

using namespace std::chrono_literals;
using compress::LayerKind;
using compress::TensorInfo;
using testing::fc_tensors;
using testing::plans_by_step;
using testing::RankRun;
using testing::run_ranks;
using testing::RunSettings;
using testing::ThrottledCollectives;

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

// A 256 x 1024 weight (1 MiB of fp32) over a simulated 0.35 MB/s link that the model
// knows: a step of none waits about 3 s for the wire, fp16 half that, PowerSGD (rank 8:
// 40 KB) about 120 ms.
RunSettings slow_link_job(const std::string& codec) {
  RunSettings settings;
  settings.codec = codec;
  settings.steps = 9;
  settings.rows = 256;
  settings.cols = 1024;
  settings.bytes_per_s = 0.35e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 0.35e6);
  settings.compute = 5ms;
  settings.timeout = 60s;  // seconds of simulated wire; more on a loaded sanitizer run
  return settings;
}

// What both slow-link tests below expect of every rank: PowerSGD chosen once, at
// `ruled_out_at` (the model ruled none and fp16 out) or at step 10 (a machine too slow for
// that bound), none never run, only PowerSGD after the choice, the ranks alike.
void expect_powersgd_without_none(const std::vector<testing::RankRun>& runs,
                                  uint64_t ruled_out_at) {
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].decisions.size(), 1u) << "rank " << r;
    const auto [step, chosen] = runs[r].decisions[0];
    EXPECT_EQ(chosen, "powersgd") << "rank " << r;
    EXPECT_TRUE(step == ruled_out_at || step == 10) << "rank " << r << ": decided at step " << step;
    if (step == ruled_out_at) {
      EXPECT_NE(runs[r].reasons[0].find("ruled out by the model: none fp16"), std::string::npos)
          << runs[r].reasons[0];
    }
    EXPECT_EQ(std::count(runs[r].plan_per_step.begin(), runs[r].plan_per_step.end(), "none"), 0)
        << "rank " << r;
    for (size_t s = step; s < runs[r].plan_per_step.size(); ++s) {
      EXPECT_EQ(runs[r].plan_per_step[s], "powersgd") << "rank " << r << ", step " << s;
    }
    EXPECT_EQ(runs[r].decisions, runs[0].decisions) << "rank " << r;
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
}

TEST(AutoTest, ASlowLinkSelectsPowerSgdFromTheFirstStepAfterItsOpeningTurn) {
  // No dense start (auto's default under SGD): PowerSGD, the least predicted exchange,
  // opens the trial with its warm-up, a lead-in and a sample (steps 0-2). Its sample
  // (about 125 ms) bounds the fastest step: fp16's predicted exchange (1.5 s) and none's
  // (3 s) alone exceed twice it, both are ruled out without running a step, and PowerSGD is
  // chosen at step 3. On a machine slow enough (a sanitizer run) that the sample takes over
  // 0.75 s, fp16 warms up in round 1 (step 5) and runs a turn in round 2 (8, 9): PowerSGD
  // at step 10.
  RunSettings settings = slow_link_job("auto:trial=3,plans=none/fp16/powersgd");
  settings.steps = 12;
  const auto runs = run_ranks(2, settings);
  expect_powersgd_without_none(runs, 3);
  for (int r = 0; r < 2; ++r) {
    if (runs[r].decisions.size() == 1 && runs[r].decisions[0].first == 3) {
      EXPECT_EQ(runs[r].plan_per_step, std::vector<std::string>(12, "powersgd")) << "rank " << r;
    }
  }
}

TEST(AutoTest, UnderADenseStartAPlanThatDoesNotCompressOpensAndPowerSgdsWarmUpRulesOut) {
  // dense=2 (auto's start under Adam's family): PowerSGD is held back at steps 0 and 1, so
  // fp16 opens the trial (warm-up, lead-in, sample: steps 0-2; the turn stays on it at step
  // 2). Round 1 starts with PowerSGD's warm-up (step 3), which bounds the fastest step at
  // once (an agreement after the warm-up): none's predicted exchange (3 s) and fp16's (1.5
  // s) exceed twice it (about 130 ms), so none never runs a step and PowerSGD is chosen at
  // step 4. Where the warm-up takes over 0.75 s (a sanitizer run), fp16 stays for its turn
  // (4, 5) and round 2's (PowerSGD's turn, 6-7, fp16's, 8-9): PowerSGD at step 10.
  RunSettings settings = slow_link_job("auto:trial=3,dense=2,plans=none/fp16/powersgd");
  settings.steps = 12;
  const auto runs = run_ranks(2, settings);
  expect_powersgd_without_none(runs, 4);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(
        std::vector<std::string>(runs[r].plan_per_step.begin(), runs[r].plan_per_step.begin() + 4),
        (std::vector<std::string>{"fp16", "fp16", "fp16", "powersgd"}))
        << "rank " << r;
  }
}

// A 256 x 1024 weight, 40 ms of compute a step, auto choosing among none, fp16 and
// PowerSGD from 3 samples each (at most 6): no simulated link.
RunSettings fast_link_job(int steps) {
  RunSettings settings;
  settings.codec = "auto:trial=3,trial_max=6,dense=2,plans=none/fp16/powersgd";
  settings.steps = steps;
  settings.rows = 256;
  settings.cols = 1024;
  settings.compute = 40ms;
  return settings;
}

TEST(AutoTest, AFastLinkSelectsNoneOrFp16) {
  // No simulated link: every plan's step is its 40 ms of compute, PowerSGD cannot win by
  // its penalty (9.6%; the median of 3 steps keeps a noisy machine's hiccups out). The trial
  // ends when its verdicts resolve, the plans fall within the tie, or the budget is spent
  // (trial_max 6: fp16's opening, 3 steps, round 1's 4, then at most 5 rounds of 6 steps: a
  // decision by step 37).
  const auto runs = run_ranks(2, fast_link_job(40));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(runs[r].decisions.size(), 1u) << "rank " << r;
    const std::string last = runs[r].decisions.back().second;
    // Under a sanitizer's pace the in-process exchange of none's 1 MB is no longer free
    // (none measured 148 ms a step against its 40 ms of compute under TSan): there the
    // measured steps rightly choose PowerSGD; the premise holds while none's step is
    // within twice its compute.
    const std::string& why = runs[r].reasons.back();
    const size_t at = why.find("measured: none ");
    const double none_ms = at == std::string::npos ? 0 : std::atof(why.c_str() + at + 15);
    if (none_ms < 80) {
      EXPECT_TRUE(last == "none" || last == "fp16") << last << ": " << why;
    }
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

TEST(AutoTest, OnALinkWhoseExchangesAreShortBesideAStepATurnIsOneStep) {
  // The fast-link job of the test above with a 10 Gbit link that the model knows: none's
  // exchange (1 MiB) is predicted at under 2 ms of a 40 ms step, below the share where the
  // previous plan's leftovers could sway a sample (AdaptiveStrategy::kLeadInShare), so the
  // turns after the opening are samples alone. Steps 0-2: fp16's opening (the dense start
  // holds PowerSGD back; its warm-up, a lead-in, as every opening, and a sample); from step 3
  // round 1: PowerSGD's warm-up, fp16's sample alone, none's warm-up, PowerSGD's sample
  // (with lead-ins fp16 and none would run twice).
  RunSettings settings = fast_link_job(7);
  settings.link = comm::LinkModel::from_bandwidth(0, 10e9);
  const auto runs = run_ranks(2, settings);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(runs[r].plan_per_step, (std::vector<std::string>{"fp16", "fp16", "fp16", "powersgd",
                                                               "fp16", "none", "powersgd"}))
        << "rank " << r;
    EXPECT_TRUE(runs[r].decisions.empty()) << "rank " << r;  // 1 sample each: no verdict yet
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
}

TEST(AutoTest, TheModelRulesOutAPlanWhoseExchangeAloneExceedsTwiceTheBestStep) {
  // A 256 x 256 weight (256 KiB) over a simulated 0.25 MB/s link that the model knows:
  // int8's exchange is predicted at about 0.27 s, none's at 1.05 s. int8 (least predicted)
  // opens the trial: its warm-up, a lead-in and a sample. The sample (about 0.3 s; under
  // 0.52 s on a loaded machine under sanitizers) bounds the fastest step, none, predicted
  // beyond twice it, is ruled out, and int8 is chosen at step 3: none ran no step.
  RunSettings settings;
  settings.codec = "auto:trial=2,plans=none/int8";
  settings.steps = 6;
  settings.rows = 256;
  settings.cols = 256;
  settings.bytes_per_s = 0.25e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 0.25e6);
  settings.compute = 5ms;
  const auto runs = run_ranks(2, settings);
  const std::vector<std::pair<uint64_t, std::string>> decisions = {{3, "int8"}};
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(runs[r].plan_per_step, std::vector<std::string>(6, "int8")) << "rank " << r;
    EXPECT_EQ(runs[r].decisions, decisions) << "rank " << r;
    ASSERT_FALSE(runs[r].reasons.empty());
    EXPECT_NE(runs[r].reasons[0].find("ruled out by the model: none"), std::string::npos)
        << runs[r].reasons[0];
    EXPECT_NE(runs[r].reasons[0].find("exchange ms/step predicted: none 1052.7"), std::string::npos)
        << runs[r].reasons[0];
    EXPECT_NE(runs[r].reasons[0].find("ms/step waited after backward: none - int8 "),
              std::string::npos)
        << runs[r].reasons[0];
    EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  }
}

TEST(AutoTest, TheCallersStatusIsCarriedOrExchangedWhicheverPlanRuns) {
  // fp16 on the reduce-scatter cannot carry the caller's status words on its collectives,
  // none can: auto takes them either way (no collective of the caller's per step), and
  // every step leaves in them the OR over the ranks, whichever plan ran it. Over a
  // simulated 25 kB/s link every step waits for its exchange, so that neither plan is
  // ruled out unrun (cannot_beat(): no wait, no gain to make) and both run in 8 steps: fp16's
  // opening (steps 0-2), its turn and none's warm-up (3-5), fp16's next turn.
  std::vector<std::vector<std::string>> plans(2);
  std::vector<std::vector<std::vector<float>>> seen(2);
  comm::run_local_ranks(2, 20s, [&](comm::Collectives& local) {
    ThrottledCollectives c(local, 25e3);
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
  // ring, auto goes on without it instead of failing (the first decision comes by step 13:
  // fp16's opening in the dense start, steps 0-2; round 1, PowerSGD's warm-up, fp16's turn,
  // none's warm-up, 3-6; round 2, a lead-in and a sample of each, 7-12; sooner where the
  // model rules plans out); on the default quantized path int8's buckets take the
  // reduce-scatter there and it stays a plan.
  RunSettings settings;
  settings.codec = "auto:window=2,trial=1,dense=2";
  settings.steps = 16;
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
  // The uniform plans' trial: int8's opening (3 steps), round 1 (its turn, the warm-ups of
  // fp16 and none: 4) and at most 3 rounds of three two-step turns (18); fit's: the
  // choice's opening (3), round 1 (3) and at most 3 rounds of two turns (12).
  settings.steps = 45;
  settings.timeout = 90s;
  settings.tensors = {{"a.weight", {512, 384}, LayerKind::kFcWeight},
                      {"b.weight", {512, 384}, LayerKind::kFcWeight}};
  settings.bytes_per_s = 7.8e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 7.8e6);
  settings.hooks = true;
  settings.backward = 300ms;
  const auto runs = run_ranks(2, settings);
  for (int r = 0; r < 2; ++r) {
    // int8, fp16, none (least predicted exchange first) in turns: int8's opening, round 1
    // (int8's turn, the warm-ups of fp16 and none), then a lead-in and a sample each.
    EXPECT_EQ(
        std::vector<std::string>(runs[r].plan_per_step.begin(), runs[r].plan_per_step.begin() + 11),
        (std::vector<std::string>{"int8", "int8", "int8", "int8", "int8", "fp16", "none", "int8",
                                  "int8", "fp16", "fp16"}))
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

// Two 256 x 256 weights (256 KiB each in fp32: one first bucket of 512 KiB) over a
// simulated 1.25 MB/s link the model knows, auto choosing between none and fp16.
RunSettings none_or_fp16_job(int steps) {
  RunSettings settings;
  settings.codec = "auto:window=100,trial=5,plans=none/fp16";
  settings.steps = steps;
  settings.timeout = 60s;
  settings.tensors = {{"a.weight", {256, 256}, LayerKind::kFcWeight},
                      {"b.weight", {256, 256}, LayerKind::kFcWeight}};
  settings.bytes_per_s = 1.25e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 1.25e6);
  return settings;
}

TEST(AutoTest, APlainLoserLeavesTheTrialAfterThreeStepsOfItsOwn) {
  // Two 256 x 256 weights (256 KiB each in fp32: one first bucket of 512 KiB) over a
  // simulated 6 MB/s link; backward reports b.weight 250 ms before a.weight. On their first
  // layouts a step of none takes about 250 + 87 ms, fp16's 250 + 44: none is slower by far
  // more than twice the noise, though by less than a quarter of fp16's step (15%: no clear
  // loser at one sample, kClearLoss), and leaves the trial once each plan has 3
  // samples (fp16's opening, steps 0-2; round 1, fp16's turn and none's warm-up, 3-5; then
  // rounds of a lead-in and a sample each: step 18), before `trial` (5) and before its own
  // layout could propose anything (after 6 measured steps: lead-ins are not). fp16, alone,
  // is chosen then; a loaded machine may take the full verdict (step 26) or a round more.
  RunSettings settings = none_or_fp16_job(34);
  settings.hooks = true;
  settings.backward = 250ms;
  settings.bytes_per_s = 6e6;
  settings.link = comm::LinkModel::from_bandwidth(0, 8 * 6e6);
  std::vector<std::vector<float>> inputs;
  const auto runs = run_ranks(2, settings, &inputs);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(runs[r].decisions.size(), 1u) << "rank " << r;
    const std::string& reason = runs[r].reasons[0];
    const size_t decided = runs[r].decisions[0].first;
    EXPECT_EQ(runs[r].decisions[0].second, "fp16") << reason;
    EXPECT_GE(decided, 18u) << reason;
    EXPECT_LE(decided, 30u) << reason;
    for (size_t s = 0; s < runs[r].plan_per_step.size(); ++s) {
      // fp16's opening and turn (0-4), none's warm-up (5), then two-step turns.
      const std::string expected = s >= decided      ? "fp16"
                                   : s < 5           ? "fp16"
                                   : s == 5          ? "none"
                                   : (s - 6) / 2 % 2 ? "none"
                                                     : "fp16";
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

// Rank r's one decision, for `plan`, the same on every rank with the same parameters: its
// step and the steps `none` ran (nothing where rank r did not decide exactly once).
std::optional<std::pair<size_t, long>> one_decision(const std::vector<testing::RankRun>& runs,
                                                    int r, const std::string& plan) {
  EXPECT_EQ(runs[r].decisions.size(), 1u) << "rank " << r;
  if (runs[r].decisions.size() != 1) return std::nullopt;
  EXPECT_EQ(runs[r].decisions[0].second, plan) << runs[r].reasons[0];
  EXPECT_EQ(runs[r].decisions, runs[0].decisions) << "rank " << r;
  EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
  return std::make_pair(runs[r].decisions[0].first,
                        static_cast<long>(std::count(runs[r].plan_per_step.begin(),
                                                     runs[r].plan_per_step.end(), "none")));
}

// none_or_fp16_job without gradient hooks, `compute` of sleep a step: fp16 chosen on every
// rank at step `at`, none having run `none_steps`, or, on a loaded machine, a round later
// (4 steps; none 2 more). Returns the runs and whether the decision came at `at`.
std::pair<std::vector<RankRun>, bool> fp16_chosen(std::chrono::milliseconds compute, int steps,
                                                  size_t at, long none_steps) {
  RunSettings settings = none_or_fp16_job(steps);
  settings.compute = compute;
  auto runs = run_ranks(2, settings);
  bool on_time = true;
  for (int r = 0; r < 2; ++r) {
    const auto decision = one_decision(runs, r, "fp16");
    if (!decision) continue;
    const auto [decided, none_ran] = *decision;
    EXPECT_TRUE(decided == at || decided == at + 4) << "decided at " << decided;
    EXPECT_EQ(none_ran, decided == at ? none_steps : none_steps + 2) << "rank " << r;
    on_time = on_time && decided == at;
  }
  return {std::move(runs), on_time};
}

TEST(AutoTest, AClearLoserLeavesTheTrialAfterItsFirstSample) {
  // Every exchange follows backward: with 300 ms of compute a step of none takes about
  // 300 + 2 x 210 ms, fp16's 300 + 2 x 105. none loses by more than a quarter of fp16's step
  // (kClearLoss) and the model predicts its exchange (about 420 ms) above fp16's, but below
  // fp16's whole step: no clear loser at its warm-up (loses_at_warmup()), one at its first
  // sample. It leaves at the end of that sample's round: fp16's opening (steps 0-2), round 1
  // (fp16's turn, none's warm-up: 3-5), round 2 (a lead-in and a sample each: 6-9): fp16 is
  // chosen at step 10, none ran 3 steps.
  const auto [runs, on_time] = fp16_chosen(300ms, 16, 10, 3);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(runs[r].reasons.size(), 1u);
    EXPECT_EQ(runs[r].reasons[0].find("lost at its warm-up"), std::string::npos)
        << runs[r].reasons[0];
  }
}

TEST(AutoTest, AClearLoserTheModelBoundsLeavesAtItsWarmUp) {
  // As above with 50 ms of compute: a step of none about 50 + 2 x 210 ms, fp16's 50 + 2 x
  // 105. none's warm-up scores more than a quarter above fp16's sample and the model puts
  // its exchange alone (about 420 ms) above fp16's whole step (about 260): it leaves after
  // round 1 (fp16's turn, none's warm-up: steps 3-5) with no lead-in or sample; fp16 is
  // chosen at step 6, none ran 1 step.
  const auto [runs, on_time] = fp16_chosen(50ms, 12, 6, 1);
  for (int r = 0; r < 2 && on_time; ++r) {
    // Logged as such, its one step counted.
    ASSERT_EQ(runs[r].reasons.size(), 1u);
    EXPECT_NE(runs[r].reasons[0].find("lost at its warm-up"), std::string::npos)
        << runs[r].reasons[0];
    const std::string& json = runs[r].inputs_json[0];
    EXPECT_NE(json.find("\"lost_at_warmup\":[\"none\"]"), std::string::npos) << json;
    EXPECT_NE(json.find("\"trial_steps\":{\"none\":1,\"fp16\":5}"), std::string::npos) << json;
  }
}

TEST(AutoTest, StartedInItsFirstStepAsTheHookStartsItTheFirstExchangeBoundsNothing) {
  // none and int8 over the simulated 1.25 MB/s link, 200 ms of compute, started as the DDP
  // hook starts it: in step 0, after its compute, right before its exchange. int8 opens
  // (steps 0-2); timed from start(), its first step would be its exchange alone (about
  // 105 ms), and none's predicted exchange (about 420 ms) is beyond twice that: the prune
  // would rule none out unrun. Untimed, the bound is int8's sample (about 305 ms): none
  // warms up (step 5, after int8's turn) and leaves there (about 620 ms, its exchange
  // predicted above int8's step: loses_at_warmup()), or, where a loaded machine stretches
  // int8's step past none's predicted exchange, after its first sample (3 steps).
  RunSettings settings = none_or_fp16_job(12);
  settings.codec = "auto:window=100,trial=5,plans=none/int8";
  settings.compute = 200ms;
  settings.start_in_first_step = true;
  const auto runs = run_ranks(2, settings);
  for (int r = 0; r < 2; ++r) {
    const auto decision = one_decision(runs, r, "int8");
    ASSERT_TRUE(decision);
    const long none_steps = decision->second;
    const std::string& reason = runs[r].reasons[0];
    EXPECT_EQ(reason.find("ruled out by the model"), std::string::npos) << reason;
    EXPECT_TRUE(none_steps == 1 || none_steps == 3) << "rank " << r << ": " << none_steps;
    if (none_steps == 1) EXPECT_NE(reason.find("lost at its warm-up"), std::string::npos) << reason;
  }
}

TEST(AutoTest, APlanFitBuiltComesBackFromACheckpoint) {
  // Two ranks run the scenario above for 20 steps (int8, none, fit measured, then chosen),
  // save, and a fresh strategy on each rank loads it: the same plan, fit's policy, and the
  // same aggregate of the next step's gradients as the strategy that saved.
  const std::vector<TensorInfo> tensors = {{"a.weight", {512, 384}, LayerKind::kFcWeight},
                                           {"b.weight", {512, 384}, LayerKind::kFcWeight}};
  const std::string codec = "auto:window=100,trial=1,plans=none/fit/int8";
  std::vector<std::string> saved_plan(2), loaded_plan(2), saved_reason(2), loaded_reason(2);
  std::vector<std::vector<float>> saved_after(2), loaded_after(2);
  comm::run_local_ranks(2, 40s, [&](comm::Collectives& local) {
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
    // int8's opening (steps 0-2), round 1 (int8's turn, none's warm-up: 3-5), round 2 (a
    // turn of each: 6-9): fit is built after step 9; its trial with the choice (the choice's
    // opening, 10-12; round 1, its turn and fit's warm-up, 13-15; round 2, a turn of each,
    // 16-19): decided at step 20.
    for (int i = 0; i < 20; ++i) step(*first);
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
    // where ADP7 holds PlanTrial's state; with no trial in progress (the decision came at
    // step 20) that is an empty queue, position 0, no steps, no samples and no reason where
    // ADP7 has "no trial" and the turn's plan. ADP4 is ADP5 without the noise at its end.
    // ADP6 differs from ADP7 only in a trial in progress (its lead-in fields: PlanTrialTest).
    // All load, ADP4's noise unknown.
    // tag, plan count, active, step; regime and rate; detector; measured ms and trial
    // steps per plan (3 plans); ruled out.
    constexpr size_t kTrialAt = 4 + 3 * 8 + (1 + 1 + 8 + 1) + 35 + 2 * (8 + 3 * 8) + (8 + 3);
    ASSERT_EQ(state[kTrialAt], 0) << "a trial in progress at step 20";
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
    auto sixth = load_as(state, "ADP6");
    EXPECT_EQ(dynamic_cast<AdaptiveStrategy*>(sixth.get())->active_plan().name,
              dynamic_cast<AdaptiveStrategy*>(first.get())->active_plan().name);
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
    reader.expect_end("ADP7 state");
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
