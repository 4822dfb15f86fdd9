#include <gtest/gtest.h>

#include <cmath>

#include "codec_test_util.h"
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::random_vector;
using testing::tensor_of;

constexpr size_t kCodesOffset = PayloadHeader::kSize + 4;

float quantize(float v, float t) { return v >= t ? t : (v <= -t ? -t : 0.0f); }

TEST(TwoBitCodec, CodesAndPackingOfFourElements) {
  auto codec = create_codec("2bit:threshold=0.5,ef=0", tensor_of(4));
  const std::vector<float> input = {1.0f, -1.0f, 0.1f, 0.5f};
  const Bytes payload = encode(*codec, input);
  ASSERT_EQ(payload.size(), kCodesOffset + 1);
  float t;
  std::memcpy(&t, payload.data() + PayloadHeader::kSize, 4);
  EXPECT_EQ(t, 0.5f);
  // Element q in bits 2q..2q+1: 11, 10, 00, 11.
  EXPECT_EQ(payload[kCodesOffset], 0b11'00'10'11);
  EXPECT_EQ(decode(*codec, payload, 4), (std::vector<float>{0.5f, -0.5f, 0.0f, 0.5f}));
}

TEST(TwoBitCodec, AutoThresholdSelectsAboveAlphaMeanAndSendsTheirMeanMagnitude) {
  // threshold=auto is the default. mean |a| = 1.5, so alpha = 1 selects |a| >= 1.5:
  // 2 and -4, which decode to +-3 (their mean magnitude).
  auto codec = create_codec("2bit:ef=0", tensor_of(4));
  const std::vector<float> input = {2.0f, -4.0f, 0.0f, -0.0f};
  const Bytes payload = encode(*codec, input);
  float v;
  std::memcpy(&v, payload.data() + PayloadHeader::kSize, 4);
  EXPECT_EQ(v, 3.0f);
  EXPECT_EQ(decode(*codec, payload, 4), (std::vector<float>{3.0f, -3.0f, 0.0f, 0.0f}));
  // alpha = 2: t = 3 selects only -4.
  auto strict = create_codec("2bit:alpha=2,ef=0", tensor_of(4));
  EXPECT_EQ(decode(*strict, encode(*strict, input), 4),
            (std::vector<float>{0.0f, -4.0f, 0.0f, 0.0f}));
}

TEST(TwoBitCodec, AutoThresholdResidualShrinks) {
  // ||a - D(C(a))||^2 = ||a||^2 - |S| v^2 < ||a||^2 (a strict contraction).
  const size_t n = 1000;
  auto codec = create_codec("2bit", tensor_of(n));
  const auto g = testing::random_vector(n, 9, 1.0f);
  Bytes payload;
  codec->encode(g, payload);
  const auto decoded = decode(*codec, payload, n);
  double before = 0, after = 0;
  for (size_t i = 0; i < n; ++i) {
    before += double(g[i]) * g[i];
    after += double(g[i] - decoded[i]) * (g[i] - decoded[i]);
  }
  EXPECT_LT(after, 0.9 * before);
}

TEST(TwoBitCodec, AutoThresholdOfZerosSendsNothing) {
  auto codec = create_codec("2bit", tensor_of(70));
  const std::vector<float> zeros(70, 0.0f);
  EXPECT_EQ(decode(*codec, encode(*codec, zeros), 70), zeros);
}

TEST(TwoBitCodec, AutoThresholdRejectsNonFiniteGradients) {
  auto codec = create_codec("2bit", tensor_of(3));
  const std::vector<float> input = {1.0f, INFINITY, 0.0f};
  Bytes out;
  EXPECT_THROW(codec->encode(input, out), Error);
}

TEST(TwoBitCodec, AlphaNeedsTheAutoThreshold) {
  EXPECT_THROW(create_codec("2bit:threshold=0.5,alpha=1", tensor_of(3)), ConfigError);
  EXPECT_THROW(create_codec("2bit:alpha=0", tensor_of(3)), ConfigError);
}

TEST(TwoBitCodec, GroupLayoutOfSixtyFourElements) {
  auto codec = create_codec("2bit:threshold=1,ef=0", tensor_of(64));
  std::vector<float> input(64, 0.0f);
  input[0] = 2.0f;    // byte 0, bits 0-1: 11
  input[16] = -2.0f;  // byte 0, bits 2-3: 10
  input[49] = 1.0f;   // byte 1, bits 6-7: 11 (a >= t)
  input[50] = -1.0f;  // byte 2, bits 6-7: 10 (a <= -t)
  const Bytes payload = encode(*codec, input);
  ASSERT_EQ(payload.size(), kCodesOffset + 16);
  EXPECT_EQ(payload[kCodesOffset + 0], 0b00'00'10'11);
  EXPECT_EQ(payload[kCodesOffset + 1], 0b11'00'00'00);
  EXPECT_EQ(payload[kCodesOffset + 2], 0b10'00'00'00);
  for (size_t j = 3; j < 16; ++j) EXPECT_EQ(payload[kCodesOffset + j], 0) << j;
}

TEST(TwoBitCodec, RoundTripAtEveryTailLength) {
  for (const size_t n : {0, 1, 2, 3, 4, 5, 63, 64, 65, 67, 128, 130, 1000, 4099}) {
    auto codec = create_codec("2bit:threshold=0.7,ef=0", tensor_of(n));
    const auto input = random_vector(n, static_cast<uint32_t>(n));
    const Bytes payload = encode(*codec, input);
    EXPECT_EQ(payload.size(), kCodesOffset + (n + 3) / 4) << n;
    std::vector<float> accum(n, 1.0f);
    codec->decode_add(payload, accum);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(accum[i], 1.0f + quantize(input[i], 0.7f)) << "n=" << n << " i=" << i;
    }
  }
}

TEST(TwoBitCodec, EncodeResidualIsMxnetsUpdate) {
  for (const size_t n : {1, 64, 1000}) {
    auto codec = create_codec("2bit:threshold=0.5,ef=0", tensor_of(n));
    auto a = random_vector(n, 16);
    const auto original = a;
    Bytes payload;
    codec->encode_residual(a, payload);
    EXPECT_EQ(payload, encode(*codec, original));
    for (size_t i = 0; i < n; ++i) {
      // MXNet: if r >= t: r -= t; elif r <= -t: r += t.
      float r = original[i];
      if (r >= 0.5f) {
        r -= 0.5f;
      } else if (r <= -0.5f) {
        r += 0.5f;
      }
      EXPECT_EQ(a[i], r) << i;
    }
  }
}

TEST(TwoBitCodec, NanAndInfinity) {
  auto codec = create_codec("2bit:threshold=0.5,ef=0", tensor_of(3));
  const std::vector<float> input = {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity()};
  EXPECT_EQ(decode(*codec, encode(*codec, input), 3), (std::vector<float>{0.0f, 0.5f, -0.5f}));
}

}  // namespace
}  // namespace gradwire::compress
