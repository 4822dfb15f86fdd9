#include "gradwire/comm/ordered_collectives.h"

#include <algorithm>
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
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  // The timeout runs from the last progress (or from this wait's start, if later): a holder
  // that keeps completing operations is waited for however long its turn lasts.
  while (serving_ != turn) {
    const Clock::time_point deadline = std::max(progress_at_, started) + inner_->timeout();
    if (Clock::now() >= deadline) {
      abandoned_.insert(turn);
      throw TimeoutError("rank " + std::to_string(inner_->rank()) + " waited " +
                         std::to_string(inner_->timeout().count() / 1000) +
                         " s for its turn on the communicator (turn " + std::to_string(turn) +
                         ", serving " + std::to_string(serving_) +
                         ") without progress: an earlier collective of this process never "
                         "finished");
    }
    served_.wait_until(lock, deadline);
  }
  progress_at_ = Clock::now();
  t_in_turn = this;
}

void OrderedCollectives::skip_abandoned() {
  while (!abandoned_.empty() && *abandoned_.begin() <= serving_) {
    if (*abandoned_.begin() == serving_) ++serving_;
    abandoned_.erase(abandoned_.begin());
  }
}

void OrderedCollectives::end_turn(uint64_t turn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    progress_at_ = std::chrono::steady_clock::now();
    // An abandoned turn not yet reached stays to be skipped; one ended by its holder after
    // a failed begin_turn (the executor passes its turns so) is the same turn.
    if (abandoned_.count(turn) == 0 || serving_ == turn) {
      if (serving_ <= turn) serving_ = turn + 1;
      abandoned_.erase(turn);
    }
    skip_abandoned();
  }
  if (t_in_turn == this) t_in_turn = nullptr;
  served_.notify_all();
}

void OrderedCollectives::note_progress() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    progress_at_ = std::chrono::steady_clock::now();
  }
  served_.notify_all();
}

std::unique_ptr<Work> OrderedCollectives::allreduce_sum_async(void* data, size_t count,
                                                              DataType type) {
  CallTurn turn(*this);
  inner_->allreduce_sum_async(data, count, type)->wait();
  note_progress();
  return std::make_unique<CompletedWork>();
}

void OrderedCollectives::allreduce_max(float* data, size_t count) {
  CallTurn turn(*this);
  inner_->allreduce_max(data, count);
  note_progress();
}

void OrderedCollectives::allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) {
  CallTurn turn(*this);
  inner_->allgather_bytes(data, out);
  note_progress();
}

void OrderedCollectives::alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) {
  CallTurn turn(*this);
  inner_->alltoall_bytes(to, out);
  note_progress();
}

void OrderedCollectives::broadcast(void* data, size_t bytes, int root) {
  CallTurn turn(*this);
  inner_->broadcast(data, bytes, root);
  note_progress();
}

void OrderedCollectives::barrier() {
  CallTurn turn(*this);
  inner_->barrier();
  note_progress();
}

}  // namespace gradwire::comm
