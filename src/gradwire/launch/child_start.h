// Internal to the launcher: starting one rank's process. Everything the child needs between
// fork() and exec() is prepared beforehand in a ChildPlan, so that the child only makes
// async-signal-safe calls; a child that cannot start reports why through a pipe.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace gradwire::launch {

// The shell's convention for "command not found / not executable".
inline constexpr int kExecFailureStatus = 127;

using Environment = std::map<std::string, std::string>;

// The launcher's own environment (`environ`), as a map.
Environment inherited_environment();

// What a child that could not start writes to its report pipe before _exit().
struct StartFailure {
  enum Stage : int { kExec = 0, kNetns = 1 } stage;
  int error;  // errno
};

struct ChildPlan {
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  char* const* argv = nullptr;
  pid_t launcher_pid = 0;
  int stdin_fd = -1;  // -1: inherit the launcher's stdin
  int stdout_fd = -1;
  int stderr_fd = -1;
  int exec_report_fd = -1;
  int netns_fd = -1;  // >= 0: enter this network namespace before exec
  // A launcher started with SIGINT/SIGTERM ignored (nohup, `cmd &` without job control)
  // passes that on, as a shell would; everything else starts with default actions.
  bool ignore_sigint = false;
  bool ignore_sigterm = false;
};

// In the child, right after fork(): its own process group, death with the launcher, the
// plan's descriptors and signal dispositions, the network namespace, then exec. Never
// returns: on failure it writes a StartFailure to plan.exec_report_fd and exits with
// kExecFailureStatus.
[[noreturn]] void exec_child(const ChildPlan& plan);

}  // namespace gradwire::launch
