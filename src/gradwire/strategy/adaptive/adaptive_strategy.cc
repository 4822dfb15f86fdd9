#include "gradwire/strategy/adaptive/adaptive_strategy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gradwire/compress/codec.h"
#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/agreement.h"

namespace gradwire::strategy {
namespace {

std::vector<std::string> split_plans(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const auto slash = text.find('/', start);
    out.push_back(
        text.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

// "%.1f": times in ms, changes in percent.
std::string format_tenths(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

// "%g": parameters in the canonical spec, so that 0.50 and 0.5 read the same.
std::string format_parameter(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double squared_norm(std::span<const float> values) {
  double total = 0;
  for (float v : values) total += static_cast<double>(v) * v;
  return total;
}

}  // namespace

bool AdaptiveOptions::matches(const std::string& text) {
  const std::string name = text.substr(0, text.find(':'));
  return name == "auto" || name == "accordion";
}

AdaptiveOptions AdaptiveOptions::parse(const std::string& text) {
  const Spec spec = Spec::parse(text);
  SpecReader reader(spec, "codec");
  AdaptiveOptions o;
  o.rank = static_cast<int>(reader.get_int_in("rank", o.rank, 1, 1024));
  o.window = static_cast<size_t>(reader.get_int_in("window", 50, 1, 1'000'000));
  o.eta = reader.get_double_in("eta", o.eta, 1e-6, 1e6);
  Spec canonical{spec.name, {}};
  canonical.params["rank"] = std::to_string(o.rank);
  canonical.params["window"] = std::to_string(o.window);
  canonical.params["eta"] = format_parameter(o.eta);
  if (spec.name == "auto") {
    o.mode = Mode::kAuto;
    const std::string plans = reader.get_string("plans", "none/fp16/int8/powersgd");
    for (const auto& name : split_plans(plans)) {
      for (const auto& plan : o.plans) {
        if (plan.name == name) throw ConfigError("codec auto: plan '" + name + "' listed twice");
      }
      o.plans.push_back(make_codec_plan(name, o.rank));
    }
    o.penalty = reader.get_double_in("penalty", o.penalty, 0, 100);
    o.trial = static_cast<size_t>(reader.get_int_in("trial", 5, 1, 10'000));
    o.reprobe = static_cast<size_t>(reader.get_int_in("reprobe", 2000, 0, 1'000'000'000));
    o.prune = reader.get_double_in("prune", o.prune, 0, 1e6);
    canonical.params["plans"] = plans;
    canonical.params["penalty"] = format_parameter(o.penalty);
    canonical.params["trial"] = std::to_string(o.trial);
    canonical.params["reprobe"] = std::to_string(o.reprobe);
    canonical.params["prune"] = format_parameter(o.prune);
  } else if (spec.name == "accordion") {
    o.mode = Mode::kAccordion;
    const std::string critical = reader.get_string("critical", "fp16");
    const std::string normal = reader.get_string("normal", "powersgd");
    o.plans = {make_codec_plan(critical, o.rank), make_codec_plan(normal, o.rank)};
    canonical.params["critical"] = critical;
    canonical.params["normal"] = normal;
  } else {
    throw ConfigError("'" + spec.name + "' is not an adaptive codec (auto, accordion)");
  }
  reader.finish();
  o.canonical = canonical.to_string();
  return o;
}

AdaptiveStrategy::AdaptiveStrategy(comm::Collectives& collectives, AdaptiveOptions options,
                                   AllreduceOptions base)
    : collectives_(collectives),
      options_(std::move(options)),
      base_(std::move(base)),
      detector_(options_.window, options_.eta) {
  if (options_.plans.empty()) throw ConfigError("an adaptive codec needs at least one plan");
}

AdaptiveStrategy::~AdaptiveStrategy() = default;

void AdaptiveStrategy::start(std::span<const compress::TensorInfo> tensors,
                             const FloatSpans& params) {
  if (!plans_.empty()) throw Error("AdaptiveStrategy::start called twice");
  // int8 sums the ranks' levels in int8: beyond 127 ranks it has none left.
  const int world = collectives_.size();
  if (compress::shared_scale_levels(world) == 0) {
    std::erase_if(options_.plans, [&](const CodecPlan& plan) {
      if (plan.name != "int8") return false;
      left_out_ =
          "int8 left out: it sums the ranks' values in int8, 127 ranks at most, this job has " +
          std::to_string(world);
      return true;
    });
    if (options_.plans.empty()) throw ConfigError("codec " + options_.canonical + ": " + left_out_);
  }
  // One configuration check and one broadcast for all plans: every plan's policy per tensor
  // must match, and every plan starts from rank 0's parameters.
  std::vector<std::string> lines{"codec " + options_.canonical};
  for (const auto& plan : options_.plans) {
    const auto plan_lines =
        configuration_lines(name(), compress::CodecPolicy::parse(plan.policy), tensors);
    for (const auto& line : plan_lines) lines.push_back("plan " + plan.name + ": " + line);
  }
  check_same_configuration(collectives_, lines);
  broadcast_from_rank0(collectives_, params);
  for (const auto& plan : options_.plans) {
    AllreduceOptions o = base_;
    o.codec = plan.policy;
    o.agree_at_start = false;
    plans_.push_back(std::make_unique<AllreduceStrategy>(collectives_, o));
    plans_.back()->start(tensors, params);
  }
  grad_sq_.assign(tensors.size(), 0);
  grad_seen_.assign(tensors.size(), 0);
  measured_ms_.assign(options_.plans.size(), 0);
  ruled_out_.assign(options_.plans.size(), 0);
  predicted_ms_.assign(options_.plans.size(), 0);
  for (size_t p = 0; p < plans_.size(); ++p) {
    predicted_ms_[p] = 1e3 * plans_[p]->predicted_exchange_seconds(base_.link).value_or(0.0);
  }
  if (options_.mode == AdaptiveOptions::Mode::kAuto) {
    std::vector<size_t> all(options_.plans.size());
    for (size_t p = 0; p < all.size(); ++p) all[p] = p;
    begin_trial(all, left_out_.empty() ? "start of training" : "start of training; " + left_out_);
  } else {
    decide(0, "start of training");
  }
}

void AdaptiveStrategy::gradient_ready(size_t index, std::span<float> grad) {
  if (plans_.empty() || index >= grad_sq_.size()) return;
  // Before the plan may exchange it in place (each index is reported once per step).
  grad_sq_[index] = squared_norm(grad);
  grad_seen_[index] = 1;
  plans_[active_]->gradient_ready(index, grad);
}

void AdaptiveStrategy::set_learning_rate(double lr) {
  // A change of at least half the rate since the last window end (a step schedule's
  // decay), not the small per-step moves of a smooth schedule, which would keep every
  // window critical.
  if (!window_lr_) window_lr_ = lr;
  if (std::abs(lr - *window_lr_) >= 0.5 * *window_lr_) lr_changed_ = true;
}

TrafficStats AdaptiveStrategy::traffic() const {
  TrafficStats total;
  for (const auto& plan : plans_) {
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

void AdaptiveStrategy::synchronize(const FloatSpans& grads) {
  if (plans_.empty()) throw Error("AdaptiveStrategy::synchronize called before start");
  if (grads.size() == grad_sq_.size()) {
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grad_seen_[k]) grad_sq_[k] = squared_norm(grads[k]);
      grad_seen_[k] = 0;
    }
  }  // else the plan's synchronize() throws, naming the mismatch
  double local_sq = 0;
  for (double sq : grad_sq_) local_sq += sq;
  plans_[active_]->synchronize(grads);
  const auto now = Clock::now();
  const double step_ms =
      last_end_ ? std::chrono::duration<double, std::milli>(now - *last_end_).count() : 0.0;
  last_end_ = now;
  ++step_;
  bool lr_restart = false;
  const bool window_ended = update_regime(std::sqrt(local_sq), lr_restart);
  if (options_.mode == AdaptiveOptions::Mode::kAuto) {
    step_auto(step_ms, window_ended, lr_restart);
  } else {
    step_accordion(window_ended);
  }
}

bool AdaptiveStrategy::update_regime(double local_norm, bool& lr_restart) {
  if (!detector_.observe(local_norm)) return false;
  float flags[2] = {detector_.critical() ? 1.0f : 0.0f, lr_changed_ ? 1.0f : 0.0f};
  collectives_.allreduce_max(flags, 2);
  window_lr_.reset();  // the next window's reference is the next rate seen
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

void AdaptiveStrategy::step_auto(double step_ms, bool window_ended, bool lr_restart) {
  if (!trial_queue_.empty()) {
    // Measuring: the plan's first step of the trial warms it up (allocations, PowerSGD's
    // first factors) and is not counted.
    if (trial_steps_++ > 0 && step_ms > 0) samples_.push_back(step_ms);
    if (lr_restart) {
      std::vector<size_t> all(options_.plans.size());
      for (size_t p = 0; p < all.size(); ++p) all[p] = p;
      begin_trial(all, "learning-rate change");
    } else if (trial_steps_ > options_.trial || !allowed(trial_queue_[trial_pos_])) {
      next_trial_plan();
    }
    return;
  }
  std::vector<size_t> all(options_.plans.size());
  for (size_t p = 0; p < all.size(); ++p) all[p] = p;
  if (lr_restart) {
    begin_trial(all, "learning-rate change");
  } else if (options_.reprobe > 0 && step_ >= next_reprobe_) {
    begin_trial(all, "scheduled measurement");
  } else if (window_ended) {
    std::vector<size_t> unmeasured;
    for (size_t p = 0; p < all.size(); ++p) {
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

void AdaptiveStrategy::begin_trial(std::vector<size_t> queue, std::string why) {
  // From the least predicted exchange to the most (unknown last), so that a plan the model
  // rules out is compared with the fastest plans measured.
  const auto key = [&](size_t p) { return predicted_ms_[p] > 0 ? predicted_ms_[p] : HUGE_VAL; };
  std::stable_sort(queue.begin(), queue.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  for (size_t p : queue) ruled_out_[p] = 0;
  trial_queue_ = std::move(queue);
  trial_why_ = std::move(why);
  trial_pos_ = static_cast<size_t>(-1);
  next_trial_plan();
}

std::vector<double> AdaptiveStrategy::candidates() const {
  std::vector<double> ms = measured_ms_;
  for (size_t p = 0; p < ms.size(); ++p) {
    if (ruled_out_[p]) ms[p] = 0;
  }
  return ms;
}

bool AdaptiveStrategy::rule_out(size_t plan) {
  if (!(options_.prune > 0) || !(predicted_ms_[plan] > 0)) return false;
  double fastest = 0;
  for (size_t p = 0; p < measured_ms_.size(); ++p) {
    if (measured_ms_[p] > 0 && !ruled_out_[p] && (fastest == 0 || measured_ms_[p] < fastest)) {
      fastest = measured_ms_[p];
    }
  }
  if (!(fastest > 0) || !(predicted_ms_[plan] > options_.prune * fastest)) return false;
  ruled_out_[plan] = 1;
  return true;
}

void AdaptiveStrategy::next_trial_plan() {
  if (trial_pos_ < trial_queue_.size() && trial_steps_ > options_.trial) {
    // Every rank ran the plan for the same steps; the slowest rank's median is the step
    // time of the job, agreed now so that rule_out() decides alike on every rank.
    float agreed = static_cast<float>(median(samples_));
    collectives_.allreduce_max(&agreed, 1);
    if (agreed > 0) measured_ms_[trial_queue_[trial_pos_]] = agreed;
  }
  do {
    ++trial_pos_;
  } while (trial_pos_ < trial_queue_.size() &&
           (!allowed(trial_queue_[trial_pos_]) || rule_out(trial_queue_[trial_pos_])));
  trial_steps_ = 0;
  samples_.clear();
  if (trial_pos_ >= trial_queue_.size()) {
    finish_trial();
    return;
  }
  active_ = trial_queue_[trial_pos_];
  if (Timeline::global().enabled()) {
    const auto now = Timeline::Clock::now();
    Timeline::global().record("codec trial", "auto", now, now,
                              "{\"plan\":\"" + options_.plans[active_].name + "\"}");
  }
}

void AdaptiveStrategy::finish_trial() {
  trial_queue_.clear();
  next_reprobe_ = step_ + options_.reprobe;
  size_t best = choose_plan(options_.plans, candidates(), critical_, options_.penalty);
  if (best >= options_.plans.size()) best = active_;  // nothing measured is allowed: stay
  decide(best, trial_why_);
}

// State: tag, plan count, the step, the agreed regime and the learning rate it is measured
// against, the detector, auto's measurements and the trial in progress, then one section
// per plan with its AllreduceStrategy's state. The time of the last step's end is not
// state: the first step after a resume is not timed, as the first step of a job is not.
namespace {

constexpr uint32_t kAdaptiveStateTag = 0x32504441;  // "ADP2"

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
  put_vector(writer, ruled_out_);
  std::vector<uint64_t> queue(trial_queue_.begin(), trial_queue_.end());
  put_vector(writer, queue);
  writer.put<uint64_t>(trial_pos_);
  writer.put<uint64_t>(trial_steps_);
  put_vector(writer, samples_);
  writer.put_string(trial_why_);
  writer.put<uint64_t>(next_reprobe_);
  Bytes plan_state;
  for (const auto& plan : plans_) {
    plan_state.clear();
    plan->save_state(plan_state);
    put_section(out, plan_state);
  }
}

void AdaptiveStrategy::load_state(ByteReader& in) {
  if (plans_.empty()) throw Error("AdaptiveStrategy::load_state called before start");
  if (in.get<uint32_t>("adaptive state tag") != kAdaptiveStateTag) {
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
  auto ruled_out = get_vector<uint8_t>(in, "ruled out", plans);
  auto queue = get_vector<uint64_t>(in, "trial queue", plans);
  const auto trial_pos = in.get<uint64_t>("trial position");
  const auto trial_steps = in.get<uint64_t>("trial steps");
  auto samples = get_vector<double>(in, "trial samples", 1u << 20);
  std::string why = in.get_string("trial reason");
  const auto next_reprobe = in.get<uint64_t>("next measurement");
  if (measured.size() != plans || ruled_out.size() != plans || trial_pos > queue.size()) {
    throw PayloadError("the checkpoint's adaptive measurements do not fit " + options_.canonical);
  }
  for (const uint64_t p : queue) {
    if (p >= plans) throw PayloadError("the checkpoint's trial names a plan out of range");
  }
  for (auto& plan : plans_) {
    ByteReader section = get_section(in, "plan state");
    plan->load_state(section);
    section.expect_end("plan state");
  }
  step_ = step;
  critical_ = critical;
  window_lr_ = has_lr ? std::optional<double>(lr) : std::nullopt;
  lr_changed_ = lr_changed;
  measured_ms_ = std::move(measured);
  ruled_out_ = std::move(ruled_out);
  trial_queue_.assign(queue.begin(), queue.end());
  trial_pos_ = static_cast<size_t>(trial_pos);
  trial_steps_ = static_cast<size_t>(trial_steps);
  samples_ = std::move(samples);
  trial_why_ = std::move(why);
  next_reprobe_ = next_reprobe;
  last_end_.reset();
  decisions_.clear();  // start()'s, replaced by this one
  decide(static_cast<size_t>(active), "resumed from a checkpoint");
}

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
    std::string ruled, ruled_json;
    for (size_t p = 0; p < options_.plans.size(); ++p) {
      if (!ruled_out_[p]) continue;
      ruled += (ruled.empty() ? "" : " ") + options_.plans[p].name;
      ruled_json += (ruled_json.empty() ? "\"" : ",\"") + options_.plans[p].name + "\"";
    }
    json += ",\"ruled_out\":[" + ruled_json + "]";
    if (!ruled.empty()) reason += "; ruled out by the model: " + ruled;
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

}  // namespace gradwire::strategy
