// auto's plan `fit`: per tensor the most faithful codec whose exchange still fits under the
// compute that overlaps it (ALGORITHMS.md 9).
//
// The rungs are auto's uniform plans that do not compress (none, fp16, bf16, int8, in the
// order listed: most faithful first). Tensors come in the order buckets are filled
// (reverse registration, the order backward finishes them); consecutive tensors on the
// same rung share a bucket up to the caps (the first bucket's, then the others'), and a
// tensor of at least the first bucket's size closes its bucket, as AllreduceStrategy
// builds them. A bucket is final when its last tensor is: `ready_s`
// seconds before backward ends (measured from the gradient hooks). Its exchange on rung r
// costs, by the cost model,
//     x = c_r 2(W-1) alpha + 2 (W-1)/W (sum of its tensors' bytes on rung r) beta
// (c_r collectives per bucket: int8 has 2, its block maxima and its levels). The exchanges
// run one at a time in bucket order, so with t = 0 at backward's end
//     start_b = max(-ready_b, end_{b-1}),   end_b = start_b + x_b,
// and the step waits exposed = max(0, end of the last bucket) after backward. fit_rungs()
// starts with every tensor on rung 0 and, while something is exposed, moves one tensor one
// rung down: the move that cuts `exposed` most (ties: the earliest tensor); it stops when
// nothing is exposed or no move cuts it. So tensors whose exchange hides under backward
// stay exact, and the exposed tail is compressed where it saves most. The codecs' own
// compute is not in the model: the trial that measures `fit` against the uniform plans
// decides whether it pays.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "gradwire/comm/cost_model.h"
#include "gradwire/compress/codec.h"

namespace gradwire::strategy {

struct FitTensor {
  size_t elements = 0;        // the bucket caps count these as fp32
  double ready_s = 0;         // final this long before backward's end
  std::vector<double> bytes;  // per rung: on the wire in its bucket's collectives
};

struct FitInput {
  std::vector<FitTensor> tensors;  // in the order buckets are filled
  std::vector<int> collectives;    // per rung: collectives per bucket
  comm::LinkModel link;
  int world = 1;
  size_t first_bucket_bytes = 1u << 20;  // AllreduceOptions' caps
  size_t bucket_bytes = 25u << 20;
};

struct FitBucket {
  size_t first = 0, end = 0;  // tensors [first, end) of FitInput::tensors
  size_t rung = 0;
};

// The buckets AllreduceStrategy makes of the tensors on `rungs`.
std::vector<FitBucket> fit_buckets(const FitInput& input, std::span<const size_t> rungs);

// Seconds the step waits after backward for the exchanges, tensors on `rungs`.
double fit_exposed_seconds(const FitInput& input, std::span<const size_t> rungs);

// The rung of every tensor (see above). Throws Error for inconsistent sizes.
std::vector<size_t> fit_rungs(const FitInput& input);

// What auto makes of the model's tensors: the policy of plan `fit` and why it is, or is
// not, worth measuring.
struct FitRung {
  std::string name;    // auto's plan: "none", "fp16", ...
  std::string policy;  // its layer policy
};

struct FitProposal {
  std::string policy;   // "other=RUNG0,@NAME=RUNG,..." for the tensors off rung 0
  std::string summary;  // "none: 6 tensors; int8: fc1.weight; exposed exchange predicted ..."
  // Empty: measure it. Else why not: every tensor on one rung, a tensor name that cannot
  // go into a policy, or predicted slower than the best uniform rung by more than tie_ms.
  std::string why_not;
};

// `tensors` in registration order, `ready_s` for each the (agreed) seconds it was final
// before backward's end; `setting` gives the link, world and bucket caps (its tensors and
// collectives are filled in here from the rungs' codecs). Throws Error for a rung that is
// neither additive nor shared-scale (int8).
FitProposal propose_fit(std::span<const compress::TensorInfo> tensors,
                        std::span<const double> ready_s, std::span<const FitRung> rungs,
                        FitInput setting, double tie_ms);

}  // namespace gradwire::strategy
