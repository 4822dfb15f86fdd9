#include "gradwire/compress/quantize/ternary_codes.h"

#include <bit>
#include <string>

#include "gradwire/core/error.h"
#include "gradwire/core/vectorize.h"

namespace gradwire::compress {
namespace {

// The value of the code in bits 2q, 2q + 1 of byte b, with masks: 11 -> +v, 10 -> -v,
// 00 -> +0 (01 never reaches here).
inline float value_at(uint8_t b, size_t q, uint32_t v_bits) {
  const uint32_t code = static_cast<uint32_t>(b) >> (2 * q);
  const uint32_t sent = 0u - ((code >> 1) & 1u);
  const uint32_t negative = (~code & 1u) << 31;
  return std::bit_cast<float>(sent & (v_bits | negative));
}

// The four rows of a group are spelled out so that the loop over j is the innermost and
// vectorizes (twice as fast as a loop over the rows).
[[gnu::noinline]] void decode_add_kernel(const uint8_t* __restrict in, float* __restrict accum,
                                         size_t n, float v) {
  const uint32_t v_bits = std::bit_cast<uint32_t>(v);
  const size_t groups = n / kTernaryGroup;
  for (size_t g = 0; g < groups; ++g) {
    float* x = accum + kTernaryGroup * g;
    const uint8_t* c = in + kTernaryGroupBytes * g;
    for (size_t j = 0; j < kTernaryGroupBytes; ++j) {
      x[j] += value_at(c[j], 0, v_bits);
      x[16 + j] += value_at(c[j], 1, v_bits);
      x[32 + j] += value_at(c[j], 2, v_bits);
      x[48 + j] += value_at(c[j], 3, v_bits);
    }
  }
  float* tail = accum + kTernaryGroup * groups;
  const uint8_t* c = in + kTernaryGroupBytes * groups;
  for (size_t i = 0; i < n % kTernaryGroup; ++i) tail[i] += value_at(c[i / 4], i % 4, v_bits);
}

// Nonzero when some code in the bytes is 01 (low bit set, high bit clear).
[[gnu::noinline]] uint8_t invalid_code_bits(const uint8_t* __restrict in, size_t bytes) {
  uint8_t bad = 0;
  vector_loop(bytes, [&](size_t i) {
    const uint8_t b = in[i];
    bad |= static_cast<uint8_t>(b & ~(b >> 1) & 0x55);
  });
  return bad;
}

}  // namespace

void ternary_check_and_decode_add(std::span<const uint8_t> codes, std::span<float> accum, float v,
                                  const char* codec) {
  const size_t n = accum.size();
  if (codes.size() != ternary_code_bytes(n)) {
    throw PayloadError("corrupt '" + std::string(codec) +
                       "' payload: " + std::to_string(codes.size()) + " code bytes for " +
                       std::to_string(n) + " elements");
  }
  if (invalid_code_bits(codes.data(), codes.size()) != 0) {
    size_t at = 0;
    while (invalid_code_bits(codes.data() + at, 1) == 0) ++at;
    throw PayloadError("corrupt '" + std::string(codec) +
                       "' payload: code 01 (never produced) in code byte " + std::to_string(at) +
                       " of " + std::to_string(codes.size()));
  }
  const size_t tail = n % kTernaryGroup;
  if (tail % 4 != 0 && (codes.back() >> (2 * (tail % 4))) != 0) {
    throw PayloadError("corrupt '" + std::string(codec) +
                       "' payload: padding bits after the last code are set");
  }
  decode_add_kernel(codes.data(), accum.data(), n, v);
}

}  // namespace gradwire::compress
