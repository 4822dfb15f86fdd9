// Adaptive codecs for the allreduce strategy: the codec changes over training, the same on
// every rank at the same step (ALGORITHMS.md 9).
//
//   auto[:plans=none/fp16/int8/powersgd,rank=8,penalty=0.07,trial=5,window=50,eta=0.5,
//         reprobe=2000,prune=2]
//     Measures, then picks. Each candidate plan (codec_plan.h) runs `trial` steps after one
//     of warm-up; a step's time is the wall time between two synchronize() returns
//     (forward, backward, the exchange not hidden by backward, the optimizer step: what
//     the user waits for). The ranks agree on each plan's median (the slowest rank's, by an
//     allreduce-max) and choose_plan() picks. A plan's own measured bucket layout
//     (AllreduceStrategy) is measured over the same steps (warm-up 1 and 5 timed: the
//     defaults of both); when it proposes other buckets, the trial goes on until `trial`
//     steps ran the proposal (taking turns with the first layout), and the plan counts by
//     the faster layout's median: a plan is not compared on buckets it would not keep.
//     Not when the first layout's median, less the saving the layout's model predicts
//     (more than the check measured, in every run so far), is still no faster than the
//     fastest plan measured.
//     Each decision reports its noise: every plan's standard error (from its steps' spread),
//     whether the chosen plan's lead over the runner-up exceeds twice their combined
//     error, and where it does not, about how many steps a plan would resolve it and what
//     the cost model predicts for the two (choice_noise(), codec_plan.h). The choice is
//     the scores' alone: a ranking within the noise is reported, not changed.
//     Plans that compress are charged `penalty`
//     for the steps they may cost and are not used in a critical regime (Accordion's
//     RegimeDetector over the gradient norm). It measures again every
//     `reprobe` steps (0: never), after a learning-rate decay (to half the rate at the
//     last window end or less: a step schedule's; a warm-up's rise is none), and when the
//     regime lets in plans it has not measured.
//     The cost model (comm/cost_model.h, over the base options' link) predicts each plan's
//     exchange per step at this world when training starts. A trial measures its plans
//     from the least predicted exchange to the most, and rules out, without measuring it,
//     a plan whose predicted exchange alone exceeds `prune` times the fastest step
//     measured (agreed by all ranks) so far: a step cannot be shorter than its exchange,
//     so such a plan cannot win. 0: never. A plan that cannot run at this world (int8
//     beyond 127 ranks with the quantized path forced to its ring) is left out at start.
//     Plan `fit` (listed, not a default: it lost to the best uniform plan in every whole
//     run measured, docs/RESULTS.md) is a choice per bucket among the uniform plans
//     (fit_plan.h). During the
//     first trial every rank records, per tensor, how long before backward's end its
//     gradient was final (the gradient hooks); when that trial's plans are measured, the
//     ranks agree on the shortest of those times (an allreduce) and fit_rungs() picks each
//     bucket's codec. A fit that mixes codecs is started and measured at the end of the
//     same trial; one that picks the same codec for every bucket is that uniform plan and
//     is not measured. It is built once.
//   accordion[:critical=fp16,normal=powersgd,rank=2,window=50,eta=0.5]
//     Accordion itself: plan `critical` in critical regimes, `normal` elsewhere.
//
// Every plan is an AllreduceStrategy started on the same tensors (so the model's memory for
// wire buffers and error feedback is paid once per plan); exactly one is active per step,
// and switches happen between synchronize() and the next backward. A plan left keeps its
// state (PowerSGD's warm-started Q and its error feedback) for when it is used again.
// Agreement: each rank feeds its detector the norm of its own gradient before the exchange
// (so the codec in use does not change the signal), and at the end of every window the
// ranks agree by an allreduce-max of two floats: critical on one rank is critical on all,
// and so is a learning-rate change seen by any. Timings are agreed by an allreduce-max when
// a trial ends. All other decisions follow from agreed values and the step count alone.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/strategy/adaptive/adaptive_options.h"
#include "gradwire/strategy/adaptive/codec_plan.h"
#include "gradwire/strategy/adaptive/regime_detector.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy {

class AdaptiveStrategy : public Strategy {
 public:
  // `base` gives bucket sizes and overlap; its codec is ignored (the plans have theirs).
  AdaptiveStrategy(comm::Collectives& collectives, AdaptiveOptions options, AllreduceOptions base);
  ~AdaptiveStrategy() override;

  std::string name() const override { return "allreduce"; }
  void start(std::span<const compress::TensorInfo> tensors, const FloatSpans& params) override;
  void gradient_ready(size_t index, std::span<float> grad) override;
  bool overlaps() const override { return base_.overlap; }
  void synchronize(const FloatSpans& grads) override;
  TrafficStats traffic() const override;
  void set_learning_rate(double lr) override;
  // Every plan carries it (fit too, when it is built).
  bool carry_status(std::span<float> status) override;
  std::string take_local_failure() override { return std::exchange(local_failure_, {}); }
  // Held by the plan active when the state was held (a switch may follow the step).
  void hold_codec_state(size_t index) override;
  void restore_codec_states(std::span<const uint8_t> unused_everywhere) override;
  std::vector<CodecDecision> take_decisions() override;
  // The active plan's.
  std::string bucket_layout_summary() const override;
  void save_state(Bytes& out) const override;
  void load_state(ByteReader& in) override;

