#include "gradwire/strategy/adaptive/adaptive_strategy.h"
#include "gradwire/core/statistics.h"

#include <algorithm>
#include <cmath>

#include "gradwire/compress/codec.h"
#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/adaptive/fit_plan.h"
#include "gradwire/strategy/agreement.h"

namespace gradwire::strategy {
namespace {

double squared_norm(std::span<const float> values) {
  double total = 0;
  for (float v : values) total += static_cast<double>(v) * v;
  return total;
}

}  // namespace

AdaptiveStrategy::AdaptiveStrategy(comm::Collectives& collectives, AdaptiveOptions options,
                                   AllreduceOptions base)
    : collectives_(collectives),
      options_(std::move(options)),
      base_(std::move(base)),
      detector_(options_.window, options_.eta,
                /*start_critical=*/options_.mode == AdaptiveOptions::Mode::kAccordion) {
  if (options_.plans.empty()) throw ConfigError("an adaptive codec needs at least one plan");
  critical_ = detector_.critical();
}

AdaptiveStrategy::~AdaptiveStrategy() = default;

void AdaptiveStrategy::start(std::span<const compress::TensorInfo> tensors,
                             const FloatSpans& params) {
  if (!plans_.empty()) throw Error("AdaptiveStrategy::start called twice");
  // int8's ring sums the ranks' levels in int8: beyond 127 ranks it has none left (its
  // reduce-scatter, which the base options' quantized path "auto" takes there, has).
  const int world = collectives_.size();
  if (compress::shared_scale_levels(world) == 0 && base_.quantized_path == "ring") {
    std::erase_if(options_.plans, [&](const CodecPlan& plan) {
      if (plan.name != "int8") return false;
      left_out_ =
          "int8 left out: its ring (quantized path ring) sums the ranks' values in int8, 127 "
          "ranks at most, this job has " +
          std::to_string(world);
      return true;
    });
    if (options_.plans.empty()) throw ConfigError("codec " + options_.canonical + ": " + left_out_);
  }
  // One configuration check and one broadcast for all plans: every plan's policy per tensor
  // must match, and every plan starts from rank 0's parameters.
  std::vector<std::string> lines{"codec " + options_.canonical};
  for (const auto& plan : options_.plans) {
    if (plan.per_bucket) continue;  // fit: built later from agreed measurements
    const auto plan_lines =
        configuration_lines(name(), compress::CodecPolicy::parse(plan.policy), tensors);
    for (const auto& line : plan_lines) lines.push_back("plan " + plan.name + ": " + line);
  }
  if (base_.agree_at_start) {
    check_same_configuration(collectives_, lines);
    broadcast_from_rank0(collectives_, params);
  }
  tensors_.assign(tensors.begin(), tensors.end());
  params_ = params;
  for (size_t p = 0; p < options_.plans.size(); ++p) {
    const CodecPlan& plan = options_.plans[p];
    if (plan.per_bucket) {
      fit_ = p;
      plans_.push_back(nullptr);
      continue;
    }
    plans_.push_back(std::make_unique<AllreduceStrategy>(collectives_, plan_options(plan.policy)));
    plans_.back()->start(tensors, params);
  }
  ready_at_.assign(tensors.size(), Clock::time_point{});
  ready_samples_.assign(tensors.size(), {});
  grad_sq_.assign(tensors.size(), 0);
  grad_seen_.assign(tensors.size(), 0);
  measured_ms_.assign(options_.plans.size(), 0);
  noise_ms_.assign(options_.plans.size(), 0);
  wait_ms_.assign(options_.plans.size(), 0);
  trial_steps_of_.assign(options_.plans.size(), 0);
  ruled_out_.assign(options_.plans.size(), 0);
  predicted_ms_.assign(options_.plans.size(), 0);
  for (size_t p = 0; p < plans_.size(); ++p) {
    if (!plans_[p]) continue;
    predicted_ms_[p] = 1e3 * plans_[p]->predicted_exchange_seconds(base_.link).value_or(0.0);
  }
  const bool some_exact = std::any_of(options_.plans.begin(), options_.plans.end(),
                                      [](const CodecPlan& p) { return !p.compresses; });
  dense_steps_ = some_exact ? options_.dense : 0;
  // The first step is not timed (its step_ms is 0: the opener's warm-up bounds nothing).
  // A caller may start the strategy anywhere before it: DistributedOptimizer before the
  // first forward, the DDP hook (ddp_comm_hook.h) in the first step's last bucket, right
  // before its synchronize(); timed from here, that step would be an exchange alone, far
  // shorter than a step, and the prune, which takes a warm-up for an upper bound of its
  // plan's step, would rule plans out against it (the hook's `auto` ruled out int8 on
  // cnn-wide at 100 Mbit against PowerSGD's first exchange, before int8 had run a step:
  // docs/results/e2e-cnn-wide-4hosts-100mbit-hook-warmup-rule-seeds). (A resume is timed
  // from load_state(), a sample the trial needs; the hook loads in its first step too, so
  // that step after a resume there is an exchange alone: not corrected.)
  last_end_.reset();
  if (options_.mode == AdaptiveOptions::Mode::kAuto && world == 1) {
    // Nothing goes over a wire: the most faithful plan that is built, measured never.
    size_t plan = 0;
    while (plan + 1 < plans_.size() && (!plans_[plan] || options_.plans[plan].compresses)) ++plan;
    next_reprobe_ = static_cast<uint64_t>(-1);
    decide(plan, "start of training; one rank: nothing to exchange, nothing to measure");
  } else if (options_.mode == AdaptiveOptions::Mode::kAuto) {
    std::vector<size_t> all(options_.plans.size());
    for (size_t p = 0; p < all.size(); ++p) all[p] = p;
    begin_trial(all, left_out_.empty() ? "start of training" : "start of training; " + left_out_);
  } else {
    decide(0, "start of training");
  }
}

void AdaptiveStrategy::gradient_ready(size_t index, std::span<float> grad) {
  if (plans_.empty() || index >= grad_sq_.size()) return;
  // Before the plan may exchange it in place (each index is reported once per step); the
  // detector's input, a pass over the gradient on autograd's thread: only when it is used.
  if (uses_regimes()) grad_sq_[index] = squared_norm(grad);
  grad_seen_[index] = 1;
  ready_at_[index] = Clock::now();
  plans_[active_]->gradient_ready(index, grad);
}

void AdaptiveStrategy::set_learning_rate(double lr) {
  // A fall to half the rate at the last window end or less (a step schedule's decay), not
  // the small per-step moves of a smooth schedule, which would keep every window critical,
  // nor a warm-up's rise (it doubles the rate in a window early on, while training's start
  // is critical anyway: a new trial would only measure the same plans again). The
  // reference is the last rate of the window before (a decay on a window's first step
  // counts), or the first rate seen.
  last_lr_ = lr;
  if (!window_lr_) window_lr_ = lr;
  if (lr <= 0.5 * *window_lr_) lr_changed_ = true;
}

TrafficStats AdaptiveStrategy::traffic() const {
  TrafficStats total;
  for (const auto& plan : plans_) {
    if (!plan) continue;
    const TrafficStats t = plan->traffic();
    total.steps += t.steps;
    total.bytes_contributed += t.bytes_contributed;
    total.bytes_on_wire += t.bytes_on_wire;
    total.bytes_dense += t.bytes_dense;
    total.bytes_dense_on_wire += t.bytes_dense_on_wire;
  }
  return total;
}

std::vector<CodecDecision> AdaptiveStrategy::take_decisions() {
  std::vector<CodecDecision> out;
  out.swap(decisions_);
  return out;
}

void AdaptiveStrategy::hold_codec_state(size_t index) {
  if (plans_.empty()) throw Error("AdaptiveStrategy::hold_codec_state called before start");
  held_plan_ = active_;
  plans_[active_]->hold_codec_state(index);
}

void AdaptiveStrategy::restore_codec_states(std::span<const uint8_t> unused_everywhere) {
  if (plans_.empty()) return;
  plans_[held_plan_]->restore_codec_states(unused_everywhere);
}

void AdaptiveStrategy::synchronize(const FloatSpans& grads) {
  if (plans_.empty()) throw Error("AdaptiveStrategy::synchronize called before start");
  // fit's input: during a trial (not a plan's warm-up step), when every gradient came
  // through a hook, how long before the last one each was final.
  if (fit_state_ == FitState::kPending && trial_.active() && turn_plan_ != PlanTrial::kNone &&
      !ready_at_.empty() &&
      std::all_of(grad_seen_.begin(), grad_seen_.end(), [](uint8_t v) { return v; })) {
    const auto last = *std::max_element(ready_at_.begin(), ready_at_.end());
    for (size_t k = 0; k < ready_at_.size(); ++k) {
      ready_samples_[k].push_back(
          std::chrono::duration<double, std::milli>(last - ready_at_[k]).count());
    }
  }
  if (grads.size() == grad_sq_.size()) {
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grad_seen_[k] && uses_regimes()) grad_sq_[k] = squared_norm(grads[k]);
      grad_seen_[k] = 0;
    }
  }  // else the plan's synchronize() throws, naming the mismatch
  double local_sq = 0;
  if (uses_regimes()) {
    for (double sq : grad_sq_) local_sq += sq;
  }
  const bool on_proposal = plans_[active_]->next_step_on_proposal();
  const auto exchange_start = Clock::now();
  plans_[active_]->synchronize(grads);
  local_failure_ = plans_[active_]->take_local_failure();
  if (!status_.empty() && !carries_[active_]) exchange_status();
  const auto now = Clock::now();
  const double wait_ms = std::chrono::duration<double, std::milli>(now - exchange_start).count();
  const double step_ms =
      last_end_ ? std::chrono::duration<double, std::milli>(now - *last_end_).count() : 0.0;
  last_end_ = now;
  ++step_;
  bool lr_restart = false;
  const bool window_ended = uses_regimes() && update_regime(std::sqrt(local_sq), lr_restart);
  if (options_.mode == AdaptiveOptions::Mode::kAuto) {
    step_auto(step_ms, wait_ms, on_proposal, window_ended, lr_restart);
  } else {
    step_accordion(window_ended);
  }
}

