// One measurement of auto's plans, their steps interleaved (ALGORITHMS.md 9).
//
// The plans of a trial take turns, one step each, in a fixed order: A B C A B C ... A
// round is one turn of every plan still running that may run now (auto's `allowed`: a plan
// that compresses waits out the dense start). Interleaving makes the plans share the
// job's drift (the first steps' allocations and caches, a neighbour's load, the data):
// each plan's figure is measured over the same stretch of training as the others'. A
// plan's first step in a trial warms it up (allocations, PowerSGD's first factors) and is
// not counted; each later step gives a sample: the step's wall time (between two
// synchronize() returns), on the plan's first bucket layout or on the layout it proposes
// (AllreduceStrategy's own comparison runs on the plan's own steps), and the time its
// synchronize() waited for the exchange after backward.
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
  // The step of the plan next() returned ran: its wall time (0: not timed), the time its
  // synchronize() waited, and whether it ran the plan's proposed layout. Moves the turn on.
  void record(double step_ms, double wait_ms, bool on_proposal);
  // Starts the next round (after the round's verdict).
  void next_round();

  // Steps `plan` ran in this trial after its warm-up: its samples, and the steps that were
  // not timed (the first after a resume), so that a resumed job settles its trial at the
  // step the uninterrupted one did.
  size_t samples(size_t plan) const;
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
  // Throws PayloadError for a state that does not fit `plan_count` plans.
  void load_state(ByteReader& in, size_t plan_count);

 private:
  struct Samples {
    uint64_t runs = 0;             // steps run in this trial, the warm-up included
    double warmup = 0;             // the warm-up step's ms
    std::vector<double> first;     // step ms on the first layout
    std::vector<double> proposal;  // and on the proposed one
    std::vector<double> wait;      // ms synchronize() waited
  };
  std::vector<size_t> running_;
  std::vector<size_t> contenders_;
  size_t turn_ = 0;
  size_t rounds_ = 0;
  std::vector<Samples> per_plan_;
  std::string why_;
};

}  // namespace gradwire::strategy
