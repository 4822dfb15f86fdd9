// The codec plans an adaptive strategy switches between, and how `auto` picks one.
//
// A plan is a whole-model layer policy (compress/policy.h) run by its own
// AllreduceStrategy: `none` (fp32), `fp16`, `bf16`, `int8`, `powersgd` (PowerSGD of rank r
// on the matrices its factors shrink at least 2 times, fp32 for everything else, as DDP's
// PowerSGD hook with its min_compression_rate), and `fit`, a choice per bucket among the
// uniform plans listed with it (fit_plan.h), which auto builds from its first trial.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace gradwire::strategy {

struct CodecPlan {
  std::string name;    // "fp16"
  std::string policy;  // its layer policy: "fp16", "powersgd:min_rate=2,rank=8"
  // True for plans that change what the optimizer sees beyond rounding (powersgd): they
  // need fewer bytes but may need more steps, so auto charges them a penalty and never
  // uses them in a critical regime. none, fp16, bf16 and int8 (block-wise, with error
  // feedback) converge like fp32 in our measurements.
  bool compresses = false;
  // fit: `policy` is empty until auto builds it (per tensor, "@NAME=SPEC" items).
  bool per_bucket = false;
  // none, fp16, bf16, int8: one codec everywhere that does not compress; fit's rungs.
  bool uniform_exact() const { return !compresses && !per_bucket; }
};

// "none", "fp16", "bf16", "int8", "powersgd", "fit"; throws ConfigError for anything else.
CodecPlan make_codec_plan(const std::string& name, int powersgd_rank);
std::vector<std::string> codec_plan_names();

// Auto's choice: the plan with the smallest score, where
//     score_p = step_ms_p x (1 + penalty)   for a plan that compresses,
//     score_p = step_ms_p                   otherwise,
// over the plans allowed now (measured, step_ms_p > 0, and not compressing when
// `critical`). A later plan must beat an earlier one's score by more than `tie` (relative)
// to be chosen, so plans are listed from the most to the least faithful (none before fp16:
// on a fast link their steps cost the same and fp32 is exact). Returns plans.size() when no
// plan is allowed.
inline constexpr double kPlanTie = 0.02;
size_t choose_plan(std::span<const CodecPlan> plans, std::span<const double> step_ms, bool critical,
                   double penalty, double tie = kPlanTie);

}  // namespace gradwire::strategy
