#include "gradwire/strategy/in_order_executor.h"

#include <string>

#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"

namespace gradwire::strategy {

InOrderExecutor::InOrderExecutor(comm::Collectives& turns, std::function<void(size_t bucket)> run)
    : turns_(turns), run_(std::move(run)), thread_([this] { loop(); }) {}

InOrderExecutor::~InOrderExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void InOrderExecutor::begin_step(std::vector<size_t> tensors_per_bucket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_step_) throw Error("InOrderExecutor: a step began before the last one finished");
  pending_ = std::move(tensors_per_bucket);
  next_ = 0;
  posted_ = 0;
  turn_.assign(pending_.size(), 0);
  error_ = nullptr;
  in_step_ = true;
  post_runnable();  // buckets without tensors to wait for may run at once
}

void InOrderExecutor::post_runnable() {
  const size_t before = posted_;
  while (posted_ < pending_.size() && pending_[posted_] == 0) {
    turn_[posted_++] = turns_.reserve_turn();
  }
  if (posted_ != before) wake_.notify_all();
}

bool InOrderExecutor::in_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_step_;
}

void InOrderExecutor::tensor_ready(size_t bucket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_step_ || bucket >= pending_.size() || pending_[bucket] == 0) {
    throw Error("InOrderExecutor: bucket " + std::to_string(bucket) +
                " reported ready more often than it has tensors");
  }
  if (--pending_[bucket] == 0) post_runnable();
}

void InOrderExecutor::finish_step() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!in_step_) return;
  done_.wait(lock, [&] { return next_ == pending_.size(); });
  in_step_ = false;
  if (error_) {
    auto error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void InOrderExecutor::loop() {
  Timeline::global().name_thread("exchange");
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || (in_step_ && next_ < posted_); });
    if (stop_) {
      // The buckets made runnable but not run pass their turns, in order, so that the
      // communicator's later callers are not kept waiting for them.
      for (; next_ < posted_; ++next_) {
        const uint64_t turn = turn_[next_];
        lock.unlock();
        try {
          turns_.begin_turn(turn);
        } catch (...) {
          // An earlier turn never ended (its collective is stuck): ending ours skips it.
        }
        turns_.end_turn(turn);
        lock.lock();
      }
      return;
    }
    const size_t bucket = next_;
    const uint64_t turn = turn_[bucket];
    // After a failure the remaining buckets are skipped as they become ready (their turns
    // pass): the step is lost and finish_step() reports why.
    const bool skip = error_ != nullptr;
    lock.unlock();
    std::exception_ptr error;
    try {
      turns_.begin_turn(turn);
      if (!skip) run_(bucket);
    } catch (...) {
      error = std::current_exception();
    }
    turns_.end_turn(turn);
    lock.lock();
    if (error && !error_) error_ = error;
    if (++next_ == pending_.size()) done_.notify_all();
  }
}

}  // namespace gradwire::strategy
