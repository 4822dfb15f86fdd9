// Staleness of pushes (server version now - version the gradient was computed on): an
// exact histogram up to kMaxTracked, so percentiles are exact for the staleness a real job
// sees; larger values land in the last bucket.
#pragma once

#include <cstdint>
#include <vector>

namespace gradwire::strategy::ps {

struct StalenessSummary {
  uint64_t count = 0;
  double mean = 0;
  uint64_t p50 = 0;
  uint64_t p99 = 0;
  uint64_t max = 0;
};

class StalenessHistogram {
 public:
  static constexpr uint64_t kMaxTracked = 65535;

  StalenessHistogram() = default;
  // From counts() of another histogram (a checkpoint, or a server's report).
  explicit StalenessHistogram(std::vector<uint64_t> counts);

  void add(uint64_t staleness);
  void merge(const StalenessHistogram& other);
  // counts()[t] = pushes with staleness t (the last entry: >= its index); trailing zeros cut.
  const std::vector<uint64_t>& counts() const { return counts_; }
  // Percentiles are nearest-rank: the smallest t with at least q of the pushes <= t.
  StalenessSummary summary() const;

 private:
  std::vector<uint64_t> counts_;
};

}  // namespace gradwire::strategy::ps
