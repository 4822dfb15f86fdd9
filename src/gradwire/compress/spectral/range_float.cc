#include "gradwire/compress/spectral/range_float.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <string>

#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

constexpr uint32_t kMagnitudeMask = 0x7fffffffu;
constexpr uint32_t kFractionMask = 0x007fffffu;
constexpr uint32_t kSmallestNormal = 0x00800000u;  // bits of 2^-126
constexpr int kMinEMax = -128;                     // e_max is sent as an i8
// Offsets from 0 to this are told apart by the width choice; larger ones always flush.
constexpr int kLastOffset = 16;

// floor(log2 a) and the 23 fraction bits of a > 0 (bits of a finite float without sign),
// subnormals normalised.
inline int exponent_and_fraction(uint32_t magnitude, uint32_t& fraction) {
  if (magnitude >= kSmallestNormal) {
    fraction = magnitude & kFractionMask;
    return static_cast<int>(magnitude >> 23) - 127;
  }
  const int shift = std::countl_zero(magnitude) - 8;  // moves the leading 1 to bit 23
  fraction = (magnitude << shift) & kFractionMask;
  return -126 - shift;
}

inline int exponent_of(uint32_t magnitude) {
  uint32_t unused;
  return exponent_and_fraction(magnitude, unused);
}

// ceil(log2(x)) for x >= 1.
inline int ceil_log2(int x) { return std::bit_width(static_cast<unsigned>(x - 1)); }

struct Layout {
  int width;     // E
  int mantissa;  // M
  int max_offset;
};

inline Layout layout_of(int bits, int width) {
  return Layout{width, bits - 1 - width, (1 << width) - 2};
}

// The B-bit code of v (see the header for the format and the rounding rules).
inline uint32_t encode_value(float v, int e_max, const Layout& layout) {
  const uint32_t raw = std::bit_cast<uint32_t>(v);
  const uint32_t magnitude = raw & kMagnitudeMask;
  if (magnitude == 0) return 0;
  const int m = layout.mantissa;
  uint32_t fraction;
  int offset = e_max - exponent_and_fraction(magnitude, fraction);
  uint32_t q;
  if (offset > layout.max_offset) {
    // Below the smallest representable s: s when |v| >= s/2 (offset is then one past the
    // last), else zero.
    if (offset != layout.max_offset + 1) return 0;
    offset = layout.max_offset;
    q = 0;
  } else {
    q = m == 23 ? fraction : (fraction + (1u << (22 - m))) >> (23 - m);
    if (q >> m) {  // rounded up to the next power of two
      q = 0;
      if (--offset < 0) {  // above e_max: saturate
        offset = 0;
        q = (1u << m) - 1;
      }
    }
  }
  const auto code = static_cast<uint32_t>((1 << layout.width) - 1 - offset);
  return ((raw >> 31) << (layout.width + m)) | (code << m) | q;
}

}  // namespace

RangeFloatBlock range_float_block(std::span<const float> values, int bits, ExponentWidthRule rule) {
  uint32_t largest = 0;
  uint32_t smallest = kMagnitudeMask;
  bool finite = true;
  for (const float v : values) {
    const uint32_t magnitude = std::bit_cast<uint32_t>(v) & kMagnitudeMask;
    finite &= magnitude < 0x7f800000u;
    largest = std::max(largest, magnitude);
    smallest = magnitude != 0 ? std::min(smallest, magnitude) : smallest;
  }
  if (!finite) {
    throw Error("range-based float: cannot encode a non-finite value (NaN or infinity)");
  }
  RangeFloatBlock block;
  if (largest == 0) return block;  // all zeros: E = 0
  block.e_max = exponent_of(largest);
  if (block.e_max < kMinEMax) {
    block.e_max = 0;  // below 2^-128: sent as zeros
    return block;
  }
  const int e_min = exponent_of(smallest);
  const int range_width =
      std::min({kRangeFloatMaxWidth, bits - 1, ceil_log2(block.e_max - e_min + 2)});
  block.width = range_width;
  if (rule == ExponentWidthRule::kRange || range_width == 1) return block;

  // Per offset o = e_max - floor(log2|v|) (the last bucket collects all larger ones): count,
  // sum and sum of squares of |v| / 2^e_max.
  std::array<double, kLastOffset + 1> count{}, sum{}, squares{};
  const float unit = std::ldexp(1.0f, -block.e_max);  // exact: e_max >= -128
  for (const float v : values) {
    const uint32_t magnitude = std::bit_cast<uint32_t>(v) & kMagnitudeMask;
    if (magnitude == 0) continue;
    const int offset = std::min(kLastOffset, block.e_max - exponent_of(magnitude));
    // Scaled in double: a subnormal v times 2^128 would overflow nothing and lose nothing.
    const double a = static_cast<double>(std::bit_cast<float>(magnitude)) * unit;
    count[offset] += 1.0;
    sum[offset] += a;
    squares[offset] += a * a;
  }
  // Estimated squared error for each width: mantissa rounding (uniform, step 2^(-o-M)) for
  // the representable offsets, the distance to s for the next one, |v|^2 beyond.
  double best_error = 0.0;
  for (int width = range_width; width >= 1; --width) {
    const Layout layout = layout_of(bits, width);
    double error = 0.0;
    for (int o = 0; o <= kLastOffset; ++o) {
      if (o <= layout.max_offset) {
        error += count[o] * std::ldexp(1.0, -2 * (o + layout.mantissa)) / 12.0;
      } else if (o == layout.max_offset + 1) {
        const double s = std::ldexp(1.0, -layout.max_offset);
        error += count[o] * s * s - 2.0 * s * sum[o] + squares[o];
      } else {
        error += squares[o];
      }
    }
    if (width == range_width || error < best_error) {
      best_error = error;
      block.width = width;
    }
  }
  return block;
}

