// AllreduceStrategy's bucket: what the files that implement the strategy share
// (allreduce_strategy.cc, allreduce_messages.cc, allreduce_checkpoint.cc).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"
#include "gradwire/core/bytes.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"
#include "gradwire/strategy/allreduce/sparse_exchange.h"
#include "gradwire/strategy/codec_reduce_scatter.h"

namespace gradwire::strategy {

// Tensors share a bucket only when their codecs take the same path (additive with one wire
// type, int8, sparse messages, other messages): equal kinds.
inline int bucket_kind(compress::Codec& codec) {
  if (const auto wire = codec.additive_wire()) return 1 + static_cast<int>(*wire);
  if (codec.shared_scale() != nullptr) return -1;
  return compress::sends_sparse(codec.id()) ? -2 : -3;
}

struct AllreduceStrategy::Bucket {
  std::vector<size_t> tensors;  // indices into tensors_
  std::vector<size_t> offsets;  // element offset of each tensor in the wire buffer
  size_t elements = 0;
  std::optional<compress::WireType> wire;  // set: additive path
  bool int8 = false;                       // shared-scale path (int8 codec)
  bool sparse_codecs = false;              // message path, every codec sends_sparse
  // Set: the reduce-scatter path, over the bucket's gradients laid end to end in `flat`
  // (the tensors' own codecs stay unused; error feedback is the reduce-scatter's).
  std::unique_ptr<CodecReduceScatter> reduce_scatter;
  std::vector<float> flat;
  // Additive path: the elements, then a low-rank group's Q (at most q_floats), then the
  // carried status.
  std::vector<uint8_t> wire_buffer;
  size_t q_floats = 0;
  // Shared-scale path: each tensor's first block in `maxima`, and the blocks' maxima.
  std::vector<size_t> block_offsets;
  std::vector<float> maxima;
  std::vector<uint8_t> refused;  // this step, per tensor: its codec refused the gradient
  // Message path, kept across steps so that a step allocates nothing once they are large
  // enough: this rank's message, every rank's, and every rank's payload in it.
  Bytes message;
  std::vector<Bytes> gathered;
  std::vector<std::vector<std::span<const uint8_t>>> payloads;
  // Sparse codecs only (every tensor's codec sends_sparse): the split and dense paths,
  // this rank's decoded payloads and the sum, n floats each.
  std::unique_ptr<SparseExchange> sparse;
  comm::SparsePath last_path = comm::SparsePath::kAllgather;
  std::vector<float> mine, sum;
};

// A codec's encoding of tensor k; on an exception its cause goes to local_failure_ (the
// first of the step) and the caller sends zeros in its place.
template <typename Encode>
bool AllreduceStrategy::encode_or_fail(size_t k, Encode&& encode) {
  try {
    encode();
    return true;
  } catch (const std::exception& e) {
    if (local_failure_.empty()) {
      local_failure_ = "encoding the gradient of '" + tensors_[k].name + "' failed: " + e.what();
    }
    return false;
  }
}

}  // namespace gradwire::strategy
