// Small statistics the strategies' measurements share.
#pragma once

#include <algorithm>
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

}  // namespace gradwire
