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
  // need fewer bytes but may need more steps, so auto charges them a penalty and keeps
  // them out of its dense start (and of critical regimes, with regimes=on). none, fp16,
  // bf16 and int8 (block-wise, with error feedback) converge like fp32 in our
  // measurements.
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
// to be chosen where the two are priced alike (the same factor: none, fp16 and int8, or any
// two plans at penalty 0), so plans are listed from the most to the least faithful (none
// before fp16: on a fast link their steps cost the same and fp32 is exact). Where one
// compresses and the other does not, the penalty already prices the quality the tie would
// protect, and the smaller score wins: a tie on top charged PowerSGD twice, and within it
// `auto` kept int8 where the cost model scored PowerSGD 1.9% less (cnn-wide at 1 Gbit,
// where int8 then trained 1.28x fixed PowerSGD's time,
// docs/results/e2e-cnn-wide-4hosts-1gbit-warmup-rule-seeds). Returns plans.size() when no
// plan is allowed.
inline constexpr double kPlanTie = 0.02;
// f_p: 1 + penalty for a plan that compresses, else 1.
double score_factor(const CodecPlan& plan, double penalty);
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

// One verdict of an interleaved trial (plan_trial.h), after a round, from the agreed
// figures of the plans still running (`running`; `contenders`: those that left unresolved
// in earlier rounds): step_ms and standard_error_ms per plan (0: not
// measured), `samples` measured steps each. Before `min_samples` only a plain loser leaves:
// from kEarlySamples on, one slower than L beyond twice the noise below; from the first
// sample, a clear one, whose score exceeds L's by more than kClearLoss of it and whose
// predicted exchange exceeds L's (predicted_ms, both known): one sample has no standard
// error, so the model must corroborate it, and a plan that loses by a quarter of a step is
// not worth the lead-ins and samples that would measure by how much (on gpt at 100 Mbit
// none and fp16 ran 7 trial steps each at 2.4x and 1.7x PowerSGD's step, about 2 s of the
// trial, docs/results/e2e-gpt-4hosts-100mbit-rule-seeds; at half a step, kClearLoss's
// first value, fp16 and int8 still ran up to 11 steps each at 1.2x to 1.7x PowerSGD's score on
// cnn-wide at 1 Gbit, most of the trial's 1.0 to 1.4 s, docs/results/trial-cost). A single
// step spread by 2% to 30% of a step in the trials of the standing matrices, mostly 5% to
// 15% (a median's standard error times the root of its samples), so a plan no worse than
// L leaves on one sample rarely, and a plan about as fast as L costs nothing by leaving;
// where the model predicts r's exchange below L's (on a fast link, where `none` leads) no
// plan is a clear loser. Then,
// with L = choose_plan() over the running plans and, for every other running plan r, the
// gap s_r - s_L of their scores and its noise 2 sqrt((f_L e_L)^2 + (f_r e_r)^2):
//   - |gap| > noise: resolved, r leaves the trial (a faster r the tie passed over too: the
//     tie chose L);
//   - |gap| <= tie x s_L: within the tie, where the choice costs at most the tie; r leaves;
//   - else, when samples x (noise / gap)^2 (the steps a plan that would resolve it) exceeds
//     `max_samples`: more trial steps cannot resolve it within the trial's budget; r
//     leaves the trial as a contender that the cost model decides;
//   - else r runs on.
// Except that r runs on, whatever the verdict, while its proposed bucket layout is still to
// be timed and could win on it: optimistic_ms, its figure less the saving the layout's
// model predicts (0: nothing pending), scores below the tie of L's (L's optimistic figure
// where its own proposal is pending: both may gain from their layouts).
// The trial ends when only L runs on, or at `max_samples`, where the plans still running
// become contenders. Among L and the contenders the choice is the cost model's, calibrated
// by what the trial measured: with x_q the model's exchange per step (predicted_ms) and w_q
// the time plan q's synchronize() waited after backward (wait_ms), k is the least-squares
// slope of w over x across the measured plans, within [0, 1]: the part of a predicted
// exchange that shows in a step (about 1 where the link is as slow as the model's and
// nothing hides it, below 1 where backward hides it or the link is faster than the
// model's; a slope, so that what every plan waits alike, such as a codec's compute on a
// link that costs nothing, does not count; at most 1, so that a noisy slope between close
// predictions only shrinks the model's differences, towards the tie and the faithful
// plan), and
//     step_p = step_L + d_p + k (x_p - x_L),
// scored and tied as choose_plan() does, where d_p = o_p - o_L with o_q = step_q - w_q, the
// part of q's step that is not waiting for the exchange (compute, and what of the codec's
// encode and decode does not hide), counted only where it exceeds twice the two steps'
// combined standard error (else 0): a codec's compute that the trial resolved counts (on
// gpt at 1 Gbit the model alone chose PowerSGD for its 13 ms shorter predicted exchange
// where its orthogonalisation made its step 14 ms longer than fp16's,
// docs/results/e2e-gpt-4hosts-1gbit-open-seeds), a gap within the noise does not (with it,
// two measured plans would be chosen by their measured steps, the noise the model is there
// to overrule). A contender with no prediction (0) leaves L the
// choice, and so do measured plans whose predictions are all equal. Where k is 0 every
// contender is predicted at L's step, and the tie gives the most faithful plan. Rounds that
// end a trial early save the steps that would resolve a gap smaller
// than the tie, or one the trial could not resolve anyway.
struct TrialVerdict {
  std::vector<size_t> leave;  // plans that leave the trial now (contenders among them)
  bool finished = false;
  size_t choice = 0;               // when finished: plans.size() when no plan is allowed
  bool by_model = false;           // the choice was the cost model's among unresolved contenders
  std::vector<size_t> unresolved;  // of `leave`: those leaving unresolved (contenders)
  std::vector<size_t> contenders;  // when finished by the model: all of them, L not among
};
inline constexpr size_t kEarlySamples = 3;
inline constexpr double kClearLoss = 0.25;
struct TrialLimits {
  size_t min_samples = 5;
  size_t max_samples = 20;
  double penalty = 0.096;
  double tie = kPlanTie;
};
TrialVerdict settle_trial(std::span<const CodecPlan> plans, std::span<const size_t> running,
                          std::span<const size_t> contenders, std::span<const double> step_ms,
                          std::span<const double> standard_error_ms,
                          std::span<const double> wait_ms, std::span<const double> optimistic_ms,
                          std::span<const double> predicted_ms, size_t samples, bool critical,
                          const TrialLimits& limits);

