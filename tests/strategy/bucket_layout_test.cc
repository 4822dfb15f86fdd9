#include "gradwire/strategy/allreduce/bucket_layout.h"

#include <gtest/gtest.h>

#include <random>

#include "gradwire/core/error.h"

namespace gradwire::strategy {
namespace {

// Two ranks over a link of 1 ms per KB and no latency: a bucket of B bytes costs B us.
LayoutInput two_ranks() {
  LayoutInput input;
  input.world = 2;
  input.link = {0.0, 1e-6};
  input.tie_s = 1e-9;
  return input;
}

LayoutTensor tensor(double bytes, double ready_s, int kind = 0) {
  LayoutTensor t;
  t.elements = static_cast<size_t>(bytes / 4);
  t.wire_bytes = bytes;
  t.ready_s = ready_s;
  t.kind = kind;
  return t;
}

// Every partition into contiguous buckets (respecting kinds and the cap), by brute force.
double best_by_enumeration(const LayoutInput& input) {
  const size_t n = input.tensors.size();
  double best = 1e30;
  for (uint32_t cuts = 0; cuts < (1u << (n - 1)); ++cuts) {
    std::vector<size_t> ends;
    bool valid = true;
    size_t first = 0;
    for (size_t k = 1; k <= n; ++k) {
      if (k == n || (cuts >> (k - 1)) & 1u) {
        size_t elements = 0;
        for (size_t i = first; i < k; ++i) {
          valid = valid && input.tensors[i].kind == input.tensors[first].kind;
          elements += input.tensors[i].elements;
        }
        valid = valid && (k - first == 1 || elements * sizeof(float) <= input.bucket_bytes);
        ends.push_back(k);
        first = k;
      }
    }
    if (valid) best = std::min(best, layout_exposed_seconds(input, ends));
  }
  return best;
}

TEST(BucketLayoutTest, ATensorFinalEarlyGetsABucketOfItsOwnWhenItsExchangeHidesUnderBackward) {
  // cnn's shape: the fc layers (20 KB) are final 40 ms before backward ends, the convs
  // (4 KB) at the end. One bucket waits 24 ms after backward; fc alone hides, and only the
  // convs' 4 ms are exposed.
  LayoutInput input = two_ranks();
  input.tensors = {tensor(400, 0.041), tensor(19600, 0.040), tensor(4000, 0.0)};
  EXPECT_NEAR(layout_exposed_seconds(input, {3}), 0.024, 1e-9);
  const PlannedLayout layout = plan_bucket_layout(input);
  EXPECT_EQ(layout.ends, (std::vector<size_t>{2, 3}));
  EXPECT_NEAR(layout.exposed_s, 0.004, 1e-9);
}

TEST(BucketLayoutTest, ASplitThatSavesLessThanTheTieIsNotMade) {
  // cnn's shape, 3 buckets against 2: after the fc layers, a conv of 2000 bytes final
  // 0.5 ms before backward's end and one of 400 bytes at the end. A bucket of its own for
  // the first ends the exchange 0.5 ms sooner: made with a tie of 0.1 ms, not with one of
  // 1 ms (what AllreduceStrategy prices a bucket).
  LayoutInput input = two_ranks();
  input.tensors = {tensor(19600, 0.040), tensor(2000, 0.0005), tensor(400, 0.0)};
  input.tie_s = 1e-4;
  EXPECT_EQ(plan_bucket_layout(input).ends, (std::vector<size_t>{1, 2, 3}));
  input.tie_s = 1e-3;
  EXPECT_EQ(plan_bucket_layout(input).ends, (std::vector<size_t>{1, 3}));
}

TEST(BucketLayoutTest, NothingToHideKeepsOneBucket) {
  // Every gradient final at backward's end: splitting saves nothing and costs latency.
  LayoutInput input = two_ranks();
  input.link.alpha_s = 1e-4;
  input.tensors = {tensor(1000, 0), tensor(1000, 0), tensor(1000, 0)};
  EXPECT_EQ(plan_bucket_layout(input).ends, (std::vector<size_t>{3}));
}

TEST(BucketLayoutTest, LatencyKeepsSmallTensorsTogether) {
  // Three tiny tensors final 1 ms apart: each bucket's latency (2 x 1 ms at two ranks)
  // outweighs what starting early hides.
  LayoutInput input = two_ranks();
  input.link.alpha_s = 1e-3;
  input.tensors = {tensor(10, 0.002), tensor(10, 0.001), tensor(10, 0.0)};
  EXPECT_EQ(plan_bucket_layout(input).ends, (std::vector<size_t>{3}));
}

TEST(BucketLayoutTest, KindsAndTheCapSplitBuckets) {
  LayoutInput input = two_ranks();
  input.bucket_bytes = 4000;
  input.tensors = {tensor(2000, 0), tensor(2000, 0), tensor(2000, 0, /*kind=*/1),
                   tensor(8000, 0, 1)};
  // {0, 1} within the cap; 2 has another kind; 3 alone is above the cap and gets its own.
  EXPECT_EQ(plan_bucket_layout(input).ends, (std::vector<size_t>{2, 3, 4}));
}

TEST(BucketLayoutTest, TheLastBucketCarryingTheStatusStartsAtBackwardsEnd) {
  LayoutInput input = two_ranks();
  input.tensors = {tensor(1000, 0.010), tensor(1000, 0.010)};
  input.last_waits_for_end = false;  // both final 10 ms early: all hidden
  EXPECT_EQ(plan_bucket_layout(input).exposed_s, 0.0);
  input.last_waits_for_end = true;  // the last bucket starts at 0 at the earliest
  const PlannedLayout layout = plan_bucket_layout(input);
  EXPECT_EQ(layout.ends, (std::vector<size_t>{1, 2}));
  EXPECT_NEAR(layout.exposed_s, 0.001, 1e-9);
}

TEST(BucketLayoutTest, MatchesEveryPartitionByEnumeration) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> bytes(10, 30000), ready(0, 0.05);
  std::uniform_int_distribution<int> kind(0, 3), count(1, 9);
  for (int trial = 0; trial < 300; ++trial) {
    LayoutInput input = two_ranks();
    input.world = 2 + trial % 5;
    input.link.alpha_s = (trial % 3) * 2e-4;
    input.bucket_bytes = 40000;
    input.last_waits_for_end = trial % 2 == 0;
    const int n = count(rng);
    for (int k = 0; k < n; ++k) {
      input.tensors.push_back(tensor(bytes(rng), ready(rng), kind(rng) == 0 ? 1 : 0));
      input.tensors.back().collectives = input.tensors.back().kind == 1 ? 2 : 1;
    }
    const PlannedLayout layout = plan_bucket_layout(input);
    EXPECT_NEAR(layout.exposed_s, best_by_enumeration(input), 1e-6) << "trial " << trial;
    EXPECT_NEAR(layout.exposed_s, layout_exposed_seconds(input, layout.ends), 1e-12);
  }
}

TEST(BucketLayoutTest, CalibrationPutsTheMeasuredTimeIntoBeta) {
  LayoutInput input = two_ranks();
  input.link.alpha_s = 1e-3;
  input.tensors = {tensor(1000, 0), tensor(3000, 0)};
  // One bucket, 4000 bytes: 2 ms of latency, so 10 ms measured leaves 8 ms for the bytes.
  const comm::LinkModel link = calibrated_link(input, {2}, 0.010);
  EXPECT_DOUBLE_EQ(link.alpha_s, 1e-3);
  EXPECT_NEAR(link.beta_s_per_byte, 0.008 / 4000, 1e-15);
  input.link = link;
  EXPECT_NEAR(layout_exposed_seconds(input, {2}), 0.010, 1e-12);
  // A measurement within the latency's share says nothing about beta.
  EXPECT_DOUBLE_EQ(calibrated_link(input, {2}, 0.001).beta_s_per_byte, link.beta_s_per_byte);
}

TEST(BucketLayoutTest, BadInputIsAnError) {
  LayoutInput input = two_ranks();
  EXPECT_THROW(plan_bucket_layout(input), Error);
  input.tensors = {tensor(100, -1)};
  EXPECT_THROW(plan_bucket_layout(input), Error);
  input.tensors = {tensor(100, 0), tensor(100, 0)};
  EXPECT_THROW(layout_exposed_seconds(input, {1}), Error);
  EXPECT_THROW(layout_exposed_seconds(input, {1, 1, 2}), Error);
}

}  // namespace
}  // namespace gradwire::strategy
