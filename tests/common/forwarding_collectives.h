// A Collectives that hands every operation to another: the base of the tests' fakes
// (paced, failing, recording, slow), which override only what they change.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/core/bytes.h"

namespace gradwire {

class ForwardingCollectives : public comm::Collectives {
 public:
  // Forwards to `inner`, which outlives this.
  explicit ForwardingCollectives(comm::Collectives& inner) : inner_(&inner) {}
  // Forwards to `inner`, which this owns (a Context's communicator).
  explicit ForwardingCollectives(std::unique_ptr<comm::Collectives> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  const comm::CollectiveTraffic& traffic() const override { return inner_->traffic(); }
  std::unique_ptr<comm::Work> allreduce_sum_async(void* data, size_t count,
                                                  comm::DataType type) override {
    return inner_->allreduce_sum_async(data, count, type);
  }
  void allreduce_max(float* data, size_t count) override { inner_->allreduce_max(data, count); }
  using comm::Collectives::allgather_bytes;
  void allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) override {
    inner_->allgather_bytes(data, out);
  }
  void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) override {
    inner_->alltoall_bytes(to, out);
  }
  void broadcast(void* data, size_t bytes, int root) override {
    inner_->broadcast(data, bytes, root);
  }
  void barrier() override { inner_->barrier(); }

 protected:
  comm::Collectives& inner() { return *inner_; }

 private:
  std::unique_ptr<comm::Collectives> owned_;
  comm::Collectives* inner_;
};

}  // namespace gradwire
