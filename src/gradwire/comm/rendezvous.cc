#include "gradwire/comm/rendezvous.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "gradwire/comm/gloo_collectives.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/error.h"

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
                        std::chrono::milliseconds timeout) {
  store.set("joined/" + std::to_string(world.rank), as_bytes("1"));
  int64_t joined = store.add("joined", 1);
  const auto deadline = Clock::now() + timeout;
  while (joined < world.world_size) {
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < world.world_size; ++r) {
        if (!store.check({"joined/" + std::to_string(r)})) missing.push_back(r);
      }
      throw TimeoutError("rank " + std::to_string(world.rank) + ": " + describe_ranks(missing) +
                         " did not join within " + seconds(timeout) + " s; " +
                         std::to_string(joined) + " of " + std::to_string(world.world_size) +
                         " joined at " + world.master_addr + ":" +
                         std::to_string(world.master_port));
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
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) world.master_addr = addr;
  if (world.world_size > 1 && !std::getenv("RANK")) {
    throw ConfigError("WORLD_SIZE=" + std::to_string(world.world_size) +
                      " but RANK is not set: start the ranks with `gradwire run -n N -- ...` "
                      "(or torchrun), which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  }
  return world;
}

std::unique_ptr<Collectives> connect(const WorldInfo& world, const ConnectOptions& options) {
  if (world.world_size == 1) {
    return std::make_unique<LocalCollectives>(
        std::make_shared<LocalGroup>(1, options.collective_timeout), 0);
  }
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
  wait_for_all_ranks(*store, world, options.join_timeout);
  tcp_store->setTimeout(options.collective_timeout);

  GlooOptions gloo;
  gloo.timeout = options.collective_timeout;
  gloo.bind_interface = options.socket_ifname;
  gloo.bind_hostname = is_loopback(world.master_addr) ? "127.0.0.1" : "";
  if (gloo.bind_interface.empty() && gloo.bind_hostname.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    gloo.bind_hostname = host;
  }
  return make_gloo_collectives(store, world.rank, world.world_size, gloo);
}

}  // namespace gradwire::comm
