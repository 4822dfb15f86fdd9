// Rendezvous from torchrun's environment, then collectives over c10d's ProcessGroupGloo.
//
// Sequence: rank 0 serves a c10d TCPStore at MASTER_ADDR:MASTER_PORT; every rank connects,
// records "joined/<rank>" and waits until all WORLD_SIZE ranks joined; then the Gloo
// process group connects its full mesh through the same store. A rank that never joins
// makes the others fail within join_timeout, naming it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "gradwire/comm/collectives.h"

namespace gradwire::comm {

// What a launcher told this process (torchrun's variables).
struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;

  // Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Without WORLD_SIZE the
  // process is a world of one. Malformed or inconsistent values throw ConfigError.
  static WorldInfo from_environment();
};

struct ConnectOptions {
  std::chrono::milliseconds join_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(300)};
  // Network interface Gloo binds to (e.g. from GLOO_SOCKET_IFNAME); empty: 127.0.0.1 when
  // MASTER_ADDR is a loopback address, the host's default address otherwise.
  std::string socket_ifname;
};

// Joins the world and returns its collectives (LocalCollectives for a world of one).
std::unique_ptr<Collectives> connect(const WorldInfo& world, const ConnectOptions& options);

}  // namespace gradwire::comm
