// Runs fn on `world` threads, each a real rank: TCPStore rendezvous and ProcessGroupGloo
// over loopback, exactly as separate processes would, but bounded and cleaned up by one
// test process. Rethrows the first rank's exception after every thread finished.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gradwire/comm/rendezvous.h"
#include "gradwire/launch/launcher.h"

namespace gradwire::testing {

inline comm::ConnectOptions quick_timeouts(
    std::chrono::milliseconds join = std::chrono::seconds(20),
    std::chrono::milliseconds op = std::chrono::seconds(30)) {
  comm::ConnectOptions o;
  o.join_timeout = join;
  o.collective_timeout = op;
  return o;
}

inline void run_gloo_ranks(
    int world, const std::function<void(int rank, std::unique_ptr<comm::Collectives>&)>& fn,
    const comm::ConnectOptions& options = quick_timeouts(), std::vector<int> ranks_to_start = {}) {
  const int port = launch::pick_free_port();
  if (ranks_to_start.empty()) {
    for (int r = 0; r < world; ++r) ranks_to_start.push_back(r);
  }
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r : ranks_to_start) {
    threads.emplace_back([&, r] {
      try {
        comm::WorldInfo info;
        info.rank = r;
        info.world_size = world;
        info.local_rank = r;
        info.master_port = port;
        auto collectives = comm::connect(info, options);
        fn(r, collectives);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace gradwire::testing