bool AdaptiveStrategy::update_regime(double local_norm, bool& lr_restart) {
  if (!detector_.observe(local_norm)) return false;
  float flags[2] = {detector_.critical() ? 1.0f : 0.0f, lr_changed_ ? 1.0f : 0.0f};
  collectives_.allreduce_max(flags, 2);
  window_lr_ = last_lr_;  // the next window's reference: this one's last rate, if any
  lr_changed_ = false;
  lr_restart = flags[1] > 0;
  if (lr_restart) detector_.restart();
  critical_ = flags[0] > 0 || lr_restart;
  return true;
}

void AdaptiveStrategy::step_accordion(bool window_ended) {
  if (!window_ended) return;
  const size_t wanted = critical_ ? 0 : 1;
  if (wanted != active_) decide(wanted, critical_ ? "critical regime" : "normal regime");
}

void AdaptiveStrategy::step_auto(double step_ms, double wait_ms, bool on_proposal,
                                 bool window_ended, bool lr_restart) {
  // Every plan, for a trial (built only when one starts: this runs every step).
  const auto all_plans = [&] {
    std::vector<size_t> all(options_.plans.size());
    for (size_t p = 0; p < all.size(); ++p) all[p] = p;
    return all;
  };
  if (trial_.active()) {
    if (turn_plan_ != PlanTrial::kNone) {
      trial_.record(step_ms, wait_ms, on_proposal);
      // A warm-up in round 1 (after the opening) bounds its plan's step: the model rules
      // out, before they warm up, the plans whose exchange alone exceeds `prune` x it.
      if (trial_.rounds() == 1 && trial_.steps(turn_plan_) == 1) rule_out_running(agree_figures());
    }
    if (lr_restart) {
      begin_trial(all_plans(), "learning-rate decay");
    } else {
      advance_trial();
    }
    return;
  }
  if (lr_restart) {
    begin_trial(all_plans(), "learning-rate decay");
  } else if (options_.reprobe > 0 && step_ >= next_reprobe_) {
    begin_trial(all_plans(), "scheduled measurement");
  } else if (window_ended) {
    // regimes=on: a regime that lets in plans not measured yet measures them.
    std::vector<size_t> unmeasured;
    for (size_t p = 0; p < options_.plans.size(); ++p) {
      if (allowed(p) && measured_ms_[p] == 0 && !ruled_out_[p]) unmeasured.push_back(p);
    }
    if (!unmeasured.empty()) {
      begin_trial(unmeasured, critical_ ? "critical regime" : "normal regime");
      return;
    }
    const size_t best = choose_plan(options_.plans, candidates(), critical_, options_.penalty);
    if (best < options_.plans.size() && best != active_) {
      decide(best, critical_ ? "critical regime" : "normal regime");
    }
  }
}

