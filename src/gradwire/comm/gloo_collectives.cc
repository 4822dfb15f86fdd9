#include "gradwire/comm/gloo_collectives.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "gradwire/core/error.h"
#include "gradwire/core/failure_report.h"

namespace gradwire::comm {
namespace {

at::ScalarType scalar_type(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return at::kFloat;
    case DataType::kFloat16:
      return at::kHalf;
    case DataType::kInt8:
      return at::kChar;
  }
  return at::kFloat;
}

at::Tensor byte_view(void* data, size_t bytes) {
  return at::from_blob(data, {static_cast<int64_t>(bytes)}, at::kByte);
}

// Hang diagnosis. Each rank counts its collectives (the sequence). A rank that has waited
// in collective #n longer than GlooOptions::slow_after writes n to the store under its
// progress key; a fast collective writes nothing, so the store costs no round trip on the
// critical path. When a collective fails, the ranks whose published progress is below n
// are the ones that never arrived: every rank that did arrive was waiting, and so has
// published n.
// A collective that fails at once (a peer exited and its connections closed) publishes n
// too, and waits up to twice slow_after for the others to publish: each rank still alive
// and in #n has failed as well or has waited past slow_after by then. The ranks still
// behind are named as not having reached #n: a rank that exited, or one still before it.
std::string progress_key(int rank) { return "progress/" + std::to_string(rank); }

class GlooCollectives;

// Gloo writes to its sockets with writev, which raises SIGPIPE in the writing thread once
// the peer has closed the connection; under the default disposition that kills this
// process before the failed write can become an error naming the peer (a rank that exits
// would take its survivors down by signal). Every thread that writes to the group's sockets
// blocks SIGPIPE while it does: the group's threads (the process group's workers, the Gloo
// device's event loop) are made while the creating thread blocks it, so they start with it
// blocked; a caller's thread blocks it while it launches an operation (send and receive
// post their first write on the caller's thread) or talks to the store. The write then
// fails with EPIPE and the collective fails as any other. The process's disposition, and
// the program's threads outside these calls, are left as the program set them.
//
// A scope that blocks SIGPIPE on this thread (nothing when it already was). A SIGPIPE the
// scope's writes raised is pending on this thread when it ends: it is taken (sigtimedwait)
// before the mask is put back, so that it is not delivered then.
class SigpipeBlockedHere {
 public:
  SigpipeBlockedHere() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t previous;
    blocked_ = ::pthread_sigmask(SIG_BLOCK, &pipe_, &previous) == 0 &&
               sigismember(&previous, SIGPIPE) == 0;
  }
  ~SigpipeBlockedHere() {
    if (!blocked_) return;
    sigset_t pending;
    if (::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{0, 0};
      ::sigtimedwait(&pipe_, nullptr, &now);
    }
    ::pthread_sigmask(SIG_UNBLOCK, &pipe_, nullptr);
  }
  SigpipeBlockedHere(const SigpipeBlockedHere&) = delete;
  SigpipeBlockedHere& operator=(const SigpipeBlockedHere&) = delete;

 private:
  sigset_t pipe_;
  bool blocked_ = false;  // by this scope
};

// The devices torch.distributed gives a Gloo group (torch/csrc/distributed/c10d/init.cpp):
// one per interface of GLOO_SOCKET_IFNAME, else the hostname's address.
std::vector<std::shared_ptr<::gloo::transport::Device>> torch_default_devices() {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  const char* names = std::getenv("GLOO_SOCKET_IFNAME");
  std::string list = names ? names : "";
  size_t start = 0;
  while (start < list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    if (end > start) {
      devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForInterface(list.substr(start, end - start)));
    }
    start = end + 1;
  }
  if (devices.empty()) devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return devices;
}

// How a work is waited for. c10d's collective works survive a timed wait that expires, so
// a collective is probed (a short wait, then the progress is published and the rest of the
// timeout waited out). Its send and receive works do not: a timed wait that expires
// completes them with a timeout error (the transfer is abandoned), so a send or receive
// that merely takes longer than the probe, a large message on a slow link, would fail.
// They wait out the group's timeout at once, and a failure names the peer, not the ranks
// behind (the collective before every alltoall names those).
enum class Wait { kProbed, kWholeTimeout };

class GlooWork : public Work {
 public:
  GlooWork(GlooCollectives* owner, c10::intrusive_ptr<c10d::Work> work, uint64_t sequence,
           std::string op, Wait how = Wait::kProbed)
      : owner_(owner), work_(std::move(work)), sequence_(sequence), op_(std::move(op)), how_(how) {}
  void wait() override;

