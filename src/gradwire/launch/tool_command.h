// Runs a system tool (ip, tc, ...) to completion and captures what it printed: how the
// emulated cluster configures network namespaces without a netlink library.
#pragma once

#include <string>
#include <vector>

namespace gradwire::launch {

struct ToolResult {
  int status = 0;      // exit status, or 128 + signal
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (searched in PATH) with the given arguments, stdin from /dev/null. Throws
// SystemError when it cannot be started.
ToolResult run_tool(const std::vector<std::string>& argv);

// run_tool, and SystemError naming the command and quoting its output unless it exits 0.
std::string run_tool_checked(const std::vector<std::string>& argv);

// "ip -n ns link add ..." for messages.
std::string command_line(const std::vector<std::string>& argv);

}  // namespace gradwire::launch
