// AdaptiveStrategy's decisions: the plan it makes active and the record of why (the
// reason line and the metrics' JSON: measurements, predictions, trial steps, plans ruled
// out, the choice's noise), for the log, the timeline and take_decisions().
#include <cmath>

#include "gradwire/core/number_text.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/adaptive/adaptive_strategy.h"

namespace gradwire::strategy {

void AdaptiveStrategy::decide(size_t plan, const std::string& why) {
  active_ = plan;
  CodecDecision d;
  d.step = step_;
  d.plan = options_.plans[plan].name;
  const auto change = detector_.last_change();
  const std::string regime = critical_ ? "critical regime" : "normal regime";
  std::string reason = why == regime ? why : why + "; " + regime;
  std::string json = "{\"step\":" + std::to_string(step_) + ",\"plan\":\"" + d.plan +
                     "\",\"why\":\"" + why + "\",\"critical\":" + (critical_ ? "true" : "false");
  if (change) {
    const bool finite = std::isfinite(*change);
    reason += " (gradient norm changed " +
              (finite ? format_tenths(100 * *change) + "%" : "from 0") +
              " between the last two windows, eta " + format_tenths(100 * options_.eta) + "%)";
    json += ",\"norm_change\":" + (finite ? format_parameter(*change) : std::string("null"));
  }
  if (options_.mode == AdaptiveOptions::Mode::kAuto) {
    // Per plan, "; LABEL: none 12.3 fp16 -" in the reason and "KEY":{"none":12.3,...} in json.
    const auto per_plan = [&](const std::vector<double>& ms, const char* label, const char* key) {
      reason += std::string("; ") + label + ":";
      json += std::string(",\"") + key + "\":{";
      for (size_t p = 0; p < options_.plans.size(); ++p) {
        const std::string value = ms[p] > 0 ? format_tenths(ms[p]) : "null";
        reason += " " + options_.plans[p].name + " " + (ms[p] > 0 ? value : "-");
        json += std::string(p ? "," : "") + "\"" + options_.plans[p].name + "\":" + value;
      }
      json += "}";
    };
    json += ",\"penalty\":" + format_parameter(options_.penalty);
    per_plan(measured_ms_, "ms/step measured", "step_ms");
    per_plan(predicted_ms_, "exchange ms/step predicted", "predicted_exchange_ms");
    // What each plan's steps waited for their exchange after backward (the trial's mean,
    // "-" for a plan that ran no step): the cost model's calibration, to replay a choice.
    per_plan(wait_ms_, "ms/step waited after backward", "wait_ms");
    // Steps each measurement took (warm-up included; more where a layout's proposal was
    // timed too): what the trials cost, in the metrics only.
    json += ",\"trial_steps\":{";
    for (size_t p = 0; p < options_.plans.size(); ++p) {
      json += std::string(p ? "," : "") + "\"" + options_.plans[p].name +
              "\":" + std::to_string(trial_steps_of_[p]);
    }
    json += "}";
    // Per reason (kByModel, kByWait, kAtWarmUp): the plans' names, as text and as JSON.
    std::string text[4], list[4];
    for (size_t p = 0; p < options_.plans.size(); ++p) {
      const uint8_t why = ruled_out_[p];
      if (!why || why > kAtWarmUp) continue;
      text[why] += (text[why].empty() ? "" : " ") + options_.plans[p].name;
      list[why] += (list[why].empty() ? "\"" : ",\"") + options_.plans[p].name + "\"";
    }
    const std::string& ruled = text[kByModel];
    const std::string& waited = text[kByWait];
    json += ",\"ruled_out\":[" + list[kByModel] + "],\"cannot_beat\":[" + list[kByWait] +
            "],\"lost_at_warmup\":[" + list[kAtWarmUp] + "]";
    if (!ruled.empty()) reason += "; ruled out by the model: " + ruled;
    if (!text[kAtWarmUp].empty()) {
      reason +=
          "; lost at its warm-up (by a quarter, its predicted exchange above the "
          "leader's step): " +
          text[kAtWarmUp];
    }
    if (!waited.empty()) {
      reason +=
          "; cannot beat the most faithful plan by the tie (its wait after backward is "
          "too short): " +
          waited;
    }
    if (!verdict_.empty()) {
      reason += "; " + verdict_;
      json += ",\"by_model\":true";
    }
    if (fit_ != kNoPlan && fit_state_ != FitState::kPending) {
      reason += "; fit: " + fit_summary_;
      json += ",\"fit\":\"" + fit_summary_ + "\"";
    }
    report_noise(plan, reason, json);
    verdict_.clear();
  }
  json += "}";
  d.reason = std::move(reason);
  d.inputs_json = std::move(json);
  if (Timeline::global().enabled()) {
    const auto now = Timeline::Clock::now();
    Timeline::global().record("codec decision", "auto", now, now, d.inputs_json);
  }
  decisions_.push_back(std::move(d));
}

void AdaptiveStrategy::report_noise(size_t plan, std::string& reason, std::string& json) const {
  std::string per_plan, per_plan_json;
  for (size_t p = 0; p < options_.plans.size(); ++p) {
    if (!(measured_ms_[p] > 0)) continue;
    const std::string value = noise_ms_[p] > 0 ? format_tenths(noise_ms_[p]) : "null";
    per_plan += " " + options_.plans[p].name + " " + (noise_ms_[p] > 0 ? value : "-");
    per_plan_json +=
        (per_plan_json.empty() ? "\"" : ",\"") + options_.plans[p].name + "\":" + value;
  }
  json += ",\"noise_ms\":{" + per_plan_json + "}";
  const ChoiceNoise noise = choice_noise(options_.plans, candidates(), noise_ms_, plan, critical_,
                                         options_.penalty, options_.trial);
  if (noise.runner_up >= options_.plans.size()) return;
  const CodecPlan& runner = options_.plans[noise.runner_up];
  reason += "; standard error ms:" + per_plan + "; " + options_.plans[plan].name + " over " +
            runner.name + " by " + format_tenths(noise.gap_ms) + " ms a step (scores), noise " +
            format_tenths(noise.noise_ms) + " ms (2 standard errors): ";
  json += ",\"runner_up\":\"" + runner.name + "\",\"gap_ms\":" + format_parameter(noise.gap_ms) +
          ",\"gap_noise_ms\":" + format_parameter(noise.noise_ms) +
          ",\"resolved\":" + (noise.resolved ? "true" : "false");
  if (noise.resolved) {
    reason += "resolved";
    return;
  }
  const bool never = noise.steps_to_resolve == ChoiceNoise::kNever;
  reason += "not resolved";
  if (!never)
    reason +=
        ", about " + std::to_string(noise.steps_to_resolve) + " steps a plan would resolve it";
  json += ",\"steps_to_resolve\":" +
          (never ? std::string("null") : std::to_string(noise.steps_to_resolve));
  // Where the timing cannot tell them apart, what the cost model says of the two.
  const auto predicted = [&](size_t p) {
    return predicted_ms_[p] > 0 ? format_tenths(predicted_ms_[p]) + " ms" : std::string("unknown");
  };
  reason += "; the cost model's exchange: " + options_.plans[plan].name + " " + predicted(plan) +
            ", " + runner.name + " " + predicted(noise.runner_up);
}

}  // namespace gradwire::strategy