 private:
  GlooCollectives* owner_;
  c10::intrusive_ptr<c10d::Work> work_;
  uint64_t sequence_;
  std::string op_;
  Wait how_;
};

class GlooCollectives : public Collectives {
 public:
  GlooCollectives(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                  const GlooOptions& options)
      : store_(std::move(store)),
        rank_(rank),
        size_(size),
        timeout_(options.timeout),
        slow_after_(std::min(options.slow_after, options.timeout / 4)),
        failure_report_file_(options.failure_report_file),
        leave_together_(options.leave_together) {
    const SigpipeBlockedHere sigpipe_blocked;  // inherited by every thread made below
    auto gloo_options = c10d::ProcessGroupGloo::Options::create();
    gloo_options->timeout = options.timeout;
    try {
      if (!options.bind_interface.empty()) {
        gloo_options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForInterface(options.bind_interface));
      } else if (!options.bind_hostname.empty()) {
        gloo_options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname(options.bind_hostname));
      } else {
        gloo_options->devices = torch_default_devices();
      }
      gloo_options->threads = 1;
      auto pg_store = c10::make_intrusive<c10d::PrefixStore>("gloo", store_);
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(pg_store, rank, size, gloo_options);
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(rank) + " could not connect the Gloo mesh: " + e.what());
    }
  }

  ~GlooCollectives() override {
    // On a normal exit, leave together so that no rank tears down connections a peer is
    // still reading. Not after a failed collective or while an exception unwinds: the
    // peers are then inside some other collective (or gone), and a barrier would wait for
    // the whole timeout before this rank can exit and let the launcher stop the rest.
    if (!leave_together_ || failed_ || std::uncaught_exceptions() > 0) return;
    try {
      c10d::BarrierOptions options;
      options.timeout = std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(30));
      group_->barrier(options)->wait();
    } catch (...) {
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  std::chrono::milliseconds slow_after() const { return slow_after_; }

  std::unique_ptr<Work> allreduce_sum_async(void* data, size_t count, DataType type) override {
    const uint64_t seq = begin("allreduce");
    count_allreduce(count * data_type_size(type));
    std::vector<at::Tensor> tensors{
        at::from_blob(data, {static_cast<int64_t>(count)}, scalar_type(type))};
    return std::make_unique<GlooWork>(this, launch([&] { return group_->allreduce(tensors); }), seq,
                                      "allreduce");
  }

  void allreduce_max(float* data, size_t count) override {
    const uint64_t seq = begin("allreduce-max");
    count_allreduce(count * sizeof(float));
    std::vector<at::Tensor> tensors{at::from_blob(data, {static_cast<int64_t>(count)}, at::kFloat)};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    GlooWork(this, launch([&] { return group_->allreduce(tensors, options); }), seq,
             "allreduce-max")
        .wait();
  }

  using Collectives::allgather_bytes;
  void allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& all) override {
    // Two rounds: sizes, then the contributions padded to the largest size. The padded
    // input is this object's; `all` keeps its buffers' capacity from call to call.
    int64_t my_size = static_cast<int64_t>(data.size());
    sizes_.resize(size_);
    {
      const uint64_t seq = begin("allgather(sizes)");
      std::vector<at::Tensor> input{at::from_blob(&my_size, {1}, at::kLong)};
      std::vector<std::vector<at::Tensor>> output(1);
      for (int r = 0; r < size_; ++r) {
        output[0].push_back(at::from_blob(&sizes_[r], {1}, at::kLong));
      }
      GlooWork(this, launch([&] { return group_->allgather(output, input); }), seq,
               "allgather(sizes)")
          .wait();
    }
    const int64_t max_size = std::max<int64_t>(1, *std::max_element(sizes_.begin(), sizes_.end()));
    padded_.resize(max_size);
    if (!data.empty()) std::memcpy(padded_.data(), data.data(), data.size());
    std::memset(padded_.data() + data.size(), 0, max_size - data.size());
    all.resize(size_);
    for (auto& bytes : all) bytes.resize(max_size);
    {
      const uint64_t seq = begin("allgather");
      std::vector<at::Tensor> input{byte_view(padded_.data(), max_size)};
      std::vector<std::vector<at::Tensor>> output(1);
      for (int r = 0; r < size_; ++r) output[0].push_back(byte_view(all[r].data(), max_size));
      GlooWork(this, launch([&] { return group_->allgather(output, input); }), seq, "allgather")
          .wait();
    }
    for (int r = 0; r < size_; ++r) all[r].resize(sizes_[r]);
    count_allgather(data.size(), max_size);
  }

  void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) override {
    if (static_cast<int>(to.size()) != size_) {
      throw Error("alltoall_bytes: " + std::to_string(to.size()) + " messages for " +
                  std::to_string(size_) + " ranks");
    }
    // Every pair's size first (an alltoall of one int64 each).
    send_sizes_.resize(size_);
    receive_sizes_.resize(size_);
    for (int r = 0; r < size_; ++r) send_sizes_[r] = static_cast<int64_t>(to[r].size());
    {
      const uint64_t seq = begin("alltoall(sizes)");
      at::Tensor input = at::from_blob(send_sizes_.data(), {size_}, at::kLong);
      at::Tensor output = at::from_blob(receive_sizes_.data(), {size_}, at::kLong);
      // c10d may move the split vectors into its work: it gets its own.
      std::vector<int64_t> output_splits(size_, 1), input_splits(size_, 1);
      GlooWork(this, launch([&] {
                 return group_->alltoall_base(output, input, output_splits, input_splits);
               }),
               seq, "alltoall(sizes)")
          .wait();
    }
    for (int r = 0; r < size_; ++r) {
      if (receive_sizes_[r] < 0) {
        throw PayloadError("alltoall: rank " + std::to_string(r) + " announced a negative size");
      }
    }
    // Then the messages by pairwise exchange: in step s every rank sends to rank + s and
    // receives from rank - s, so each link carries one flow each way at a time (W-1 steps,
    // the cost model's; posting all W-1 flows at once makes W-1 senders converge on every
    // receiver's link, which measured up to 2.3x slower on the emulated cluster).
    out.resize(size_);
    out[rank_].assign(to[rank_].begin(), to[rank_].end());
    for (int step = 1; step < size_; ++step) {
      const int to_rank = (rank_ + step) % size_;
      const int from_rank = (rank_ - step + size_) % size_;
      out[from_rank].resize(static_cast<size_t>(receive_sizes_[from_rank]));
      const uint64_t seq = begin("alltoall");
      std::vector<at::Tensor> send_tensors, receive_tensors;
      std::unique_ptr<GlooWork> send_work, receive_work;
      if (!to[to_rank].empty()) {
        send_tensors.push_back(
            byte_view(const_cast<uint8_t*>(to[to_rank].data()), to[to_rank].size()));
        send_work = std::make_unique<GlooWork>(
            this, launch([&] { return group_->send(send_tensors, to_rank, kAlltoallTag); }), seq,
            "alltoall send to rank " + std::to_string(to_rank), Wait::kWholeTimeout);
      }
      if (!out[from_rank].empty()) {
        receive_tensors.push_back(byte_view(out[from_rank].data(), out[from_rank].size()));
        receive_work = std::make_unique<GlooWork>(
            this, launch([&] { return group_->recv(receive_tensors, from_rank, kAlltoallTag); }),
            seq, "alltoall receive from rank " + std::to_string(from_rank), Wait::kWholeTimeout);
      }
      if (send_work) send_work->wait();
      if (receive_work) receive_work->wait();
    }
    count_alltoall(to);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    const uint64_t seq = begin("broadcast");
    count_broadcast(bytes, root);
    std::vector<at::Tensor> tensors{byte_view(data, bytes)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    GlooWork(this, launch([&] { return group_->broadcast(tensors, options); }), seq, "broadcast")
        .wait();
  }

  void barrier() override {
    const uint64_t seq = begin("barrier");
    GlooWork(this, launch([&] { return group_->barrier(); }), seq, "barrier").wait();
  }

  // Writes this rank's progress to the store (see slow_after). A store that cannot be
  // reached is left for fail() to report.
  void publish_progress(uint64_t sequence) {
    if (!store_) return;
    const SigpipeBlockedHere sigpipe_blocked;  // the store's server may have gone
    try {
      const std::string value = std::to_string(sequence);
      store_->set(progress_key(rank_), std::vector<uint8_t>(value.begin(), value.end()));
    } catch (const std::exception&) {
    }
  }

  // The ranks whose published progress is below `sequence`; a note when the store is gone.
  std::vector<int> ranks_behind(uint64_t sequence, std::string& note) {
    std::vector<int> behind;
    if (!store_) return behind;
    const SigpipeBlockedHere sigpipe_blocked;  // the store's server may have gone
    try {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        uint64_t reached = 0;
        if (store_->check({progress_key(r)})) {
          auto value = store_->get(progress_key(r));
          reached = std::stoull(std::string(value.begin(), value.end()));
        }
        if (reached < sequence) behind.push_back(r);
      }
    } catch (const std::exception&) {
      note =
          " (could not read other ranks' progress from the store: rank 0, which serves it, "
          "may have exited)";
      behind.clear();
    }
    return behind;
  }

  // The ranks behind `sequence` once every rank that is alive and in it has published:
  // polls the store for up to twice slow_after (see the diagnosis above), returning early
  // when none is behind. The store can vanish while this polls (rank 0 serves it, and it
  // stops polling and exits first when its own wait began first): the last reading it got
  // then stands, since every survivor publishes before polling; a note is returned only
  // when the store could not be read at all.
  std::vector<int> ranks_behind_after_settling(uint64_t sequence, std::string& note) {
    const auto deadline = std::chrono::steady_clock::now() + 2 * slow_after_;
    std::vector<int> behind = ranks_behind(sequence, note);
    while (!behind.empty() && note.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::string read_note;
      std::vector<int> now_behind = ranks_behind(sequence, read_note);
      if (!read_note.empty()) break;  // the store is gone: keep the last reading
      behind = std::move(now_behind);
    }
    return behind;
  }

  // Builds the error for a failed operation and why. After a wait past slow_after
  // (`waited`), the ranks that arrived have published their progress, so it names the
  // ranks that never reached the operation within the timeout (TimeoutError, and the
  // failure report). A quick failure (a peer closed its connections) names the ranks that
  // had not reached it once the others had failed too (Error: the cause is the connection).
  [[noreturn]] void fail(uint64_t sequence, const std::string& op, const std::string& cause,
                         bool waited) {
    failed_ = true;
    publish_progress(sequence);
    std::string progress_note;
    const std::vector<int> behind = waited ? ranks_behind(sequence, progress_note)
                                           : ranks_behind_after_settling(sequence, progress_note);
    std::string message =
        op + " #" + std::to_string(sequence) + " failed on rank " + std::to_string(rank_);
    if (!behind.empty()) {
      message += ": " + describe_ranks(behind) +
                 (waited ? " did not arrive within " +
                               std::to_string(timeout_.count() / 1000.0).substr(0, 6) + " s"
                         : std::string(" had not reached it (exited, or still before it)"));
    }
    message += progress_note + " [" + cause + "]";
    if (!behind.empty() && waited) {
      write_failure_report(failure_report_file_, {behind, message});
      throw TimeoutError(message);
    }
    throw Error(message);
  }

 private:
  // Numbers the next collective; nothing leaves this rank (see slow_after).
  uint64_t begin(const char*) { return ++sequence_; }

  template <typename Fn>
  c10::intrusive_ptr<c10d::Work> launch(Fn&& fn) {
    try {
      const SigpipeBlockedHere sigpipe_blocked;  // send and receive write here
      return fn();
    } catch (const std::exception& e) {
      fail(sequence_, "collective", e.what(), /*waited=*/false);
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds slow_after_;
  std::string failure_report_file_;
  bool leave_together_;
  std::atomic<bool> failed_{false};  // a collective failed (any thread)
  uint64_t sequence_ = 0;
  std::vector<int64_t> sizes_;                       // allgather_bytes's scratch, kept across calls
  Bytes padded_;                                     // allgather_bytes's send buffer
  std::vector<int64_t> send_sizes_, receive_sizes_;  // alltoall_bytes's scratch
  static constexpr int kAlltoallTag = 0x6761;        // alltoall_bytes's point-to-point tag
};

void GlooWork::wait() {
  bool slow = false;
  try {
    if (how_ == Wait::kWholeTimeout) {
      work_->wait(owner_->timeout());
      return;
    }
    try {
      work_->wait(owner_->slow_after());
    } catch (const std::exception&) {
      // Slow, failed, or done just after the probe gave up (a race: the work completes
      // between the expired wait and this check). Slow: say how far this rank got. Then
      // wait out the collective's own timeout; on a completed work that returns at once,
      // or rethrows its failure.
      if (!work_->isCompleted()) {
        slow = true;
        owner_->publish_progress(sequence_);
      }
      work_->wait(owner_->timeout());
    }
  } catch (const std::exception& e) {
    owner_->fail(sequence_, op_, e.what(), slow);
  }
}

}  // namespace

std::unique_ptr<Collectives> make_gloo_collectives(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                   int size, const GlooOptions& options) {
  return std::make_unique<GlooCollectives>(std::move(store), rank, size, options);
}

}  // namespace gradwire::comm
