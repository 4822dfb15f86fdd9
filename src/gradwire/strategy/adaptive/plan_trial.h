// One measurement of auto's plans, their steps interleaved (ALGORITHMS.md 9).
//
// The plans of a trial take turns in a fixed order: a plan's first turn is one step, its
// warm-up, every later turn two (with lead-ins, below) or one. A round is one turn of every
// plan still running that may run now (auto's `allowed`: a plan that compresses waits out
// the dense start), except round 0, the opening: the first plan that may run, alone, for its
// warm-up, a lead-in and its first sample: A A A | A A B C | A A B B C C ... auto orders its
// plans from the least predicted exchange, so on a slow link the opener is the likeliest
// winner, and the model rules the others out against a measured step before they warm up (a
// warm-up, with its allocations and first factors, is a loose bound: on cnn-wide at 100
// Mbit PowerSGD's sample of about 124 ms rules out int8, fp16 and none, whose warm-ups cost
// 0.4-1.2 s each). Interleaving makes the plans share the
// job's drift (the first steps' allocations and caches, a neighbour's load, the data):
// each plan's figure is measured over the same stretch of training as the others'.
//
// With lead-ins, only a turn's second step is a sample. A step may leave work behind it
// that slows the next step (its last bytes still draining from a shaped link's queue, its
// exchange thread's tail: a hypothesis, which one later run with timelines did not show,
// docs/results/e2e-cnn-4hosts-100mbit-auto-trial-timeline): in a run of one plan every step pays
// its own plan's leftovers, but in a trial the first step of a turn pays the previous plan's.
// Measured with one step a turn on cnn at 100 Mbit
// (docs/results/e2e-cnn-4hosts-100mbit-auto-seeds): PowerSGD, which followed int8, timed 82-85 ms a
// step and int8, which followed PowerSGD, 68-87 ms, where whole runs of each took 68-73 and 76-82
// ms; the trial chose int8 in two seeds of three. The first step of a two-step turn (the lead-in)
// follows another plan's and is not a sample (nor, on the plan's AllreduceStrategy, one of its
// layout's measured steps: it runs on the layout of the sample after it); the second follows the
// plan's own, as every step of a run of that plan does. Lead-ins are auto's choice, made round by
// round (set_lead_ins()): a lead-in doubles what a losing plan's sample costs, and where the
// exchanges are short beside a step the leftovers are too (AdaptiveStrategy::
// trial_needs_lead_ins()). A plan's first step, its warm-up (allocations, PowerSGD's first
// factors), is no sample either, but bounds its step from above: in round 1, where the plans
// after the opener warm up, the model rules the slowest out on that one step each. A plan
// that warms up after round 1 (held back by a longer dense start) ends its round there, so
// that its warm-up can rule the others out before they run another turn. Each sample gives the
// step's wall time (between two synchronize() returns), on the plan's first bucket layout or on the
// layout it proposes (AllreduceStrategy's own comparison runs on the plan's own steps), and the
// time its synchronize() waited for the exchange after backward. (A plan that `allowed` stops
// between its lead-in and its sample, a regime change with regimes=on, takes its sample at its next
// turn.)
//
// PlanTrial keeps the turns and the samples; it has no collectives. After each round auto
// agrees the ranks' figures (local_figures(): an allreduce-max, the slowest rank's) and
// settles the trial on them (settle_trial(), codec_plan.h): plans leave it as their
// verdicts resolve, and it ends when one is left or its budget is spent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradwire/core/bytes.h"

namespace gradwire::strategy {

// A plan's agreed figures after a round (every rank's slowest).
struct TrialFigure {
  double step_ms = 0;   // the median step on the faster layout measured enough
  double noise_ms = 0;  // its median's standard error
  double wait_ms = 0;   // the median time synchronize() waited after backward
  size_t samples = 0;   // measured steps (both layouts)
  bool by_proposal = false;
  // The plan's warm-up step in this trial (0: not run yet): not a sample, but an upper
  // bound of its step that rules plans out before it has samples (a first step is the
  // slowest: allocations, first factors).
  double warmup_ms = 0;
};

class PlanTrial {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  // Figures per plan in local_figures() and agree().
  static constexpr size_t kFloatsPerPlan = 6;

