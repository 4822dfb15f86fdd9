#include "gradwire/strategy/adaptive/codec_plan.h"

#include <algorithm>
#include <cmath>

#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"

namespace gradwire::strategy {

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
    const double score = step_ms[p] * (plans[p].compresses ? 1 + penalty : 1.0);
    if (best == plans.size() || score < best_score * (1 - tie)) {
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
  const auto factor = [&](size_t p) { return plans[p].compresses ? 1 + penalty : 1.0; };
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

}  // namespace gradwire::strategy
