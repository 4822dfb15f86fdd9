#include "gradwire/compress/sparsify/topk_select.h"

#include <algorithm>
#include <bit>

namespace gradwire::compress {
namespace {

inline uint32_t magnitude_key(float v) { return std::bit_cast<uint32_t>(v) & 0x7fffffffu; }

// Writes every position whose key is above `threshold`, plus the first `ties` positions
// whose key equals it; in increasing order, k positions in all.
void collect(std::span<const float> a, uint32_t threshold, size_t ties, size_t k,
             std::vector<uint32_t>& indices) {
  indices.resize(k);
  uint32_t* __restrict out = indices.data();
  const float* __restrict in = a.data();
  size_t m = 0;
  const size_t n = a.size();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = magnitude_key(in[i]);
    if (key > threshold) {
      out[m++] = static_cast<uint32_t>(i);
    } else if (key == threshold && ties != 0) {
      out[m++] = static_cast<uint32_t>(i);
      --ties;
    }
  }
}

// Trivial cases shared by both methods; returns true when `indices` is already final.
bool select_trivial(std::span<const float> a, size_t k, std::vector<uint32_t>& indices) {
  if (k == 0) {
    indices.clear();
    return true;
  }
  if (k >= a.size()) {
    indices.resize(a.size());
    for (size_t i = 0; i < a.size(); ++i) indices[i] = static_cast<uint32_t>(i);
    return true;
  }
  return false;
}

}  // namespace

void TopKSelector::select(std::span<const float> a, size_t k, std::vector<uint32_t>& indices) {
  if (a.size() < kRadixMinSize) {
    select_nth_element(a, k, indices);
  } else {
    select_radix(a, k, indices);
  }
}

void TopKSelector::select_nth_element(std::span<const float> a, size_t k,
                                      std::vector<uint32_t>& indices) {
  if (select_trivial(a, k, indices)) return;
  const size_t n = a.size();
  keys_.resize(n);
  for (size_t i = 0; i < n; ++i) keys_[i] = magnitude_key(a[i]);
  // After nth_element, position n-k holds the k-th largest key and everything after it is
  // >= that key.
  const auto nth = keys_.begin() + static_cast<std::ptrdiff_t>(n - k);
  std::nth_element(keys_.begin(), nth, keys_.end());
  const uint32_t threshold = *nth;
  const auto above = static_cast<size_t>(
      std::count_if(nth + 1, keys_.end(), [&](uint32_t key) { return key > threshold; }));
  collect(a, threshold, k - above, k, indices);
}

void TopKSelector::select_radix(std::span<const float> a, size_t k,
                                std::vector<uint32_t>& indices) {
  if (select_trivial(a, k, indices)) return;
  const size_t n = a.size();
  const float* __restrict in = a.data();
  constexpr uint32_t kHighBins = 1u << 16;  // key bits 30..15
  constexpr uint32_t kLowBins = 1u << 15;   // key bits 14..0
  histogram_.assign(kHighBins + kLowBins, 0);
  uint32_t* __restrict high = histogram_.data();
  uint32_t* __restrict low = high + kHighBins;

  // Pass 1: histogram of the high bits; walk down from the top to the bucket holding the
  // k-th largest key. `above` counts the keys in higher buckets.
  for (size_t i = 0; i < n; ++i) ++high[magnitude_key(in[i]) >> 15];
  size_t above = 0;
  uint32_t high_bucket = kHighBins - 1;
  while (above + high[high_bucket] < k) above += high[high_bucket--];

  // Pass 2: the same inside that bucket on the low bits; this pins the exact key.
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = magnitude_key(in[i]);
    if ((key >> 15) == high_bucket) ++low[key & (kLowBins - 1)];
  }
  uint32_t low_bucket = kLowBins - 1;
  while (above + low[low_bucket] < k) above += low[low_bucket--];

  // Pass 3: collect.
  const uint32_t threshold = (high_bucket << 15) | low_bucket;
  collect(a, threshold, k - above, k, indices);
}

}  // namespace gradwire::compress
