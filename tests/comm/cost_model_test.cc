#include "gradwire/comm/cost_model.h"

#include <gtest/gtest.h>

namespace gradwire::comm {
namespace {

const LinkModel kGigabit = LinkModel::from_bandwidth(50e-6, 1e9);

TEST(CostModelTest, CollectivesFollowGloosAlgorithms) {
  EXPECT_DOUBLE_EQ(kGigabit.beta_s_per_byte, 8e-9);
  // Ring allreduce of 4 MB over 4 ranks: 6 steps, 2 x 3/4 of the bytes.
  EXPECT_DOUBLE_EQ(ring_allreduce_seconds(kGigabit, 4e6, 4), 6 * 50e-6 + 1.5 * 4e6 * 8e-9);
  // Allgather of 1 kB per rank over 8 ranks: sizes, then 7 contributions.
  EXPECT_DOUBLE_EQ(allgather_seconds(kGigabit, 1000, 8), 14 * 50e-6 + 7 * 1008 * 8e-9);
  EXPECT_DOUBLE_EQ(alltoall_seconds(kGigabit, 1000, 8), allgather_seconds(kGigabit, 1000, 8));
  EXPECT_EQ(ring_allreduce_seconds(kGigabit, 4e6, 1), 0);
  EXPECT_EQ(allgather_seconds(kGigabit, 4e6, 1), 0);
}

TEST(CostModelTest, IndependentUnionGrowsTowardsTheWholeTensor) {
  EXPECT_NEAR(independent_union(1e6, 0.01, 1), 1e4, 1e-6);
  EXPECT_NEAR(independent_union(1e6, 0.01, 2), 1e6 * (1 - 0.99 * 0.99), 1e-6);
  EXPECT_GT(independent_union(1e6, 0.01, 1024), 0.9999 * 1e6);
  EXPECT_EQ(independent_union(1e6, 0.0, 64), 0);
}

SparseBucketLoad load(double n, double density, double union_count) {
  return {n, 8 * density * n, density * n, union_count};
}

TEST(CostModelTest, SplitTrafficStopsGrowingWithTheWorldAllgatherDoesNot) {
  const double n = 1 << 20, d = 0.01;
  for (int world : {16, 64, 256, 1024}) {
    const auto l = load(n, d, independent_union(n, d, world));
    const double split = sparse_path_seconds(kGigabit, SparsePath::kSplit, l, world);
    // Per rank at most 8k (the pairs) + 4n (a dense reduced range) bytes, and 4(W-1) steps.
    EXPECT_LE(split, 4 * (world - 1) * 50e-6 + (8 * d * n + 4 * n + 16 * world) * 8e-9) << world;
  }
  // 256 ranks: the union covers 92% of the bucket, split sends it as dense ranges and wins.
  const auto l256 = load(n, d, independent_union(n, d, 256));
  EXPECT_EQ(cheapest_sparse_path(kGigabit, l256, 256), SparsePath::kSplit);
  EXPECT_GT(sparse_path_seconds(kGigabit, SparsePath::kAllgather, l256, 256),
            2 * sparse_path_seconds(kGigabit, SparsePath::kSplit, l256, 256));
  // 1,024 ranks: allgather moves 1,023 payloads per rank, split about one dense range, but
  // its 4(W-1) message steps (0.2 s at 50 us) now cost more than the ring allreduce's 2(W-1).
  const auto l = load(n, d, independent_union(n, d, 1024));
  EXPECT_GT(sparse_path_seconds(kGigabit, SparsePath::kAllgather, l, 1024),
            3 * sparse_path_seconds(kGigabit, SparsePath::kSplit, l, 1024));
  EXPECT_EQ(cheapest_sparse_path(kGigabit, l, 1024), SparsePath::kDense);
}

TEST(CostModelTest, CheapestPathDependsOnWorldDensityAndUnion) {
  const double n = 1 << 20;
  // Two ranks, independent picks: allgather sends each payload once; split twice over.
  EXPECT_EQ(cheapest_sparse_path(kGigabit, load(n, 0.01, independent_union(n, 0.01, 2)), 2),
            SparsePath::kAllgather);
  // Sixteen ranks that mostly agree on their coordinates (a union of 2k): split.
  EXPECT_EQ(cheapest_sparse_path(kGigabit, load(n, 0.01, 2 * 0.01 * n), 16), SparsePath::kSplit);
  // ... that pick disjoint ones (U = W k): the reduced ranges carry what allgather does.
  EXPECT_EQ(cheapest_sparse_path(kGigabit, load(n, 0.01, 16 * 0.01 * n), 16),
            SparsePath::kAllgather);
  // More than half the coordinates per rank: a dense allreduce is cheapest.
  EXPECT_EQ(cheapest_sparse_path(kGigabit, load(n, 0.6, n), 8), SparsePath::kDense);
  // A tiny bucket at 16 ranks: latency decides, and split takes twice the steps.
  EXPECT_NE(cheapest_sparse_path(kGigabit, load(1000, 0.01, 10), 16), SparsePath::kSplit);
}

}  // namespace
}  // namespace gradwire::comm
