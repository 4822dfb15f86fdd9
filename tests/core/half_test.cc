#include "gradwire/core/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace gradwire {
namespace {

bool is_half_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

// Reference: exact rounding to nearest even through double arithmetic.
uint16_t reference_float_to_half(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return sign | 0x7e00u;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00u;  // rounds to infinity
  if (a < std::ldexp(1.0, -14)) {
    // Subnormal: units of 2^-24.
    const double units = std::nearbyint(a * std::ldexp(1.0, 24));  // default mode: even ties
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  int exponent;
  std::frexp(a, &exponent);    // a = m * 2^exponent, m in [0.5, 1)
  const int e = exponent - 1;  // a = 1.x * 2^e
  const double units = std::nearbyint(a * std::ldexp(1.0, 10 - e));  // in [1024, 2048]
  uint32_t bits = static_cast<uint32_t>(e + 15) << 10;
  bits += static_cast<uint32_t>(units) - 1024;  // 2048 carries into the exponent
  return static_cast<uint16_t>(sign | bits);
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (is_half_nan(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(is_half_nan(float_to_half(f))) << h;
      continue;
    }
    ASSERT_EQ(float_to_half(f), h) << "half 0x" << std::hex << h << " -> " << f;
  }
}

TEST(Half, HalfToFloatValues) {
  EXPECT_EQ(half_to_float(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
}

TEST(Half, FloatToHalfSpecialCases) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // ties to even: overflow
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_TRUE(is_half_nan(float_to_half(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_half_nan(float_to_half(std::bit_cast<float>(0x7f800001u))));  // signalling
  // Subnormals and ties to even.
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);            // tie -> even 0
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);  // just above the tie
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);            // 1.5 units -> 2
  EXPECT_EQ(float_to_half(std::ldexp(5.0f, -25)), 0x0002);            // 2.5 units -> 2
  EXPECT_EQ(float_to_half(1e-30f), 0x0000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::denorm_min()), 0x8000);
  // Largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(float_to_half(std::ldexp(1023.6f, -24)), 0x0400);
  // Normal ties: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> even (1).
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(Half, MatchesReferenceOnRoundingBoundaries) {
  // Every exponent, mantissas whose dropped 13 bits sit at and around the rounding point.
  std::mt19937 rng(7);
  const uint32_t low_patterns[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff};
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (int rep = 0; rep < 8; ++rep) {
        const uint32_t high = rng() & 0x3ffu;  // the 10 kept mantissa bits
        for (const uint32_t low : low_patterns) {
          const uint32_t bits = (sign << 31) | (exponent << 23) | (high << 13) | low;
          const float f = std::bit_cast<float>(bits);
          const uint16_t got = float_to_half(f);
          if (std::isnan(f)) {
            EXPECT_TRUE(is_half_nan(got));
          } else {
            ASSERT_EQ(got, reference_float_to_half(f)) << std::hex << "float bits 0x" << bits;
          }
        }
      }
    }
  }
}

TEST(Half, MatchesReferenceOnStridedFloats) {
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 4099) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    const uint16_t got = float_to_half(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(is_half_nan(got));
    } else {
      ASSERT_EQ(got, reference_float_to_half(f)) << std::hex << "float bits 0x" << bits;
    }
  }
}

// The span conversions (F16C where the CPU has it) against the scalar code, on values
// that exercise every path: zeros, subnormals, rounding ties, the largest finite half,
// overflow to infinity, infinities.
TEST(Half, SpanConversionsMatchTheScalarCodeOnEdgeValues) {
  std::vector<float> in;
  for (uint32_t bits = 0; bits < 0x48000000u; bits += 0x1003) {  // up to 131072
    const float f = std::bit_cast<float>(bits);
    in.push_back(f);
    in.push_back(-f);
  }
  for (float f :
       {0.0f, -0.0f, 5.96e-8f, 2.98e-8f, 6.1e-5f, 65504.0f, 65520.0f, 65519.99f, 1e9f,
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    in.push_back(f);
  }
  for (const float scale : {1.0f, 0.25f}) {
    std::vector<uint8_t> halves(2 * in.size());
    float_to_half(in, halves.data(), scale);
    std::vector<float> back(in.size()), accum(in.size(), 0.5f);
    half_to_float(halves.data(), back);
    half_to_float_add(halves.data(), accum);
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t expected = float_to_half(scale * in[i]);
      ASSERT_EQ(load_u16(halves.data(), i), expected)
          << "float " << in[i] << " scale " << scale
          << (half_conversion_uses_f16c() ? " (F16C)" : "");
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(half_to_float(expected)));
      ASSERT_EQ(accum[i], 0.5f + half_to_float(expected));
    }
  }
}

TEST(Half, SpanConversionsAnyLengthAndAlignment) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  for (const size_t n : {0, 1, 15, 16, 17, 100, 1000}) {
    std::vector<float> in(n);
    for (auto& x : in) x = dist(rng);
    // Offset 1: deliberately misaligned half buffer.
    std::vector<uint8_t> storage(2 * n + 1);
    uint8_t* halves = storage.data() + 1;
    float_to_half(in, halves, 0.5f);
    std::vector<float> back(n);
    half_to_float(halves, back);
    std::vector<float> accum(n, 1.0f);
    half_to_float_add(halves, accum);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t expected = float_to_half(0.5f * in[i]);
      EXPECT_EQ(load_u16(halves, i), expected);
      EXPECT_EQ(back[i], half_to_float(expected));
      EXPECT_EQ(accum[i], 1.0f + half_to_float(expected));
    }
  }
}

}  // namespace
}  // namespace gradwire
