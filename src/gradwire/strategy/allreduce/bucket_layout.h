// Bucket boundaries chosen from measured gradient readiness and the cost model.
//
// The tensors come in the order buckets are filled (reverse registration: the order
// backward finishes them). Tensor k is final `ready_s[k]` seconds before backward ends
// (t = 0), measured; a bucket can start when its latest tensor is final (and the bucket
// that carries the step's status, the last, at t = 0 at the earliest), and the exchanges
// run one at a time in bucket order. A bucket of tensors [i, j) costs, by Hockney's model
// over a ring (comm/cost_model.h),
//     x(i, j) = c 2(W-1) alpha + 2 (W-1)/W (sum of its wire bytes) beta
// with c its collectives (additive: 1; int8: 2, the block maxima and the levels). The
// caller calibrates beta from a measured exchange (calibrated_link()): the link's real
// speed, the codec's compute and a shared host's contention all show up per byte. So
//     start_b = max(ready_b, end_{b-1}),   end_b = start_b + x_b,
// and the step waits max(0, end of the last bucket) after backward. The layout minimizes
// that end exactly, by dynamic programming over the boundaries (the end of a prefix is all
// the rest depends on):
//     E(j) = min over i < j of max(E(i), ready(i, j)) + x(i, j),   E(0) = -infinity,
// with ties (within `tie_s`) going to fewer buckets: each costs the executor a wake-up and
// a collective's fixed overhead that the model prices only as alpha. A bucket holds
// tensors of one kind only and at most `bucket_bytes` of fp32 gradient (a larger tensor
// gets a bucket of its own). O(n^2) over n tensors.
#pragma once

#include <cstddef>
#include <vector>

#include "gradwire/comm/cost_model.h"

namespace gradwire::strategy {

struct LayoutTensor {
  size_t elements = 0;    // the cap counts these as fp32
  double wire_bytes = 0;  // on the wire in its bucket's collectives
  double ready_s = 0;     // final this long before backward's end (>= 0)
  int kind = 0;           // tensors of different kinds never share a bucket
  int collectives = 1;    // per bucket of this kind
};

struct LayoutInput {
  std::vector<LayoutTensor> tensors;  // in fill order
  comm::LinkModel link;
  int world = 1;
  size_t bucket_bytes = 25u << 20;
  bool last_waits_for_end = true;  // the last bucket carries the status: starts at t >= 0
  double tie_s = 50e-6;
};

struct PlannedLayout {
  std::vector<size_t> ends;  // bucket b holds tensors [ends[b-1], ends[b]) (ends[-1] = 0)
  double exposed_s = 0;      // predicted wait after backward
};

// The layout of least predicted exposed exchange (see above). Throws Error for no tensors
// or a negative readiness.
PlannedLayout plan_bucket_layout(const LayoutInput& input);

// The predicted exposed exchange of a given layout (the same model).
double layout_exposed_seconds(const LayoutInput& input, const std::vector<size_t>& ends);

// The buckets `ends` took `measured_s` in all: the link whose beta makes the model say so,
// alpha kept (unchanged when the measurement is within alpha's share, or nothing moved).
comm::LinkModel calibrated_link(const LayoutInput& input, const std::vector<size_t>& ends,
                                double measured_s);

}  // namespace gradwire::strategy
