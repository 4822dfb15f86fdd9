#include "gradwire/context.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/rendezvous.h"
#include "gradwire/core/error.h"

namespace gradwire {
namespace {

std::chrono::milliseconds env_seconds(const char* name, std::chrono::milliseconds fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  if (*end != '\0' || errno != 0 || !(value > 0) || value > 7 * 24 * 3600) {
    throw ConfigError(std::string("environment variable ") + name + "=" + text +
                      " is not a positive number of seconds");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(value * 1000));
}

}  // namespace

InitOptions InitOptions::from_environment() {
  InitOptions options;
  options.join_timeout = env_seconds("GRADWIRE_JOIN_TIMEOUT", options.join_timeout);
  options.collective_timeout = env_seconds("GRADWIRE_TIMEOUT", options.collective_timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) options.socket_ifname = ifname;
  return options;
}

Context::Context(int rank, int world_size, int local_rank,
                 std::unique_ptr<comm::Collectives> collectives)
    : rank_(rank),
      world_size_(world_size),
      local_rank_(local_rank),
      collectives_(std::move(collectives)) {}

Context::~Context() = default;

void Context::barrier() { collectives_->barrier(); }

std::vector<double> Context::allgather(double value) {
  const auto* raw = reinterpret_cast<const uint8_t*>(&value);
  const auto all = collectives_->allgather_bytes(std::span<const uint8_t>(raw, sizeof(value)));
  std::vector<double> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != sizeof(double)) throw PayloadError("allgather(double): bad size");
    std::memcpy(&out[r], all[r].data(), sizeof(double));
  }
  return out;
}

std::shared_ptr<Context> init(const InitOptions& options) {
  const auto world = comm::WorldInfo::from_environment();
  comm::ConnectOptions connect_options;
  connect_options.join_timeout = options.join_timeout;
  connect_options.collective_timeout = options.collective_timeout;
  connect_options.socket_ifname = options.socket_ifname;
  return std::make_shared<Context>(world.rank, world.world_size, world.local_rank,
                                   comm::connect(world, connect_options));
}

}  // namespace gradwire