  PlanTrial() = default;
  // `order`: the plans in turn order; `plan_count`: all of auto's plans (indices below it).
  PlanTrial(std::vector<size_t> order, size_t plan_count, std::string why);

  bool active() const { return !running_.empty(); }
  const std::vector<size_t>& running() const { return running_; }
  const std::string& why() const { return why_; }
  size_t rounds() const { return rounds_; }
  // Contenders: plans that left unresolved, for the cost model to decide at the end.
  const std::vector<size_t>& contenders() const { return contenders_; }

  // The plan of the next step: the first running plan from this round's turn on that
  // `allowed` lets run; kNone when the round is over (every running plan had its turn or
  // may not run now).
  template <typename Allowed>
  size_t next(Allowed allowed) {
    while (turn_ < running_.size() && !allowed(running_[turn_])) ++turn_;
    return turn_ < running_.size() ? running_[turn_] : kNone;
  }
  // Whether a turn after a plan's warm-up is a lead-in and a sample (true, the default) or
  // the sample alone, from the next turn on: set between rounds, the same on every rank.
  void set_lead_ins(bool on) { lead_ins_ = on; }
  bool lead_ins() const { return lead_ins_; }

  // The step of the plan next() returned ran: its wall time (0: not timed), the time its
  // synchronize() waited, and whether it ran the plan's proposed layout. A lead-in keeps
  // the turn (the plan's next step is its sample); a sample moves it on.
  void record(double step_ms, double wait_ms, bool on_proposal);
  // Starts the next round (after the round's verdict).
  void next_round();

  // Turns `plan` completed in this trial: its samples, and the sample steps that were not
  // timed (the first after a resume), so that a resumed job settles its trial at the step
  // the uninterrupted one did.
  size_t samples(size_t plan) const;
  // Steps `plan` ran in this trial, lead-ins and warm-up included.
  size_t steps(size_t plan) const;
  // `plan`'s next step in this trial is a lead-in (not its warm-up, not a sample).
  bool lead_in_next(size_t plan) const;
  // The fewest samples of any running plan.
  size_t fewest_samples() const;
  // This rank's figures of the running plans, kFloatsPerPlan each, in running() order:
  // medians on the first and the proposed layout, their standard errors, the median wait,
  // the warm-up step.
  std::vector<float> local_figures() const;
  // The plans' figures from the agreed (allreduce-max) local_figures(), indexed by plan
  // (zeros for plans not running). A proposal counts once it has `min_proposal` samples
  // and its median is the smaller.
  std::vector<TrialFigure> agree(std::span<const float> agreed, size_t min_proposal) const;

  // Ends `plan`'s part in the trial; as a contender the cost model decides.
  void leave(size_t plan, bool contender);
  // Adds a plan to the running ones (auto's fit, built after the uniform plans' trial).
  void join(size_t plan);

  void save_state(ByteWriter& out) const;
  // Throws PayloadError for a state that does not fit `plan_count` plans. `with_lead_ins`:
  // the state holds the lead-in fields (AdaptiveStrategy's ADP7); one without (ADP6) was
  // written by a trial that always led in, and its turns are counted from its steps.
  void load_state(ByteReader& in, size_t plan_count, bool with_lead_ins);

 private:
  struct Samples {
    uint64_t runs = 0;             // steps run in this trial, warm-up and lead-ins included
    uint64_t turns = 0;            // turns completed after the warm-up (samples, timed or not)
    bool led_in = false;           // the lead-in of the turn in progress ran
    double warmup = 0;             // the warm-up step's ms
    std::vector<double> first;     // step ms on the first layout
    std::vector<double> proposal;  // and on the proposed one
    std::vector<double> wait;      // ms synchronize() waited
  };
  std::vector<size_t> running_;
  std::vector<size_t> contenders_;
  size_t turn_ = 0;
  size_t rounds_ = 0;
  bool lead_ins_ = true;
  std::vector<Samples> per_plan_;
  std::string why_;
};

}  // namespace gradwire::strategy
