// SparseLoCo's Q(top-k per chunk) written plainly, the reference of the codec's tests and
// of the DiLoCo strategy's (sparseloco_codec.cc states the rule).
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gradwire/compress/codecs.h"

namespace gradwire::compress::testing {

// Q(top-k of every chunk of e), written plainly.
inline std::vector<float> reference_sent(const std::vector<float>& e, size_t chunk, double density,
                                         int bits) {
  std::vector<float> s(e.size(), 0.0f);
  const size_t levels = size_t{1} << (bits - 1);
  for (size_t begin = 0; begin < e.size(); begin += chunk) {
    const size_t size = std::min(chunk, e.size() - begin);
    const size_t k = topk_count(density, size);
    const auto magnitude = [&](size_t i) { return std::fabs(e[begin + i]); };
    std::vector<size_t> chosen(size);
    std::iota(chosen.begin(), chosen.end(), size_t{0});
    // The k largest magnitudes, ties to the lower position.
    std::stable_sort(chosen.begin(), chosen.end(),
                     [&](size_t a, size_t b) { return magnitude(a) > magnitude(b); });
    chosen.resize(k);
    // Ranked by increasing magnitude, ties by position.
    std::sort(chosen.begin(), chosen.end(), [&](size_t a, size_t b) {
      return magnitude(a) < magnitude(b) || (magnitude(a) == magnitude(b) && a < b);
    });
    for (size_t j = 0; j < levels; ++j) {
      const size_t lo = j * k / levels, hi = (j + 1) * k / levels;
      double sum = 0.0;
      for (size_t r = lo; r < hi; ++r) sum += magnitude(chosen[r]);
      for (size_t r = lo; r < hi; ++r) {
        const auto level = static_cast<float>(sum / static_cast<double>(hi - lo));
        s[begin + chosen[r]] = std::signbit(e[begin + chosen[r]]) ? -level : level;
      }
    }
  }
  return s;
}

}  // namespace gradwire::compress::testing
