#include "gradwire/strategy/adaptive/plan_trial.h"

#include <algorithm>

#include "gradwire/core/error.h"
#include "gradwire/core/statistics.h"

namespace gradwire::strategy {
namespace {

void put_doubles(ByteWriter& out, const std::vector<double>& values) {
  out.put<uint64_t>(values.size());
  for (double v : values) out.put<double>(v);
}

std::vector<double> get_doubles(ByteReader& in, const char* field) {
  const auto size = in.get<uint64_t>(field);
  if (size > (1u << 20)) throw PayloadError(std::string(field) + ": too many samples");
  std::vector<double> values(static_cast<size_t>(size));
  for (double& v : values) v = in.get<double>(field);
  return values;
}

}  // namespace

PlanTrial::PlanTrial(std::vector<size_t> order, size_t plan_count, std::string why)
    : running_(std::move(order)), per_plan_(plan_count), why_(std::move(why)) {
  for (size_t p : running_) {
    if (p >= plan_count) throw Error("PlanTrial: plan " + std::to_string(p) + " out of range");
  }
}

void PlanTrial::record(double step_ms, double wait_ms, bool on_proposal) {
  if (turn_ >= running_.size()) throw Error("PlanTrial::record: no plan's turn");
  Samples& s = per_plan_[running_[turn_]];
  const uint64_t before = s.runs++;
  if (before == 0) {
    s.warmup = step_ms;  // the warm-up: a turn of its own
    if (rounds_ > 1) {
      turn_ = running_.size();  // a late warm-up ends its round
      return;
    }
    const bool opening = std::all_of(per_plan_.begin(), per_plan_.end(), [&](const Samples& other) {
      return &other == &s || other.runs == 0;
    });
    if (opening) return;  // the trial's first plan: its lead-in and sample follow
  } else if (lead_ins_ && !s.led_in) {
    s.led_in = true;
    return;  // a lead-in: the plan's next step is its sample
  } else {
    s.led_in = false;
    ++s.turns;
    if (step_ms > 0) {
      (on_proposal ? s.proposal : s.first).push_back(step_ms);
      s.wait.push_back(wait_ms);
    }
    if (rounds_ == 0) {
      turn_ = running_.size();  // the opening turn's sample ends round 0
      return;
    }
  }
  ++turn_;
}

void PlanTrial::next_round() {
  turn_ = 0;
  ++rounds_;
}

size_t PlanTrial::samples(size_t plan) const {
  return plan < per_plan_.size() ? static_cast<size_t>(per_plan_[plan].turns) : 0;
}

bool PlanTrial::lead_in_next(size_t plan) const {
  return plan < per_plan_.size() && lead_ins_ && per_plan_[plan].runs > 0 &&
         !per_plan_[plan].led_in;
}

size_t PlanTrial::steps(size_t plan) const {
  return plan < per_plan_.size() ? static_cast<size_t>(per_plan_[plan].runs) : 0;
}

size_t PlanTrial::fewest_samples() const {
  size_t fewest = running_.empty() ? 0 : static_cast<size_t>(-1);
  for (size_t p : running_) fewest = std::min(fewest, samples(p));
  return fewest;
}

std::vector<float> PlanTrial::local_figures() const {
  std::vector<float> out;
  out.reserve(running_.size() * kFloatsPerPlan);
  for (size_t p : running_) {
    const Samples& s = per_plan_[p];
    out.push_back(static_cast<float>(median(s.first)));
    out.push_back(static_cast<float>(median(s.proposal)));
    out.push_back(static_cast<float>(median_standard_error(s.first)));
    out.push_back(static_cast<float>(median_standard_error(s.proposal)));
    out.push_back(static_cast<float>(median(s.wait)));
    out.push_back(static_cast<float>(s.warmup));
  }
  return out;
}

std::vector<TrialFigure> PlanTrial::agree(std::span<const float> agreed,
                                          size_t min_proposal) const {
  if (agreed.size() != running_.size() * kFloatsPerPlan) {
    throw Error("PlanTrial::agree: " + std::to_string(agreed.size()) + " figures for " +
                std::to_string(running_.size()) + " plans");
  }
  std::vector<TrialFigure> out(per_plan_.size());
  for (size_t i = 0; i < running_.size(); ++i) {
    const size_t p = running_[i];
    const float* f = agreed.data() + i * kFloatsPerPlan;
    TrialFigure& figure = out[p];
    figure.samples = samples(p);
    figure.wait_ms = f[4];
    figure.warmup_ms = f[5];
    figure.by_proposal =
        per_plan_[p].proposal.size() >= min_proposal && f[1] > 0 && (f[0] == 0 || f[1] < f[0]);
    figure.step_ms = figure.by_proposal ? f[1] : f[0];
    figure.noise_ms = figure.by_proposal ? f[3] : f[2];
  }
  return out;
}

void PlanTrial::leave(size_t plan, bool contender) {
  const auto it = std::find(running_.begin(), running_.end(), plan);
  if (it == running_.end()) return;
  // Keep the turn on the plan it pointed at.
  if (static_cast<size_t>(it - running_.begin()) < turn_) --turn_;
  running_.erase(it);
  if (contender) contenders_.push_back(plan);
}

void PlanTrial::join(size_t plan) {
  if (plan >= per_plan_.size()) throw Error("PlanTrial::join: plan out of range");
  if (std::find(running_.begin(), running_.end(), plan) != running_.end()) return;
  running_.push_back(plan);
  per_plan_[plan] = Samples{};
}

void PlanTrial::save_state(ByteWriter& out) const {
  out.put<uint64_t>(running_.size());
  for (size_t p : running_) out.put<uint64_t>(p);
  out.put<uint64_t>(contenders_.size());
  for (size_t p : contenders_) out.put<uint64_t>(p);
  out.put<uint64_t>(turn_);
  out.put<uint64_t>(rounds_);
  out.put_string(why_);
  out.put<uint8_t>(lead_ins_);
  out.put<uint64_t>(per_plan_.size());
  for (const Samples& s : per_plan_) {
    out.put<uint64_t>(s.runs);
    out.put<uint64_t>(s.turns);
    out.put<uint8_t>(s.led_in);
    out.put<double>(s.warmup);
    put_doubles(out, s.first);
    put_doubles(out, s.proposal);
    put_doubles(out, s.wait);
  }
}

void PlanTrial::load_state(ByteReader& in, size_t plan_count, bool with_lead_ins) {
  const auto read_plans = [&](const char* field) {
    const auto size = in.get<uint64_t>(field);
    if (size > plan_count) throw PayloadError(std::string(field) + ": too many plans");
    std::vector<size_t> plans(static_cast<size_t>(size));
    for (size_t& p : plans) {
      p = static_cast<size_t>(in.get<uint64_t>(field));
      if (p >= plan_count) throw PayloadError(std::string(field) + ": a plan out of range");
    }
    return plans;
  };
  auto running = read_plans("trial plans");
  auto contenders = read_plans("trial contenders");
  const auto turn = in.get<uint64_t>("trial turn");
  const auto rounds = in.get<uint64_t>("trial rounds");
  std::string why = in.get_string("trial reason");
  const bool lead_ins = with_lead_ins ? in.get<uint8_t>("trial lead-ins") != 0 : true;
  if (in.get<uint64_t>("trial plan count") != plan_count || turn > running.size()) {
    throw PayloadError("the checkpoint's trial does not fit this codec's plans");
  }
  std::vector<Samples> per_plan(plan_count);
  for (Samples& s : per_plan) {
    s.runs = in.get<uint64_t>("trial runs");
    if (with_lead_ins) {
      s.turns = in.get<uint64_t>("trial turns");
      s.led_in = in.get<uint8_t>("trial lead-in") != 0;
      if (s.turns > s.runs || (s.led_in && s.runs == 0)) {
        throw PayloadError("the checkpoint's trial counts more turns than steps");
      }
    } else if (s.runs > 0) {  // every turn after the warm-up was a lead-in and a sample
      s.turns = (s.runs - 1) / 2;
      s.led_in = (s.runs - 1) % 2 == 1;
    }
    s.warmup = in.get<double>("trial warm-up");
    s.first = get_doubles(in, "trial samples");
    s.proposal = get_doubles(in, "trial samples on a proposal");
    s.wait = get_doubles(in, "trial waits");
  }
  running_ = std::move(running);
  contenders_ = std::move(contenders);
  turn_ = static_cast<size_t>(turn);
  rounds_ = static_cast<size_t>(rounds);
  why_ = std::move(why);
  lead_ins_ = lead_ins;
  per_plan_ = std::move(per_plan);
}

}  // namespace gradwire::strategy
