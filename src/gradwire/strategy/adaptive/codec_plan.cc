#include "gradwire/strategy/adaptive/codec_plan.h"

#include <algorithm>
#include <cmath>

#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"

namespace gradwire::strategy {

double score_factor(const CodecPlan& plan, double penalty) {
  return plan.compresses ? 1 + penalty : 1.0;
}

namespace {

// o_r - o_L, where o_q = step_ms[q] - wait_ms[q] is the part of plan q's step that is not
// waiting for the exchange after backward (compute, and the codec's own encode and decode
// where they do not hide), when the gap exceeds twice the steps' combined standard error;
// else 0: a gap within the noise is the noise, which the cost model is there to overrule.
double resolved_own_time_gap(size_t leader, size_t r, std::span<const double> step_ms,
                             std::span<const double> standard_error_ms,
                             std::span<const double> wait_ms) {
  if (!(wait_ms[leader] >= 0) || !(wait_ms[r] >= 0)) return 0;
  const double e_l = standard_error_ms[leader], e_r = standard_error_ms[r];
  if (!(e_l > 0) || !(e_r > 0)) return 0;
  const double gap = (step_ms[r] - wait_ms[r]) - (step_ms[leader] - wait_ms[leader]);
  return std::abs(gap) > 2 * std::sqrt(e_l * e_l + e_r * e_r) ? gap : 0.0;
}

}  // namespace

std::vector<std::string> codec_plan_names() {
  return {"none", "fp16", "bf16", "int8", "powersgd", "fit"};
}

CodecPlan make_codec_plan(const std::string& name, int powersgd_rank) {
  // int8 (per-block scale, error feedback) converged like fp16 in the e2e measurement
  // (docs/RESULTS.md: cnn 88.47% against fp16's 88.50% and none's 88.27%): not charged.
  if (name == "none" || name == "fp16" || name == "bf16" || name == "int8") {
    return {name, name, false};
  }
  // PowerSGD as DDP's hook runs it: matrices whose factors are at least 2 times smaller
  // (min_compression_rate) go low rank, everything else dense in fp32, in one bucket, so
  // that a model's small matrices and its biases cost one collective and no P and Q.
  if (name == "powersgd") {
    return {name, "powersgd:min_rate=2,rank=" + std::to_string(powersgd_rank), true};
  }
  if (name == "fit") return {name, "", false, true};
  throw ConfigError("unknown codec plan '" + name + "'; the plans are " + join(codec_plan_names()));
}

size_t choose_plan(std::span<const CodecPlan> plans, std::span<const double> step_ms, bool critical,
                   double penalty, double tie) {
  size_t best = plans.size();
  double best_score = 0;
  for (size_t p = 0; p < plans.size() && p < step_ms.size(); ++p) {
    if (!(step_ms[p] > 0) || (critical && plans[p].compresses)) continue;
    const double score = step_ms[p] * score_factor(plans[p], penalty);
    // The tie only between plans priced alike: where the factors differ, the penalty
    // prices the quality and the smaller score wins.
    const bool alike = best == plans.size() ||
                       score_factor(plans[p], penalty) == score_factor(plans[best], penalty);
    if (best == plans.size() || score < best_score * (alike ? 1 - tie : 1.0)) {
      best = p;
      best_score = score;
    }
  }
  return best;
}

ChoiceNoise choice_noise(std::span<const CodecPlan> plans, std::span<const double> step_ms,
                         std::span<const double> standard_error_ms, size_t chosen, bool critical,
                         double penalty, size_t trial) {
  ChoiceNoise out;
  out.runner_up = plans.size();
  const size_t n = std::min({plans.size(), step_ms.size(), standard_error_ms.size()});
  if (chosen >= n || !(step_ms[chosen] > 0)) return out;
  const auto factor = [&](size_t p) { return score_factor(plans[p], penalty); };
  double runner_score = 0;
  for (size_t p = 0; p < n; ++p) {
    if (p == chosen || !(step_ms[p] > 0) || (critical && plans[p].compresses)) continue;
    const double score = factor(p) * step_ms[p];
    if (out.runner_up == plans.size() || score < runner_score) {
      out.runner_up = p;
      runner_score = score;
    }
  }
  if (out.runner_up == plans.size()) return out;
  const size_t r = out.runner_up;
  out.gap_ms = runner_score - factor(chosen) * step_ms[chosen];
  const double ec = factor(chosen) * standard_error_ms[chosen];
  const double er = factor(r) * standard_error_ms[r];
  out.known = standard_error_ms[chosen] > 0 && standard_error_ms[r] > 0;
  out.noise_ms = 2 * std::sqrt(ec * ec + er * er);
  out.resolved = out.known && std::abs(out.gap_ms) > out.noise_ms;
  if (out.resolved) return out;
  if (!out.known || out.gap_ms == 0) {
    out.steps_to_resolve = ChoiceNoise::kNever;
  } else {
    const double ratio = out.noise_ms / out.gap_ms;
    out.steps_to_resolve = static_cast<size_t>(
        std::ceil(static_cast<double>(std::max<size_t>(trial, 1)) * ratio * ratio));
  }
  return out;
}

TrialVerdict settle_trial(std::span<const CodecPlan> plans, std::span<const size_t> running,
                          std::span<const size_t> contenders, std::span<const double> step_ms,
                          std::span<const double> standard_error_ms,
                          std::span<const double> wait_ms, std::span<const double> optimistic_ms,
                          std::span<const double> predicted_ms, size_t samples, bool critical,
                          const TrialLimits& limits) {
  TrialVerdict out;
  const size_t n = plans.size();
  if (step_ms.size() < n || standard_error_ms.size() < n || wait_ms.size() < n ||
      optimistic_ms.size() < n || predicted_ms.size() < n) {
    throw Error("settle_trial: a figure per plan expected");
  }
  const auto factor = [&](size_t p) { return score_factor(plans[p], limits.penalty); };
  std::vector<double> running_ms(n, 0.0);
  for (size_t p : running) running_ms[p] = step_ms[p];
  size_t leader = choose_plan(plans, running_ms, critical, limits.penalty, limits.tie);
  if (leader >= n && running.size() == 1 && !(critical && plans[running[0]].compresses)) {
    leader = running[0];  // the one plan left needs no measurement
  }
  out.choice = leader;
  if (leader >= n) {  // nothing measured yet
    out.finished = running.empty();
    return out;
  }
  std::vector<size_t> undecided(contenders.begin(), contenders.end());
  const bool full = samples >= limits.min_samples;
  const bool early = samples >= std::min<size_t>(kEarlySamples, limits.min_samples);
  if (full || samples >= 1) {
    const double s_l = factor(leader) * step_ms[leader];
    const double e_l = factor(leader) * standard_error_ms[leader];
    // The leader as its own proposed layout might show it (optimistic_ms), for the plans
    // that stay for theirs.
    const double s_l_best =
        factor(leader) * (optimistic_ms[leader] > 0 ? optimistic_ms[leader] : step_ms[leader]);
    for (size_t r : running) {
      if (r == leader) continue;
      if (!(step_ms[r] > 0) || (critical && plans[r].compresses)) {
        if (full) out.leave.push_back(r);  // not a candidate now
        continue;
      }
      // A plan whose proposed layout is still to be timed and could win on it stays.
      if (optimistic_ms[r] > 0 && factor(r) * optimistic_ms[r] < (1 - limits.tie) * s_l_best) {
        continue;
      }
      const double gap = factor(r) * step_ms[r] - s_l;
      const double e_r = factor(r) * standard_error_ms[r];
      const double noise = 2 * std::sqrt(e_l * e_l + e_r * e_r);
      const bool known = standard_error_ms[leader] > 0 && standard_error_ms[r] > 0;
      if (!full) {
        // Before `min_samples`: only a plain loser, slower beyond twice the noise from
        // kEarlySamples on, or a clear one from the first sample.
        const bool clear = gap > kClearLoss * s_l && predicted_ms[leader] > 0 &&
                           predicted_ms[r] > predicted_ms[leader];
        if ((early && known && gap > 2 * noise) || clear) out.leave.push_back(r);
        continue;
      }
      if ((known && std::abs(gap) > noise) || std::abs(gap) <= limits.tie * s_l) {
        out.leave.push_back(r);
        continue;
      }
      const double ratio = known ? noise / gap : HUGE_VAL;
      if (static_cast<double>(samples) * ratio * ratio > static_cast<double>(limits.max_samples)) {
        out.leave.push_back(r);
        out.unresolved.push_back(r);
        undecided.push_back(r);
      }
    }
  }
  size_t staying = 0;
  for (size_t r : running) {
    if (std::find(out.leave.begin(), out.leave.end(), r) == out.leave.end()) ++staying;
  }
  out.finished = staying <= 1 || samples >= limits.max_samples;
  if (!out.finished) return out;
  if (samples >= limits.max_samples) {
    for (size_t r : running) {
      if (r != leader && std::find(out.leave.begin(), out.leave.end(), r) == out.leave.end() &&
          step_ms[r] > 0 && !(critical && plans[r].compresses)) {
        undecided.push_back(r);
      }
    }
  }
  if (undecided.empty()) return out;
  // The cost model among the leader and the contenders, calibrated by the measured plans'
  // waits: k, the least-squares slope of wait_ms over predicted_ms.
  const double x_l = predicted_ms[leader];
  if (!(x_l > 0)) return out;
  double sx = 0, sw = 0, m = 0;
  for (size_t q = 0; q < n; ++q) {
    if (!(step_ms[q] > 0) || !(predicted_ms[q] > 0) || !(wait_ms[q] >= 0)) continue;
    sx += predicted_ms[q];
    sw += wait_ms[q];
    ++m;
  }
  double sxx = 0, sxw = 0;
  for (size_t q = 0; q < n; ++q) {
    if (!(step_ms[q] > 0) || !(predicted_ms[q] > 0) || !(wait_ms[q] >= 0)) continue;
    sxx += (predicted_ms[q] - sx / m) * (predicted_ms[q] - sx / m);
    sxw += (predicted_ms[q] - sx / m) * (wait_ms[q] - sw / m);
  }
  if (m < 2 || !(sxx > 0)) return out;
  const double k = std::clamp(sxw / sxx, 0.0, 1.0);
  std::vector<double> predicted_step(n, 0.0);
  predicted_step[leader] = step_ms[leader];
  for (size_t r : undecided) {
    if (!(predicted_ms[r] > 0)) return out;
    predicted_step[r] = step_ms[leader] +
                        resolved_own_time_gap(leader, r, step_ms, standard_error_ms, wait_ms) +
                        k * (predicted_ms[r] - x_l);
  }
  out.contenders = undecided;
  out.by_model = true;
  const size_t model_choice =
      choose_plan(plans, predicted_step, critical, limits.penalty, limits.tie);
  if (model_choice < n) out.choice = model_choice;
  return out;
}

bool cannot_beat(const CodecPlan& p, double step_ms, double wait_ms, double penalty, double tie) {
  if (!(step_ms > 0) || !(wait_ms >= 0)) return false;
  const double f = score_factor(p, penalty);
  return f * (step_ms - wait_ms) >= (1 - tie) * step_ms;
}

bool loses_at_warmup(const CodecPlan& p, double warmup_ms, double predicted_ms, double leader_score,
                     double penalty) {
  if (!(warmup_ms > 0) || !(predicted_ms > 0) || !(leader_score > 0)) return false;
  const double f = score_factor(p, penalty);
  return f * warmup_ms > (1 + kClearLoss) * leader_score && f * predicted_ms > leader_score;
}

}  // namespace gradwire::strategy
