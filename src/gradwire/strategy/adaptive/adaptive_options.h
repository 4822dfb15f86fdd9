// The options of the adaptive codecs `auto` and `accordion`, parsed from their spec (the
// keys and what each decides: adaptive_strategy.h, ALGORITHMS.md 9).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gradwire/strategy/adaptive/codec_plan.h"

namespace gradwire::strategy {

struct AdaptiveOptions {
  enum class Mode { kAuto, kAccordion };
  Mode mode = Mode::kAuto;
  // auto: the candidates, most faithful first; accordion: {critical plan, normal plan}.
  std::vector<CodecPlan> plans;
  // PowerSGD's rank in the powersgd plan: 8 for auto (on cnn-wide at 100 Mbit rank 8 costs
  // the step of rank 2 and converges per step like int8, rank 2 does not), 2 for accordion
  // (the rank of Accordion's own experiments). docs/RESULTS.md, issue 10.
  int rank = 8;
  static constexpr int kAccordionRank = 2;
  // auto: score factor of plans that compress, the steps to a target they cost beyond
  // fp32's. Measured (docs/results/auto-penalty, issue 62: 3 tuning seeds, 3 targets each,
  // PowerSGD as auto runs it, dense for its first 2 steps): 1.122x fp32's steps on cnn and
  // 1.070x on cnn-wide under SGD, 0.978x on gpt under AdamW (rank 16). auto knows the
  // optimizer, not the model: under SGD and for an optimizer it is not told, the midpoint
  // of the two CNNs' (0.096) misjudges a plan's time to the target by at most 2.4% on
  // either; under Adam's family kPerCoordinatePenalty (registry.h).
  double penalty = 0.096;
  // auto: measured steps a plan runs in a trial before a verdict on it (after one warm-up
  // step), and at most (its budget: trial_max)
  size_t trial = 5;
  size_t trial_max = 20;
  // auto: the first `dense` steps of training run no plan that compresses (DDP's PowerSGD
  // hook's start_powerSGD_iter). Under SGD and for an optimizer it is not told, 0: PowerSGD
  // from the first step reached every target on cnn and cnn-wide (docs/results/auto-penalty,
  // the powersgd-from0 rows, as near fp32's steps as after 2 dense steps), and the fixed
  // PowerSGD that starts so was the fastest configuration on cnn-wide at 100 Mbit, where each
  // dense step costs a second of fp32 exchange. Under Adam's family kPerCoordinateDense
  // (registry.h): there PowerSGD from the first step stalled gpt in one seed of two.
  size_t dense = 0;
  // auto: whether Accordion's detector gates plans that compress after the start (a
  // critical regime after a learning-rate decay or a change of the gradient norm by eta).
  // Off by default: training's start is no longer critical for auto (issue 62).
  bool regimes = false;
  size_t window = 50;     // steps per regime window
  double eta = 0.5;       // relative change of the gradient norm that makes a regime critical
  size_t reprobe = 2000;  // auto: steps between measurements (0: only when a regime asks)
  double prune = 2;       // auto: rule out plans predicted slower than this x the best step
  std::string canonical;  // every key spelled out, e.g. "auto:eta=0.5,penalty=0.096,..."

  // True for specs named auto or accordion.
  static bool matches(const std::string& text);
  // Throws ConfigError for unknown keys or plans, and out-of-range values.
  static AdaptiveOptions parse(const std::string& text);
};

}  // namespace gradwire::strategy
