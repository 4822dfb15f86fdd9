#include "gradwire/distributed_sampler.h"

#include <gtest/gtest.h>

#include <set>

#include <torch/serialize.h>

namespace gradwire {
namespace {

TEST(DistributedSamplerTest, ShardsAreDisjointEqualAndCoverTheDataset) {
  constexpr size_t kSize = 103;
  constexpr int kWorld = 4;
  std::multiset<size_t> seen;
  for (int r = 0; r < kWorld; ++r) {
    DistributedSampler sampler(kSize, r, kWorld, /*seed=*/3);
    EXPECT_EQ(sampler.indices().size(), 26u);  // ceil(103 / 4)
    seen.insert(sampler.indices().begin(), sampler.indices().end());
  }
  for (size_t i = 0; i < kSize; ++i) EXPECT_GE(seen.count(i), 1u) << i;
  EXPECT_EQ(seen.size(), 104u);  // one index repeated as padding
}

TEST(DistributedSamplerTest, ReshufflesPerEpochAndAgreesAcrossInstances) {
  DistributedSampler a(1000, 1, 2, 7), b(1000, 1, 2, 7);
  const auto epoch0 = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), epoch0);
  b.set_epoch(1);
  EXPECT_EQ(a.indices(), b.indices());
}

// The permutation is part of the contract: bench/peers/ddp_peer.py draws the same shards
// (Fisher-Yates over SplitMix64 from seed * 0x9E3779B97F4A7C15 + epoch).
TEST(DistributedSamplerTest, PermutationIsTheDocumentedOne) {
  DistributedSampler sampler(10, 1, 3, /*seed=*/7);
  sampler.set_epoch(3);
  // permutation 4 9 1 8 6 3 7 2 5 0; rank 1 of 3 takes positions 1, 4, 7, 10 mod 10
  EXPECT_EQ(sampler.indices(), (std::vector<size_t>{9, 6, 2, 4}));
}

TEST(DistributedSamplerTest, DataLoaderResetsMoveToTheNextEpoch) {
  DistributedSampler sampler(50, 0, 2, 1);
  DistributedSampler reference(50, 0, 2, 1);
  sampler.reset();  // first pass: epoch 0
  EXPECT_EQ(sampler.indices(), reference.indices());
  std::vector<size_t> drawn;
  while (auto batch = sampler.next(10)) drawn.insert(drawn.end(), batch->begin(), batch->end());
  EXPECT_EQ(drawn, reference.indices());
  sampler.reset();  // second pass: epoch 1
  reference.set_epoch(1);
  EXPECT_EQ(sampler.indices(), reference.indices());
}

TEST(DistributedSamplerTest, AMidEpochResumeGoesOnWhereTheSavedJobWas) {
  DistributedSampler sampler(50, 1, 2, 3);
  sampler.set_epoch(2);
  sampler.reset();
  const auto first = sampler.next(10);  // one batch of the epoch done, then saved
  torch::serialize::OutputArchive out;
  sampler.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  std::vector<size_t> rest;
  while (auto batch = sampler.next(10)) rest.insert(rest.end(), batch->begin(), batch->end());

  DistributedSampler resumed(50, 1, 2, 3);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  resumed.load(in);
  resumed.reset();  // what a DataLoader does first
  std::vector<size_t> drawn;
  while (auto batch = resumed.next(10)) drawn.insert(drawn.end(), batch->begin(), batch->end());
  EXPECT_EQ(drawn, rest);
  ASSERT_TRUE(first.has_value());
  resumed.reset();  // the next pass is the next epoch, from its start
  DistributedSampler reference(50, 1, 2, 3);
  reference.set_epoch(3);
  EXPECT_EQ(resumed.indices(), reference.indices());
  EXPECT_EQ(resumed.next(100)->size(), reference.indices().size());

  // PyTorch's loop calls set_epoch(epoch) at each epoch's start, the restored one too: the
  // resume position stays; a set_epoch() to another epoch starts that one from its start.
  DistributedSampler again(50, 1, 2, 3);
  torch::serialize::InputArchive in2;
  std::stringstream copy(bytes.str());
  in2.load_from(copy);
  again.load(in2);
  again.set_epoch(2);
  again.reset();
  drawn.clear();
  while (auto batch = again.next(10)) drawn.insert(drawn.end(), batch->begin(), batch->end());
  EXPECT_EQ(drawn, rest);
  DistributedSampler other(50, 1, 2, 3);
  std::stringstream copy2(bytes.str());
  torch::serialize::InputArchive in3;
  in3.load_from(copy2);
  other.load(in3);
  other.set_epoch(5);
  other.reset();
  reference.set_epoch(5);
  EXPECT_EQ(other.next(100)->size(), reference.indices().size());
}

}  // namespace
}  // namespace gradwire
