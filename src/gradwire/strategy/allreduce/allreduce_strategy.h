// Data parallelism over allreduce, with buckets (fusion buffers) and pluggable codecs.
//
// Tensors are packed into buckets in reverse registration order (the order backward
// produces gradients, as in PyTorch DDP), each at most bucket_bytes of fp32 gradient
// (a tensor larger than that gets a bucket of its own). Per bucket:
//  * additive codecs (none, fp16): every tensor is written to the bucket's wire buffer
//    pre-scaled by 1/world, one allreduce sums it, and the sum is the average;
//  * other codecs: every tensor is encoded (with error feedback when the codec has it),
//    the bucket's payloads are allgathered as one message, and every rank decodes all
//    ranks' payloads in rank order, sums and divides by world. Decoding its own payload
//    too (instead of using its raw gradient) keeps all ranks bitwise equal.
// Tensors whose codec has a low-rank face (PowerSGD) are exchanged after the buckets, all
// together, in two allreduces per step: every tensor's P, then every tensor's Q.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy {

struct AllreduceOptions {
  std::string codec = "none";       // a layer policy (compress/policy.h): one spec, per kind, hylo
  size_t bucket_bytes = 25u << 20;  // DDP's default bucket_cap_mb = 25
};

class AllreduceStrategy : public Strategy {
 public:
  AllreduceStrategy(comm::Collectives& collectives, AllreduceOptions options);
  ~AllreduceStrategy() override;

  std::string name() const override { return "allreduce"; }
  void start(std::span<const compress::TensorInfo> tensors, const FloatSpans& params) override;
  void synchronize(const FloatSpans& grads) override;
  TrafficStats traffic() const override { return traffic_; }

  // Bucket layout, for tests and diagnostics: tensor indices per bucket.
  std::vector<std::vector<size_t>> bucket_layout() const;

 private:
  struct Bucket;
  void synchronize_additive(Bucket& bucket, const FloatSpans& grads);
  void synchronize_messages(Bucket& bucket, const FloatSpans& grads);
  void synchronize_low_rank(const FloatSpans& grads);
  // Adds `bytes` of fp32 gradient to the dense figures (as one ring allreduce).
  void count_dense(size_t bytes);

  comm::Collectives& collectives_;
  AllreduceOptions options_;
  std::vector<compress::TensorInfo> tensors_;
  std::vector<std::unique_ptr<compress::Codec>> codecs_;  // one per tensor
  std::vector<Bucket> buckets_;
  std::vector<size_t> low_rank_;            // tensors exchanged by synchronize_low_rank
  std::vector<float> p_buffer_, q_buffer_;  // their concatenated P and Q factors
  TrafficStats traffic_;
  bool started_ = false;
};

}  // namespace gradwire::strategy
