// The worker side of a parameter-server job: Strategy "ps".
//
// start():       plans the slices (job.h), says hello to every server (worker 0 with the
//                initial weights) and takes the weights the servers answer with;
// synchronize(): encodes each slice's gradient with its codec (error feedback inside the
//                codec), pushes one message per server, all in flight at once, then waits
//                for every server's weights and writes them into the parameters. The
//                servers apply the update, so the wrapped optimizer does not step.
// finish():      says goodbye; worker 0 receives the final model and the job summary.
//                Destroying a started strategy without finish() says goodbye too.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gradwire/comm/transport.h"
#include "gradwire/strategy/ps/job.h"
#include "gradwire/strategy/ps/protocol.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy::ps {

struct WorkerOptions {
  JobConfig config;
  std::string codec = "none";  // layer policy for pushes
  int worker = 0;              // this worker's index in [0, num_workers)
  uint64_t token = 0;
  std::vector<std::string> servers;                              // transport peer name of server i
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // longest wait for a server
};

class ParameterServerStrategy : public Strategy {
 public:
  ParameterServerStrategy(std::unique_ptr<comm::Transport> transport, WorkerOptions options);
  ~ParameterServerStrategy() override;

  std::string name() const override { return "ps"; }
  void start(std::span<const compress::TensorInfo> tensors, const FloatSpans& params) override;
  void synchronize(const FloatSpans& grads) override;
  bool applies_update() const override { return true; }
  TrafficStats traffic() const override { return traffic_; }
  void count_samples(size_t samples, double loss_sum) override;
  void set_learning_rate(double lr) override;
  std::optional<JobProgress> job_progress() const override { return progress_; }
  std::optional<JobSummary> finish() override;

  const std::vector<Slice>& slices() const { return slices_; }

 private:
  struct Reply;
  // Waits until every server answered; Error for an error reply, TimeoutError naming the
  // servers that did not answer in time.
  std::vector<Reply> await_replies(const char* what);
  void apply_weights(const Reply& reply);
  std::string checksum() const;
  // wants_final: finish() waits for the servers' final message; the destructor does not.
  void send_goodbye(bool wants_final);

  std::unique_ptr<comm::Transport> transport_;
  WorkerOptions options_;
  std::vector<Slice> slices_;
  std::vector<std::vector<size_t>> server_slices_;              // slice indices per server
  std::vector<std::unique_ptr<compress::Codec>> codecs_;        // push codec per slice
  std::vector<std::unique_ptr<compress::Codec>> pull_codecs_;   // per slice
  std::vector<std::unique_ptr<compress::Codec>> whole_codecs_;  // `none`, for whole weights
  FloatSpans params_;
  std::vector<uint64_t> versions_;  // per server: version of the weights held
  uint64_t clock_ = 0;
  double lr_ = 0;  // sent with every push; starts at the job's configured lr
  WorkerStats stats_;
  std::optional<JobProgress> progress_;
  TrafficStats traffic_;
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace gradwire::strategy::ps
