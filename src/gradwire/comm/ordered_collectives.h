// OrderedCollectives: one communicator shared by several threads of a process, in an order
// that is the same on every rank.
//
// Collectives must be issued in the same order on every rank. A Context's communicator is
// used by the program's thread (the status collective at the end of backward, buffers,
// Context::allgather) and by each DistributedOptimizer's exchange thread (the buckets,
// during backward). Their order is decided where it is deterministic, on the program's
// thread: a bucket's turn is reserved when the gradient hooks make it ready
// (InOrderExecutor), and a call from a thread that holds no turn takes the next one when
// it is made. Turns are served strictly in the order they were reserved (a ticket lock),
// so two optimizers whose buckets complete in one backward, or a collective issued between
// backward and step, reach the wire in the same order on every rank.
//
// A call made inside a turn (the exchange thread running its bucket) passes straight
// through. A turn waits as long as the communicator makes progress (a turn ends, or an
// operation inside a turn completes: a DiLoCo exchange of many operations may hold its turn
// longer than the timeout in all); one that sees no progress for the communicator's
// timeout throws TimeoutError naming the turn it waited for, and is abandoned: when the
// turns before it end, it is skipped, so the communicator serves the later callers (the
// rank has then issued one collective fewer than its peers, and its caller has the error).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>

#include "gradwire/comm/collectives.h"

namespace gradwire::comm {

class OrderedCollectives : public Collectives {
 public:
  explicit OrderedCollectives(std::unique_ptr<Collectives> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  const CollectiveTraffic& traffic() const override { return inner_->traffic(); }

  // Completes before returning (the turn covers the whole operation).
  std::unique_ptr<Work> allreduce_sum_async(void* data, size_t count, DataType type) override;
  void allreduce_max(float* data, size_t count) override;
  using Collectives::allgather_bytes;
  void allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) override;
  void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;

  uint64_t reserve_turn() override;
  void begin_turn(uint64_t turn) override;
  void end_turn(uint64_t turn) override;

 private:
  // The turn of a call from outside any turn: reserved, begun and ended around it.
  class CallTurn;
  // An operation completed: the turn holder is alive (turns waiting measure from here).
  void note_progress();
  // Advances serving_ past the abandoned turns it reached. Holds mutex_.
  void skip_abandoned();

  std::unique_ptr<Collectives> inner_;
  std::mutex mutex_;
  std::condition_variable served_;
  uint64_t next_ticket_ = 0;      // the next turn to reserve
  uint64_t serving_ = 0;          // the turn that may issue now
  std::set<uint64_t> abandoned_;  // turns whose wait timed out: skipped when reached
  std::chrono::steady_clock::time_point progress_at_ = std::chrono::steady_clock::now();
};

}  // namespace gradwire::comm