void AdaptiveStrategy::begin_trial(std::vector<size_t> plans, std::string why) {
  // From the least predicted exchange to the most (unknown last), so that a plan the model
  // rules out is compared with the fastest plans measured.
  const auto key = [&](size_t p) { return predicted_ms_[p] > 0 ? predicted_ms_[p] : HUGE_VAL; };
  std::stable_sort(plans.begin(), plans.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  std::erase_if(plans, [&](size_t p) { return plans_[p] == nullptr; });  // fit, not built
  for (size_t p : plans) {
    ruled_out_[p] = 0;
    trial_steps_of_[p] = 0;
  }
  trial_ = PlanTrial(std::move(plans), options_.plans.size(), std::move(why));
  advance_trial();
}

void AdaptiveStrategy::advance_trial() {
  for (int pass = 0; pass < 2 && trial_.active(); ++pass) {
    const size_t next = trial_.next([&](size_t p) { return allowed(p); });
    if (next != PlanTrial::kNone) {
      turn_plan_ = next;
      if (next != active_ && Timeline::global().enabled()) {
        const auto now = Timeline::Clock::now();
        Timeline::global().record("codec trial", "auto", now, now,
                                  "{\"plan\":\"" + options_.plans[next].name + "\"}");
      }
      active_ = next;
      if (trial_.lead_in_next(next)) plans_[next]->mark_next_step_lead_in();
      return;
    }
    if (pass == 1 || !settle_round()) break;
    trial_.next_round();
  }
  turn_plan_ = PlanTrial::kNone;
  if (!trial_.active()) return;  // decided
  // No running plan may run now (those left wait for the dense start to end): a step of
  // the first plan allowed, outside the trial.
  for (size_t p = 0; p < plans_.size(); ++p) {
    if (allowed(p)) {
      active_ = p;
      return;
    }
  }
}

std::vector<TrialFigure> AdaptiveStrategy::agree_figures() {
  // Every rank agrees at the same step: the figures agreed, the slowest rank's.
  std::vector<float> agreed = trial_.local_figures();
  if (!agreed.empty()) collectives_.allreduce_max(agreed.data(), agreed.size());
  auto figures = trial_.agree(agreed, std::min<size_t>(3, options_.trial));
  for (size_t p : trial_.running()) {
    trial_steps_of_[p] = trial_.steps(p);  // a warm-up alone counts too
    if (!(figures[p].step_ms > 0)) continue;
    measured_ms_[p] = figures[p].step_ms;
    noise_ms_[p] = figures[p].noise_ms;
    wait_ms_[p] = figures[p].wait_ms;
  }
  return figures;
}

bool AdaptiveStrategy::settle_round() {
  const auto figures = agree_figures();
  rule_out_running(figures);
  TrialVerdict verdict = settle_trial(
      options_.plans, trial_.running(), trial_.contenders(), candidates(), noise_ms_, wait_ms_,
      optimistic_figures(figures), predicted_ms_, trial_.fewest_samples(), critical_,
      {.min_samples = options_.trial,
       .max_samples = options_.trial_max,
       .penalty = options_.penalty,
       .tie = kPlanTie});
  for (size_t p : verdict.leave) {
    trial_.leave(p, std::find(verdict.unresolved.begin(), verdict.unresolved.end(), p) !=
                        verdict.unresolved.end());
  }
  if (!verdict.finished) {
    trial_.set_lead_ins(trial_needs_lead_ins(figures));
    return true;
  }
  // fit: built from this trial's measurements, interleaved with the choice in a trial of
  // its own.
  if (verdict.choice < options_.plans.size() && build_fit() && !rule_out(fit_)) {
    const std::string why = trial_.why();
    trial_ = PlanTrial({verdict.choice, fit_}, options_.plans.size(), why + "; fit built");
    return true;
  }
  finish_trial(verdict);
  return false;
}

void AdaptiveStrategy::rule_out_running(std::span<const TrialFigure> figures) {
  // The model's rules: a predicted exchange beyond `prune` x the fastest step (a warm-up
  // step bounds it from above before samples come), or no chance to beat the most
  // faithful plan measured (3 samples on) by the tie. The plan of the fastest figure is
  // never ruled out by it (a model far off the link could otherwise rule out every plan).
  const std::vector<size_t> running = trial_.running();
  double warmup_bound = 0, fastest_figure = 0;
  size_t fastest_plan = PlanTrial::kNone;
  for (size_t p : running) {
    const double w = figures[p].warmup_ms;
    if (w > 0 && (warmup_bound == 0 || w < warmup_bound)) warmup_bound = w;
    const double figure = figures[p].step_ms > 0 ? figures[p].step_ms : w;
    if (figure > 0 && (fastest_plan == PlanTrial::kNone || figure < fastest_figure)) {
      fastest_plan = p;
      fastest_figure = figure;
    }
  }
  size_t reference = PlanTrial::kNone;
  for (size_t p = 0; p < options_.plans.size() && reference == PlanTrial::kNone; ++p) {
    if (figures[p].samples >= std::min<size_t>(3, options_.trial)) reference = p;
  }
  // The leader by the samples so far, for the plans that only warmed up (loses_at_warmup()).
  std::vector<double> sampled_ms(options_.plans.size(), 0.0);
  for (size_t p : running) sampled_ms[p] = figures[p].step_ms;
  const size_t leader =
      choose_plan(options_.plans, sampled_ms, critical_, options_.penalty, kPlanTie);
  const double leader_score =
      leader < options_.plans.size()
          ? sampled_ms[leader] * score_factor(options_.plans[leader], options_.penalty)
          : 0;
  for (size_t p : running) {
    if (critical_ && options_.plans[p].compresses) {
      trial_.leave(p, false);  // regimes=on: not a candidate in this regime
    } else if (p != fastest_plan && rule_out(p, warmup_bound)) {
      trial_.leave(p, false);
    } else if (p != leader && !(figures[p].step_ms > 0) &&
               loses_at_warmup(options_.plans[p], figures[p].warmup_ms, predicted_ms_[p],
                               leader_score, options_.penalty)) {
      ruled_out_[p] = kAtWarmUp;
      trial_.leave(p, false);
    } else if (reference != PlanTrial::kNone && p != reference &&
               cannot_beat(options_.plans[p], figures[reference].step_ms,
                           figures[reference].wait_ms, options_.penalty)) {
      ruled_out_[p] = kByWait;
      trial_.leave(p, false);
    }
  }
}

bool AdaptiveStrategy::trial_needs_lead_ins(std::span<const TrialFigure> figures) const {
  // Measured (ALGORITHMS.md 9): with one step a turn the leftovers of int8's exchange, 23-28
  // ms predicted, 24-29% of the fastest step, made PowerSGD's samples 15-20% slow and the
  // trial chose int8 (cnn at 100 Mbit, cnn-wide at 1 Gbit); none's 11 ms at 10 Gbit (10%
  // of cnn-wide's step, 2% of gpt's) left verdicts that matched whole runs, and lead-ins
  // there doubled the trial (48-64 steps of 235 against 22-31) for no other choice.
  double longest_exchange = 0, fastest = 0;
  for (size_t p : trial_.running()) {
    if (!(predicted_ms_[p] > 0)) return true;  // unknown: lead in
    longest_exchange = std::max(longest_exchange, predicted_ms_[p]);
    const double figure = figures[p].step_ms > 0 ? figures[p].step_ms : figures[p].warmup_ms;
    if (figure > 0 && (fastest == 0 || figure < fastest)) fastest = figure;
  }
  return !(fastest > 0) || longest_exchange >= kLeadInShare * fastest;
}

std::vector<double> AdaptiveStrategy::optimistic_figures(
    std::span<const TrialFigure> figures) const {
  // A plan comparing its proposed layout, not yet timed on it: its figure less the saving
  // the layout's model predicts (agreed inputs), what it could show on the proposal.
  std::vector<double> optimistic(options_.plans.size(), 0.0);
  for (size_t p : trial_.running()) {
    if (plans_[p] && plans_[p]->layout_comparing() && !figures[p].by_proposal &&
        figures[p].step_ms > 0) {
      optimistic[p] =
          std::max(1e-3, figures[p].step_ms - 1e3 * plans_[p]->layout_predicted_saving_s());
    }
  }
  return optimistic;
}

std::vector<double> AdaptiveStrategy::candidates() const {
  std::vector<double> ms = measured_ms_;
  for (size_t p = 0; p < ms.size(); ++p) {
    if (ruled_out_[p]) ms[p] = 0;
  }
  return ms;
}

double AdaptiveStrategy::fastest_measured_ms() const {
  double fastest = 0;
  for (size_t p = 0; p < measured_ms_.size(); ++p) {
    if (measured_ms_[p] > 0 && !ruled_out_[p] && (fastest == 0 || measured_ms_[p] < fastest)) {
      fastest = measured_ms_[p];
    }
  }
  return fastest;
}

bool AdaptiveStrategy::rule_out(size_t plan, double fastest_bound_ms) {
  if (!(options_.prune > 0) || !(predicted_ms_[plan] > 0)) return false;
  double fastest = fastest_measured_ms();
  if (fastest_bound_ms > 0 && (fastest == 0 || fastest_bound_ms < fastest)) {
    fastest = fastest_bound_ms;
  }
  if (!(fastest > 0) || !(predicted_ms_[plan] > options_.prune * fastest)) return false;
  ruled_out_[plan] = kByModel;
  return true;
}

bool AdaptiveStrategy::build_fit() {
  if (fit_ == kNoPlan || fit_state_ != FitState::kPending) return false;
  // Every rank gets here at the same step. The times before backward's end agreed: the
  // shortest of any rank's (its median over the trial), the least that overlaps.
  std::vector<float> before_end(tensors_.size());
  for (size_t k = 0; k < tensors_.size(); ++k) {
    before_end[k] = -static_cast<float>(median(ready_samples_[k]));
  }
  if (!before_end.empty()) collectives_.allreduce_max(before_end.data(), before_end.size());
  ready_samples_.clear();
  ready_samples_.shrink_to_fit();
  std::vector<double> ready_s(tensors_.size());
  for (size_t k = 0; k < tensors_.size(); ++k) ready_s[k] = -1e-3 * before_end[k];

  std::vector<FitRung> rungs;  // the uniform plans, most faithful first
  for (const CodecPlan& plan : options_.plans) {
    if (plan.uniform_exact()) rungs.push_back({plan.name, plan.policy});
  }
  FitInput setting;
  setting.link = base_.link;
  setting.world = collectives_.size();
  setting.first_bucket_bytes = base_.first_bucket_bytes;
  setting.bucket_bytes = base_.bucket_bytes;
  // The fastest agreed step of the plans still in the running, as rule_out() takes it.
  const double fastest = fastest_measured_ms();
  FitProposal proposal = propose_fit(tensors_, ready_s, rungs, setting, kPlanTie * fastest);
  if (!proposal.why_not.empty()) {
    fit_state_ = FitState::kUniform;
    fit_summary_ = proposal.why_not + (proposal.summary.empty() ? "" : "; " + proposal.summary);
    return false;
  }
  fit_summary_ = std::move(proposal.summary);
  start_fit_plan(proposal.policy);
  return true;
}

bool AdaptiveStrategy::carry_status(std::span<float> status) {
  // Each plan that can carries them; for the others synchronize() exchanges them itself,
  // after the plan's exchange, as the caller would (fp16 on the reduce-scatter cannot: its
  // steps would otherwise cost every plan's steps a collective of the caller's).
  if (status.empty()) return false;
  carries_.assign(plans_.size(), 0);
  for (size_t p = 0; p < plans_.size(); ++p) {
    if (plans_[p]) carries_[p] = plans_[p]->carry_status(status) ? 1 : 0;
  }
  status_ = status;
  return true;
}

void AdaptiveStrategy::exchange_status() {
  for (float& word : status_) word = word != 0.0f ? 1.0f : 0.0f;
  if (!local_failure_.empty()) status_[0] = 1.0f;  // the failure word
  if (collectives_.size() > 1) collectives_.allreduce_max(status_.data(), status_.size());
}

std::string AdaptiveStrategy::bucket_layout_summary() const {
  return plans_[active_] ? plans_[active_]->bucket_layout_summary() : std::string();
}

AllreduceOptions AdaptiveStrategy::plan_options(const std::string& policy) const {
  AllreduceOptions o = base_;
  o.codec = policy;
  o.agree_at_start = false;
  return o;
}

void AdaptiveStrategy::start_fit_plan(const std::string& policy) {
  auto plan = std::make_unique<AllreduceStrategy>(collectives_, plan_options(policy));
  plan->start(tensors_, params_);
  if (!status_.empty()) carries_[fit_] = plan->carry_status(status_) ? 1 : 0;
  predicted_ms_[fit_] = 1e3 * plan->predicted_exchange_seconds(base_.link).value_or(0.0);
  plans_[fit_] = std::move(plan);
  options_.plans[fit_].policy = policy;
  fit_policy_ = policy;
  fit_state_ = FitState::kBuilt;
}

void AdaptiveStrategy::finish_trial(const TrialVerdict& verdict) {
  const std::string why = trial_.why();
  trial_ = PlanTrial();
  turn_plan_ = PlanTrial::kNone;
  next_reprobe_ = step_ + options_.reprobe;
  size_t best = verdict.choice;
  if (best >= options_.plans.size()) best = active_;  // nothing measured is allowed: stay
  verdict_.clear();
  if (verdict.by_model) {
    verdict_ = "unresolved between " + options_.plans[best].name;
    for (size_t p : verdict.contenders) {
      if (p != best) verdict_ += ", " + options_.plans[p].name;
    }
    // The trial's leader, when the model chose another.
    const size_t leader = choose_plan(options_.plans, candidates(), critical_, options_.penalty);
    if (leader < options_.plans.size() && leader != best) {
      verdict_ += ", " + options_.plans[leader].name;
    }
    verdict_ += ": the cost model's choice";
  }
  decide(best, why);
}

}  // namespace gradwire::strategy
