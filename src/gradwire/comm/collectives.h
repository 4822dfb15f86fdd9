// Collectives: the only way strategies talk to other ranks for synchronous exchange.
//
// Strategies are written against this interface, never against Gloo or NCCL headers, so
// they run unchanged over GlooCollectives (real processes, c10d ProcessGroupGloo) and
// LocalCollectives (threads in one process, for tests).
//
// Contracts shared by every implementation:
//  * All ranks call the same collectives in the same order (as in MPI/c10d).
//  * Results are bitwise identical on every rank (sums are reduced in one order).
//  * Every call is bounded by timeout(): when a peer does not arrive in time, or is gone,
//    the call throws TimeoutError (or Error) naming the ranks that did not arrive, instead
//    of hanging.
//  * traffic() counts, per rank, what it contributed (its allreduce buffer, its allgather
//    data, a broadcast root's buffer) and what its sends put on the network in Gloo's
//    algorithms (wire_bytes.h); the two differ by the algorithm's factor, e.g. about
//    2(W-1)/W for a ring allreduce and (W-1), plus padding, for an allgather; an alltoall
//    contributes and sends what goes to the other ranks, plus a round of sizes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradwire/comm/wire_bytes.h"
#include "gradwire/core/bytes.h"

namespace gradwire::comm {

// kInt8 sums wrap on overflow (as Gloo's do): callers keep sums within [-128, 127].
enum class DataType : uint8_t { kFloat32, kFloat16, kInt8 };
size_t data_type_size(DataType type);
const char* data_type_name(DataType type);

// An operation in flight. wait() blocks until it is complete on this rank, and rethrows
// its error (with the missing ranks named) if it failed.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  // Starts an in-place elementwise sum over `count` elements at `data`. `data` must stay
  // valid and untouched until the returned Work's wait() returns.
  virtual std::unique_ptr<Work> allreduce_sum_async(void* data, size_t count, DataType type) = 0;
  void allreduce_sum(void* data, size_t count, DataType type) {
    allreduce_sum_async(data, count, type)->wait();
  }
  // In-place elementwise maximum over ranks.
  virtual void allreduce_max(float* data, size_t count) = 0;

  // Every rank contributes `data` (sizes may differ between ranks); `out[r]` becomes rank
  // r's bytes. Buffers kept by the caller across calls are reused (no allocation once
  // they are large enough).
  virtual void allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) = 0;
  std::vector<Bytes> allgather_bytes(std::span<const uint8_t> data) {
    std::vector<Bytes> out;
    allgather_bytes(data, out);
    return out;
  }

  // Personalised exchange (MPI_Alltoallv): to[r] goes to rank r, and out[r] becomes what
  // rank r sent to this rank (out[rank()] is to[rank()]). to.size() must be size(); sizes
  // may differ per pair and per rank. A first round exchanges the sizes (8 bytes a pair).
  // Buffers in `out` keep their capacity from call to call.
  virtual void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) = 0;

  // Copies `bytes` bytes at `data` from `root` to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;

  virtual void barrier() = 0;

  virtual const CollectiveTraffic& traffic() const { return traffic_; }

  // Order across threads (ordered_collectives.h). A thread that decides now what will be
  // issued later, on another thread, reserves its turn here; that thread issues it between
  // begin_turn() and end_turn(), and every call made meanwhile from other threads waits its
  // own turn. Every reserved turn must be begun and ended once. The defaults order nothing
  // (a communicator used from one thread at a time).
  virtual uint64_t reserve_turn() { return 0; }
  virtual void begin_turn(uint64_t turn) {}
  virtual void end_turn(uint64_t turn) {}

 protected:
  // Implementations call these once per operation, so every one counts alike.
  void count_allreduce(size_t bytes) {
    traffic_.contributed += bytes;
    traffic_.on_wire += ring_allreduce_wire_bytes(bytes, size());
  }
  // `data` bytes of this rank, padded to `padded` for the exchange; a first round
  // exchanges every rank's size (8 bytes).
  void count_allgather(size_t data, size_t padded) {
    traffic_.contributed += data;
    traffic_.on_wire += ring_allgather_wire_bytes(sizeof(int64_t), size()) +
                        ring_allgather_wire_bytes(padded, size());
  }
  // What this rank sends to the other ranks in an alltoall (to[rank()] stays here).
  void count_alltoall(std::span<const Bytes> to) {
    uint64_t sent = 0;
    for (size_t r = 0; r < to.size(); ++r) {
      if (static_cast<int>(r) != rank()) sent += to[r].size();
    }
    traffic_.contributed += sent;
    traffic_.on_wire += pairwise_alltoall_wire_bytes(sent, size());
  }
  void count_broadcast(size_t bytes, int root) {
    if (rank() == root) traffic_.contributed += bytes;
    traffic_.on_wire += tree_broadcast_wire_bytes(bytes, size(), rank(), root);
  }

 private:
  CollectiveTraffic traffic_;
};

// A Work that is already complete (or already failed, rethrowing on wait()).
class CompletedWork : public Work {
 public:
  explicit CompletedWork(std::exception_ptr error = nullptr) : error_(std::move(error)) {}
  void wait() override;

 private:
  std::exception_ptr error_;
};

// "ranks 2, 3" / "rank 2" — for messages.
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace gradwire::comm
