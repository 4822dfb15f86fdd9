// Subcommands of the `gradwire` tool. Each add_*_command registers a CLI11 subcommand whose
// callback runs it and stores the process exit code in `exit_code`, which main() returns;
// `exit_code` must outlive app.parse(). Errors are reported on stderr by the subcommand itself.
#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

namespace gradwire::cli {

// A file `gradwire bench` runs (a benchmark binary, the DDP peer, the plot script): in a
// build tree under bench/ beside the gradwire executable, when installed in
// <prefix>/libexec/gradwire. ConfigError naming where it looked when it is in neither.
std::filesystem::path bench_file(const std::string& name);

// `gradwire run -n N [--master-addr A] [--master-port P] [--grace-seconds S] [--no-prefix]
//  -- PROGRAM ARGS...`: starts N local copies of PROGRAM with torchrun's environment.
void add_run_command(CLI::App& app, int& exit_code);

// `gradwire cluster --hosts N --bandwidth RATE -- PROGRAM ARGS...`: N ranks on an emulated
// cluster of network namespaces; `gradwire cluster --cleanup` removes leftovers.
void add_cluster_command(CLI::App& app, int& exit_code);

// `gradwire train ...`: the built-in training job.
void add_train_command(CLI::App& app, int& exit_code);

// `gradwire bench codecs ...`: the codec benchmarks.
void add_bench_command(CLI::App& app, int& exit_code);

// `gradwire bench e2e ...` (bench_e2e_command.cc), added under `bench`.
void add_bench_e2e_command(CLI::App& bench, int& exit_code);

// `gradwire bench exchange ...` (bench_exchange_command.cc): one rank of the aggregation
// scaling benchmark, added under `bench`.
void add_bench_exchange_command(CLI::App& bench, int& exit_code);

}  // namespace gradwire::cli
