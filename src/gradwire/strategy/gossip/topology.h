// Gossip topologies: whom a worker exchanges its model with next (ALGORITHMS.md 7).
//
//   ring              alternately the right (r + 1) and the left (r - 1) neighbour
//   exponential       r + 2^0, r + 2^1, ..., r + 2^floor(log2(W - 1)), then again (the
//                     time-varying exponential graph of SGP, Assran et al. 2019: any two
//                     workers' information mixes in about log2 W exchanges)
//   random[:seed]     a uniformly random other live worker, from a stream seeded by the
//                     seed and the rank (so runs repeat)
// all modulo W. A dropped peer (dead, or silent past the timeout) is skipped: the next live
// worker in the same direction takes its place, so the graph stays connected.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace gradwire::strategy::gossip {

class Topology {
 public:
  // Throws ConfigError for an unknown topology, a bad seed, or rank outside [0, world).
  static Topology parse(const std::string& spec, int rank, int world);

  // The peer of this worker's next exchange (advances the cycle); nullopt when no other
  // worker is alive.
  std::optional<int> next_peer();
  void drop(int peer);
  bool alive(int peer) const { return alive_.at(static_cast<size_t>(peer)) != 0; }
  std::vector<int> dropped() const;
  int live_peers() const;
  // "ring", "exponential", "random:seed=7".
  const std::string& canonical() const { return canonical_; }

 private:
  enum class Kind { kRing, kExponential, kRandom };
  Topology(Kind kind, int rank, int world, uint64_t seed, std::string canonical);
  // The first live worker at r + step, r + 2 step, ... (step = +1 or -1 modulo W).
  std::optional<int> live_from(int start, int direction) const;

  Kind kind_;
  int rank_;
  int world_;
  std::vector<uint8_t> alive_;
  uint64_t turn_ = 0;  // exchanges started so far
  std::mt19937_64 rng_;
  std::string canonical_;
};

}  // namespace gradwire::strategy::gossip
