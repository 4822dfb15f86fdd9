// float <-> bfloat16 ("bf16": the top 16 bits of an IEEE binary32) conversion.
//
// Round to nearest, ties to even, on the 16 dropped bits; overflow goes to +-inf, NaN stays
// NaN (sign and the top payload bits kept, quiet bit forced so a signalling NaN whose
// payload sits in the dropped bits cannot become infinity). bf16 has float's exponent
// range, so subnormal floats round like any other (to bf16 subnormals or zero) and every
// bf16 value widens to a float exactly. The scalar functions are branchless (both results
// computed, then selected) so loops over spans vectorize; they are inline so codecs can fuse
// them into their own loops.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

#include "gradwire/core/half.h"

namespace gradwire {

inline uint16_t float_to_bf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  // Round the low 16 bits to nearest even: add 0x7fff plus the lowest kept bit, then shift.
  // A carry into the exponent is correct rounding, up to and including overflow to inf.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;  // quiet NaN, sign and top payload kept
  return static_cast<uint16_t>(select_bits(mask_if((x & 0x7fffffffu) > 0x7f800000u), nan, rounded));
}

inline float bf16_to_float(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

// out[i] = bf16(in[i]). `out` holds in.size() bf16 values and may be unaligned.
void float_to_bf16(std::span<const float> in, void* out);
// out[i] = float(in[i]). `in` holds out.size() bf16 values and may be unaligned.
void bf16_to_float(const void* in, std::span<float> out);
// accum[i] += float(in[i]).
void bf16_to_float_add(const void* in, std::span<float> accum);

}  // namespace gradwire
