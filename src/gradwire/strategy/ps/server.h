// ParameterServer: one server of a parameter-server job (ALGORITHMS.md 6,
// docs/PARAMETER_SERVER.md). It owns some slices of the model, decodes the workers' pushes
// with the codec each slice was configured with, applies them through an Updater, and
// answers with weights encoded by the job's pull codec.
//
// Consistency (JobConfig::consistency), with clock(m) = pushes worker m made:
//  * BSP: pushes of one clock are summed; when every live worker pushed, their average is
//    applied once (staleness 0) and every worker gets the new weights.
//  * SSP:S: a push is applied on arrival; the reply, which lets the worker start its next
//    step, is held until min over live workers of clock >= clock(m) - S.
//  * ASP: a push is applied on arrival and answered at once.
// Version = updates applied; staleness of a push = version now - version it was computed
// on (the version of the weights the worker last received), recorded in a histogram.
//
// Robustness: a message with a wrong token, a bad format or an unexpected type or order is
// logged and dropped; the server never throws for what a peer sends. A worker that is
// silent for worker_timeout_s while the server waits on it is lost: BSP stops the job
// (telling every worker, naming it) unless continue_on_worker_loss; SSP and ASP drop it
// from the clock set and go on.
//
// Checkpoints (checkpoint_dir, checkpoint_every): every N updates the server writes its
// weights, updater state, version and counters to DIR/server-<i>.ckpt atomically; a job
// started on the same directory resumes from it. A failed write is logged and the previous
// checkpoint stays.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gradwire/comm/transport.h"

namespace gradwire::strategy::ps {

struct ServerOptions {
  int index = 0;       // this server's index in [0, num_servers)
  uint64_t token = 0;  // the job's token; messages carrying another are dropped
  std::chrono::milliseconds poll{50};
  // How long to wait for the first worker's hello before giving up (TimeoutError).
  std::chrono::milliseconds first_hello_timeout{std::chrono::seconds(300)};
  std::function<void(const std::string&)> log;  // default: one line on stderr
};

struct ServerCounters {
  uint64_t version = 0;
  uint64_t pushes = 0;
  uint64_t rejected_token = 0;
  uint64_t malformed = 0;  // failed to parse, or unexpected in this state
  uint64_t checkpoints = 0;
  uint64_t checkpoint_failures = 0;
  int lost_workers = 0;
  bool resumed = false;
};

class ParameterServer {
 public:
  ParameterServer(comm::Transport& transport, ServerOptions options);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  // Serves until every worker said goodbye or was lost. Throws Error when the job cannot go
  // on (BSP lost a worker without continue_on_worker_loss), after telling the workers.
  void run();

  ServerCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradwire::strategy::ps
