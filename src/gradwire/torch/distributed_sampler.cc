#include "gradwire/distributed_sampler.h"

#include <torch/serialize/archive.h>

#include <algorithm>
#include <numeric>

#include "gradwire/core/error.h"

namespace gradwire {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): advances `state` and returns the next draw.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

DistributedSampler::DistributedSampler(size_t dataset_size, int rank, int world_size, uint64_t seed,
                                       bool shuffle)
    : dataset_size_(dataset_size),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      shuffle_(shuffle) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw ConfigError("DistributedSampler: rank " + std::to_string(rank) +
                      " is outside a world of " + std::to_string(world_size));
  }
  build();
}

void DistributedSampler::set_epoch(uint64_t epoch) {
  // The loop of a resumed job calls set_epoch() with the epoch load() restored before its
  // first pass: that keeps the resume position; any other epoch starts from its beginning.
  if (epoch != epoch_) resume_position_ = 0;
  epoch_ = epoch;
  build();
  fresh_ = true;
}

void DistributedSampler::build() {
  std::vector<size_t> order(dataset_size_);
  std::iota(order.begin(), order.end(), size_t{0});
  if (shuffle_) {
    // Same seed on every rank, so the shards partition one permutation. Fisher-Yates from
    // the back with SplitMix64 draws, j = draw mod (i + 1): a sequence any language
    // reproduces in a few lines (bench/peers/ddp_peer.py does), unlike std::shuffle's,
    // which belongs to the standard library. The modulo bias is below n / 2^64.
    uint64_t state = seed_ * 0x9E3779B97F4A7C15ULL + epoch_;
    for (size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[splitmix64(state) % i]);
    }
  }
  const size_t per_rank = (dataset_size_ + world_size_ - 1) / world_size_;
  indices_.clear();
  indices_.reserve(per_rank);
  for (size_t j = 0; j < per_rank && dataset_size_ > 0; ++j) {
    indices_.push_back(order[(j * world_size_ + rank_) % dataset_size_]);
  }
  position_ = 0;
}

void DistributedSampler::reset(torch::optional<size_t> new_size) {
  if (new_size) dataset_size_ = *new_size;
  if (!fresh_) ++epoch_;
  fresh_ = false;
  build();
  // The first pass after load() goes on from the saved position (mid-epoch resume).
  position_ = std::min(resume_position_, indices_.size());
  resume_position_ = 0;
}

torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (position_ >= indices_.size()) return torch::nullopt;
  const size_t end = std::min(indices_.size(), position_ + batch_size);
  std::vector<size_t> batch(indices_.begin() + position_, indices_.begin() + end);
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", torch::tensor(static_cast<int64_t>(epoch_)), /*is_buffer=*/true);
  archive.write("position", torch::tensor(static_cast<int64_t>(position_)), /*is_buffer=*/true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor epoch, position;
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  resume_position_ = 0;
  set_epoch(static_cast<uint64_t>(epoch.item<int64_t>()));
  position_ = static_cast<size_t>(position.item<int64_t>());
  resume_position_ = position_;  // kept by the reset() a DataLoader calls first
}

}  // namespace gradwire
