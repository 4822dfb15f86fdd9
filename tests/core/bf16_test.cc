#include "gradwire/core/bf16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gradwire {
namespace {

bool is_bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

// The value a bf16 bit pattern (sign clear) would have if the exponent kept going: 0x7f80
// is 2^128, the first value past the largest finite bf16.
double magnitude_of(uint32_t bf16_bits) {
  if (bf16_bits == 0x7f80u) return std::ldexp(1.0, 128);
  return static_cast<double>(std::bit_cast<float>(bf16_bits << 16));
}

// Reference: the nearer of the two bf16 neighbours of |f| (exact in double), ties to the one
// with an even last bit; past the largest finite bf16 that is infinity.
uint16_t reference_float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7fc0u | ((bits >> 16) & 0x7fu));
  if (std::isinf(f)) return static_cast<uint16_t>(sign | 0x7f80u);
  const uint32_t below = (bits & 0x7fffffffu) >> 16;  // toward zero
  const uint32_t above = below + 1;
  const double a = std::fabs(static_cast<double>(f));
  const double down = a - magnitude_of(below);
  const double up = magnitude_of(above) - a;
  uint32_t result = below;
  if (up < down || (up == down && (below & 1u))) result = above;
  return static_cast<uint16_t>(sign | result);
}

TEST(Bf16, EveryBf16RoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), h << 16);
    if (is_bf16_nan(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(is_bf16_nan(float_to_bf16(f))) << h;
      continue;
    }
    ASSERT_EQ(float_to_bf16(f), h) << "bf16 0x" << std::hex << h << " -> " << f;
  }
}

TEST(Bf16, TiesGoToEven) {
  // Between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81, odd): the midpoint 1 + 2^-8 goes down.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // Between 0x3f81 (odd) and 0x3f82 (even): the midpoint goes up.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  // Just either side of a tie.
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(3.0f, -8), 0.0f)), 0x3f81);
  EXPECT_EQ(float_to_bf16(-(1.0f + std::ldexp(1.0f, -8))), 0xbf80);
  EXPECT_EQ(float_to_bf16(-(1.0f + std::ldexp(3.0f, -8))), 0xbf82);
  // A tie that carries into the exponent: 2 - 2^-8 is between 0x3fff and 2.0 (0x4000).
  EXPECT_EQ(float_to_bf16(2.0f - std::ldexp(1.0f, -8)), 0x4000);
}

TEST(Bf16, SpecialValues) {
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // FLT_MAX is nearer 2^128 than the largest finite bf16 (0x7f7f): overflow to infinity.
  EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7f80);
  EXPECT_EQ(float_to_bf16(-FLT_MAX), 0xff80);
  EXPECT_EQ(float_to_bf16(bf16_to_float(0x7f7f)), 0x7f7f);
  // NaN stays NaN, sign kept, quiet; a signalling NaN whose payload is all in the dropped
  // bits must not turn into infinity.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::quiet_NaN()), 0x7fc0);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::quiet_NaN()), 0xffc0);
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(std::bit_cast<float>(0x7f800001u))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(std::bit_cast<float>(0xff80ffffu))));
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7fa12345u)), 0x7fe1);  // payload top kept
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7fc0)));
  EXPECT_EQ(bf16_to_float(0x7f80), std::numeric_limits<float>::infinity());
}

TEST(Bf16, Subnormals) {
  // bf16 shares float's exponent: subnormal floats round like any other value.
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00000001u)), 0x0000);  // rounds to zero
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00008000u)), 0x0000);  // tie -> even 0
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00008001u)), 0x0001);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // tie -> even 2
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00010000u)), 0x0001);  // exact
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x007fffffu)), 0x0080);  // up to FLT_MIN
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x807fffffu)), 0x8080);
  EXPECT_EQ(bf16_to_float(0x0001), std::bit_cast<float>(0x00010000u));
  EXPECT_EQ(bf16_to_float(0x0080), FLT_MIN);
}

TEST(Bf16, MatchesTheReferenceOnRandomAndEdgeBitPatterns) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    uint32_t bits = rng();
    if (i % 4 == 1) bits = (bits & 0xffff0000u) | 0x8000u;  // exact ties
    if (i % 4 == 2) bits &= 0x807fffffu;                    // subnormals
    const float f = std::bit_cast<float>(bits);
    const uint16_t got = float_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_bf16_nan(got)) << std::hex << bits;
      ASSERT_EQ(got & 0x8000u, (bits >> 16) & 0x8000u) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(got, reference_float_to_bf16(f)) << "float bits 0x" << std::hex << bits;
  }
}

TEST(Bf16, SpansMatchTheScalarFunctionsAtOddOffsets) {
  const size_t n = 37;  // a vector block plus a tail
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  std::vector<float> in(n);
  for (auto& x : in) x = dist(rng);
  in[5] = std::numeric_limits<float>::quiet_NaN();
  in[6] = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> buffer(2 * n + 1);
  uint8_t* wire = buffer.data() + 1;  // unaligned on purpose
  float_to_bf16(in, wire);
  std::vector<float> out(n), accum(n, 1.0f);
  bf16_to_float(wire, out);
  bf16_to_float_add(wire, accum);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, wire + 2 * i, 2);
    EXPECT_EQ(h, float_to_bf16(in[i])) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(bf16_to_float(h))) << i;
    if (i == 5) {
      EXPECT_TRUE(std::isnan(accum[i]));
    } else {
      EXPECT_EQ(accum[i], 1.0f + bf16_to_float(h)) << i;
    }
  }
}

}  // namespace
}  // namespace gradwire
