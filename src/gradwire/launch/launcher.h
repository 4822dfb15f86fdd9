// Local multi-process launcher behind `gradwire run` and `gradwire train --workers N`.
//
// Starts N copies of a command with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), so programs written for torchrun, Slurm or mpirun launches run unchanged.
// With nnodes > 1 it is one node of a multi-node job: one launcher per node, each starting
// its node's ranks, all given the same master address and port (torchrun's static
// rendezvous). Ranks may be spread over hosts that are
// network namespaces of this machine (the emulated cluster, emulated_cluster.h). Contracts:
//  * every output line of rank r is written as "[r] line", stdout to stdout and stderr to
//    stderr, whole lines only (a final unterminated line is flushed at exit);
//  * SIGINT/SIGTERM received by the launcher are forwarded to every rank;
//  * when a rank exits non-zero (or by a signal) the others get SIGTERM, then SIGKILL after
//    the grace period, and the result names the root cause: the rank that the failed ranks
//    blame in their failure reports (core/failure_report.h: the rank that hung or died and
//    which they waited for), else the first rank that failed, and its status;
//  * the ranks never outlive the launcher (each gets PR_SET_PDEATHSIG);
//  * with max_restarts R (torchrun's --max-restarts), a failure stops every rank and starts
//    them all again, up to R times; the ranks see TORCHELASTIC_RESTART_COUNT (0, 1, ...)
//    and TORCHELASTIC_MAX_RESTARTS, and resume from their checkpoints if they keep any.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gradwire::launch {

struct LaunchOptions {
  int num_processes = 1;  // started by this launcher (on this node)
  // A job of nnodes launchers: this one starts the global ranks
  // [node_rank * num_processes, (node_rank + 1) * num_processes) of nnodes * num_processes.
  int nnodes = 1;
  int node_rank = 0;
  std::vector<std::string> command;  // program (searched in PATH) and its arguments
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port on master_addr (nnodes = 1 only)
  std::chrono::milliseconds grace_period{5000};
  bool prefix_output = true;
  // Extra environment for every rank (overrides inherited variables).
  std::map<std::string, std::string> extra_env;
  // When set, OMP_NUM_THREADS is set to this value for every rank unless already set in
  // the launcher's environment (torchrun's behaviour).
  std::optional<int> threads_per_process;
  // Consecutive ranks share a host: rank r is LOCAL_RANK r % K of host GROUP_RANK r / K,
  // LOCAL_WORLD_SIZE K. 0: every rank on one host (K = num_processes).
  int ranks_per_host = 0;
  // Empty: every rank runs in the launcher's network namespace. Otherwise one namespace per
  // host (a path such as /run/netns/NAME); host h's ranks enter it before exec.
  std::vector<std::string> host_netns;
  // Ranks whose failure is reported (LaunchResult::tolerated) but does not stop the others:
  // parameter-server workers when the job goes on without a lost worker.
  std::set<int> may_fail;
  // How often a failed job is started again (every rank), torchrun's --max-restarts.
  int max_restarts = 0;
};

struct LaunchResult {
  int exit_code = 0;  // 0 when every rank exited 0
  // The root cause when the failed ranks blame one (it may still have been running, or run
  // on another node), else the first rank that failed; unset when none failed.
  std::optional<int> failed_rank;
  // e.g. "rank 2 exited with status 3", plus any rank found failed in the same instant
  // ("; rank 0 exited with status 2"); led by the blamed rank when there is one: "rank 2
  // did not arrive: ranks 0, 1 failed waiting for it (...); rank 0 exited ..."
  std::string message;
  std::vector<std::string> tolerated;  // failures of may_fail ranks, e.g. "rank 3 was killed..."
  // The failures that restarted the job, in order (their messages); the result itself is
  // the last attempt's.
  std::vector<std::string> restarted_after;
};

// Runs the ranks to completion. Throws ConfigError for invalid options and SystemError when a
// process cannot be started; a program that cannot be executed is a failed rank (status 127,
// the reason in the message). Runs in one process take turns: signal handling is process-wide.
LaunchResult run_processes(const LaunchOptions& options);

// Binds port 0 on `addr`, returns the port the kernel chose, and closes the socket.
int pick_free_port(const std::string& addr = "127.0.0.1");

}  // namespace gradwire::launch
