// `gradwire run`: the command-line face of gradwire::launch::run_processes.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "gradwire/core/error.h"
#include "gradwire/launch/launcher.h"

namespace gradwire::cli {
namespace {

// Usage errors exit with 2, like the shell builtins and argparse.
constexpr int kUsageExitCode = 2;
constexpr int kSystemExitCode = 1;

struct RunArguments {
  int num_processes = 1;  // on this node
  int nnodes = 1;
  int node_rank = 0;
  int max_restarts = 0;
  int servers = 0;  // parameter servers started besides the N workers
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  double grace_seconds = 5.0;
  bool no_prefix = false;
  std::vector<std::string> command;
};

launch::LaunchOptions to_launch_options(const RunArguments& args) {
  if (args.num_processes < 1) {
    throw ConfigError("-n must be at least 1, got " + std::to_string(args.num_processes));
  }
  if (args.command.empty()) {
    throw ConfigError("no program given; usage: gradwire run -n N -- PROGRAM ARGS...");
  }
  if (!(args.grace_seconds >= 0)) {
    throw ConfigError("--grace-seconds must not be negative, got " +
                      std::to_string(args.grace_seconds));
  }
  if (args.servers < 0) throw ConfigError("--servers must not be negative");
  if (args.servers > 0 && args.nnodes > 1) {
    // Servers are ranks N..N+S-1 after every node's workers (comm/rendezvous.h): no node's
    // launcher holds a contiguous block with them.
    throw ConfigError(
        "--servers with --nnodes > 1: start parameter-server jobs from one launcher (gradwire "
        "train --strategy ps runs on one node), or start the servers as their own node");
  }
  if (args.nnodes > 1 && args.master_port == 0) {
    throw ConfigError("--nnodes " + std::to_string(args.nnodes) +
                      " needs --master-port P, the same on every node (and --master-addr, the "
                      "address of node 0)");
  }
  launch::LaunchOptions options;
  options.num_processes = args.num_processes + args.servers;
  options.nnodes = args.nnodes;
  options.node_rank = args.node_rank;
  options.max_restarts = args.max_restarts;
  if (args.servers > 0) {
    // Ranks [N, N + S) are the servers (comm/rendezvous.h); they wait on the network.
    options.extra_env["GRADWIRE_NUM_SERVERS"] = std::to_string(args.servers);
  }
  options.command = args.command;
  options.master_addr = args.master_addr;
  options.master_port = args.master_port;
  options.grace_period =
      std::chrono::milliseconds(static_cast<long long>(args.grace_seconds * 1e3));
  options.prefix_output = !args.no_prefix;
  // One OpenMP thread per rank once the ranks alone fill the machine (an OMP_NUM_THREADS in
  // the launcher's environment still wins).
  unsigned cores = std::thread::hardware_concurrency();
  if (static_cast<unsigned>(args.num_processes) >= cores) options.threads_per_process = 1;
  return options;
}

int run(const RunArguments& args) {
  try {
    launch::LaunchResult result = launch::run_processes(to_launch_options(args));
    if (result.exit_code != 0) {
      std::cerr << "gradwire run: " << result.message
                << (result.failed_rank ? "; stopped the other ranks" : "; stopped all ranks")
                << std::endl;
    }
    return result.exit_code;
  } catch (const ConfigError& e) {
    std::cerr << "gradwire run: " << e.what() << std::endl;
    return kUsageExitCode;
  } catch (const Error& e) {
    std::cerr << "gradwire run: " << e.what() << std::endl;
    return kSystemExitCode;
  }
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArguments>();
  CLI::App* run_app = app.add_subcommand(
      "run",
      "Start N local copies of a program with torchrun's environment (RANK, WORLD_SIZE, "
      "LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ...); each output line is prefixed with its rank");
  run_app->add_option("-n,--nproc-per-node", args->num_processes, "number of processes to start")
      ->capture_default_str();
  run_app
      ->add_option("--nnodes", args->nnodes,
                   "number of nodes of the job; one `gradwire run` per node, each with its "
                   "--node-rank and the same --master-addr and --master-port")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run_app
      ->add_option("--node-rank", args->node_rank,
                   "this node's index in 0..nnodes-1 (GROUP_RANK); its ranks are "
                   "node-rank * nproc-per-node and up")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run_app
      ->add_option("--servers", args->servers,
                   "also start S parameter servers (ranks N..N+S-1, GRADWIRE_NUM_SERVERS=S) for "
                   "programs using strategy \"ps\"")
      ->capture_default_str();
  run_app->add_option("--master-addr", args->master_addr, "address of rank 0 (MASTER_ADDR)")
      ->capture_default_str();
  run_app
      ->add_option("--master-port", args->master_port,
                   "port of rank 0 (MASTER_PORT); 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  run_app
      ->add_option("--grace-seconds", args->grace_seconds,
                   "after a rank fails or a signal arrives, how long the others get to exit "
                   "before SIGKILL")
      ->capture_default_str();
  run_app
      ->add_option("--max-restarts", args->max_restarts,
                   "when a rank fails, stop every rank and start them all again, up to R times "
                   "(TORCHELASTIC_RESTART_COUNT tells the ranks which attempt this is; they "
                   "resume from their own checkpoints)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run_app->add_flag("--no-prefix", args->no_prefix,
                    "pass the ranks' output through unchanged, without \"[rank] \"");
  run_app
      ->add_option("command", args->command,
                   "the program and its arguments, after --; everything from the program on "
                   "is passed to it untouched")
      ->expected(-1);
  // Everything after the program name belongs to the program, even "-n" or "--lr".
  run_app->positionals_at_end();
  run_app->callback([args, &exit_code] { exit_code = run(*args); });
}

}  // namespace gradwire::cli
