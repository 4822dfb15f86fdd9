// InOrderExecutor: runs a step's bucket exchanges on one thread of its own, strictly in
// bucket order, each as soon as every tensor of its bucket is ready.
//
// This is what lets exchanges start during backward (overlap) while every rank still
// issues the same collectives in the same order: a bucket that becomes ready early waits
// for the buckets before it, exactly as in PyTorch DDP's Reducer. The tensors' readiness
// is reported from any thread (autograd's, or the caller of synchronize()); the work of
// bucket b, run(b), happens on the executor's thread. When a bucket becomes runnable, its
// turn on the communicator is reserved on the reporting thread (Collectives::reserve_turn,
// ordered_collectives.h), and run(b) happens inside that turn: collectives that other
// threads issue meanwhile come before or after it in the order of the reporting thread.
//
//   begin_step(counts)   counts[b] = tensors of bucket b that will be reported this step
//   tensor_ready(b)      one more tensor of bucket b is ready (any thread)
//   finish_step()        waits until every bucket ran; rethrows the first error
// Destruction waits for the bucket running, if any (a collective that never completes
// ends at the communicator's timeout), runs no other, and passes the turns of the buckets
// that were runnable.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "gradwire/comm/collectives.h"

namespace gradwire::strategy {

class InOrderExecutor {
 public:
  InOrderExecutor(comm::Collectives& turns, std::function<void(size_t bucket)> run);
  ~InOrderExecutor();
  InOrderExecutor(const InOrderExecutor&) = delete;
  InOrderExecutor& operator=(const InOrderExecutor&) = delete;

  // Starts a step. Throws if the previous one was not finished.
  void begin_step(std::vector<size_t> tensors_per_bucket);
  bool in_step() const;
  void tensor_ready(size_t bucket);
  // Blocks until every bucket of the step ran (or one failed: the rest are skipped, and
  // its exception is rethrown here). Ends the step.
  void finish_step();

 private:
  void loop();
  // Reserves the turns of the buckets that became runnable, in order. Holds mutex_.
  void post_runnable();

  comm::Collectives& turns_;
  std::function<void(size_t)> run_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the executor's thread waits on it
  std::condition_variable done_;  // finish_step() waits on it
  std::vector<size_t> pending_;   // tensors still to be reported, per bucket
  size_t next_ = 0;               // the next bucket to run
  size_t posted_ = 0;             // buckets runnable so far, each with its turn
  std::vector<uint64_t> turn_;    // per bucket: its turn on the communicator
  bool in_step_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after every member above is ready
};

}  // namespace gradwire::strategy
