// AllreduceStrategy's message path: buckets of codecs without an additive or shared-scale
// face, whose payloads go by allgather, or, for sparse codecs, by the split and dense paths
// of sparse_exchange.h.
#include <algorithm>
#include <cstring>

#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/allreduce/allreduce_bucket.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"
#include "gradwire/strategy/allreduce/sparse_exchange.h"

namespace gradwire::strategy {

// Message layout per bucket and rank: for each tensor of the bucket, u32 length + payload.
void AllreduceStrategy::synchronize_messages(Bucket& bucket, const FloatSpans& grads) {
  std::string args = timeline_args(bucket);
  {
    // Each payload is encoded straight into the message, behind its length.
    TimelineSpan span("encode", "compute");
    span.set_args(args);
    bucket.message.clear();
    for (size_t k : bucket.tensors) {
      const size_t length_at = bucket.message.size();
      bucket.message.resize(length_at + sizeof(uint32_t));
      if (!encode_or_fail(k, [&] { codecs_[k]->encode(grads[k], bucket.message); })) {
        // An empty message: this rank contributes nothing to the bucket (every rank reads
        // it as zeros), and the step's status says it failed.
        bucket.message.clear();
        break;
      }
      const auto length =
          static_cast<uint32_t>(bucket.message.size() - length_at - sizeof(uint32_t));
      std::memcpy(bucket.message.data() + length_at, &length, sizeof length);
    }
  }
  if (bucket.sparse) {
    bucket.last_path = next_sparse_path(bucket, options_.link);
    if (!args.empty()) {
      args.back() = ',';
      args += "\"path\":\"" + std::string(comm::sparse_path_name(bucket.last_path)) + "\"}";
    }
    if (bucket.last_path != comm::SparsePath::kAllgather) {
      synchronize_sparse(bucket, grads, bucket.last_path, args);
      return;
    }
  }
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    collectives_.allgather_bytes(bucket.message, bucket.gathered);
  }
  TimelineSpan decode_span("decode", "compute");
  decode_span.set_args(args);
  const std::vector<Bytes>& all = bucket.gathered;

  // Split every rank's message before touching any gradient, so a malformed one changes
  // nothing.
  const int world = collectives_.size();
  auto& payloads = bucket.payloads;
  payloads.resize(world);
  for (int r = 0; r < world; ++r) {
    payloads[r].clear();
    if (all[r].empty()) continue;  // rank r could not encode: it contributes zeros
    ByteReader reader(all[r]);
    try {
      for (size_t j = 0; j < bucket.tensors.size(); ++j) {
        const uint32_t length = reader.get<uint32_t>("payload length");
        payloads[r].push_back(reader.get_bytes(length, "payload"));
      }
      reader.expect_end("bucket message");
    } catch (const PayloadError& e) {
      throw PayloadError("gradient message from rank " + std::to_string(r) + ": " + e.what());
    }
  }
  const float scale = 1.0f / static_cast<float>(world);
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const size_t k = bucket.tensors[j];
    std::span<float> grad = grads[k];
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (int r = 0; r < world; ++r) {
      if (payloads[r].empty()) continue;
      try {
        codecs_[k]->decode_add(payloads[r][j], grad);
      } catch (const MismatchError& e) {
        throw MismatchError("payload from rank " + std::to_string(r) + " for '" + tensors_[k].name +
                            "': " + e.what());
      } catch (const PayloadError& e) {
        throw PayloadError("payload from rank " + std::to_string(r) + " for '" + tensors_[k].name +
                           "': " + e.what());
      }
    }
    for (float& v : grad) v *= scale;
  }
  if (bucket.sparse) {
    uint64_t payload_bytes = 0, union_count = 0;
    for (int r = 0; r < world; ++r) {
      for (const auto& payload : payloads[r]) payload_bytes += payload.size();
    }
    for (size_t k : bucket.tensors) {
      for (const float v : grads[k]) union_count += v != 0.0f;
    }
    bucket.sparse->record_allgather(payload_bytes, union_count);
  }
}

void AllreduceStrategy::synchronize_sparse(Bucket& bucket, const FloatSpans& grads,
                                           comm::SparsePath path, const std::string& args) {
  uint64_t payload_bytes = 0;
  {
    // This rank's payloads as every rank would decode them.
    TimelineSpan span("decode", "compute");
    span.set_args(args);
    bucket.mine.assign(bucket.elements, 0.0f);
    ByteReader reader(bucket.message);
    // An empty message (this rank could not encode) contributes zeros.
    for (size_t j = 0; j < bucket.tensors.size() && !bucket.message.empty(); ++j) {
      const size_t k = bucket.tensors[j];
      const uint32_t length = reader.get<uint32_t>("payload length");
      codecs_[k]->decode_add(
          reader.get_bytes(length, "payload"),
          std::span<float>(bucket.mine).subspan(bucket.offsets[j], grads[k].size()));
      payload_bytes += length;
    }
  }
  bucket.sum.resize(bucket.elements);
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    if (path == comm::SparsePath::kSplit) {
      bucket.sparse->split(collectives_, bucket.mine, payload_bytes, bucket.sum);
    } else {
      bucket.sparse->dense(collectives_, bucket.mine, payload_bytes, bucket.sum);
    }
  }
  TimelineSpan span("decode", "compute");
  span.set_args(args);
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const float* sum = bucket.sum.data() + bucket.offsets[j];
    std::span<float> grad = grads[bucket.tensors[j]];
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = sum[i] * scale;
  }
}

}  // namespace gradwire::strategy