// Whether plan p can beat plan q by the tie at all, from q's measured step (step_ms) and the
// time its synchronize() waited for the exchange after backward (wait_ms, what a codec can
// save of q's step at most: it adds its own encoding and exposed exchange to the compute
// the two share). p is out when
//     f_p (step_ms - wait_ms) >= (1 - tie) step_ms,
// i.e. wait_ms / step_ms <= (f_p - 1 + tie) / f_p (2% for a plan that does not compress,
// about 10.6% for one charged the 0.096 penalty): on a fast link, where the exchange hides
// under backward, no codec is worth a trial step.
bool cannot_beat(const CodecPlan& p, double step_ms, double wait_ms, double penalty,
                 double tie = kPlanTie);

// Whether plan p, warmed up but with no sample yet, is a clear loser already: its trial's
// next steps (a lead-in and a sample) would cost more than p could ever win back. With
// s_L the score of the leader L (choose_plan()'s over the measured running plans), w_p p's
// warm-up step and x_p its predicted exchange (the cost model's, 0: unknown), p loses at
// its warm-up when
//     f_p w_p > (1 + kClearLoss) s_L   and   f_p x_p > s_L,
// the measurement and the model agreeing: a warm-up bounds p's step from above only
// loosely (allocations, first factors), so it alone is no verdict, but a step cannot be
// shorter than the exchange it waits for, so where the model puts p's exchange alone above
// L's whole step p wins only on a link faster than the model's, and then its warm-up
// would not lose by a quarter. The prune (adaptive_options.h) rules such a plan out before
// it warms up only beyond `prune` (2) x the fastest step, where the model alone decides;
// below it this rule lets one measured step decide. Measured: on cnn-wide at 100 Mbit int8
// (x 266 ms, 1.9x PowerSGD's 138-154 ms step) ran its warm-up, a lead-in and a sample at
// 410-442 ms each before it left as a clear loser at its first sample, 0.8 s of the
// trial (docs/results/e2e-cnn-wide-4hosts-100mbit-same-plan-seeds).
bool loses_at_warmup(const CodecPlan& p, double warmup_ms, double predicted_ms, double leader_score,
                     double penalty);

}  // namespace gradwire::strategy
