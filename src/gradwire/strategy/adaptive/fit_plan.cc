#include "gradwire/strategy/adaptive/fit_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gradwire/core/error.h"

namespace gradwire::strategy {

std::vector<FitBucket> fit_buckets(const FitInput& input, std::span<const size_t> rungs) {
  std::vector<FitBucket> buckets;
  const size_t big = std::min(input.first_bucket_bytes, input.bucket_bytes);
  size_t elements = 0;  // in the last bucket
  bool closed = false;  // by a tensor of at least `big` bytes
  for (size_t t = 0; t < input.tensors.size(); ++t) {
    const size_t n = input.tensors[t].elements;
    const size_t cap = buckets.size() == 1 ? big : input.bucket_bytes;
    if (!buckets.empty() && !closed && buckets.back().rung == rungs[t] &&
        (elements + n) * sizeof(float) <= cap) {
      buckets.back().end = t + 1;
      elements += n;
    } else {
      buckets.push_back({t, t + 1, rungs[t]});
      elements = n;
    }
    closed = n * sizeof(float) >= big;
  }
  return buckets;
}

double fit_exposed_seconds(const FitInput& input, std::span<const size_t> rungs) {
  double end = 0;
  bool first = true;
  for (const FitBucket& bucket : fit_buckets(input, rungs)) {
    double ready = HUGE_VAL, bytes = 0;
    for (size_t t = bucket.first; t < bucket.end; ++t) {
      ready = std::min(ready, input.tensors[t].ready_s);
      bytes += input.tensors[t].bytes[bucket.rung];
    }
    const double x = comm::ring_allreduce_seconds(input.link, bytes, input.world) +
                     (input.collectives[bucket.rung] - 1) *
                         comm::ring_allreduce_seconds(input.link, 0, input.world);
    end = (first ? -ready : std::max(-ready, end)) + x;
    first = false;
  }
  return std::max(0.0, end);
}

std::vector<size_t> fit_rungs(const FitInput& input) {
  const size_t rung_count = input.collectives.size();
  if (rung_count == 0) throw Error("fit_rungs: no rungs");
  for (const FitTensor& t : input.tensors) {
    if (t.bytes.size() != rung_count) {
      throw Error("fit_rungs: a tensor has bytes for " + std::to_string(t.bytes.size()) +
                  " rungs, not " + std::to_string(rung_count));
    }
  }
  std::vector<size_t> rungs(input.tensors.size(), 0);
  double exposed = fit_exposed_seconds(input, rungs);
  while (exposed > 0) {
    size_t best = rungs.size();
    double best_exposed = exposed;
    for (size_t t = 0; t < rungs.size(); ++t) {
      if (rungs[t] + 1 == rung_count) continue;
      ++rungs[t];
      const double e = fit_exposed_seconds(input, rungs);
      --rungs[t];
      if (e < best_exposed) {
        best = t;
        best_exposed = e;
      }
    }
    if (best == rungs.size()) break;  // no move cuts it
    ++rungs[best];
    exposed = best_exposed;
  }
  return rungs;
}

}  // namespace gradwire::strategy