double range_float_relative_bound(int bits, int width) {
  const int m = bits - 1 - width;
  return std::ldexp(1.0, -(m + 1)) / (1.0 - std::ldexp(1.0, -(m + 2)));
}

void range_float_encode(std::span<const float> values, RangeFloatBlock block, int bits,
                        uint8_t* out) {
  if (block.width == 0) return;
  const Layout layout = layout_of(bits, block.width);
  const float* in = values.data();
  const size_t n = values.size();
  if (bits == 8) {
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<uint8_t>(encode_value(in[i], block.e_max, layout));
    return;
  }
  // Little-endian bit stream through a 64-bit accumulator, flushed a byte at a time.
  uint64_t pending = 0;
  int pending_bits = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    pending |= static_cast<uint64_t>(encode_value(in[i], block.e_max, layout)) << pending_bits;
    pending_bits += bits;
    while (pending_bits >= 8) {
      out[o++] = static_cast<uint8_t>(pending);
      pending >>= 8;
      pending_bits -= 8;
    }
  }
  if (pending_bits > 0) out[o] = static_cast<uint8_t>(pending);
}

void range_float_decode(const uint8_t* in, RangeFloatBlock block, int bits, std::span<float> out) {
  float* values = out.data();
  const size_t n = out.size();
  if (block.width == 0) {
    std::fill(values, values + n, 0.0f);
    return;
  }
  const Layout layout = layout_of(bits, block.width);
  const int m = layout.mantissa;
  // scale[c] = 2^(e_max - (2^E - 1 - c)), scale[0] = 0 (the zero code).
  std::array<float, 1 << kRangeFloatMaxWidth> scale{};
  for (int c = 1; c < (1 << layout.width); ++c) {
    scale[c] = std::ldexp(1.0f, block.e_max - ((1 << layout.width) - 1 - c));
  }
  const float step = std::ldexp(1.0f, -m);
  const uint32_t mantissa_mask = (1u << m) - 1;
  const uint32_t code_mask = (1u << layout.width) - 1;
  const auto value_of = [&](uint32_t bits_of_value) {
    const uint32_t q = bits_of_value & mantissa_mask;
    const uint32_t c = (bits_of_value >> m) & code_mask;
    const uint32_t sign = (bits_of_value >> (m + layout.width)) << 31;
    // 1 + q 2^-M is exact in a float (M <= 15); the product rounds only when subnormal.
    const float magnitude = scale[c] * (1.0f + static_cast<float>(q) * step);
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | (c != 0 ? sign : 0u));
  };
  if (bits == 8) {
    for (size_t i = 0; i < n; ++i) values[i] = value_of(in[i]);
    return;
  }
  const uint32_t value_mask = (1u << bits) - 1;
  uint64_t pending = 0;
  int pending_bits = 0;
  size_t byte = 0;
  for (size_t i = 0; i < n; ++i) {
    while (pending_bits < bits) {
      pending |= static_cast<uint64_t>(in[byte++]) << pending_bits;
      pending_bits += 8;
    }
    values[i] = value_of(static_cast<uint32_t>(pending) & value_mask);
    pending >>= bits;
    pending_bits -= bits;
  }
}

bool range_float_padding_is_zero(const uint8_t* in, size_t count, int bits, int width) {
  const size_t total = count * static_cast<size_t>(bits);
  if (width == 0 || total % 8 == 0) return true;
  return (in[total / 8] >> (total % 8)) == 0;
}

}  // namespace gradwire::compress
