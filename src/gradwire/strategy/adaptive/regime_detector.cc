#include "gradwire/strategy/adaptive/regime_detector.h"

#include <cmath>
#include <limits>

#include "gradwire/core/error.h"

namespace gradwire::strategy {

RegimeDetector::RegimeDetector(size_t window, double eta, bool start_critical)
    : window_(window), eta_(eta), critical_(start_critical) {
  if (window_ == 0) throw ConfigError("the regime detector's window must be at least one step");
  if (!(eta_ > 0)) throw ConfigError("the regime detector's eta must be positive");
}

bool RegimeDetector::observe(double norm) {
  sum_ += norm;
  if (++in_window_ < window_) return false;
  const double mean = sum_ / static_cast<double>(window_);
  sum_ = 0;
  in_window_ = 0;
  if (previous_) {
    // A zero norm followed by a non-zero one is an infinite change: critical.
    const double change = *previous_ > 0 ? std::abs(*previous_ - mean) / *previous_
                          : mean > 0     ? std::numeric_limits<double>::infinity()
                                         : 0.0;
    last_change_ = change;
    critical_ = change >= eta_;
  }
  previous_ = mean;
  return true;
}

namespace {

void put_optional(ByteWriter& out, const std::optional<double>& value) {
  out.put<uint8_t>(value.has_value());
  out.put<double>(value.value_or(0.0));
}

std::optional<double> get_optional(ByteReader& in, const char* field) {
  const bool has = in.get<uint8_t>(field) != 0;
  const double value = in.get<double>(field);
  return has ? std::optional<double>(value) : std::nullopt;
}

}  // namespace

void RegimeDetector::save_state(ByteWriter& out) const {
  out.put<uint64_t>(in_window_);
  out.put<double>(sum_);
  put_optional(out, previous_);
  put_optional(out, last_change_);
  out.put<uint8_t>(critical_);
}

void RegimeDetector::load_state(ByteReader& in) {
  const auto in_window = in.get<uint64_t>("regime window position");
  if (in_window >= window_) {
    throw PayloadError("regime state at step " + std::to_string(in_window) + " of a window of " +
                       std::to_string(window_));
  }
  const double sum = in.get<double>("regime norm sum");
  const auto previous = get_optional(in, "regime previous mean");
  const auto last_change = get_optional(in, "regime last change");
  const bool critical = in.get<uint8_t>("regime critical") != 0;
  in_window_ = static_cast<size_t>(in_window);
  sum_ = sum;
  previous_ = previous;
  last_change_ = last_change;
  critical_ = critical;
}

void RegimeDetector::restart() {
  in_window_ = 0;
  sum_ = 0;
  previous_.reset();
  critical_ = true;
}

}  // namespace gradwire::strategy
