// What a launch is told: how many ranks, on which node of how many, the command, the
// master's address, and how the ranks are placed on (emulated) hosts. See launcher.h.
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

// ConfigError naming the first option out of range or inconsistent with the others.
void validate(const LaunchOptions& options);

}  // namespace gradwire::launch
