#include "gradwire/launch/child_start.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

extern char** environ;

namespace gradwire::launch {
namespace {

#ifndef CLOSE_RANGE_CLOEXEC
constexpr unsigned kCloseRangeCloexec = 1U << 2;
#else
constexpr unsigned kCloseRangeCloexec = CLOSE_RANGE_CLOEXEC;
#endif

void put_fd(int fd, int target) {
  if (fd == target) {
    ::fcntl(fd, F_SETFD, 0);  // keep it across exec
  } else {
    ::dup2(fd, target);
  }
}

}  // namespace

Environment inherited_environment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    std::size_t equals = text.find('=');
    if (equals == std::string_view::npos || equals == 0) continue;
    env.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return env;
}

[[noreturn]] void exec_child(const ChildPlan& plan) {
  // Own process group: signals sent to it reach the rank's whole subtree, and the terminal's
  // Ctrl-C reaches only the launcher, which forwards it.
  ::setpgid(0, 0);
  // Die with the launcher. If the launcher died before this line, nobody would send the
  // signal, hence the check of the parent afterwards.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != plan.launcher_pid) ::_exit(1);

  if (plan.stdin_fd >= 0) put_fd(plan.stdin_fd, STDIN_FILENO);
  put_fd(plan.stdout_fd, STDOUT_FILENO);
  put_fd(plan.stderr_fd, STDERR_FILENO);
  // Descriptors the host program left inheritable do not leak into the ranks (as with
  // Python's subprocess); failure (old kernel) is harmless.
#ifdef SYS_close_range
  ::syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec);
#endif

  // Signals were blocked around fork() so that no launcher handler runs here; give the
  // program the dispositions a fresh process expects (SIGPIPE and SIGCHLD default even when
  // the host program ignores them, as Python's subprocess does for SIGPIPE), then unblock.
  struct sigaction action {};
  sigemptyset(&action.sa_mask);
  action.sa_handler = plan.ignore_sigint ? SIG_IGN : SIG_DFL;
  ::sigaction(SIGINT, &action, nullptr);
  action.sa_handler = plan.ignore_sigterm ? SIG_IGN : SIG_DFL;
  ::sigaction(SIGTERM, &action, nullptr);
  action.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &action, nullptr);
  ::sigaction(SIGPIPE, &action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  StartFailure failure{StartFailure::kExec, 0};
  if (plan.netns_fd >= 0 && ::setns(plan.netns_fd, CLONE_NEWNET) != 0) {
    failure = {StartFailure::kNetns, errno};
  } else {
    ::execvpe(plan.argv[0], plan.argv, plan.envp.data());
    failure.error = errno;
  }
  [[maybe_unused]] ssize_t written = ::write(plan.exec_report_fd, &failure, sizeof failure);
  ::_exit(kExecFailureStatus);
}

}  // namespace gradwire::launch
