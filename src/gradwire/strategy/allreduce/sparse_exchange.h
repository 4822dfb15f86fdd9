// Aggregation of a bucket of sparse payloads whose traffic does not grow with the world:
// the `split` and `dense` paths of comm/cost_model.h beside the strategy's allgather.
//
// Every path computes S = sum over ranks, in rank order, of each rank's decoded payloads
// (zero where a rank sent nothing). `split` adds in the same order as the allgather path
// (0 + rank 0's value + rank 1's + ...), so the two give the same bits; `dense` sums by
// Gloo's ring and rounds otherwise, the same on every rank.
//
// split, for W ranks and a bucket of n elements cut into W ranges [r n/W, (r+1) n/W):
//   1. alltoall: to owner r, this rank's non-zeros in range r:
//        u64 payload bytes | u32 count | u32 offset[count] (increasing) | f32 value[count]
//   2. owner r sums the W messages in rank order (and counts the union of their offsets);
//   3. allgather: owner r's range, sparse or dense, whichever is smaller:
//        u8 format (0 sparse, 1 dense) | u64 payload bytes over all ranks | u64 pairs over
//        all ranks | u32 union | sparse: u32 offset[union] | f32 value[union]
//                                | dense:  f32 value[range]
// A message that breaks this layout (a count past its bytes, offsets out of range or not
// increasing, an unknown format) throws PayloadError naming the rank, before any output is
// written.
//
// Each path leaves the step's totals over all ranks (payload bytes, pairs, union), the
// same on every rank, for the next step's choice (cheapest_sparse_path).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/cost_model.h"
#include "gradwire/core/bytes.h"

namespace gradwire::strategy {

// The last step's totals over all ranks; known == false before the first step.
struct SparseStepTotals {
  bool known = false;
  uint64_t payload_bytes = 0;  // the ranks' codec payloads
  uint64_t pairs = 0;          // the non-zeros they sent
  uint64_t union_count = 0;    // distinct coordinates among those

  // The per-rank load the cost model takes.
  comm::SparseBucketLoad load(size_t elements, int world) const;
  void save(Bytes& out) const;
  static SparseStepTotals load_from(ByteReader& in);
};

class SparseExchange {
 public:
  explicit SparseExchange(size_t elements) : elements_(elements) {}

  size_t elements() const { return elements_; }
  const SparseStepTotals& totals() const { return totals_; }
  void set_totals(const SparseStepTotals& totals) { totals_ = totals; }

  // `mine`: this rank's decoded payloads (n floats, zero where it sent nothing);
  // `payload_bytes`: their encoded size. Writes S to `sum` (n floats).
  void split(comm::Collectives& collectives, std::span<const float> mine, uint64_t payload_bytes,
             std::span<float> sum);
  void dense(comm::Collectives& collectives, std::span<const float> mine, uint64_t payload_bytes,
             std::span<float> sum);
  // After the strategy's allgather path: every rank's payload bytes are known, and the
  // union is S's non-zeros; pairs are estimated as payload bytes / 8 (index + value).
  void record_allgather(uint64_t payload_bytes_total, uint64_t union_count);

 private:
  size_t range_begin(int owner, int world) const;

  size_t elements_;
  SparseStepTotals totals_;
  std::vector<Bytes> to_, from_, gathered_;  // kept across steps
  Bytes reduced_;
  std::vector<float> acc_;
  std::vector<uint8_t> touched_;
  std::vector<float> dense_;
};

}  // namespace gradwire::strategy
