#include "gradwire/context.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include <cstdio>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/ordered_collectives.h"
#include "gradwire/comm/rendezvous.h"
#include "gradwire/comm/zmq_transport.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/ps/server.h"

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
  if (const char* bind = std::getenv("GRADWIRE_PS_BIND"); bind && *bind) options.ps_bind = bind;
  if (const char* file = std::getenv("GRADWIRE_ERROR_FILE")) options.failure_report_file = file;
  return options;
}

Context::Context(int rank, int world_size, int local_rank,
                 std::unique_ptr<comm::Collectives> collectives, InitOptions options)
    : rank_(rank),
      world_size_(world_size),
      local_rank_(local_rank),
      // Several threads of this process use it (ordered_collectives.h): one order for all.
      collectives_(collectives ? std::make_unique<comm::OrderedCollectives>(std::move(collectives))
                               : nullptr),
      options_(std::move(options)) {}

Context::~Context() = default;

comm::Collectives& Context::collectives() {
  if (!collectives_) {
    throw ConfigError(
        "this process served as a parameter server and its job is over: it has "
        "no collectives (check context->is_server() after gradwire::init())");
  }
  return *collectives_;
}

void Context::barrier() { collectives().barrier(); }

std::vector<double> Context::allgather(double value) {
  const auto* raw = reinterpret_cast<const uint8_t*>(&value);
  const auto all = collectives().allgather_bytes(std::span<const uint8_t>(raw, sizeof(value)));
  std::vector<double> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != sizeof(double)) throw PayloadError("allgather(double): bad size");
    std::memcpy(&out[r], all[r].data(), sizeof(double));
  }
  return out;
}

namespace {

// A server's whole life: listen, publish the address, serve until every worker is done.
// Throws what stopped it.
void serve(const comm::WorldInfo& world, const comm::RoleInfo& role,
           const comm::ConnectOptions& options, const std::string& bind) {
  comm::ZmqServerTransport transport("server" + std::to_string(role.index), bind);
  // The last replies (whole models) still go out after run() returns: on a slow link that
  // takes seconds, so the socket waits for them on close, up to the collective timeout but
  // no more than 30 s (a model of about 375 MB at 100 Mbit). A worker that leaves without
  // waiting (destroyed without finish()) says so in its goodbye and gets no final reply,
  // which ZeroMQ would otherwise keep for the whole linger.
  transport.set_linger(
      std::min<std::chrono::milliseconds>(options.collective_timeout, std::chrono::seconds(30)));
  // Listening on every interface: tell workers an address they can reach.
  const std::string endpoint =
      comm::advertised_endpoint(transport.endpoint(), options.socket_ifname);
  strategy::ps::ServerOptions server_options;
  server_options.index = role.index;
  server_options.first_hello_timeout = options.collective_timeout;
  server_options.token = comm::join_as_server(world, role, options, endpoint);
  strategy::ps::ParameterServer server(transport, server_options);
  server.run();
}

}  // namespace

std::shared_ptr<Context> init(const InitOptions& options) {
  const auto world = comm::WorldInfo::from_environment();
  comm::ConnectOptions connect_options;
  connect_options.join_timeout = options.join_timeout;
  connect_options.collective_timeout = options.collective_timeout;
  connect_options.socket_ifname = options.socket_ifname;
  connect_options.failure_report_file = options.failure_report_file;
  const auto role = comm::RoleInfo::from_environment(world);
  if (role.num_servers == 0) {
    return std::make_shared<Context>(world.rank, world.world_size, world.local_rank,
                                     comm::connect(world, connect_options), options);
  }
  if (role.server) {
    serve(world, role, connect_options, options.ps_bind);
    return std::make_shared<Context>(role.index, role.num_servers, world.local_rank, nullptr,
                                     options);
  }
  auto join = comm::join_as_worker(world, role, connect_options);
  auto context = std::make_shared<Context>(role.index, role.num_workers, world.local_rank,
                                           std::move(join.collectives), options);
  context->set_parameter_servers({std::move(join.server_endpoints), join.token});
  return context;
}

}  // namespace gradwire
