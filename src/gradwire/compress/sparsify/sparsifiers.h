// Internal: the sparsifier family beside exact top-k (docs/ALGORITHMS.md 1.2-1.4). Users go
// through compress::create_codec() (registry.h); tests and benchmarks may include this header.
//
//   laplace-topk  Laplace-fitted threshold with model/bisection correction (1.2)
//   gaussiank     Gaussian-fitted threshold, SIDCo/Gaussian-k's x0.5 / x1.5 rounds (1.3)
//   dgc           DGC's sampled threshold (1.3); momentum correction is the generic
//                 `momentum=` key of ErrorFeedback (error_feedback.h)
//   randomk       k indices drawn from a seed carried in the payload, values only (1.3)
//
// The three threshold codecs send the top-k body of codecs.h (TopKLayout) under their own
// codec id; they are threshold methods, so the count they send may differ from k (each
// codec's bound is stated below and measured by last_selection()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gradwire/compress/codec.h"
#include "gradwire/core/spec.h"

namespace gradwire::compress {

std::unique_ptr<Codec> make_laplace_topk_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_gaussian_k_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_random_k_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_dgc_codec(SpecReader& reader, const TensorInfo& tensor);
// SparseLoCo's outer-gradient codec (sparseloco_codec.cc): chunk-wise top-k, a few bits a
// value, its own decaying error-feedback accumulator.
std::unique_ptr<Codec> make_sparseloco_codec(SpecReader& reader, const TensorInfo& tensor);

// Payload format versions (bump when a body layout changes).
inline constexpr uint8_t kLaplaceTopKVersion = 1;
inline constexpr uint8_t kGaussianKVersion = 1;
inline constexpr uint8_t kRandomKVersion = 1;
inline constexpr uint8_t kDgcVersion = 1;
inline constexpr uint8_t kSparseLoCoVersion = 1;

// What the last encode() selected. Bounds on `selected` (k = target):
//   laplace-topk  <= (1 + eps) k; normally >= (1 - eps) k (fewer when max_rounds counts do
//                 not reach the bracket, e.g. a tensor with fewer than (1 - eps) k non-zeros)
//   gaussiank     <= 4k/3; normally >= 2k/3
//   dgc           <= 1.3 k (exactly k after the exact fallback); normally >= 0.8 k
//   randomk       == k
// A threshold codec that meets a non-finite input statistic (NaN or infinity in the tensor)
// sends the exact top-k by |a_i| instead (exact_fallback, counts == 0).
struct SelectionStats {
  size_t target = 0;            // k = max(1, ceil(density N))
  size_t selected = 0;          // entries in the payload
  int counts = 0;               // threshold counts c(t) evaluated
  int full_passes = 0;          // streaming passes over the tensor (statistics pass included)
  bool exact_fallback = false;  // exact top-k among the survivors (or of the whole tensor)
  float threshold = 0.0f;       // last threshold t on |a_i - mu| (0 for randomk)
};

// Base of the codecs above: exposes the statistics of the last encode().
class SparsifierCodec : public Codec {
 public:
  const SelectionStats& last_selection() const { return stats_; }

 protected:
  SelectionStats stats_;
};

// The last selection of `codec`, looking through ErrorFeedback; nullptr when the codec is
// not one of the sparsifiers above.
const SelectionStats* selection_stats(const Codec& codec);

}  // namespace gradwire::compress
