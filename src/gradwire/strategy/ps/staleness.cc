#include "gradwire/strategy/ps/staleness.h"

#include <algorithm>
#include <cmath>

namespace gradwire::strategy::ps {

StalenessHistogram::StalenessHistogram(std::vector<uint64_t> counts) : counts_(std::move(counts)) {
  if (counts_.size() > kMaxTracked + 1) {
    uint64_t tail = 0;
    for (size_t t = kMaxTracked; t < counts_.size(); ++t) tail += counts_[t];
    counts_.resize(kMaxTracked + 1);
    counts_.back() = tail;
  }
}

void StalenessHistogram::add(uint64_t staleness) {
  const size_t t = static_cast<size_t>(std::min(staleness, kMaxTracked));
  if (counts_.size() <= t) counts_.resize(t + 1, 0);
  ++counts_[t];
}

void StalenessHistogram::merge(const StalenessHistogram& other) {
  if (counts_.size() < other.counts_.size()) counts_.resize(other.counts_.size(), 0);
  for (size_t t = 0; t < other.counts_.size(); ++t) counts_[t] += other.counts_[t];
}

StalenessSummary StalenessHistogram::summary() const {
  StalenessSummary s;
  double sum = 0;
  for (size_t t = 0; t < counts_.size(); ++t) {
    s.count += counts_[t];
    sum += static_cast<double>(t) * static_cast<double>(counts_[t]);
    if (counts_[t]) s.max = t;
  }
  if (s.count == 0) return s;
  s.mean = sum / static_cast<double>(s.count);
  auto percentile = [&](double q) {
    const uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(s.count)));
    uint64_t seen = 0;
    for (size_t t = 0; t < counts_.size(); ++t) {
      seen += counts_[t];
      if (seen >= std::max<uint64_t>(1, rank)) return static_cast<uint64_t>(t);
    }
    return s.max;
  };
  s.p50 = percentile(0.50);
  s.p99 = percentile(0.99);
  return s;
}

}  // namespace gradwire::strategy::ps
