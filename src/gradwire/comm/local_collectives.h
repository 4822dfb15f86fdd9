// LocalCollectives: N ranks as threads of one process, for fast deterministic tests of
// strategies (the in-process harness of Gloo's test/base_test.h) and for world size 1.
//
// Every collective is an exchange: each rank deposits its bytes, the last to arrive
// publishes all of them, and each rank computes its result locally in rank order, so
// results are bitwise identical across ranks. A rank that does not arrive within the
// timeout makes the others throw TimeoutError naming it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"

namespace gradwire::comm {

class LocalGroup {
 public:
  LocalGroup(int size, std::chrono::milliseconds timeout);

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Deposits `contribution` for `rank` and blocks until every rank has deposited (or the
  // timeout expires); returns every rank's contribution indexed by rank.
  std::shared_ptr<const std::vector<Bytes>> exchange(int rank, Bytes contribution,
                                                     const std::string& op);

 private:
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable arrived_cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<Bytes> slots_;
  std::vector<bool> present_;
  std::shared_ptr<const std::vector<Bytes>> published_;
  std::string broken_;  // set after a timeout: later calls fail fast with this message
};

class LocalCollectives : public Collectives {
 public:
  LocalCollectives(std::shared_ptr<LocalGroup> group, int rank);

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::chrono::milliseconds timeout() const override { return group_->timeout(); }

  std::unique_ptr<Work> allreduce_sum_async(void* data, size_t count, DataType type) override;
  void allreduce_max(float* data, size_t count) override;
  using Collectives::allgather_bytes;
  void allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) override;
  void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;

 private:
  std::shared_ptr<LocalGroup> group_;
  int rank_;
  uint64_t sequence_ = 0;
};

// Runs fn(collectives) on `size` threads sharing one LocalGroup and rethrows the first
// exception any rank threw (after all threads finished).
void run_local_ranks(int size, std::chrono::milliseconds timeout,
                     const std::function<void(Collectives&)>& fn);

}  // namespace gradwire::comm
