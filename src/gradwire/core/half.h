// float <-> IEEE 754 binary16 ("fp16") conversion: portable scalar code, and F16C for spans.
//
// Round to nearest, ties to even; overflow goes to +-inf, NaN stays NaN (quiet, 0x7e00 with
// the sign kept), subnormal halves are produced and read exactly. The scalar functions are
// branchless (both paths computed, then selected) so that loops over spans vectorize; they
// are inline so codecs can fuse them into their own loops.
//
// Requires round-to-nearest floating point (the default); flush-to-zero / denormals-are-zero
// modes do not change the results because the float arithmetic inside stays in normal range.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>

namespace gradwire {

// All ones when `condition` holds, else zero: selects without branches. (GCC keeps plain
// ternaries over the float addition below as branches under -ftrapping-math, which stops
// vectorization; masks do not.)
inline uint32_t mask_if(bool condition) { return 0u - static_cast<uint32_t>(condition); }
inline uint32_t select_bits(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}

inline uint16_t float_to_half(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  // Normal half: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to
  // nearest even: add 0xfff plus the lowest kept bit, then shift. A carry into the exponent
  // is correct rounding, up to and including overflow to infinity (0x7c00).
  const uint32_t odd = (x >> 13) & 1u;
  const uint32_t normal = (x + 0xc8000fffu + odd) >> 13;  // 0xc8000000 == (15 - 127) << 23
  // Subnormal half (|value| < 2^-14): adding 0.5f aligns the 10 half-mantissa bits at the
  // bottom of the float mantissa, and the FPU's own rounding is round-to-nearest-even.
  constexpr uint32_t kMagicBits = 126u << 23;  // 0.5f
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(x) + std::bit_cast<float>(kMagicBits)) -
      kMagicBits;
  const uint32_t inf_nan = 0x7c00u | (mask_if(x > 0x7f800000u) & 0x0200u);
  uint32_t half = select_bits(mask_if(x < 0x38800000u), subnormal, normal);  // 2^-14
  half = select_bits(mask_if(x >= 0x47800000u), inf_nan, half);              // 65536
  return static_cast<uint16_t>(half | (sign >> 16));
}

inline float half_to_float(uint16_t half) {
  const uint32_t shifted = static_cast<uint32_t>(half & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;  // the half exponent field, moved
  const uint32_t normal = shifted + 0x38000000u;    // rebias 15 -> 127
  const uint32_t inf_nan = shifted + 0x70000000u;   // exponent 31 -> 255
  // Subnormal half: build 2^-14 * (1 + m/1024) and subtract 2^-14, exact in float.
  const float subnormal_f =
      std::bit_cast<float>(normal + 0x00800000u) - std::bit_cast<float>(113u << 23);
  uint32_t bits = select_bits(mask_if(exponent == 0x0f800000u), inf_nan, normal);
  bits = select_bits(mask_if(exponent == 0), std::bit_cast<uint32_t>(subnormal_f), bits);
  return std::bit_cast<float>(bits | (static_cast<uint32_t>(half & 0x8000u) << 16));
}

// Unaligned-safe element access for wire buffers (compiles to plain loads and stores).
inline uint16_t load_u16(const uint8_t* p, size_t i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return v;
}
inline void store_u16(uint8_t* p, size_t i, uint16_t v) { std::memcpy(p + 2 * i, &v, 2); }

// The span conversions below use the CPU's F16C instructions where it has them (checked
// at run time), the scalar code above otherwise; both give the same bits for every finite
// or infinite value.
bool half_conversion_uses_f16c();
// out[i] = half(scale * in[i]). `out` holds in.size() halves and may be unaligned.
void float_to_half(std::span<const float> in, void* out, float scale = 1.0f);
// out[i] = float(in[i]). `in` holds out.size() halves and may be unaligned.
void half_to_float(const void* in, std::span<float> out);
// accum[i] += float(in[i]).
void half_to_float_add(const void* in, std::span<float> accum);

}  // namespace gradwire
