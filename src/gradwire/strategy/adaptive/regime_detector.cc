#include "gradwire/strategy/adaptive/regime_detector.h"

#include <cmath>
#include <limits>

#include "gradwire/core/error.h"

namespace gradwire::strategy {

RegimeDetector::RegimeDetector(size_t window, double eta) : window_(window), eta_(eta) {
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

void RegimeDetector::restart() {
  in_window_ = 0;
  sum_ = 0;
  previous_.reset();
  critical_ = true;
}

}  // namespace gradwire::strategy
