// AllreduceStrategy's reduce-scatter path: buckets of fp16, bf16, int8 or int4 averaged by
// strategy/codec_reduce_scatter.h, summed in fp32 with every level of the codec.
//
// Which buckets take it (AllreduceOptions::quantized_path "auto"), the world being W:
//  * int8 where its shared scale has fewer than kEnoughSharedScaleLevels levels per sign
//    (floor(127 / W): 63 at 2 ranks, 31 at 4, 15 at 8, 7 at 16, none beyond 127): the
//    reduce-scatter keeps 127 at any W for the same bytes on the wire;
//  * bf16 and int4 (no allreduce: their payloads are allgathered, W-1 a rank against the
//    reduce-scatter's 2(W-1)/W) where the cost model over AllreduceOptions::link predicts
//    it faster: from 3 ranks on, once the payloads outweigh its second round of messages;
//  * fp16 from 3 ranks on a link of kFp16ReduceScatterBitsPerS or faster: the same bytes
//    either way, but its ring sums in Gloo's fp16, element by element in software, where
//    the reduce-scatter casts with F16C and sums in fp32; that sum is what a fast link
//    waits on, while on a slow one the ring moves the bytes sooner (measured below);
//  * int8 with levels enough keeps its ring: the same bytes and messages, no second
//    rounding.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/strategy/allreduce/allreduce_bucket.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::strategy {
namespace {

// The shared scale's levels per sign below which int8 takes the reduce-scatter. Set by
// the aggregate's error (on cnn's gradients the ring's is 1.6x, 3.5x and 7x the
// reduce-scatter's at 2, 4 and 8 ranks); trained for 3 epochs on cnn, neither path's
// accuracy differs from fp32's by what 3 seeds resolve up to 8 ranks (docs/RESULTS.md,
// "int8's ring against the reduce-scatter").
constexpr int kEnoughSharedScaleLevels = 31;

// The link from which fp16 takes the reduce-scatter (from 3 ranks). Measured on emulated
// hosts sharing 2 cores (docs/RESULTS.md, "16-bit payloads at 1 and 10 Gbit"): trained on
// cnn-wide at 4 ranks, the reduce-scatter takes 0.79-0.85x the ring's time at 1 Gbit/s
// and 0.76-0.84x at 10 Gbit/s (3 seeds); one bucket timed alone (docs/SCALING.md) says
// the same at 4 ranks, while the ring is faster at 2 ranks on 1 Gbit/s and at 2 to 8
// ranks on 100 Mbit/s (at 2 ranks on 10 Gbit/s the reduce-scatter was faster too, but
// not trained: the rule keeps 2 ranks on the ring).
constexpr double kFp16ReduceScatterBitsPerS = 1e9;

bool quantizer(compress::CodecId id) {
  return id == compress::CodecId::kFp16 || id == compress::CodecId::kBf16 ||
         id == compress::CodecId::kInt8 || id == compress::CodecId::kInt4;
}

}  // namespace

bool AllreduceStrategy::takes_reduce_scatter(const std::vector<size_t>& tensors, size_t elements) {
  const int world = collectives_.size();
  if (world < 2 || tensors.empty() || elements == 0 || options_.quantized_path == "ring") {
    return false;
  }
  compress::Codec& first = *codecs_[tensors.front()];
  if (!quantizer(first.id())) return false;
  const std::string spec = first.spec();
  for (size_t k : tensors) {
    if (codecs_[k]->spec() != spec) return false;  // one codec for the bucket's ranges
  }
  // Momentum correction lives in the tensors' own error feedback.
  const Spec parsed = Spec::parse(spec);
  if (const auto m = parsed.params.find("momentum");
      m != parsed.params.end() && std::stod(m->second) > 0) {
    return false;
  }
  if (options_.quantized_path == "reduce-scatter") return true;
  if (first.shared_scale() != nullptr) {
    return compress::shared_scale_levels(world) < kEnoughSharedScaleLevels;
  }
  const comm::LinkModel& link = options_.link;
  if (first.additive_wire()) {  // fp16
    return world >= 3 && 8.0 / link.beta_s_per_byte >= 0.999 * kFp16ReduceScatterBitsPerS;
  }
  // bf16, int4: the cost model, this path against the allgather of the bucket's message
  // (every tensor's payload behind its length).
  double message = 0;
  std::vector<float> zeros;
  for (size_t k : tensors) {
    auto codec = compress::create_codec(spec, tensors_[k]);
    zeros.assign(tensors_[k].numel(), 0.0f);
    Bytes payload;
    codec->encode(zeros, payload);
    message += static_cast<double>(payload.size() + sizeof(uint32_t));
  }
  const CodecReduceScatter probe(collectives_, spec, "<path probe>", elements);
  return probe.predicted_seconds(link) < comm::allgather_seconds(link, message, world);
}

std::pair<CodecReduceScatter*, size_t> AllreduceStrategy::reduce_scatter_of(size_t k) const {
  for (const Bucket& bucket : buckets_) {
    if (!bucket.reduce_scatter) continue;
    for (size_t j = 0; j < bucket.tensors.size(); ++j) {
      if (bucket.tensors[j] == k) return {bucket.reduce_scatter.get(), bucket.offsets[j]};
    }
  }
  return {nullptr, 0};
}

void AllreduceStrategy::synchronize_reduce_scatter(Bucket& bucket, const FloatSpans& grads) {
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const auto& g = grads[bucket.tensors[j]];
    std::copy(g.begin(), g.end(), bucket.flat.begin() + static_cast<ptrdiff_t>(bucket.offsets[j]));
  }
  // A rank whose codec refuses its values (non-finite) sends nothing and every rank gets
  // zeros for the bucket; the step's status says it failed, naming the tensor here.
  const auto refusing = bucket.reduce_scatter->average(bucket.flat);
  const std::string& why = bucket.reduce_scatter->refused_here();
  if (!refusing.empty() && !why.empty() && local_failure_.empty()) {
    size_t culprit = bucket.tensors.front();
    for (size_t k : bucket.tensors) {
      const auto& g = grads[k];
      if (std::any_of(g.begin(), g.end(), [](float v) { return !std::isfinite(v); })) {
        culprit = k;
        break;
      }
    }
    local_failure_ = "encoding the gradient of '" + tensors_[culprit].name + "' failed: " + why;
  }
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    auto& g = grads[bucket.tensors[j]];
    std::copy_n(bucket.flat.begin() + static_cast<ptrdiff_t>(bucket.offsets[j]), g.size(),
                g.begin());
  }
}

}  // namespace gradwire::strategy
