// Local multi-process launcher behind `gradwire run` and `gradwire train --workers N`.
//
// Starts N copies of a command with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), so programs written for
// torchrun, Slurm or mpirun launches run unchanged. Ranks may be spread over hosts that are
// network namespaces of this machine (the emulated cluster, emulated_cluster.h). Contracts:
//  * every output line of rank r is written as "[r] line", stdout to stdout and stderr to
//    stderr, whole lines only (a final unterminated line is flushed at exit);
//  * SIGINT/SIGTERM received by the launcher are forwarded to every rank;
//  * when a rank exits non-zero (or by a signal) the others get SIGTERM, then SIGKILL after
//    the grace period, and the result names that first failing rank and its status;
//  * the ranks never outlive the launcher (each gets PR_SET_PDEATHSIG).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gradwire::launch {

struct LaunchOptions {
  int num_processes = 1;
  std::vector<std::string> command;  // program (searched in PATH) and its arguments
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port on master_addr
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
};

struct LaunchResult {
  int exit_code = 0;               // 0 when every rank exited 0
  std::optional<int> failed_rank;  // the first rank that failed, if any
  std::string message;             // e.g. "rank 2 exited with status 3", plus any rank found failed
                                   // in the same instant ("; rank 0 exited with status 2")
  std::vector<std::string> tolerated;  // failures of may_fail ranks, e.g. "rank 3 was killed..."
};

// Runs the ranks to completion. Throws ConfigError for invalid options and SystemError when a
// process cannot be started; a program that cannot be executed is a failed rank (status 127,
// the reason in the message). Runs in one process take turns: signal handling is process-wide.
LaunchResult run_processes(const LaunchOptions& options);

// Binds port 0 on `addr`, returns the port the kernel chose, and closes the socket.
int pick_free_port(const std::string& addr = "127.0.0.1");

}  // namespace gradwire::launch
