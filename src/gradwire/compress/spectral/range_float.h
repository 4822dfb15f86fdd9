// Range-based float: a B-bit number format whose exponent is relative to a block maximum
// (docs/ALGORITHMS.md 5, step 4). Used by the `spectral` codec for the real and imaginary
// parts of the kept Fourier coefficients, one block per chunk.
//
// Per block (sent in the chunk header):
//   e_max = floor(log2 max|v|)                         (i8, so in [-128, 127])
//   E     = exponent width in [0, 4]; 0 means every value of the block is zero and no value
//           bits are sent (e_max is then 0)
//   M     = B - 1 - E mantissa bits
// Per value, B bits: sign (bit B-1) | exponent code c (E bits) | mantissa q (M bits).
//   c = 0       -> 0 (whatever the sign and mantissa bits say)
//   c in 1..2^E-1 -> (-1)^sign * 2^e * (1 + q / 2^M),  e = e_max - (2^E - 1 - c)
// so the offset o = e_max - floor(log2|v|) is representable for o in [0, 2^E - 2], and the
// bit patterns order like magnitudes (as in IEEE floats).
//
// Rounding, per value: the mantissa rounds to nearest (halves up); a mantissa that rounds to
// 2^M moves to the next exponent, except at e_max, where it saturates at 2^M - 1. Hence a
// representable value has relative error at most 2^-(M+1) / (1 - 2^-(M+2))
// (range_float_relative_bound). A value below the smallest representable magnitude
// s = 2^(e_max - 2^E + 2) becomes the nearer of 0 and s: s when |v| >= s/2, else 0 (absolute
// error at most s/2). A block whose largest magnitude is below 2^-128 (e_max would not fit
// in an i8) is sent as all zeros.
//
// Value bits form one little-endian bit stream: value i occupies bits [B i, B i + B) (bit b
// is bit b % 8 of byte b / 8); bits past the last value are zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace gradwire::compress {

inline constexpr int kRangeFloatMinBits = 5;  // E = 4 leaves M = 0
inline constexpr int kRangeFloatMaxBits = 16;
inline constexpr int kRangeFloatMaxWidth = 4;

// How the encoder picks E (the decoder reads E from the block header either way).
enum class ExponentWidthRule : uint8_t {
  // E = min(4, ceil(log2(e_max - e_min + 2))), e_min = floor(log2 of the smallest non-zero
  // |v|): every value's exponent fits when the range allows (ALGORITHMS.md 5 as written).
  kRange,
  // The E in [1, min(4, that)] that minimises the estimated squared error of the block:
  // fewer exponent bits give every value more mantissa bits, at the cost of flushing the
  // smallest values, which rarely matter (ALGORITHMS.md 5 [OURS]).
  kMinError,
};

struct RangeFloatBlock {
  int e_max = 0;  // in [-128, 127]
  int width = 0;  // E in [0, kRangeFloatMaxWidth]
};

// Picks e_max and E for `values`, which must be finite (throws gradwire::Error otherwise).
RangeFloatBlock range_float_block(std::span<const float> values, int bits,
                                  ExponentWidthRule rule = ExponentWidthRule::kMinError);

// Bytes of the value bit stream of `count` values: ceil(count * bits / 8), 0 when width = 0.
inline size_t range_float_bytes(size_t count, int bits, int width) {
  return width == 0 ? 0 : (count * static_cast<size_t>(bits) + 7) / 8;
}

// Largest relative error of a value that does not underflow (see above), M = bits-1-width.
double range_float_relative_bound(int bits, int width);

// Writes range_float_bytes(values.size(), bits, block.width) bytes to `out`. `block` must come
// from range_float_block() on the same values (or describe a wider range).
void range_float_encode(std::span<const float> values, RangeFloatBlock block, int bits,
                        uint8_t* out);

// Reads out.size() values written by range_float_encode. Requires 5 <= bits <= 16 and
// width <= min(4, bits - 1); every bit pattern is a valid value (the caller checks lengths
// and padding with range_float_padding_is_zero).
void range_float_decode(const uint8_t* in, RangeFloatBlock block, int bits, std::span<float> out);

// True when the bits past the last of `count` values in the stream's last byte are zero.
bool range_float_padding_is_zero(const uint8_t* in, size_t count, int bits, int width);

}  // namespace gradwire::compress
