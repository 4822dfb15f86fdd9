// Small statistics the strategies' measurements share.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace gradwire {

// The median of `values` (the mean of the two middle ones for an even count); 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

// The standard error of median(values), from the samples' spread: sigma estimated robustly
// as 1.4826 x the median absolute deviation (a stalled step does not inflate it), and the
// median's standard error of a normal sample, sqrt(pi / 2) sigma / sqrt(n). 0 for fewer
// than 2 values.
inline double median_standard_error(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  const double centre = median(values);
  std::vector<double> deviations(values.size());
  for (size_t i = 0; i < values.size(); ++i) deviations[i] = std::abs(values[i] - centre);
  const double sigma = 1.4826 * median(std::move(deviations));
  return 1.2533 * sigma / std::sqrt(static_cast<double>(values.size()));
}

}  // namespace gradwire
