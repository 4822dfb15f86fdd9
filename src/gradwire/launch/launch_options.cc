#include "gradwire/launch/launch_options.h"

#include "gradwire/core/error.h"

namespace gradwire::launch {

void validate(const LaunchOptions& options) {
  if (options.num_processes < 1) {
    throw ConfigError("the number of processes must be at least 1, got " +
                      std::to_string(options.num_processes));
  }
  if (options.command.empty() || options.command.front().empty()) {
    throw ConfigError("no command to run: give the program and its arguments");
  }
  if (options.master_port < 0 || options.master_port > 65535) {
    throw ConfigError("the master port must be in 0..65535 (0 picks a free one), got " +
                      std::to_string(options.master_port));
  }
  if (options.master_addr.empty()) throw ConfigError("the master address is empty");
  if (options.max_restarts < 0) {
    throw ConfigError("the number of restarts must not be negative, got " +
                      std::to_string(options.max_restarts));
  }
  if (options.nnodes < 1) {
    throw ConfigError("the number of nodes must be at least 1, got " +
                      std::to_string(options.nnodes));
  }
  if (options.node_rank < 0 || options.node_rank >= options.nnodes) {
    throw ConfigError("the node rank must be in 0.." + std::to_string(options.nnodes - 1) +
                      ", got " + std::to_string(options.node_rank));
  }
  if (options.nnodes > 1) {
    if (options.master_port == 0) {
      throw ConfigError("a job of " + std::to_string(options.nnodes) +
                        " nodes needs an explicit master port, the same on every node");
    }
    if (options.ranks_per_host != 0 || !options.host_netns.empty()) {
      throw ConfigError(
          "emulated hosts (ranks per host, network namespaces) are for a job of "
          "one node");
    }
  }
  if (options.grace_period.count() < 0) throw ConfigError("the grace period must not be negative");
  if (options.threads_per_process && *options.threads_per_process < 1) {
    throw ConfigError("threads per process must be at least 1, got " +
                      std::to_string(*options.threads_per_process));
  }
  if (options.ranks_per_host < 0 ||
      (options.ranks_per_host > 0 && options.num_processes % options.ranks_per_host != 0)) {
    throw ConfigError("ranks per host (" + std::to_string(options.ranks_per_host) +
                      ") must divide the number of processes (" +
                      std::to_string(options.num_processes) + ")");
  }
  if (!options.host_netns.empty()) {
    const int per_host =
        options.ranks_per_host > 0 ? options.ranks_per_host : options.num_processes;
    const size_t hosts = static_cast<size_t>(options.num_processes / per_host);
    if (options.host_netns.size() != hosts) {
      throw ConfigError(std::to_string(options.host_netns.size()) + " network namespaces for " +
                        std::to_string(hosts) + " hosts");
    }
  }
  for (const auto& [key, value] : options.extra_env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      throw ConfigError("invalid environment variable name '" + key + "'");
    }
  }
}

}  // namespace gradwire::launch
