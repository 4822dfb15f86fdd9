#include "gradwire/comm/rendezvous.h"

#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "gradwire/comm/gloo_collectives.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/core/failure_report.h"

namespace gradwire::comm {
namespace {

using Clock = std::chrono::steady_clock;

long env_int(const char* name, long fallback, long lo, long hi) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || errno != 0 || value < lo || value > hi) {
    throw ConfigError(std::string("environment variable ") + name + "=" + text +
                      " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "]");
  }
  return value;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

std::string seconds(std::chrono::milliseconds ms) {
  std::string s = std::to_string(ms.count() / 1000.0);
  return s.substr(0, s.find('.') + 2);
}

std::vector<uint8_t> as_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Every rank counts itself in, then waits for the rest; on timeout names who is missing.
void wait_for_all_ranks(c10d::Store& store, const WorldInfo& world,
                        std::chrono::milliseconds timeout, const std::string& failure_report_file) {
  store.set("joined/" + std::to_string(world.rank), as_bytes("1"));
  int64_t joined = store.add("joined", 1);
  const auto deadline = Clock::now() + timeout;
  while (joined < world.world_size) {
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < world.world_size; ++r) {
        if (!store.check({"joined/" + std::to_string(r)})) missing.push_back(r);
      }
      const std::string message = "rank " + std::to_string(world.rank) + ": " +
                                  describe_ranks(missing) + " did not join within " +
                                  seconds(timeout) + " s; " + std::to_string(joined) + " of " +
                                  std::to_string(world.world_size) + " joined at " +
                                  world.master_addr + ":" + std::to_string(world.master_port);
      write_failure_report(failure_report_file, {missing, message});
      throw TimeoutError(message);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    joined = store.add("joined", 0);
  }
}

}  // namespace

WorldInfo WorldInfo::from_environment() {
  WorldInfo world;
  world.world_size = static_cast<int>(env_int("WORLD_SIZE", 1, 1, 1 << 20));
  world.rank = static_cast<int>(env_int("RANK", 0, 0, world.world_size - 1));
  world.local_rank = static_cast<int>(env_int("LOCAL_RANK", world.rank, 0, 1 << 20));
  world.master_port = static_cast<int>(env_int("MASTER_PORT", 29500, 1, 65535));
  if (const char* addr = std::getenv("MASTER_ADDR")) {
    if (!*addr) {
      throw ConfigError(
          "MASTER_ADDR is set but empty: give rank 0's host (under Slurm, the first node "
          "of the allocation: docs/LAUNCH.md), or unset it for a job on this host alone");
    }
    world.master_addr = addr;
  }
  if (world.world_size > 1 && !std::getenv("RANK")) {
    throw ConfigError("WORLD_SIZE=" + std::to_string(world.world_size) +
                      " but RANK is not set: start the ranks with `gradwire run -n N -- ...` "
                      "(or torchrun), which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  }
  return world;
}

// Connects to (rank 0: serves) the TCPStore and waits until every rank joined.
namespace {

// A MASTER_ADDR that does not resolve fails every rank at once, saying so: c10d's store
// would retry it until the join timeout and then blame the port (rank 0) or rank 0.
void check_master_addr_resolves(const WorldInfo& world) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(world.master_addr.c_str(), nullptr, &hints, &found);
  if (found) ::freeaddrinfo(found);
  if (rc == 0) return;
  throw ConfigError("MASTER_ADDR '" + world.master_addr + "' does not resolve (" +
                    ::gai_strerror(rc) +
                    "): give an address, or a name every host resolves (under Slurm, the "
                    "first node's NodeAddr: docs/LAUNCH.md)");
}

c10::intrusive_ptr<c10d::Store> join_store(const WorldInfo& world, const ConnectOptions& options) {
  check_master_addr_resolves(world);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(world.master_port);
  store_options.isServer = world.rank == 0;
  store_options.waitWorkers = false;  // we count ranks ourselves, to name the missing ones
  store_options.timeout = options.join_timeout;
  c10::intrusive_ptr<c10d::Store> tcp_store;
  try {
    tcp_store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, store_options);
  } catch (const std::exception& e) {
    if (world.rank == 0) {
      throw SystemError("rank 0 could not serve the rendezvous store on " + world.master_addr +
                        ":" + std::to_string(world.master_port) +
                        " (is the port in use? pick another with --master-port): " + e.what());
    }
    throw TimeoutError("rank " + std::to_string(world.rank) +
                       " could not reach the rendezvous store at " + world.master_addr + ":" +
                       std::to_string(world.master_port) + " within " +
                       seconds(options.join_timeout) + " s; rank 0 serves it: did rank 0 start? (" +
                       e.what() + ")");
  }
  tcp_store->setTimeout(options.join_timeout);
  auto store = c10::make_intrusive<c10d::PrefixStore>("gradwire", tcp_store);
  wait_for_all_ranks(*store, world, options.join_timeout, options.failure_report_file);
  tcp_store->setTimeout(options.collective_timeout);
  return store;
}

std::unique_ptr<Collectives> gloo_over(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                       const WorldInfo& world, const ConnectOptions& options) {
  GlooOptions gloo;
  gloo.timeout = options.collective_timeout;
  gloo.bind_interface = options.socket_ifname;
  gloo.failure_report_file = options.failure_report_file;
  gloo.bind_hostname = is_loopback(world.master_addr) ? "127.0.0.1" : "";
  if (gloo.bind_interface.empty() && gloo.bind_hostname.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    gloo.bind_hostname = host;
  }
  return make_gloo_collectives(store, rank, size, gloo);
}

}  // namespace

