// Network-namespace helpers for the emulated-cluster tests: which namespaces a cluster left,
// removing one cluster's namespaces, skipping where namespaces cannot be made, and the lock
// that keeps tests which leave or remove stale clusters from running into each other.
//
// ctest runs tests in parallel. A cluster whose launcher died is "stale" to every other
// process, so one test's `gradwire cluster --cleanup` (or remove_stale_clusters()) would
// remove the stale cluster another test is still inspecting. Tests that make stale
// clusters or remove them hold StaleClusterLock for that whole time; no other test removes
// anything but the namespaces it made itself.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "gradwire/launch/emulated_cluster.h"
#include "gradwire/launch/tool_command.h"

namespace gradwire::testing {

inline std::vector<std::string> namespaces_with_prefix(const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream lines(launch::run_tool({"ip", "netns", "list"}).output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) found.push_back(line.substr(0, line.find(' ')));
  }
  return found;
}

// Removes the namespaces whose names start with `prefix` (one cluster's: "gwc<pid>c<n>").
inline void remove_namespaces_with_prefix(const std::string& prefix) {
  for (const auto& name : namespaces_with_prefix(prefix)) {
    launch::run_tool({"ip", "netns", "delete", name});
  }
}

// Whether this process may create network namespaces (root, and a kernel that allows it).
inline bool netns_usable() {
  if (!launch::running_as_root()) return false;
  static const bool usable = [] {
    const std::string name = "gwcprobe" + std::to_string(::getpid());
    const bool ok = launch::run_tool({"ip", "netns", "add", name}).status == 0;
    launch::run_tool({"ip", "netns", "delete", name});
    return ok;
  }();
  return usable;
}

// An exclusive lock across the test processes of this machine, held while a test leaves a
// stale cluster in place or removes stale clusters.
class StaleClusterLock {
 public:
  StaleClusterLock()
      : fd_(::open("/tmp/gradwire-stale-cluster-tests.lock", O_RDWR | O_CREAT, 0644)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~StaleClusterLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  StaleClusterLock(const StaleClusterLock&) = delete;
  StaleClusterLock& operator=(const StaleClusterLock&) = delete;

 private:
  int fd_;
};

}  // namespace gradwire::testing

#define SKIP_WITHOUT_NETNS()                                                         \
  do {                                                                               \
    if (!gradwire::testing::netns_usable()) {                                        \
      GTEST_SKIP() << "needs root and network namespaces, which this machine lacks"; \
    }                                                                                \
  } while (0)
