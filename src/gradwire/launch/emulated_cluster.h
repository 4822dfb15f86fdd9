// An emulated cluster on one machine: N hosts as network namespaces joined by one switch,
// with links of a known bandwidth (`gradwire cluster`, `gradwire bench e2e`).
//
// Layout (every name carries the creating process's pid and a per-process counter, so
// clusters never collide and leftovers can be traced to their owner):
//   gwc<pid>c<n>-sw    the switch: bridge br0 with one port h<i> per host
//   gwc<pid>c<n>-h<i>  host i: lo, and eth0 = 10.213.0.<i+1>/24, a veth whose peer is the
//                      switch's port h<i>
// Nothing is created in the caller's namespace: the addresses exist only inside these
// namespaces, and removing the namespaces removes every link with them.
//
// Shaping: tc tbf at the rate on eth0 (what host i sends) and on the switch port h<i> (what
// host i receives): each host has the rate in each direction, like a full-duplex NIC on a
// non-blocking switch. (Shaping one `lo` would make both directions share one queue.) Each
// queue holds 10 ms at the rate (at least 64 KiB); the bucket's burst is 2 ms at the rate (at
// least 16 KiB). A delay adds netem on eth0: the one-way latency between any two hosts.
// Where the kernel has no netem the delay is refused, never faked.
//
// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); `ip` and `tc` from iproute2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradwire/launch/launcher.h"

namespace gradwire::launch {

struct ClusterOptions {
  int hosts = 2;
  std::string bandwidth = "unlimited";  // tc's rate notation ("100mbit", "10gbit") or "unlimited"
  double delay_ms = 0;                  // > 0: one-way latency through netem
};

struct ClusterHost {
  std::string netns;       // the namespace's name, for `ip -n` / `ip netns exec`
  std::string netns_path;  // /run/netns/<name>, for setns()
  std::string address;     // eth0's IPv4 address
};

class EmulatedCluster {
 public:
  // The interface of every host towards the switch (GLOO_SOCKET_IFNAME).
  static constexpr const char* kInterface = "eth0";

  // Creates the namespaces, links and shaping. ConfigError when not root, for a malformed
  // rate, or for a delay without netem; SystemError when a tool fails. Whatever was created
  // before a failure is removed again.
  explicit EmulatedCluster(const ClusterOptions& options);
  // Removes everything (processes still inside the namespaces are killed) unless keep().
  ~EmulatedCluster();
  EmulatedCluster(const EmulatedCluster&) = delete;
  EmulatedCluster& operator=(const EmulatedCluster&) = delete;

  const std::vector<ClusterHost>& hosts() const { return hosts_; }
  const std::string& prefix() const { return prefix_; }
  uint64_t rate_bits_per_s() const { return rate_; }  // 0: unshaped

  // Options that run `ranks_per_host` ranks of `command` on every host, with torchrun's
  // variables (MASTER_ADDR = host 0, MASTER_PORT = 29500) and GLOO_SOCKET_IFNAME = eth0.
  LaunchOptions launch_options(int ranks_per_host, std::vector<std::string> command) const;

  // Leaves the namespaces in place when this object goes; remove_stale_clusters() removes
  // them once this process has exited.
  void keep() { keep_ = true; }

  // Removes the cluster now; returns what could not be removed (empty when all went).
  std::vector<std::string> remove();

 private:
  void create(const ClusterOptions& options);
  void shape(const std::string& netns, const std::string& device, double delay_ms);

  std::string prefix_;
  std::string switch_netns_;
  std::vector<ClusterHost> hosts_;
  std::vector<std::string> created_;  // namespaces, in creation order
  uint64_t rate_ = 0;
  bool keep_ = false;
};

// Bits per second from tc's rate notation: a number and one of bit, kbit, mbit, gbit, tbit
// (powers of 1000, as tc) or bps, kbps, mbps, gbps (bytes); "unlimited" or "none" is 0.
// ConfigError for anything else.
uint64_t parse_rate(const std::string& text);

// Whether this process may create network namespaces (effective uid 0).
bool running_as_root();

// `gradwire cluster --cleanup`: removes the namespaces of clusters whose creating process
// (a gradwire program) no longer runs, killing the processes left inside them. Returns the
// namespaces removed; clusters of running programs are left alone.
std::vector<std::string> remove_stale_clusters();

}  // namespace gradwire::launch
