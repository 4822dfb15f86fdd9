// The codecs each fuzz target drives, grouped by family, and the input format every codec
// fuzz target shares (see codec_fuzzer.cc).
//
// Input: byte 0 picks the case (bits 0-6, modulo the family's size) and the mode (bit 7):
//   decode mode (bit 7 clear): bytes 1.. are a payload handed to decode_add(). It must be
//     accepted, or rejected with a gradwire::Error that leaves the accumulator untouched.
//   encode mode (bit 7 set): bytes 1.. are float32 values (cycled to fill the tensor, any
//     bit pattern, NaN and infinities included). Two encode() calls (so error-feedback
//     residuals and warm starts carry over) must give payloads that decode; an encoder
//     may refuse non-finite or overflowing input only with a gradwire::Error.
// Each case fixes the tensor (size, shape, kind), so payload counts are stable and the
// seed corpus (fuzz/corpus/<family>/) holds valid payloads to mutate.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire::fuzz {

struct CodecCase {
  const char* spec;
  compress::TensorInfo tensor;
};

// Families: "float", "sparse", "quantizer", "spectral", "lowrank". Empty for other names.
const std::vector<CodecCase>& codec_family(std::string_view family);
std::vector<std::string_view> codec_family_names();

inline constexpr uint8_t kEncodeModeBit = 0x80;

}  // namespace gradwire::fuzz