std::unique_ptr<Collectives> connect(const WorldInfo& world, const ConnectOptions& options) {
  if (world.world_size == 1) {
    return std::make_unique<LocalCollectives>(
        std::make_shared<LocalGroup>(1, options.collective_timeout), 0);
  }
  return gloo_over(join_store(world, options), world.rank, world.world_size, world, options);
}

RoleInfo RoleInfo::from_environment(const WorldInfo& world) {
  RoleInfo role;
  role.num_servers = static_cast<int>(env_int("GRADWIRE_NUM_SERVERS", 0, 0, world.world_size - 1));
  role.num_workers = world.world_size - role.num_servers;
  role.index = world.rank;
  if (role.num_servers == 0) return role;
  const char* given = std::getenv("GRADWIRE_ROLE");
  if (given && *given) {
    const std::string name = given;
    if (name != "worker" && name != "server") {
      throw ConfigError("GRADWIRE_ROLE=" + name + " is neither worker nor server");
    }
    role.server = name == "server";
    const int count = role.server ? role.num_servers : role.num_workers;
    if (!std::getenv("GRADWIRE_ROLE_RANK")) {
      throw ConfigError("GRADWIRE_ROLE is set, so GRADWIRE_ROLE_RANK must say which " + name +
                        " this process is");
    }
    role.index = static_cast<int>(env_int("GRADWIRE_ROLE_RANK", 0, 0, count - 1));
  } else {
    role.server = world.rank >= role.num_workers;
    role.index = role.server ? world.rank - role.num_workers : world.rank;
  }
  if (world.rank == 0 && (role.server || role.index != 0)) {
    throw ConfigError("rank 0 serves the rendezvous store and must be worker 0");
  }
  return role;
}

WorkerJoin join_as_worker(const WorldInfo& world, const RoleInfo& role,
                          const ConnectOptions& options) {
  auto store = join_store(world, options);
  if (world.rank == 0) {
    std::random_device device;
    const uint64_t token = (static_cast<uint64_t>(device()) << 32) ^ device();
    std::vector<uint8_t> bytes(sizeof(token));
    std::memcpy(bytes.data(), &token, sizeof(token));
    store->set("ps/token", bytes);
  }
  WorkerJoin join;
  store->setTimeout(options.join_timeout);
  try {
    const auto bytes = store->get("ps/token");
    if (bytes.size() != sizeof(join.token)) throw ConfigError("malformed job token in the store");
    std::memcpy(&join.token, bytes.data(), sizeof(join.token));
    for (int s = 0; s < role.num_servers; ++s) {
      const auto endpoint = store->get("ps/server/" + std::to_string(s));
      join.server_endpoints.emplace_back(endpoint.begin(), endpoint.end());
    }
  } catch (const c10::Error& e) {
    throw TimeoutError("worker " + std::to_string(role.index) + ": server " +
                       std::to_string(join.server_endpoints.size()) + " did not publish its " +
                       "address within " + seconds(options.join_timeout) + " s (" +
                       e.what_without_backtrace() + ")");
  }
  store->setTimeout(options.collective_timeout);
  auto workers = c10::make_intrusive<c10d::PrefixStore>("workers", store);
  if (role.num_workers == 1) {
    join.collectives = std::make_unique<LocalCollectives>(
        std::make_shared<LocalGroup>(1, options.collective_timeout), 0);
  } else {
    join.collectives = gloo_over(workers, role.index, role.num_workers, world, options);
  }
  return join;
}

uint64_t join_as_server(const WorldInfo& world, const RoleInfo& role, const ConnectOptions& options,
                        const std::string& endpoint) {
  auto store = join_store(world, options);
  store->set("ps/server/" + std::to_string(role.index), as_bytes(endpoint));
  store->setTimeout(options.join_timeout);
  const auto bytes = store->get("ps/token");
  uint64_t token = 0;
  if (bytes.size() != sizeof(token)) throw ConfigError("malformed job token in the store");
  std::memcpy(&token, bytes.data(), sizeof(token));
  return token;
}

std::string interface_address(const std::string& ifname) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) {
    throw SystemError(errno_message("cannot list the network interfaces", errno));
  }
  std::string found, names;
  for (const ifaddrs* a = all; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    names += std::string(names.empty() ? "" : ", ") + a->ifa_name;
    if (ifname != a->ifa_name || !found.empty()) continue;
    char text[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) found = text;
  }
  ::freeifaddrs(all);
  if (found.empty()) {
    throw ConfigError("network interface '" + ifname +
                      "' has no IPv4 address (interfaces with one: " + names + ")");
  }
  return found;
}

std::string advertised_endpoint(std::string endpoint, const std::string& socket_ifname) {
  const auto any = endpoint.find("0.0.0.0");
  if (any == std::string::npos) return endpoint;
  std::string host;
  if (!socket_ifname.empty()) {
    host = interface_address(socket_ifname);
  } else {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return endpoint.replace(any, 7, host);
}

}  // namespace gradwire::comm
