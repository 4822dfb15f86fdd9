// Rendezvous from torchrun's environment, then collectives over c10d's ProcessGroupGloo.
//
// Sequence: rank 0 serves a c10d TCPStore at MASTER_ADDR:MASTER_PORT; every rank connects,
// records "joined/<rank>" and waits until all WORLD_SIZE ranks joined; then the Gloo
// process group connects its full mesh through the same store. A rank that never joins
// makes the others fail within join_timeout, naming it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  // process is a world of one; without MASTER_ADDR the master is this host. Malformed or
  // inconsistent values throw ConfigError, and so does a MASTER_ADDR set but empty (a
  // script's unset variable: falling back to this host would be wrong across nodes).
  static WorldInfo from_environment();
};

struct ConnectOptions {
  std::chrono::milliseconds join_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(300)};
  // Network interface Gloo binds to (e.g. from GLOO_SOCKET_IFNAME); empty: 127.0.0.1 when
  // MASTER_ADDR is a loopback address, the host's default address otherwise.
  std::string socket_ifname;
  // Ranks that never join or never arrive at a collective are named here
  // (core/failure_report.h); empty: nowhere.
  std::string failure_report_file;
};

// Joins the world and returns its collectives (LocalCollectives for a world of one).
std::unique_ptr<Collectives> connect(const WorldInfo& world, const ConnectOptions& options);

// A parameter-server job (GRADWIRE_NUM_SERVERS = S > 0) splits the world into W =
// WORLD_SIZE - S workers and S servers. By default ranks [0, W) are workers 0..W-1 and
// ranks [W, W+S) servers 0..S-1; a cluster launch that places servers on their own hosts
// sets GRADWIRE_ROLE=worker|server and GRADWIRE_ROLE_RANK=i on each process instead.
// Rank 0 must be worker 0: it serves the rendezvous store.
struct RoleInfo {
  bool server = false;
  int index = 0;  // among the workers, or among the servers
  int num_workers = 1;
  int num_servers = 0;  // 0: not a parameter-server job

  static RoleInfo from_environment(const WorldInfo& world);  // ConfigError when inconsistent
};

struct WorkerJoin {
  std::unique_ptr<Collectives> collectives;   // among the workers only
  uint64_t token = 0;                         // the job's token, drawn by rank 0
  std::vector<std::string> server_endpoints;  // where server i listens
};

// Every rank (workers and servers) joins the store and waits for all; then a worker reads
// the token and every server's endpoint, and connects collectives among the workers.
WorkerJoin join_as_worker(const WorldInfo& world, const RoleInfo& role,
                          const ConnectOptions& options);

// The IPv4 address of network interface `ifname` (e.g. "eth0"); ConfigError naming the
// interfaces that exist when it has none.
std::string interface_address(const std::string& ifname);

// `endpoint` ("tcp://ADDRESS:PORT") as peers should connect to it: an endpoint bound to
// 0.0.0.0 gets the address of `socket_ifname` when given (GLOO_SOCKET_IFNAME, the interface
// the job talks over), else the host name.
std::string advertised_endpoint(std::string endpoint, const std::string& socket_ifname);

// A server publishes where it listens and returns the job's token.
uint64_t join_as_server(const WorldInfo& world, const RoleInfo& role, const ConnectOptions& options,
                        const std::string& endpoint);

}  // namespace gradwire::comm
