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

// How far the trial's noise lets a choice be trusted. The chosen plan c is compared with
// the runner-up r, the other allowed and measured plan of the smallest score (scores as
// choose_plan's, s_p = f_p step_ms_p with f_p = 1 + penalty for a plan that compresses):
//     gap   = s_r - s_c            (negative where the tie kept an earlier, slower plan)
//     noise = 2 sqrt((f_c e_c)^2 + (f_r e_r)^2)
// where e_p is the standard error of plan p's measured figure (its median over `trial`
// steps). The ranking is resolved when |gap| > noise (about 95% for normal step times).
// Otherwise the standard errors shrink as 1/sqrt(n), so about
//     steps_to_resolve = ceil(trial (noise / gap)^2)
// steps per plan would resolve it; none (kNever) when the gap is 0 or a noise is unknown.
struct ChoiceNoise {
  static constexpr size_t kNever = static_cast<size_t>(-1);
  size_t runner_up = 0;  // plans.size(): no other plan allowed and measured
  double gap_ms = 0;
  double noise_ms = 0;
  bool known = false;  // both standard errors measured (> 0)
  bool resolved = false;
  size_t steps_to_resolve = 0;  // 0 when resolved
};
ChoiceNoise choice_noise(std::span<const CodecPlan> plans, std::span<const double> step_ms,
                         std::span<const double> standard_error_ms, size_t chosen, bool critical,
                         double penalty, size_t trial);

}  // namespace gradwire::strategy
