// Internal: pieces shared by the sparsifiers (topk, laplace-topk, gaussiank, dgc).
//
//  * The sparse wire body of codecs.h (TopKLayout): writer and validating reader.
//  * One-pass statistics kernels (sum and max of |a_i - mu|; mean and standard deviation).
//  * ThresholdSelector: counts c(t) = #{i : |a_i - mu| > t} and collects the survivors,
//    keeping the survivors of a lower threshold between counts so that a correction round
//    reads a few k candidates instead of the whole tensor.
//
// Ordering, as in topk_select.h: elements compare by the bits of d_i = |a_i - mu| read as an
// integer, so NaN ranks above every threshold (it is sent rather than kept forever in a
// residual) and ties at a threshold are all on the same side of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/sparsify/sparsifiers.h"
#include "gradwire/compress/sparsify/topk_select.h"
#include "gradwire/core/bytes.h"

namespace gradwire::compress {

// --- sparse wire body --------------------------------------------------------------------

// Names used in error messages, one set per codec (field names must be static strings).
struct SparseBodyNames {
  const char* codec;    // "topk"
  const char* k;        // "topk k"
  const char* layout;   // "topk layout"
  const char* indices;  // "topk indices"
  const char* bitmap;   // "topk bitmap"
  const char* values;   // "topk values"
  const char* payload;  // "'topk' payload"
};

// Appends `u32 count | u8 layout | index list or bitmap | f32 values` for the positions
// `indices` (strictly increasing, < n) with values a[indices[j]]; the smaller layout wins
// (the index list on a tie).
void write_sparse_body(ByteWriter& writer, size_t n, std::span<const uint32_t> indices,
                       const float* a);

// Reads a sparse body that must run to the end of the payload, validates all of it (count
// <= accum.size(), layout, indices strictly increasing and in range or bitmap popcount and
// padding, exact length), and only then adds the values into `accum`. Throws PayloadError.
void read_sparse_body_add(ByteReader& reader, const SparseBodyNames& names, std::span<float> accum);

// --- statistics ----------------------------------------------------------------------------

struct AbsStats {
  double sum = 0.0;  // sum of |a_i - mu| (NaN or infinity when a_i is)
  float max = 0.0f;  // max of |a_i - mu| over the non-NaN elements
};

struct MeanStd {
  double mean = 0.0;
  double std = 0.0;  // sample standard deviation (n - 1), 0 for n < 2
};
MeanStd mean_std(std::span<const float> a);

// The `rank`-th largest (0-based) of `values` by magnitude bits, using `scratch`
// (nth_element on the keys); requires rank < values.size(). Used on small samples.
float nth_largest_magnitude(std::span<const float> values, size_t rank,
                            std::vector<uint32_t>& scratch);

// --- threshold selection -----------------------------------------------------------------

class ThresholdSelector {
 public:
  // Starts a selection over `a` with center `mu`; forgets earlier survivors. `capacity` is
  // how many survivors a counting pass may keep for later rounds (a few k); the buffers
  // grow to it once and are reused. `max_magnitude`, when known, is max |a_i - mu|: counts
  // at or above it are 0 without a pass.
  void reset(std::span<const float> a, float mu, size_t capacity,
             float max_magnitude = std::numeric_limits<float>::infinity());

  // reset() and the fit pass in one pass over `a`: returns the sum and max of |a_i - mu|
  // (AbsStats), and keeps the survivors of `keep` as a count would, so that a first count at a
  // threshold >= keep reads only them (a good guess of keep, such as last step's final
  // threshold, makes the fit and the first count one pass). The max becomes max_magnitude.
  AbsStats fit_and_keep(std::span<const float> a, float mu, size_t capacity, float keep);
  // The same after a_i += g_i (error feedback's accumulate), in the same pass: bit for bit
  // what a_i += g_i then fit_and_keep(a, ...) give.
  AbsStats add_fit_and_keep(std::span<const float> g, std::span<float> a, float mu, size_t capacity,
                            float keep);