  // The plan the next step uses (for tests and diagnostics).
  const CodecPlan& active_plan() const { return options_.plans[active_]; }
  bool critical() const { return critical_; }

 private:
  using Clock = std::chrono::steady_clock;
  bool allowed(size_t plan) const {
    return !(critical_ && options_.plans[plan].compresses) && plans_[plan] != nullptr;
  }
  // Updates the regime from this step's local gradient norm; true when it was re-agreed
  // (a window ended). Sets `lr_restart` when a learning-rate change was agreed.
  bool update_regime(double local_norm, bool& lr_restart);
  // `on_proposal`: the step ran the active plan's proposed bucket layout.
  void step_auto(double step_ms, bool on_proposal, bool window_ended, bool lr_restart);
  void step_accordion(bool window_ended);
  // Starts measuring `queue` (plans not allowed now are skipped); `why` goes to the log.
  void begin_trial(std::vector<size_t> queue, std::string why);
  void next_trial_plan();  // the trial's next allowed plan, or finish_trial()
  void finish_trial();
  // The fastest agreed median of the plans measured and not ruled out; 0: none.
  double fastest_measured_ms() const;
  // In a trial, after the plan's `trial` steps: true while it should run on (its layout's
  // proposal is being timed). A collective at the step the trial would have ended.
  bool time_proposal();
  // True when the model rules `plan` out (see above); marks it so until the next trial.
  bool rule_out(size_t plan);
  // measured_ms_ with the ruled-out plans' entries 0: what choose_plan() picks from.
  std::vector<double> candidates() const;
  // Makes `plan` active from the next step and records why.
  void decide(size_t plan, const std::string& why);
  // auto: appends the noise of the choice of `plan` (choice_noise()) to a decision.
  void report_noise(size_t plan, std::string& reason, std::string& json) const;

  comm::Collectives& collectives_;
  AdaptiveOptions options_;
  AllreduceOptions base_;
  std::vector<std::unique_ptr<AllreduceStrategy>> plans_;
  size_t active_ = 0;
  uint64_t step_ = 0;  // steps synchronized
  std::optional<Clock::time_point> last_end_;

  RegimeDetector detector_;          // fed this rank's gradient norm, before the exchange
  std::vector<double> grad_sq_;      // per tensor: its squared norm this step
  std::vector<uint8_t> grad_seen_;   // per tensor: reported by gradient_ready this step
  bool critical_ = true;             // agreed
  std::optional<double> window_lr_;  // the learning rate changes are measured against
  std::optional<double> last_lr_;    // the latest rate set (not saved: every step sets it)
  bool lr_changed_ = false;          // seen locally, not yet agreed

  // auto's fit (fit_plan.h)
  enum class FitState : uint8_t { kPending = 0, kBuilt = 1, kUniform = 2 };
  static constexpr size_t kNoPlan = static_cast<size_t>(-1);
  // After a trial's last plan: builds fit from the trial's measurements (collective) and,
  // when it mixes codecs, appends it to the trial; true then.
  bool build_fit();
  void start_fit_plan(const std::string& policy);  // no collective
  // base_ for the plan of `policy`. Each plan measures its own layout over the steps it
  // is active (AllreduceOptions::layout_after, layout_steps).
  AllreduceOptions plan_options(const std::string& policy) const;
  size_t fit_ = kNoPlan;  // fit's index in the plans
  FitState fit_state_ = FitState::kPending;
  std::string fit_policy_;   // built: "other=SPEC,@NAME=SPEC,..."
  std::string fit_summary_;  // what it chose, for decisions
  std::vector<compress::TensorInfo> tensors_;
  FloatSpans params_;  // the model's, for starting fit (sizes are all it reads)
  std::vector<Clock::time_point> ready_at_;         // per tensor: gradient final, this step
  std::vector<std::vector<double>> ready_samples_;  // per tensor: ms before backward's end

  // auto
  std::vector<double> predicted_ms_;      // per plan: the model's exchange ms/step; 0: unknown
  std::string left_out_;                  // plans that cannot run at this world, and why
  std::vector<double> measured_ms_;       // agreed median ms/step per plan; 0: not measured
  std::vector<double> noise_ms_;          // its agreed standard error (ms); 0: unknown
  std::vector<uint64_t> trial_steps_of_;  // per plan: steps its last measurement ran
  std::vector<uint8_t> ruled_out_;        // per plan: ruled out by the model in the last trial
  std::vector<size_t> trial_queue_;       // plans of the trial in progress (empty: none)
  size_t trial_pos_ = 0;
  size_t trial_steps_ = 0;                // steps the current trial plan has run
  std::vector<double> samples_;           // its measured step times, ms (first layout)
  std::vector<double> proposal_samples_;  // and those on its proposed layout
  std::string trial_why_;
  uint64_t next_reprobe_ = 0;

  std::vector<CodecDecision> decisions_;
  std::span<float> status_;    // carry_status(): the caller's words, every plan carries them
  std::string local_failure_;  // the active plan's, of the last synchronize()
  size_t held_plan_ = 0;       // the plan that holds codec states (hold_codec_state)
};

}  // namespace gradwire::strategy
