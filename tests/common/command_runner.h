// Runs a shell command as a user would, for end-to-end tests: under `timeout`, so a hang
// fails the test instead of the suite, with stdout and stderr captured together.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace gradwire::testing {

struct CommandResult {
  int status = -1;  // exit status, or 128 + signal
  std::string output;
};

inline CommandResult run_command(const std::string& command, int timeout_s) {
  const std::string full = "timeout -k 5 " + std::to_string(timeout_s) + " " + command + " 2>&1";
  CommandResult result;
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe)) result.output += buffer.data();
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// A path in the temporary directory, unique to this test process.
inline std::string temp_path(const std::string& prefix, const std::string& name) {
  return (std::filesystem::temp_directory_path() / (prefix + std::to_string(getpid()) + "_" + name))
      .string();
}

}  // namespace gradwire::testing
