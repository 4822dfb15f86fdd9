// gradwire::init(): join the job this process was started in.
//
// Reads torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), as
// set by `gradwire run`, torchrun, or a Slurm/mpirun wrapper; without them the process is a
// world of one. Other settings, read here once and nowhere else:
//   GRADWIRE_JOIN_TIMEOUT   seconds to wait for every rank to join (default 60)
//   GRADWIRE_TIMEOUT        seconds any collective may take before failing (default 300)
//   GLOO_SOCKET_IFNAME      network interface for Gloo (default: loopback for a local job)
//
// Parameter-server jobs (GRADWIRE_NUM_SERVERS = S > 0, set by `gradwire train --strategy
// ps --servers S`; roles as comm/rendezvous.h says): in a server process init() serves
// until every worker is done, then returns a Context whose is_server() is true (the
// program returns from main: `if (dist->is_server()) return 0;`), or throws what stopped
// the server. Library code never ends the process. Workers get a Context over the workers
// only (rank = worker index), whose parameter_servers() tells DistributedOptimizer where
// the servers are.
//   GRADWIRE_PS_BIND        address servers listen on (default 127.0.0.1); with 0.0.0.0 a
//                           server publishes GLOO_SOCKET_IFNAME's address (or its host name)
//
// Nothing below init() reads the environment: what it read is InitOptions, kept in the
// Context.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gradwire {

namespace comm {
class Collectives;
}

struct InitOptions {
  std::chrono::milliseconds join_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(300)};
  std::string socket_ifname;
  std::string ps_bind = "127.0.0.1";
  // Where this rank names the ranks it blames when it fails (GRADWIRE_ERROR_FILE, set by
  // `gradwire run`); empty: nowhere.
  std::string failure_report_file;

  static InitOptions from_environment();
};

// Where a parameter-server job's servers listen, and the job's token.
struct ParameterServers {
  std::vector<std::string> endpoints;  // server i's ZeroMQ endpoint
  uint64_t token = 0;
};

class Context {
 public:
  // `collectives` null: the context of a parameter server whose job is over.
  Context(int rank, int world_size, int local_rank, std::unique_ptr<comm::Collectives> collectives,
          InitOptions options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  bool is_root() const { return rank_ == 0; }
  // A parameter server's context, returned by init() when the job is over: it has no
  // collectives, and the program has nothing left to do.
  bool is_server() const { return !collectives_; }
  const InitOptions& options() const { return options_; }

  void barrier();
  // Every rank's value, indexed by rank (for metrics and checksums, not for gradients).
  std::vector<double> allgather(double value);

  // The communicator every DistributedOptimizer of this context and the calls above share.
  // What is promised: the library's exchange threads and the program's thread (the one
  // that calls backward() and step()) reach the wire in one order on every rank, the order
  // in which the program's thread made them (comm/ordered_collectives.h). Two program
  // threads that call collectives concurrently are ordered by whichever takes its turn
  // first, which may differ from rank to rank: as with torch.distributed, a program that
  // issues collectives from several threads orders them itself (one thread, or a lock
  // and an order of its own that every rank follows).
  comm::Collectives& collectives();

  // Set in parameter-server jobs; null otherwise.
  const ParameterServers* parameter_servers() const { return ps_ ? &*ps_ : nullptr; }
  void set_parameter_servers(ParameterServers servers) { ps_ = std::move(servers); }

 private:
  int rank_;
  int world_size_;
  int local_rank_;
  std::unique_ptr<comm::Collectives> collectives_;
  InitOptions options_;
  std::optional<ParameterServers> ps_;
};

// Joins the job (blocks until every rank joined, or throws TimeoutError naming the ranks
// that did not).
std::shared_ptr<Context> init(const InitOptions& options = InitOptions::from_environment());

}  // namespace gradwire
