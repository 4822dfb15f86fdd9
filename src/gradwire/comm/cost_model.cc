#include "gradwire/comm/cost_model.h"

#include <algorithm>
#include <cmath>

namespace gradwire::comm {

namespace {
constexpr double kSizeBytes = 8;  // the int64 size each pair exchanges before the data
constexpr double kPairBytes = 8;  // u32 index + f32 value
}  // namespace

double ring_allreduce_seconds(const LinkModel& link, double bytes, int world) {
  if (world < 2) return 0;
  const double w = world;
  return 2 * (w - 1) * link.alpha_s + 2 * (w - 1) / w * bytes * link.beta_s_per_byte;
}

double allgather_seconds(const LinkModel& link, double bytes_per_rank, int world) {
  if (world < 2) return 0;
  const double w = world;
  return 2 * (w - 1) * link.alpha_s +
         (w - 1) * (kSizeBytes + bytes_per_rank) * link.beta_s_per_byte;
}

double alltoall_seconds(const LinkModel& link, double bytes_per_pair, int world) {
  // Pairwise exchange: the same steps and bytes as the allgather, other contents.
  return allgather_seconds(link, bytes_per_pair, world);
}

const char* sparse_path_name(SparsePath path) {
  switch (path) {
    case SparsePath::kAllgather:
      return "allgather";
    case SparsePath::kSplit:
      return "split";
    case SparsePath::kDense:
      return "dense";
  }
  return "unknown";
}

double sparse_path_seconds(const LinkModel& link, SparsePath path, const SparseBucketLoad& load,
                           int world) {
  const double w = std::max(1, world);
  switch (path) {
    case SparsePath::kAllgather:
      return allgather_seconds(link, load.payload_bytes, world);
    case SparsePath::kSplit: {
      // Message headers (a u32 count; the reduced range's format, union and totals) are
      // left out: a few bytes against the pairs.
      const double range = load.elements / w;
      const double reduced = std::min(kPairBytes * load.union_count / w, 4 * range);
      return alltoall_seconds(link, kPairBytes * load.pairs / w, world) +
             allgather_seconds(link, reduced, world);
    }
    case SparsePath::kDense:
      return ring_allreduce_seconds(link, 4 * load.elements, world);
  }
  return 0;
}

SparsePath cheapest_sparse_path(const LinkModel& link, const SparseBucketLoad& load, int world) {
  SparsePath best = SparsePath::kAllgather;
  double best_s = sparse_path_seconds(link, best, load, world);
  for (SparsePath path : {SparsePath::kSplit, SparsePath::kDense}) {
    const double s = sparse_path_seconds(link, path, load, world);
    if (s < best_s) {
      best = path;
      best_s = s;
    }
  }
  return best;
}

double independent_union(double elements, double density, int world) {
  return elements * (1 - std::pow(1 - std::clamp(density, 0.0, 1.0), world));
}

}  // namespace gradwire::comm
