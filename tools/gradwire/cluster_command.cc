// `gradwire cluster`: run a command's ranks on an emulated cluster of this machine (network
// namespaces joined by a switch, links shaped with tc; launch/emulated_cluster.h), with
// torchrun's variables, as `gradwire run` does on one host.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "gradwire/core/error.h"
#include "gradwire/launch/emulated_cluster.h"
#include "gradwire/launch/launcher.h"

namespace gradwire::cli {
namespace {

constexpr int kUsageExitCode = 2;
constexpr int kSystemExitCode = 1;

struct ClusterArguments {
  launch::ClusterOptions cluster;
  int ranks_per_host = 1;
  int master_port = 29500;
  double grace_seconds = 5.0;
  bool no_prefix = false;
  bool keep = false;
  bool cleanup = false;
  std::vector<std::string> command;
};

// SIGINT/SIGTERM while the cluster is built or removed (the launcher handles them while the
// ranks run): remembered, so that whatever was created is still removed before exiting.
volatile sig_atomic_t g_interrupted = 0;
void remember_interrupt(int signal_number) { g_interrupted = signal_number; }

class InterruptFlag {
 public:
  InterruptFlag() {
    struct sigaction action {};
    action.sa_handler = remember_interrupt;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &previous_int_);
    ::sigaction(SIGTERM, &action, &previous_term_);
  }
  ~InterruptFlag() {
    ::sigaction(SIGINT, &previous_int_, nullptr);
    ::sigaction(SIGTERM, &previous_term_, nullptr);
  }
  int signal() const { return g_interrupted; }

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

int cleanup() {
  const auto removed = launch::remove_stale_clusters();
  for (const auto& name : removed) std::cout << "gradwire cluster: removed " << name << "\n";
  std::cout << "gradwire cluster: " << removed.size()
            << " network namespaces of stopped clusters removed" << std::endl;
  return 0;
}

int run_cluster(const ClusterArguments& args) {
  if (args.command.empty()) {
    throw ConfigError(
        "no program given; usage: gradwire cluster --hosts N --bandwidth RATE -- PROGRAM ARGS...");
  }
  if (args.ranks_per_host < 1) throw ConfigError("--ranks-per-host must be at least 1");
  if (!(args.grace_seconds >= 0)) throw ConfigError("--grace-seconds must not be negative");
  InterruptFlag interrupted;
  launch::EmulatedCluster cluster(args.cluster);
  if (args.keep) cluster.keep();
  const auto& hosts = cluster.hosts();
  const int world = static_cast<int>(hosts.size()) * args.ranks_per_host;
  std::cout << "gradwire cluster: " << hosts.size() << " hosts " << hosts.front().netns << ".."
            << hosts.back().netns << " (" << hosts.front().address << ".." << hosts.back().address
            << "), "
            << (cluster.rate_bits_per_s() ? args.cluster.bandwidth + " each way per host"
                                          : std::string("unshaped links"))
            << (args.cluster.delay_ms > 0
                    ? ", " + std::to_string(args.cluster.delay_ms) + " ms one-way delay"
                    : std::string())
            << ", " << args.ranks_per_host << " rank" << (args.ranks_per_host > 1 ? "s" : "")
            << " per host" << std::endl;
  if (interrupted.signal()) return 128 + interrupted.signal();

  launch::LaunchOptions options = cluster.launch_options(args.ranks_per_host, args.command);
  options.master_port = args.master_port;
  options.prefix_output = !args.no_prefix;
  options.grace_period =
      std::chrono::milliseconds(static_cast<long long>(args.grace_seconds * 1e3));
  const unsigned cores = std::thread::hardware_concurrency();
  if (static_cast<unsigned>(world) >= cores) options.threads_per_process = 1;
  const launch::LaunchResult result = launch::run_processes(options);
  if (result.exit_code != 0) {
    std::cerr << "gradwire cluster: " << result.message
              << (result.failed_rank ? "; stopped the other ranks" : "; stopped all ranks")
              << std::endl;
  }
  if (args.keep) {
    std::cout << "gradwire cluster: kept " << cluster.prefix()
              << "* (enter a host with: ip netns exec " << hosts.front().netns
              << " sh; remove with: gradwire cluster --cleanup)" << std::endl;
  } else if (const auto problems = cluster.remove(); !problems.empty()) {
    for (const auto& p : problems) std::cerr << "gradwire cluster: " << p << "\n";
    std::cerr << "gradwire cluster: run 'gradwire cluster --cleanup' to remove what is left"
              << std::endl;
    if (result.exit_code == 0) return kSystemExitCode;
  }
  if (result.exit_code == 0 && interrupted.signal()) return 128 + interrupted.signal();
  return result.exit_code;
}

int run(const ClusterArguments& args) {
  try {
    return args.cleanup ? cleanup() : run_cluster(args);
  } catch (const ConfigError& e) {
    std::cerr << "gradwire cluster: " << e.what() << std::endl;
    return kUsageExitCode;
  } catch (const Error& e) {
    std::cerr << "gradwire cluster: " << e.what() << std::endl;
    return kSystemExitCode;
  }
}

}  // namespace

void add_cluster_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ClusterArguments>();
  CLI::App* cmd = app.add_subcommand(
      "cluster",
      "Run a program's ranks on an emulated cluster: N hosts as network namespaces joined by a "
      "switch, each link shaped to RATE in both directions (root only)");
  cmd->add_option("--hosts", args->cluster.hosts, "number of emulated hosts")
      ->capture_default_str();
  cmd->add_option("--ranks-per-host", args->ranks_per_host, "ranks started on each host")
      ->capture_default_str();
  cmd->add_option("--bandwidth", args->cluster.bandwidth,
                  "each host's link rate, each way (tc notation: 100mbit, 1gbit, 10gbit), or "
                  "unlimited")
      ->capture_default_str();
  cmd->add_option("--delay", args->cluster.delay_ms,
                  "one-way latency in ms between hosts (needs the kernel's netem)");
  cmd->add_option("--master-port", args->master_port, "rendezvous port on host 0")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  cmd->add_option("--grace-seconds", args->grace_seconds,
                  "after a rank fails or a signal arrives, how long the others get to exit "
                  "before SIGKILL")
      ->capture_default_str();
  cmd->add_flag("--no-prefix", args->no_prefix,
                "pass the ranks' output through unchanged, without \"[rank] \"");
  cmd->add_flag("--keep", args->keep,
                "leave the namespaces in place after the program ends (to inspect them; "
                "--cleanup removes them)");
  cmd->add_flag("--cleanup", args->cleanup,
                "remove what clusters whose gradwire process was killed left behind, and exit");
  cmd->add_option("command", args->command,
                  "the program and its arguments, after --, started once per rank")
      ->expected(-1);
  cmd->positionals_at_end();
  cmd->callback([args, &exit_code] { exit_code = run(*args); });
}

}  // namespace gradwire::cli
