// gradwire::init(): join the job this process was started in.
//
// Reads torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), as
// set by `gradwire run`, torchrun, or a Slurm/mpirun wrapper; without them the process is a
// world of one. Other settings, read here once and nowhere else:
//   GRADWIRE_JOIN_TIMEOUT   seconds to wait for every rank to join (default 60)
//   GRADWIRE_TIMEOUT        seconds any collective may take before failing (default 300)
//   GLOO_SOCKET_IFNAME      network interface for Gloo (default: loopback for a local job)
#pragma once

#include <chrono>
#include <memory>
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

  static InitOptions from_environment();
};

class Context {
 public:
  Context(int rank, int world_size, int local_rank, std::unique_ptr<comm::Collectives> collectives);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  bool is_root() const { return rank_ == 0; }

  void barrier();
  // Every rank's value, indexed by rank (for metrics and checksums, not for gradients).
  std::vector<double> allgather(double value);

  comm::Collectives& collectives() { return *collectives_; }

 private:
  int rank_;
  int world_size_;
  int local_rank_;
  std::unique_ptr<comm::Collectives> collectives_;
};

// Joins the job (blocks until every rank joined, or throws TimeoutError naming the ranks
// that did not).
std::shared_ptr<Context> init(const InitOptions& options = InitOptions::from_environment());

}  // namespace gradwire
