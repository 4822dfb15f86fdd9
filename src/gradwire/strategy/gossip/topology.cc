#include "gradwire/strategy/gossip/topology.h"

#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"

namespace gradwire::strategy::gossip {

Topology Topology::parse(const std::string& text, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw ConfigError("gossip topology: rank " + std::to_string(rank) + " of a world of " +
                      std::to_string(world));
  }
  const Spec spec = Spec::parse(text);
  SpecReader reader(spec, "gossip topology");
  Kind kind;
  std::string canonical = spec.name;
  uint64_t seed = 0;
  if (spec.name == "ring") {
    kind = Kind::kRing;
  } else if (spec.name == "exponential") {
    kind = Kind::kExponential;
  } else if (spec.name == "random") {
    kind = Kind::kRandom;
    seed = static_cast<uint64_t>(reader.get_int_in("seed", 0, 0, INT64_MAX));
    canonical += ":seed=" + std::to_string(seed);
  } else {
    throw ConfigError("unknown gossip topology '" + spec.name +
                      "'; available: ring, exponential, random[:seed=S]");
  }
  reader.finish();
  return Topology(kind, rank, world, seed, canonical);
}

Topology::Topology(Kind kind, int rank, int world, uint64_t seed, std::string canonical)
    : kind_(kind),
      rank_(rank),
      world_(world),
      alive_(static_cast<size_t>(world), 1),
      rng_(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(rank) + 1),
      canonical_(std::move(canonical)) {}

void Topology::drop(int peer) {
  if (peer >= 0 && peer < world_ && peer != rank_) alive_[static_cast<size_t>(peer)] = 0;
}

std::vector<int> Topology::dropped() const {
  std::vector<int> out;
  for (int r = 0; r < world_; ++r) {
    if (!alive_[static_cast<size_t>(r)]) out.push_back(r);
  }
  return out;
}

int Topology::live_peers() const {
  int n = 0;
  for (int r = 0; r < world_; ++r) n += r != rank_ && alive_[static_cast<size_t>(r)] ? 1 : 0;
  return n;
}

std::optional<int> Topology::live_from(int start, int direction) const {
  for (int step = 0; step < world_; ++step) {
    const int r = ((start + direction * step) % world_ + world_) % world_;
    if (r != rank_ && alive_[static_cast<size_t>(r)]) return r;
  }
  return std::nullopt;
}

std::optional<int> Topology::next_peer() {
  if (live_peers() == 0) return std::nullopt;
  const uint64_t turn = turn_++;
  switch (kind_) {
    case Kind::kRing:
      return turn % 2 == 0 ? live_from(rank_ + 1, +1) : live_from(rank_ - 1, -1);
    case Kind::kExponential: {
      int levels = 0;  // 2^0 .. 2^(levels-1) < world
      while ((int64_t{1} << levels) < world_) ++levels;
      const int offset = 1 << static_cast<int>(turn % static_cast<uint64_t>(levels));
      return live_from(rank_ + offset, +1);
    }
    case Kind::kRandom: {
      std::vector<int> live;
      for (int r = 0; r < world_; ++r) {
        if (r != rank_ && alive_[static_cast<size_t>(r)]) live.push_back(r);
      }
      return live[static_cast<size_t>(rng_() % live.size())];
    }
  }
  return std::nullopt;
}

}  // namespace gradwire::strategy::gossip
