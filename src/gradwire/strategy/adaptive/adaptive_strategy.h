// Adaptive codecs for the allreduce strategy: the codec changes over training, the same on
// every rank at the same step (ALGORITHMS.md 9).
//
//   auto[:plans=none/fp16/int8/powersgd,rank=8,penalty=0.096,dense=0,trial=5,trial_max=20,
//         regimes=off,window=50,eta=0.5,reprobe=2000,prune=2]
//     Measures, then picks. A trial interleaves its plans' steps, two each in turn, the
//     second measured (plan_trial.h: the first pays what the previous plan's step left
//     behind); a step's time is the wall time between two synchronize() returns
//     (forward, backward, the exchange not hidden by backward, the optimizer step: what
//     the user waits for; the first step after start() is not timed, since a caller may
//     start the strategy within it, as the DDP hook does). Each plan's first step in a trial
//     warms it up. The first plan
//     opens the trial alone (its warm-up, a lead-in and a sample), and the model rules out
//     against that sample before any other plan warms up; each warm-up after it rules out
//     at once too (an agreement of the figures after the step). The trial's
//     steps are training steps: every plan in it trains the model. After every round the
//     ranks agree each plan's median (the slowest rank's, by an allreduce-max), its
//     standard error and the median time its synchronize() waited after backward, and
//     settle_trial() (codec_plan.h) lets plans go once `trial` steps of each are measured:
//     the resolved losers, those within the tie of the leader, those the trial's budget
//     (`trial_max` measured steps a plan, each after a lead-in) could not resolve. When unresolved
//     plans remain at the end the cost model's prediction chooses among them, not the noise. A
//     plan's own measured bucket layout (AllreduceStrategy) takes turns with its first layout on
//     the plan's own steps; the plan counts by the faster layout's median once the proposal has 3
//     measured steps (or `trial`, when fewer). The first `dense` steps of training run no plan that
//     compresses (0 under SGD, kPerCoordinateDense under Adam's family, where PowerSGD from the
//     first step stalled gpt: adaptive_options.h, docs/results/auto-penalty); plans that compress
//     join the trial's turns from then. Plans that compress are charged `penalty` for the steps
//     they may cost. With `regimes=on`, Accordion's RegimeDetector over the gradient norm keeps
//     them out of critical regimes after the start too, and a learning-rate decay (to half the rate
//     at the last window end or less: a step schedule's; a warm-up's rise is none) starts a
//     critical regime and a trial; off by default (issue 62: the critical windows cost more time
//     than the quality they protect). It measures again every `reprobe` steps (0: never). The cost
//     model (comm/cost_model.h, over the base options' link) predicts each plan's exchange per step
//     at this world when training starts. A trial turns through its plans from the least predicted
//     exchange to the most, and rules out, without measuring it further, a plan whose predicted
//     exchange alone exceeds `prune` times the fastest step measured (agreed by all ranks) so far
//     (a step cannot be shorter than its exchange; 0: never), and every plan that cannot beat the
//     most faithful plan measured by the tie even if it saved all that plan's wait after backward
//     (cannot_beat(), codec_plan.h: on a fast link, where the exchange hides under backward, no
//     codec is worth its trial steps), and a plan whose warm-up scores a quarter above the
//     leader's sample where the model puts its exchange alone above the leader's step
//     (loses_at_warmup(), codec_plan.h: its lead-in and sample would cost more than it could
//     win). A plan that cannot run at this world (int8 beyond 127 ranks
//     with the quantized path forced to its ring) is left out at start.
//     Plan `fit` (listed, not a default: it lost to the best uniform plan in every whole
//     run measured, docs/RESULTS.md) is a choice per bucket among the uniform plans
//     (fit_plan.h). During the
//     first trial every rank records, per tensor, how long before backward's end its
//     gradient was final (the gradient hooks); when that trial settles, the ranks agree on
//     the shortest of those times (an allreduce) and fit_rungs() picks each bucket's
//     codec. A fit that mixes codecs is started and interleaved with the trial's choice
//     in a trial of its own; one that picks the same codec for every bucket is that uniform
//     plan and is not measured. It is built once.
//     Each decision reports its noise: every plan's standard error, whether the chosen
//     plan's lead over the runner-up exceeds twice their combined error, and where the
//     cost model chose.
//   accordion[:critical=fp16,normal=powersgd,rank=2,window=50,eta=0.5]
//     Accordion itself: plan `critical` in critical regimes, `normal` elsewhere.
//
// Every plan is an AllreduceStrategy started on the same tensors (so the model's memory for
// wire buffers and error feedback is paid once per plan); exactly one is active per step,
// and switches happen between synchronize() and the next backward. A plan left keeps its
// state (PowerSGD's warm-started Q and its error feedback) for when it is used again.
// Agreement: each rank feeds its detector (accordion, auto with regimes=on) the norm of its
// own gradient before the exchange (so the codec in use does not change the signal), and at
// the end of every window the ranks agree by an allreduce-max of two floats: critical on
// one rank is critical on all, and so is a learning-rate change seen by any. Timings are
// agreed by an allreduce-max after every round of a trial. All other decisions follow from
// agreed values and the step count alone.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/strategy/adaptive/adaptive_options.h"
#include "gradwire/strategy/adaptive/codec_plan.h"
#include "gradwire/strategy/adaptive/plan_trial.h"
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
  // Always (for a non-empty status): each plan that can carries it (fit too, when it is
  // built), and synchronize() exchanges it after the others' steps.
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
  // Whether `plan` may run the next step: not a plan that compresses in a critical regime
  // or in the dense start (when a plan that does not compress is listed to run instead).
  bool allowed(size_t plan) const {
    const bool held_back = critical_ || (step_ < dense_steps_);
    return !(held_back && options_.plans[plan].compresses) && plans_[plan] != nullptr;
  }
  bool uses_regimes() const {
    return options_.mode == AdaptiveOptions::Mode::kAccordion || options_.regimes;
  }
  // Updates the regime from this step's local gradient norm; true when it was re-agreed
  // (a window ended). Sets `lr_restart` when a learning-rate change was agreed.
  bool update_regime(double local_norm, bool& lr_restart);
  // `wait_ms`: what the step's synchronize() took; `on_proposal`: the step ran the active
  // plan's proposed bucket layout.
  void step_auto(double step_ms, double wait_ms, bool on_proposal, bool window_ended,
                 bool lr_restart);
  void step_accordion(bool window_ended);
  // Starts measuring `plans` (in turns; plans not allowed at a turn wait for the next
  // round); `why` goes to the log.
  void begin_trial(std::vector<size_t> plans, std::string why);
  // Makes the trial's next turn active, settling each round that ends (collectives).
  void advance_trial();
  // The running plans' figures agreed by every rank (an allreduce-max: the slowest rank's),
  // recorded as each plan's measurement (collective).
  std::vector<TrialFigure> agree_figures();
  // After a round: agrees the figures, rules plans out, settles the trial; false when
  // it ended (a decision was made).
  bool settle_round();
  // settle_round()'s model rules over the running plans' agreed `figures` (indexed by
  // plan): a plan the cost model rules out (rule_out(), against the fastest figure or
  // warm-up step), or one that cannot beat the most faithful plan measured, leaves.
  void rule_out_running(std::span<const TrialFigure> figures);
  // Whether the trial's next turns lead in (PlanTrial): a lead-in protects a sample from
  // the previous plan's leftovers, which are a part of that plan's exchange; where no
  // running plan's predicted exchange reaches kLeadInShare of the fastest figure (a median,
  // else a warm-up), a turn is its sample alone. From agreed figures: every rank alike.
  bool trial_needs_lead_ins(std::span<const TrialFigure> figures) const;
  static constexpr double kLeadInShare = 0.15;
  // Per plan: the figure a running plan could show on its proposed bucket layout, not yet
  // timed (its figure less the layout's predicted saving); 0 for the others.
  std::vector<double> optimistic_figures(std::span<const TrialFigure> figures) const;
  void finish_trial(const TrialVerdict& verdict);
  // The fastest agreed median of the plans measured and not ruled out; 0: none.
  double fastest_measured_ms() const;
  // True when the model rules `plan` out (see above) against the fastest step measured,
  // or `fastest_bound_ms` when smaller and positive (a step known to be at least as long as
  // the fastest: a warm-up); marks it so until the next trial.
  bool rule_out(size_t plan, double fastest_bound_ms = 0);
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
  std::vector<double> wait_ms_;           // its agreed median wait after backward (ms; not saved)
  std::vector<uint64_t> trial_steps_of_;  // per plan: steps its last measurement ran
  // per plan: ruled out in the last trial, by the exchange the model predicts (kByModel),
  // because it cannot beat the most faithful plan's step by the tie (kByWait), or as a
  // clear loser at its warm-up (kAtWarmUp, loses_at_warmup())
  static constexpr uint8_t kByModel = 1, kByWait = 2, kAtWarmUp = 3;
  std::vector<uint8_t> ruled_out_;
  PlanTrial trial_;                      // the trial in progress (inactive: none)
  size_t turn_plan_ = PlanTrial::kNone;  // the trial's plan this step runs (kNone: none)
  std::string verdict_;                  // how the last trial ended, for its decision
  uint64_t next_reprobe_ = 0;
  uint64_t dense_steps_ = 0;  // options_.dense, 0 when every plan listed compresses

  std::vector<CodecDecision> decisions_;
  std::span<float> status_;       // carry_status(): the caller's words
  std::vector<uint8_t> carries_;  // per plan: it carries them (else exchange_status())
  void exchange_status();         // the caller's status words' OR over the ranks
  std::string local_failure_;     // the active plan's, of the last synchronize()
  size_t held_plan_ = 0;          // the plan that holds codec states (hold_codec_state)
};

}  // namespace gradwire::strategy
