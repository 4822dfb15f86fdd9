// gradwire: the command-line tool. Subcommands live in *_command.cc; this file only
// dispatches and turns errors into exit codes (the one place that decides to exit).
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "gradwire/core/error.h"
#include "gradwire/version.h"

int main(int argc, char** argv) {
  // A write past RLIMIT_FSIZE must fail with EFBIG (reported, the previous checkpoint
  // kept) rather than kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"gradwire: communication-efficient distributed training for libtorch"};
  app.set_version_flag("--version", std::string("gradwire ") + gradwire::kVersion);
  app.require_subcommand(1);
  int exit_code = 0;
  gradwire::cli::add_run_command(app, exit_code);
  gradwire::cli::add_cluster_command(app, exit_code);
  gradwire::cli::add_train_command(app, exit_code);
  gradwire::cli::add_bench_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const gradwire::Error& e) {
    std::fprintf(stderr, "gradwire: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradwire: unexpected error: %s\n", e.what());
    return 3;
  }
  return exit_code;
}
