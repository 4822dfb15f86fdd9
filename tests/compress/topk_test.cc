#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "codec_test_util.h"
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/registry.h"
#include "gradwire/compress/sparsify/topk_select.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::random_vector;
using testing::tensor_of;

constexpr size_t kLayoutOffset = PayloadHeader::kSize + 4;

// Brute force: positions of the k largest |a_i|, ties to the lowest position.
std::vector<uint32_t> brute_force_topk(const std::vector<float>& a, size_t k) {
  std::vector<uint32_t> order(a.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t x, uint32_t y) { return std::fabs(a[x]) > std::fabs(a[y]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

TEST(TopKSelector, BothMethodsMatchBruteForce) {
  TopKSelector selector;
  std::vector<uint32_t> got;
  for (const size_t n : {1, 2, 10, 100, 1000, 40000}) {
    for (const size_t k : {size_t{0}, size_t{1}, n / 3, n - 1, n}) {
      // Few distinct values, so ties across the k-th position are common.
      auto a = random_vector(n, static_cast<uint32_t>(n + k));
      if (n > 10) {
        for (size_t i = 0; i < n; i += 3) a[i] = std::round(a[i] * 2.0f) / 2.0f;
      }
      const auto expected = brute_force_topk(a, k);
      selector.select_nth_element(a, k, got);
      EXPECT_EQ(got, expected) << "nth_element n=" << n << " k=" << k;
      selector.select_radix(a, k, got);
      EXPECT_EQ(got, expected) << "radix n=" << n << " k=" << k;
      selector.select(a, k, got);
      EXPECT_EQ(got, expected) << "select n=" << n << " k=" << k;
    }
  }
}

TEST(TopKSelector, AllEqualTiesGoToLowestPositions) {
  const std::vector<float> a(50000, -3.0f);
  TopKSelector selector;
  std::vector<uint32_t> got;
  selector.select_radix(a, 5, got);
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  selector.select_nth_element(a, 5, got);
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1, 2, 3, 4}));
}

TEST(TopKSelector, InfinityAndNanRankHighest) {
  std::vector<float> a = random_vector(100, 9);
  a[10] = std::numeric_limits<float>::quiet_NaN();
  a[20] = -std::numeric_limits<float>::infinity();
  TopKSelector selector;
  std::vector<uint32_t> got;
  selector.select_nth_element(a, 2, got);
  EXPECT_EQ(got, (std::vector<uint32_t>{10, 20}));
  selector.select_radix(a, 2, got);
  EXPECT_EQ(got, (std::vector<uint32_t>{10, 20}));
}

TEST(TopKCodec, KeepsExactlyTheKLargestAndZeroesTheRest) {
  const size_t n = 10000;
  auto codec = create_codec("topk:density=0.01,ef=0,warmup=0", tensor_of(n));
  const auto input = random_vector(n, 10);
  const Bytes payload = encode(*codec, input);
  const auto out = decode(*codec, payload, n);
  const auto kept = brute_force_topk(input, 100);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool sent = std::binary_search(kept.begin(), kept.end(), static_cast<uint32_t>(i));
    EXPECT_EQ(out[i], sent ? input[i] : 0.0f) << i;
    nonzero += out[i] != 0.0f;
  }
  EXPECT_EQ(nonzero, 100u);
  // Index list: header + k + layout + 8 bytes per entry.
  EXPECT_EQ(payload[kLayoutOffset], static_cast<uint8_t>(TopKLayout::kIndexList));
  EXPECT_EQ(payload.size(), PayloadHeader::kSize + 4 + 1 + 8 * 100);
}

TEST(TopKCodec, DenseSelectionUsesTheBitmap) {
  const size_t n = 1003;  // not a multiple of 8: exercises the bitmap's last byte
  auto codec = create_codec("topk:density=0.3,ef=0,warmup=0", tensor_of(n));
  const auto input = random_vector(n, 11);
  const Bytes payload = encode(*codec, input);
  const size_t k = topk_count(0.3, n);
  EXPECT_EQ(payload[kLayoutOffset], static_cast<uint8_t>(TopKLayout::kBitmap));
  EXPECT_EQ(payload.size(), PayloadHeader::kSize + 4 + 1 + (n + 7) / 8 + 4 * k);
  const auto out = decode(*codec, payload, n);
  const auto kept = brute_force_topk(input, k);
  for (size_t i = 0; i < n; ++i) {
    const bool sent = std::binary_search(kept.begin(), kept.end(), static_cast<uint32_t>(i));
    EXPECT_EQ(out[i], sent ? input[i] : 0.0f) << i;
  }
}

TEST(TopKCodec, PicksTheSmallerLayoutAtTheCrossover) {
  // bitmap bytes ceil(N/8) + 4k vs index list 8k: with N = 800, the bitmap wins from k = 26.
  const size_t n = 800;
  for (const size_t k : {24, 25, 26, 27}) {
    const double density = static_cast<double>(k) / n;
    auto codec = create_codec("topk:ef=0,warmup=0,density=" + format_number(density), tensor_of(n));
    const Bytes payload = encode(*codec, random_vector(n, 12));
    const bool bitmap = n / 8 + 4 * k < 8 * k;
    EXPECT_EQ(payload[kLayoutOffset],
              static_cast<uint8_t>(bitmap ? TopKLayout::kBitmap : TopKLayout::kIndexList))
        << k;
    EXPECT_EQ(payload.size(), PayloadHeader::kSize + 5 + std::min(n / 8 + 4 * k, 8 * k)) << k;
  }
}

TEST(TopKCodec, DensityOneSendsEverything) {
  auto codec = create_codec("topk:density=1,ef=0,warmup=0", tensor_of(77));
  const auto input = random_vector(77, 13);
  EXPECT_EQ(decode(*codec, encode(*codec, input), 77), input);
}

TEST(TopKCodec, KIsAtLeastOne) {
  auto codec = create_codec("topk:density=0.0001,ef=0,warmup=0", tensor_of(10));
  std::vector<float> input(10, 0.0f);
  input[7] = -5.0f;
  const auto out = decode(*codec, encode(*codec, input), 10);
  EXPECT_EQ(out[7], -5.0f);
}

TEST(TopKCodec, EncodeResidualZeroesTheSentPositions) {
  const size_t n = 5000;
  auto codec = create_codec("topk:density=0.02,ef=0,warmup=0", tensor_of(n));
  auto a = random_vector(n, 14);
  const auto original = a;
  Bytes out;
  codec->encode_residual(a, out);
  const auto decoded = decode(*codec, out, n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(a[i], decoded[i] != 0.0f ? 0.0f : original[i]) << i;
    EXPECT_EQ(a[i] + decoded[i], original[i]);
  }
}

TEST(TopKCodec, LargeTensorUsesRadixPathCorrectly) {
  const size_t n = 1 << 18;
  auto codec = create_codec("topk:density=0.001,ef=0,warmup=0", tensor_of(n));
  const auto input = random_vector(n, 15);
  const auto out = decode(*codec, encode(*codec, input), n);
  const auto kept = brute_force_topk(input, topk_count(0.001, n));
  size_t j = 0;
  for (size_t i = 0; i < n; ++i) {
    if (j < kept.size() && kept[j] == i) {
      EXPECT_EQ(out[i], input[i]);
      ++j;
    } else {
      EXPECT_EQ(out[i], 0.0f);
    }
  }
}

}  // namespace
}  // namespace gradwire::compress
