#include "gradwire/comm/ordered_collectives.h"

#include <string>

#include "gradwire/core/error.h"

namespace gradwire::comm {
namespace {
// The communicator whose turn this thread holds (null: none).
thread_local const OrderedCollectives* t_in_turn = nullptr;
}  // namespace

class OrderedCollectives::CallTurn {
 public:
  explicit CallTurn(OrderedCollectives& owner) : owner_(owner), own_(t_in_turn != &owner) {
    if (!own_) return;
    turn_ = owner_.reserve_turn();
    owner_.begin_turn(turn_);
  }
  ~CallTurn() {
    if (own_) owner_.end_turn(turn_);
  }
  CallTurn(const CallTurn&) = delete;
  CallTurn& operator=(const CallTurn&) = delete;

 private:
  OrderedCollectives& owner_;
  bool own_;
  uint64_t turn_ = 0;
};

OrderedCollectives::OrderedCollectives(std::unique_ptr<Collectives> inner)
    : inner_(std::move(inner)) {
  if (!inner_) throw Error("OrderedCollectives needs a communicator");
}

uint64_t OrderedCollectives::reserve_turn() {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_ticket_++;
}

void OrderedCollectives::begin_turn(uint64_t turn) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!served_.wait_for(lock, inner_->timeout(), [&] { return serving_ == turn; })) {
    throw TimeoutError("rank " + std::to_string(inner_->rank()) + " waited " +
                       std::to_string(inner_->timeout().count() / 1000) +
                       " s for its turn on the communicator (turn " + std::to_string(turn) +
                       ", serving " + std::to_string(serving_) +
                       "): an earlier collective of this process never finished");
  }
  t_in_turn = this;
}

void OrderedCollectives::end_turn(uint64_t turn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (serving_ <= turn) serving_ = turn + 1;
  }
  if (t_in_turn == this) t_in_turn = nullptr;
  served_.notify_all();
}

std::unique_ptr<Work> OrderedCollectives::allreduce_sum_async(void* data, size_t count,
                                                              DataType type) {
  CallTurn turn(*this);
  inner_->allreduce_sum_async(data, count, type)->wait();
  return std::make_unique<CompletedWork>();
}

void OrderedCollectives::allreduce_max(float* data, size_t count) {
  CallTurn turn(*this);
  inner_->allreduce_max(data, count);
}

void OrderedCollectives::allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) {
  CallTurn turn(*this);
  inner_->allgather_bytes(data, out);
}

void OrderedCollectives::alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) {
  CallTurn turn(*this);
  inner_->alltoall_bytes(to, out);
}

void OrderedCollectives::broadcast(void* data, size_t bytes, int root) {
  CallTurn turn(*this);
  inner_->broadcast(data, bytes, root);
}

void OrderedCollectives::barrier() {
  CallTurn turn(*this);
  inner_->barrier();
}

}  // namespace gradwire::comm
