#include "gradwire/strategy/allreduce/bucket_layout.h"

#include <algorithm>
#include <limits>
#include <string>

#include "gradwire/core/error.h"

namespace gradwire::strategy {
namespace {

constexpr double kNever = -std::numeric_limits<double>::infinity();

// x(i, j): the exchange of one bucket holding `bytes` on the wire.
double bucket_seconds(const LayoutInput& input, double bytes, int collectives) {
  if (input.world <= 1) return 0;
  const double w = input.world;
  return collectives * 2 * (w - 1) * input.link.alpha_s +
         2 * (w - 1) / w * bytes * input.link.beta_s_per_byte;
}

void check(const LayoutInput& input) {
  if (input.tensors.empty()) throw Error("bucket layout: no tensors");
  for (const LayoutTensor& t : input.tensors) {
    if (!(t.ready_s >= 0)) {
      throw Error("bucket layout: readiness " + std::to_string(t.ready_s) +
                  " s before backward's end; it must be 0 or more");
    }
  }
}

}  // namespace

PlannedLayout plan_bucket_layout(const LayoutInput& input) {
  check(input);
  const size_t n = input.tensors.size();
  std::vector<double> end(n + 1, kNever);  // E(j)
  std::vector<size_t> buckets(n + 1, 0);   // buckets in E(j)'s layout
  std::vector<size_t> from(n + 1, 0);      // E(j)'s last bucket starts at from[j]
  for (size_t j = 1; j <= n; ++j) {
    double ready = (j == n && input.last_waits_for_end) ? 0.0 : kNever;
    double bytes = 0;
    size_t elements = 0;
    double best = std::numeric_limits<double>::infinity();
    for (size_t i = j; i-- > 0;) {
      const LayoutTensor& t = input.tensors[i];
      if (t.kind != input.tensors[j - 1].kind) break;
      elements += t.elements;
      if (i + 1 < j && elements * sizeof(float) > input.bucket_bytes) break;
      bytes += t.wire_bytes;
      ready = std::max(ready, -t.ready_s);
      const double finish = std::max(end[i], ready) + bucket_seconds(input, bytes, t.collectives);
      const bool better = finish < best - input.tie_s;
      const bool tie_fewer = finish <= best + input.tie_s && buckets[i] + 1 < buckets[j];
      if (better || tie_fewer) {
        best = std::min(best, finish);
        end[j] = finish;
        buckets[j] = buckets[i] + 1;
        from[j] = i;
      }
    }
  }
  PlannedLayout layout;
  for (size_t j = n; j > 0; j = from[j]) layout.ends.push_back(j);
  std::reverse(layout.ends.begin(), layout.ends.end());
  layout.exposed_s = layout_exposed_seconds(input, layout.ends);
  // E(j) is the earliest end of a prefix, not the fewest buckets that reach the same final
  // wait (a prefix that ends earlier than the next bucket's readiness gains nothing): merge
  // neighbours, last first, while the wait stays within tie_s and the rules allow.
  for (size_t b = layout.ends.size() - 1; b-- > 0;) {
    const size_t first = b == 0 ? 0 : layout.ends[b - 1];
    size_t elements = 0;
    bool same_kind = true;
    for (size_t k = first; k < layout.ends[b + 1]; ++k) {
      elements += input.tensors[k].elements;
      same_kind = same_kind && input.tensors[k].kind == input.tensors[first].kind;
    }
    if (!same_kind || elements * sizeof(float) > input.bucket_bytes) continue;
    std::vector<size_t> merged = layout.ends;
    merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(b));
    const double exposed = layout_exposed_seconds(input, merged);
    if (exposed <= layout.exposed_s + input.tie_s) {
      layout.ends = std::move(merged);
      layout.exposed_s = std::min(layout.exposed_s, exposed);
    }
  }
  return layout;
}

double layout_exposed_seconds(const LayoutInput& input, const std::vector<size_t>& ends) {
  check(input);
  if (ends.empty() || ends.back() != input.tensors.size()) {
    throw Error("bucket layout: the buckets do not end at the last tensor");
  }
  double finish = kNever;
  size_t first = 0;
  for (size_t b = 0; b < ends.size(); ++b) {
    if (ends[b] <= first) throw Error("bucket layout: bucket ends must increase");
    double ready = (b + 1 == ends.size() && input.last_waits_for_end) ? 0.0 : kNever;
    double bytes = 0;
    for (size_t k = first; k < ends[b]; ++k) {
      ready = std::max(ready, -input.tensors[k].ready_s);
      bytes += input.tensors[k].wire_bytes;
    }
    finish = std::max(finish, ready) +
             bucket_seconds(input, bytes, input.tensors[ends[b] - 1].collectives);
    first = ends[b];
  }
  return std::max(0.0, finish);
}

comm::LinkModel calibrated_link(const LayoutInput& input, const std::vector<size_t>& ends,
                                double measured_s) {
  check(input);
  if (input.world <= 1) return input.link;
  const double w = input.world;
  double alpha_part = 0, byte_part = 0;
  size_t first = 0;
  for (size_t end : ends) {
    if (end <= first || end > input.tensors.size()) {
      throw Error("bucket layout: bucket ends must increase within the tensors");
    }
    alpha_part += input.tensors[end - 1].collectives * 2 * (w - 1) * input.link.alpha_s;
    for (size_t k = first; k < end; ++k) byte_part += 2 * (w - 1) / w * input.tensors[k].wire_bytes;
    first = end;
  }
  comm::LinkModel link = input.link;
  if (measured_s > alpha_part && byte_part > 0) {
    link.beta_s_per_byte = (measured_s - alpha_part) / byte_part;
  }
  return link;
}

}  // namespace gradwire::strategy
