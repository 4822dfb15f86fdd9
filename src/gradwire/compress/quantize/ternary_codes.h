// Internal: the 2-bit ternary code stream shared by `2bit` and `terngrad`.
//
// Codes: 11 -> +v, 10 -> -v, 00 -> 0; 01 is never produced (corruption). Layout: each full
// group of 64 elements takes 16 bytes, element 16q + j of the group in bits 2q..2q+1 of
// byte j (so encoders and decoders vectorize over j); the last N % 64 elements follow four
// a byte in order (element 4b + q of the tail in bits 2q..2q+1 of tail byte b), unused high
// bits zero. Total ceil(N / 4) bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace gradwire::compress {

inline constexpr size_t kTernaryGroup = 64;       // elements per group
inline constexpr size_t kTernaryGroupBytes = 16;  // bytes per group

inline size_t ternary_code_bytes(size_t n) { return (n + 3) / 4; }

// Checks `codes` (ternary_code_bytes(accum.size()) bytes: no 01 code, zero padding) and
// adds +-v or 0 per element into `accum`. Throws PayloadError naming `codec` and leaves
// `accum` untouched when the codes are corrupt.
void ternary_check_and_decode_add(std::span<const uint8_t> codes, std::span<float> accum, float v,
                                  const char* codec);

}  // namespace gradwire::compress
