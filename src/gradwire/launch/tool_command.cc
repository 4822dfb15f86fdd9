#include "gradwire/launch/tool_command.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>

#include "gradwire/core/error.h"
#include "gradwire/launch/posix_fd.h"

extern char** environ;

namespace gradwire::launch {

std::string command_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& word : argv) line += (line.empty() ? "" : " ") + word;
  return line;
}

ToolResult run_tool(const std::vector<std::string>& argv) {
  if (argv.empty()) throw ConfigError("run_tool: no command");
  Pipe output = make_pipe(argv[0] + " output");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, output.write.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, output.write.get(), STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& word : argv) args.push_back(const_cast<char*>(word.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int error = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    throw SystemError(errno_message("cannot run '" + argv[0] + "' (is it installed?)", error));
  }
  output.write.reset();
  ToolResult result;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(output.read.get(), buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string run_tool_checked(const std::vector<std::string>& argv) {
  ToolResult result = run_tool(argv);
  if (result.status != 0) {
    std::string output = result.output;
    while (!output.empty() && output.back() == '\n') output.pop_back();
    throw SystemError("'" + command_line(argv) + "' failed (status " +
                      std::to_string(result.status) + "): " + output);
  }
  return result.output;
}

}  // namespace gradwire::launch
