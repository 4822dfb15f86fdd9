// DistributedSampler: each rank draws its own shard of a dataset, reshuffled every epoch.
//
// Like PyTorch's DistributedSampler (drop_last=false): indices are permuted with a seed
// shared by all ranks (seed + epoch; Fisher-Yates over SplitMix64 draws, spelled out in
// distributed_sampler.cc so that other programs can draw the same shards), padded by wrapping
// around to a multiple of the world size, and rank r takes positions r, r + W, r + 2W, ... So
// shards are disjoint (up to the padding), equally long, and together cover the dataset every
// epoch.
//
// With a libtorch DataLoader (which owns the sampler and calls reset() at the start of
// every pass) each pass after the first moves to the next epoch's permutation; set_epoch(e)
// picks the permutation of the next pass explicitly. load() restores a saved epoch and
// position, and the first reset() after it (the DataLoader's) starts there: a mid-epoch
// resume goes on where the saved job was, also when the loop calls set_epoch() with the
// restored epoch first (PyTorch's idiom: set_epoch(epoch) at every epoch's start); a
// set_epoch() to another epoch drops the resume position.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/data/samplers/base.h>

namespace gradwire {

class DistributedSampler : public torch::data::samplers::Sampler<> {
 public:
  DistributedSampler(size_t dataset_size, int rank, int world_size, uint64_t seed = 0,
                     bool shuffle = true);

  // Selects the permutation for `epoch` and rewinds; the next reset() keeps it.
  void set_epoch(uint64_t epoch);
  // This rank's indices for the current epoch.
  const std::vector<size_t>& indices() const { return indices_; }

  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void build();

  size_t dataset_size_;
  int rank_;
  int world_size_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t epoch_ = 0;
  size_t position_ = 0;
  bool fresh_ = true;           // the current permutation has not been handed out by a reset() yet
  size_t resume_position_ = 0;  // set by load(): where the next reset() starts
  std::vector<size_t> indices_;
};

}  // namespace gradwire
