#include "gradwire/strategy/gossip/trigger.h"

#include "gradwire/core/error.h"
#include "gradwire/core/number_text.h"
#include "gradwire/core/spec.h"

namespace gradwire::strategy::gossip {
Trigger Trigger::parse(const std::string& text) {
  // "period:4" is the short form of "period:k=4".
  const auto colon = text.find(':');
  const bool short_period =
      text.rfind("period:", 0) == 0 && text.find('=', colon) == std::string::npos;
  const Spec spec = Spec::parse(short_period ? "period:k=" + text.substr(colon + 1) : text);
  SpecReader reader(spec, "gossip trigger");
  Trigger t;
  if (spec.name == "every") {
    t.kind_ = Kind::kEvery;
    t.canonical_ = "every";
  } else if (spec.name == "period") {
    t.kind_ = Kind::kPeriod;
    t.period_ = static_cast<size_t>(reader.get_int_in("k", 1, 1, 1'000'000));
    t.canonical_ = "period:k=" + std::to_string(t.period_);
  } else if (spec.name == "adaptive") {
    t.kind_ = Kind::kAdaptive;
    t.calibration_ = static_cast<size_t>(reader.get_int_in("calibration", 200, 1, 1'000'000));
    t.kappa_ = reader.get_double_in("kappa", 10, 1e-6, 1e6);
    t.t_max_ = static_cast<size_t>(reader.get_int_in("t_max", 64, 1, 1'000'000));
    t.ema_ = reader.get_double_in("ema", 0.05, 1e-6, 1);
    t.canonical_ = "adaptive:calibration=" + std::to_string(t.calibration_) +
                   ",ema=" + format_parameter(t.ema_) + ",kappa=" + format_parameter(t.kappa_) +
                   ",t_max=" + std::to_string(t.t_max_);
  } else {
    throw ConfigError("unknown gossip trigger '" + spec.name +
                      "'; available: every, period:K, adaptive[:calibration=..,kappa=..,"
                      "t_max=..,ema=..]");
  }
  reader.finish();
  if (t.kind_ != Kind::kAdaptive) t.calibration_ = 0;
  return t;
}

bool Trigger::after_step(double step_change, double drift) {
  ++since_exchange_;
  switch (kind_) {
    case Kind::kEvery:
      return true;
    case Kind::kPeriod:
      return since_exchange_ >= period_;
    case Kind::kAdaptive:
      if (calibrating()) {
        d_bar_ = have_d_bar_ ? (1 - ema_) * d_bar_ + ema_ * step_change : step_change;
        have_d_bar_ = true;
        ++calibrated_steps_;
        return true;
      }
      return drift >= theta() || since_exchange_ >= t_max_;
  }
  return false;
}

void Trigger::exchanged() { since_exchange_ = 0; }

void Trigger::learning_rate_changed() {
  if (kind_ != Kind::kAdaptive) return;
  calibrated_steps_ = 0;
  have_d_bar_ = false;
  d_bar_ = 0;
}

}  // namespace gradwire::strategy::gossip