  // c(t) = #{i : |a_i - mu| > t}. Reads only the kept survivors when a previous pass kept
  // every element above a threshold <= t; otherwise one streaming pass over `a` that keeps
  // the survivors of `keep` for later calls (and for collect()); when they outgrow the
  // capacity, the pass raises its keep threshold (above t if need be: that many passing
  // means later rounds look higher) and keeps the larger ones. A count at
  // t >= max_magnitude is 0 without a pass. A negative t counts every element.
  size_t count(float t, float keep);
  size_t count(float t) { return count(t, t); }

  // Sets `indices` to {i : |a_i - mu| > t}, increasing. When more than `max_count` survive,
  // keeps only the `k` largest |a_i - mu| among them (ties to the lower positions) and
  // returns true.
  bool collect(float t, size_t max_count, size_t k, std::vector<uint32_t>& indices);

  int counts() const { return counts_; }
  int full_passes() const { return full_passes_; }

 private:
  // One pass over a_: returns c(t) and keeps the survivors of `keep`, raising the keep
  // threshold whenever they outgrow the capacity.
  size_t scan(float t, float keep);
  // The pass of fit_and_keep over a_ (whose data is `a`), adding g first with kAdd.
  template <bool kAdd>
  AbsStats fit_pass(const float* g, float* a, float keep);
  // The buffer is full after `seen` elements: keeps only the largest kept survivors, as
  // many as would make about capacity/2 over the whole pass at the rate seen so far; returns
  // the new keep key (>= kk).
  int32_t raise_keep(size_t& stored, int32_t kk, size_t seen);

  std::span<const float> a_;
  float mu_ = 0.0f;
  size_t capacity_ = 0;
  float max_magnitude_ = 0.0f;
  // Every element with key(d_i) > kept_key_ (indices increasing, d_i = |a_i - mu|), valid
  // when have_kept_; kept_key_ is a key threshold (threshold_key in the .cc file).
  std::vector<uint32_t> kept_index_;
  std::vector<float> kept_mag_;
  size_t kept_ = 0;
  int32_t kept_key_ = 0;
  bool have_kept_ = false;
  std::vector<int32_t> keys_;
  int counts_ = 0;
  int full_passes_ = 0;
  TopKSelector exact_;
  std::vector<uint32_t> positions_;
};

// A sparsifier whose payload is the shared sparse body (index list or bitmap + values):
// subclasses only choose the coordinates. encode_residual zeroes the sent ones, since
// D(C(a)) is a there.
class IndexedSparsifier : public SparsifierCodec {
 public:
  void encode(std::span<const float> input, Bytes& out) final {
    checked_count(input.size(), id());
    select(input);
    write_payload(input, out);
  }

  // r <- a - D(C(a)): zero the sent positions.
  void encode_residual(std::span<float> a, Bytes& out) final {
    encode(a, out);
    clear_sent(a);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const final {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, id(), version_, accum.size());
    read_sparse_body_add(reader, names_, accum);
  }

 protected:
  IndexedSparsifier(uint8_t version, const SparseBodyNames& names)
      : version_(version), names_(names) {}

  // Fills indices_ (strictly increasing) and stats_ for `a`.
  virtual void select(std::span<const float> a) = 0;
  // The payload of a's values at indices_, and the residual's update (zero them in `a`).
  void write_payload(std::span<const float> a, Bytes& out) const {
    const uint32_t n = checked_count(a.size(), id());
    ByteWriter writer(out);
    PayloadHeader{id(), version_, n}.write(writer);
    write_sparse_body(writer, n, indices_, a.data());
  }
  void clear_sent(std::span<float> a) const {
    for (const uint32_t i : indices_) a[i] = 0.0f;
  }

  std::vector<uint32_t> indices_;  // positions sent by the last encode, increasing

 private:
  uint8_t version_;
  const SparseBodyNames& names_;
};

}  // namespace gradwire::compress
