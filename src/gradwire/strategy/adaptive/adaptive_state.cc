// AdaptiveStrategy's checkpoint state (format ADP7; ADP6, ADP5 and ADP4 are read too): what a
// resumed job needs to go on measuring and deciding as the uninterrupted job would.
#include <memory>

#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/adaptive/adaptive_strategy.h"

namespace gradwire::strategy {

// State: tag, plan count, the step, the agreed regime and the learning rate it is measured
// against, the detector, auto's measurements, the trial in progress (PlanTrial's state and
// the plan whose turn it is), fit's state, policy and summary, one section per plan with
// its AllreduceStrategy's state (empty for a fit not built), and the standard error of each
// plan's measurement. ADP6 is ADP7 with a trial that always led in (PlanTrial's state
// without its lead-in fields). ADP5 (and ADP4, without the standard errors) held a trial of one
// plan after another: a trial in progress there is started again over its plans, interleaved. The
// time of the last step's end is not state: the first step after a resume is timed from the load,
// as the first step of a job is from start() (a little longer than a step).
namespace {

constexpr uint32_t kAdaptiveStateTag = 0x37504441;   // "ADP7"
constexpr uint32_t kAdaptiveStateTag6 = 0x36504441;  // "ADP6": a trial always led in
constexpr uint32_t kAdaptiveStateTag5 = 0x35504441;  // "ADP5": trials one plan at a time
constexpr uint32_t kAdaptiveStateTag4 = 0x34504441;  // "ADP4": before the plans' noise
constexpr uint32_t kAdaptiveStateTag3 = 0x33504441;  // "ADP3": before the proposal samples

template <typename T>
void put_vector(ByteWriter& out, const std::vector<T>& values) {
  out.put<uint64_t>(values.size());
  for (const T& value : values) out.put<T>(value);
}

template <typename T>
std::vector<T> get_vector(ByteReader& in, const char* field, size_t max_size) {
  const auto size = in.get<uint64_t>(field);
  if (size > max_size) {
    throw PayloadError(std::string(field) + ": " + std::to_string(size) + " entries, at most " +
                       std::to_string(max_size) + " expected");
  }
  std::vector<T> values(static_cast<size_t>(size));
  for (T& value : values) value = in.get<T>(field);
  return values;
}

}  // namespace

void AdaptiveStrategy::save_state(Bytes& out) const {
  if (plans_.empty()) throw Error("AdaptiveStrategy::save_state called before start");
  ByteWriter writer(out);
  writer.put<uint32_t>(kAdaptiveStateTag);
  writer.put<uint64_t>(plans_.size());
  writer.put<uint64_t>(active_);
  writer.put<uint64_t>(step_);
  writer.put<uint8_t>(critical_);
  writer.put<uint8_t>(window_lr_.has_value());
  writer.put<double>(window_lr_.value_or(0.0));
  writer.put<uint8_t>(lr_changed_);
  detector_.save_state(writer);
  put_vector(writer, measured_ms_);
  put_vector(writer, trial_steps_of_);
  put_vector(writer, ruled_out_);
  writer.put<uint8_t>(trial_.active());
  if (trial_.active()) trial_.save_state(writer);
  writer.put<uint64_t>(turn_plan_ == PlanTrial::kNone ? plans_.size() : turn_plan_);
  writer.put<uint64_t>(next_reprobe_);
  writer.put<uint8_t>(static_cast<uint8_t>(fit_state_));
  writer.put_string(fit_policy_);
  writer.put_string(fit_summary_);
  Bytes plan_state;
  for (const auto& plan : plans_) {
    plan_state.clear();
    if (plan) plan->save_state(plan_state);
    put_section(out, plan_state);
  }
  put_vector(writer, noise_ms_);
}

void AdaptiveStrategy::load_state(ByteReader& in) {
  if (plans_.empty()) throw Error("AdaptiveStrategy::load_state called before start");
  const auto tag = in.get<uint32_t>("adaptive state tag");
  if (tag == kAdaptiveStateTag3) {
    throw PayloadError("the checkpoint's " + options_.canonical +
                       " state is format ADP3, written by an older gradwire; this one reads "
                       "ADP4 to ADP7: resume it with the gradwire that saved it");
  }
  if (tag != kAdaptiveStateTag && tag != kAdaptiveStateTag6 && tag != kAdaptiveStateTag5 &&
      tag != kAdaptiveStateTag4) {
    throw PayloadError("the checkpoint holds no " + options_.canonical +
                       " state where one was expected (was it saved with another codec?)");
  }
  const size_t plans = plans_.size();
  if (in.get<uint64_t>("plan count") != plans) {
    throw PayloadError("the checkpoint's adaptive codec has another number of plans than " +
                       options_.canonical);
  }
  const auto active = in.get<uint64_t>("active plan");
  if (active >= plans) throw PayloadError("the checkpoint's active plan is out of range");
  const auto step = in.get<uint64_t>("step");
  const bool critical = in.get<uint8_t>("critical") != 0;
  const bool has_lr = in.get<uint8_t>("window learning rate") != 0;
  const double lr = in.get<double>("window learning rate");
  const bool lr_changed = in.get<uint8_t>("learning rate changed") != 0;
  detector_.load_state(in);
  auto measured = get_vector<double>(in, "measured ms", plans);
  auto trial_steps_of = get_vector<uint64_t>(in, "trial steps per plan", plans);
  auto ruled_out = get_vector<uint8_t>(in, "ruled out", plans);
  PlanTrial trial;
  size_t turn_plan = PlanTrial::kNone;
  if (tag == kAdaptiveStateTag || tag == kAdaptiveStateTag6) {
    if (in.get<uint8_t>("trial in progress") != 0) {
      trial.load_state(in, plans, tag == kAdaptiveStateTag);
    }
    const auto turn = in.get<uint64_t>("trial turn plan");
    if (turn > plans || (turn < plans && !trial.active())) {
      throw PayloadError("the checkpoint's trial turn does not fit " + options_.canonical);
    }
    if (turn < plans) turn_plan = static_cast<size_t>(turn);
  } else {
    // ADP4/ADP5: a queue of plans measured one after another; their samples are dropped and
    // the plans not yet measured are measured again, interleaved.
    auto queue = get_vector<uint64_t>(in, "trial queue", plans);
    const auto trial_pos = in.get<uint64_t>("trial position");
    in.get<uint64_t>("trial steps");
    get_vector<double>(in, "trial samples", 1u << 20);
    get_vector<double>(in, "trial samples on a proposal", 1u << 20);
    std::string why = in.get_string("trial reason");
    if (trial_pos > queue.size()) {
      throw PayloadError("the checkpoint's adaptive measurements do not fit " + options_.canonical);
    }
    std::vector<size_t> rest;
    for (size_t i = static_cast<size_t>(trial_pos); i < queue.size(); ++i) {
      if (queue[i] >= plans) throw PayloadError("the checkpoint's trial names a plan out of range");
      rest.push_back(static_cast<size_t>(queue[i]));
    }
    if (!rest.empty()) trial = PlanTrial(std::move(rest), plans, std::move(why));
  }
  const auto next_reprobe = in.get<uint64_t>("next measurement");
  const auto fit_state = in.get<uint8_t>("fit state");
  std::string fit_policy = in.get_string("fit policy");
  std::string fit_summary = in.get_string("fit summary");
  if (fit_state > static_cast<uint8_t>(FitState::kUniform) ||
      (fit_state != static_cast<uint8_t>(FitState::kPending) && fit_ == kNoPlan) ||
      (fit_state == static_cast<uint8_t>(FitState::kBuilt)) == fit_policy.empty()) {
    throw PayloadError("the checkpoint's plan fit does not fit " + options_.canonical);
  }
  if (active == fit_ && fit_state != static_cast<uint8_t>(FitState::kBuilt)) {
    throw PayloadError("the checkpoint's active plan is fit, which it never built");
  }
  if (fit_state == static_cast<uint8_t>(FitState::kBuilt)) {
    try {
      compress::CodecPolicy::parse(fit_policy).check_tensors(tensors_);
    } catch (const ConfigError& e) {
      throw PayloadError(std::string("the checkpoint's plan fit: ") + e.what());
    }
  }
  if (measured.size() != plans || trial_steps_of.size() != plans || ruled_out.size() != plans) {
    throw PayloadError("the checkpoint's adaptive measurements do not fit " + options_.canonical);
  }
  // The fit plan is started before the sections are read (its state is in them) but kept
  // only if every section loads.
  std::unique_ptr<AllreduceStrategy> fit_plan;
  if (fit_state == static_cast<uint8_t>(FitState::kBuilt)) {
    AllreduceOptions o = base_;
    o.codec = fit_policy;
    o.agree_at_start = false;
    fit_plan = std::make_unique<AllreduceStrategy>(collectives_, o);
    fit_plan->start(tensors_, params_);
  }
  for (size_t p = 0; p < plans_.size(); ++p) {
    ByteReader section = get_section(in, "plan state");
    AllreduceStrategy* plan = p == fit_ ? fit_plan.get() : plans_[p].get();
    if (plan) plan->load_state(section);
    section.expect_end("plan state");
  }
  // ADP4 ends here: its plans' noise is unknown (0) until they are measured again.
  auto noise = tag == kAdaptiveStateTag4 ? std::vector<double>(plans, 0.0)
                                         : get_vector<double>(in, "measured noise ms", plans);
  if (noise.size() != plans) {
    throw PayloadError("the checkpoint's adaptive measurements do not fit " + options_.canonical);
  }
  if (fit_ != kNoPlan) {  // the checkpoint's fit replaces whatever this process built
    predicted_ms_[fit_] =
        fit_plan ? 1e3 * fit_plan->predicted_exchange_seconds(base_.link).value_or(0.0) : 0.0;
    if (fit_plan && !status_.empty()) carries_[fit_] = fit_plan->carry_status(status_) ? 1 : 0;
    plans_[fit_] = std::move(fit_plan);
    options_.plans[fit_].policy = fit_policy;
    ready_samples_.assign(tensors_.size(), {});
  }
  fit_state_ = static_cast<FitState>(fit_state);
  fit_policy_ = std::move(fit_policy);
  fit_summary_ = std::move(fit_summary);
  step_ = step;
  critical_ = critical;
  window_lr_ = has_lr ? std::optional<double>(lr) : std::nullopt;
  lr_changed_ = lr_changed;
  measured_ms_ = std::move(measured);
  noise_ms_ = std::move(noise);
  trial_steps_of_ = std::move(trial_steps_of);
  ruled_out_ = std::move(ruled_out);
  trial_ = std::move(trial);
  for (size_t p = 0; p < plans_.size(); ++p) {
    if (!plans_[p]) trial_.leave(p, false);  // fit, not built: nothing to measure
  }
  turn_plan_ = turn_plan;
  next_reprobe_ = next_reprobe;
  last_end_ = Clock::now();  // the next step is timed from the resume, as from start()
  decisions_.clear();        // start()'s, replaced by this one
  decide(static_cast<size_t>(active), "resumed from a checkpoint");
}

}  // namespace gradwire::strategy
