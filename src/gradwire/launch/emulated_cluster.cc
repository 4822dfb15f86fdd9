#include "gradwire/launch/emulated_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "gradwire/core/error.h"
#include "gradwire/launch/tool_command.h"

namespace gradwire::launch {
namespace {

constexpr int kMaxHosts = 250;      // host i is 10.213.0.<i+1>
constexpr int kMasterPort = 29500;  // torchrun's default; every cluster has its own addresses
constexpr double kQueueSeconds = 0.010;
constexpr double kBurstSeconds = 0.002;
constexpr uint64_t kMinQueueBytes = 64 << 10;
constexpr uint64_t kMinBurstBytes = 16 << 10;

std::atomic<int> g_cluster_counter{0};

// What `ip netns list` prints: "name" or "name (id: N)" per line.
std::vector<std::string> list_namespaces() {
  const ToolResult listed = run_tool({"ip", "netns", "list"});
  std::vector<std::string> names;
  std::istringstream lines(listed.output);
  for (std::string line; std::getline(lines, line);) {
    const auto end = line.find(' ');
    const std::string name = line.substr(0, end);
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

// Kills what still runs inside `netns`, then deletes it (and with it its links). Returns
// an empty string, or what went wrong.
std::string remove_namespace(const std::string& netns) {
  for (int round = 0; round < 20; ++round) {
    const ToolResult pids = run_tool({"ip", "netns", "pids", netns});
    if (pids.status != 0) break;  // gone already
    std::istringstream in(pids.output);
    bool any = false;
    for (long pid; in >> pid;) {
      if (pid > 1 && pid != ::getpid()) {
        ::kill(static_cast<pid_t>(pid), SIGKILL);
        any = true;
      }
    }
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const ToolResult deleted = run_tool({"ip", "netns", "delete", netns});
  if (deleted.status == 0) return "";
  const auto names = list_namespaces();
  if (std::find(names.begin(), names.end(), netns) == names.end()) return "";
  return "ip netns delete " + netns + ": " + deleted.output;
}

// Whether `pid` is a running gradwire program (its name starts with "gradwire": the CLI,
// or a test binary), the only kind that creates clusters.
bool gradwire_process_runs(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name.rfind("gradwire", 0) == 0;
}

}  // namespace

bool running_as_root() { return ::geteuid() == 0; }

uint64_t parse_rate(const std::string& text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "unlimited" || lower == "none") return 0;
  static const std::regex form(R"(^([0-9]+(\.[0-9]+)?)([a-z]+)$)");
  std::smatch match;
  const auto bad = [&] {
    return ConfigError("bandwidth '" + text +
                       "' is not a rate: write e.g. 100mbit, 1gbit, 10gbit, 500kbit (bits per "
                       "second, powers of 1000, as tc) or unlimited");
  };
  if (!std::regex_match(lower, match, form)) throw bad();
  const double value = std::stod(match[1].str());
  const std::string unit = match[3].str();
  double scale = 0;
  if (unit == "bit") scale = 1;
  if (unit == "kbit") scale = 1e3;
  if (unit == "mbit") scale = 1e6;
  if (unit == "gbit") scale = 1e9;
  if (unit == "tbit") scale = 1e12;
  if (unit == "bps") scale = 8;
  if (unit == "kbps") scale = 8e3;
  if (unit == "mbps") scale = 8e6;
  if (unit == "gbps") scale = 8e9;
  if (scale == 0) throw bad();
  const double bits = value * scale;
  if (!(bits >= 8000) || bits > 1e13) {
    throw ConfigError("bandwidth '" + text + "' is outside 8kbit..10tbit");
  }
  return static_cast<uint64_t>(std::llround(bits));
}

EmulatedCluster::EmulatedCluster(const ClusterOptions& options) {
  if (!running_as_root()) {
    throw ConfigError(
        "an emulated cluster needs root (it creates network namespaces, veth links and tc "
        "queues): run it as root, e.g. with sudo");
  }
  if (options.hosts < 1 || options.hosts > kMaxHosts) {
    throw ConfigError("--hosts must be in 1.." + std::to_string(kMaxHosts) + ", got " +
                      std::to_string(options.hosts));
  }
  if (!(options.delay_ms >= 0) || options.delay_ms > 10000) {
    throw ConfigError("--delay must be in 0..10000 ms");
  }
  rate_ = parse_rate(options.bandwidth);
  prefix_ = "gwc" + std::to_string(::getpid()) + "c" + std::to_string(g_cluster_counter++) + "-";
  try {
    create(options);
  } catch (...) {
    remove();
    throw;
  }
}

EmulatedCluster::~EmulatedCluster() {
  if (!keep_) remove();
}

void EmulatedCluster::create(const ClusterOptions& options) {
  const auto add_namespace = [&](const std::string& name) {
    created_.push_back(name);  // first, so a half-made namespace is removed too
    run_tool_checked({"ip", "netns", "add", name});
    run_tool_checked({"ip", "-n", name, "link", "set", "lo", "up"});
  };
  switch_netns_ = prefix_ + "sw";
  add_namespace(switch_netns_);
  run_tool_checked({"ip", "-n", switch_netns_, "link", "add", "br0", "type", "bridge"});
  run_tool_checked({"ip", "-n", switch_netns_, "link", "set", "br0", "up"});
  for (int i = 0; i < options.hosts; ++i) {
    ClusterHost host;
    host.netns = prefix_ + "h" + std::to_string(i);
    host.netns_path = "/run/netns/" + host.netns;
    host.address = "10.213.0." + std::to_string(i + 1);
    add_namespace(host.netns);
    const std::string port = "h" + std::to_string(i);
    run_tool_checked({"ip", "-n", host.netns, "link", "add", kInterface, "type", "veth", "peer",
                      "name", port, "netns", switch_netns_});
    run_tool_checked({"ip", "-n", switch_netns_, "link", "set", port, "master", "br0"});
    run_tool_checked({"ip", "-n", switch_netns_, "link", "set", port, "up"});
    run_tool_checked(
        {"ip", "-n", host.netns, "addr", "add", host.address + "/24", "dev", kInterface});
    run_tool_checked({"ip", "-n", host.netns, "link", "set", kInterface, "up"});
    shape(host.netns, kInterface, options.delay_ms);
    shape(switch_netns_, port, 0);
    hosts_.push_back(host);
  }
}

void EmulatedCluster::shape(const std::string& netns, const std::string& device, double delay_ms) {
  std::vector<std::string> parent = {"root"};
  if (delay_ms > 0) {
    std::ostringstream delay;
    delay << delay_ms << "ms";
    const ToolResult netem = run_tool({"tc", "-n", netns, "qdisc", "add", "dev", device, "root",
                                       "handle", "1:", "netem", "delay", delay.str()});
    if (netem.status != 0) {
      if (netem.output.find("unknown") != std::string::npos ||
          netem.output.find("not supported") != std::string::npos) {
        throw ConfigError(
            "--delay needs the kernel's netem queueing discipline (sch_netem), which this "
            "kernel does not offer (tc: " +
            netem.output.substr(0, netem.output.find('\n')) +
            "); run without --delay, or on a kernel with netem");
      }
      throw SystemError("tc could not add netem on " + device + " in " + netns + ": " +
                        netem.output);
    }
    parent = {"parent", "1:"};
  }
  if (rate_ == 0) return;
  const double bytes_per_s = static_cast<double>(rate_) / 8;
  const uint64_t burst =
      std::max<uint64_t>(kMinBurstBytes, static_cast<uint64_t>(bytes_per_s * kBurstSeconds));
  const uint64_t limit =
      std::max<uint64_t>(kMinQueueBytes, static_cast<uint64_t>(bytes_per_s * kQueueSeconds)) +
      burst;
  std::vector<std::string> command = {"tc", "-n", netns, "qdisc", "add", "dev", device};
  command.insert(command.end(), parent.begin(), parent.end());
  command.insert(command.end(), {"tbf", "rate", std::to_string(rate_) + "bit", "burst",
                                 std::to_string(burst), "limit", std::to_string(limit)});
  run_tool_checked(command);
}

LaunchOptions EmulatedCluster::launch_options(int ranks_per_host,
                                              std::vector<std::string> command) const {
  LaunchOptions options;
  options.num_processes = static_cast<int>(hosts_.size()) * ranks_per_host;
  options.ranks_per_host = ranks_per_host;
  for (const auto& host : hosts_) options.host_netns.push_back(host.netns_path);
  options.master_addr = hosts_.front().address;
  options.master_port = kMasterPort;
  options.extra_env["GLOO_SOCKET_IFNAME"] = kInterface;
  options.command = std::move(command);
  return options;
}

std::vector<std::string> EmulatedCluster::remove() {
  std::vector<std::string> problems;
  // Hosts first (their veths go with them), the switch last.
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    try {
      if (std::string problem = remove_namespace(*it); !problem.empty()) {
        problems.push_back(problem);
      }
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  created_.clear();
  return problems;
}

std::vector<std::string> remove_stale_clusters() {
  if (!running_as_root()) {
    throw ConfigError("removing emulated clusters needs root: run it as root, e.g. with sudo");
  }
  static const std::regex owned(R"(^gwc([0-9]+)c[0-9]+-(sw|h[0-9]+)$)");
  std::vector<std::string> stale;
  for (const std::string& name : list_namespaces()) {
    std::smatch match;
    if (!std::regex_match(name, match, owned)) continue;
    if (gradwire_process_runs(std::stol(match[1].str()))) continue;
    stale.push_back(name);
  }
  // Hosts before switches, as remove() does.
  std::stable_partition(stale.begin(), stale.end(),
                        [](const std::string& name) { return name.back() != 'w'; });
  std::vector<std::string> removed;
  for (const std::string& name : stale) {
    const std::string problem = remove_namespace(name);
    if (!problem.empty()) throw SystemError("could not remove " + name + ": " + problem);
    removed.push_back(name);
  }
  return removed;
}

}  // namespace gradwire::launch
