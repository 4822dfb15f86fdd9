#include "gradwire/strategy/allreduce/in_order_executor.h"

#include <string>

#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"

namespace gradwire::strategy {

InOrderExecutor::InOrderExecutor(std::function<void(size_t bucket)> run)
    : run_(std::move(run)), thread_([this] { loop(); }) {}

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
  error_ = nullptr;
  in_step_ = true;
  wake_.notify_all();  // buckets without tensors to wait for may run at once
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
  if (--pending_[bucket] == 0 && bucket == next_) wake_.notify_all();
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
    wake_.wait(lock, [&] {
      return stop_ || (in_step_ && next_ < pending_.size() && pending_[next_] == 0);
    });
    if (stop_) return;
    const size_t bucket = next_;
    if (!error_) {
      lock.unlock();
      try {
        run_(bucket);
      } catch (...) {
        lock.lock();
        error_ = std::current_exception();
        lock.unlock();
      }
      lock.lock();
    }
    // After a failure the remaining buckets are skipped as they become ready: the step
    // is lost and finish_step() reports why.
    if (++next_ == pending_.size()) done_.notify_all();
  }
}

}  // namespace gradwire::strategy
