// libFuzzer target for one codec family (GRADWIRE_FUZZ_FAMILY, set by fuzz/CMakeLists.txt).
// The input format is described in codec_fuzz_cases.h. Failures are crashes: an escaped
// exception that is not a gradwire::Error, a rejected payload that modified the
// accumulator, a payload of our own encoder that our decoder refuses, or any sanitizer
// report.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "codec_fuzz_cases.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace {

using gradwire::fuzz::CodecCase;

[[noreturn]] void fail(const CodecCase& c, const char* what, const char* detail = "") {
  std::fprintf(stderr, "codec fuzz failure [%s]: %s %s\n", c.spec, what, detail);
  std::abort();
}

void decode_mode(const CodecCase& c, const uint8_t* payload, size_t size) {
  const auto codec = gradwire::compress::create_codec(c.spec, c.tensor);
  std::vector<float> accum(c.tensor.numel());
  for (size_t i = 0; i < accum.size(); ++i) accum[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  const std::vector<float> before = accum;
  try {
    codec->decode_add({payload, size}, accum);
  } catch (const gradwire::Error&) {
    if (std::memcmp(accum.data(), before.data(), accum.size() * sizeof(float)) != 0) {
      fail(c, "a rejected payload modified the accumulator");
    }
  }
}

void encode_mode(const CodecCase& c, const uint8_t* bytes, size_t size) {
  const auto codec = gradwire::compress::create_codec(c.spec, c.tensor);
  const size_t n = c.tensor.numel();
  std::vector<float> input(n, 0.0f);
  const size_t floats = size / sizeof(float);
  for (size_t i = 0; floats > 0 && i < n; ++i) {
    std::memcpy(&input[i], bytes + (i % floats) * sizeof(float), sizeof(float));
  }
  // Encoders may refuse non-finite gradients (training diverged) with a gradwire::Error;
  // tame input (finite, |x| <= 1e15, so no sum of squares overflows) must encode.
  bool tame = true;
  for (const float x : input) tame = tame && std::isfinite(x) && std::fabs(x) <= 1e15f;
  for (int step = 0; step < 2; ++step) {
    gradwire::Bytes payload;
    try {
      codec->encode(input, payload);
    } catch (const gradwire::Error& e) {
      if (tame) fail(c, "the encoder refused finite input:", e.what());
      return;
    }
    std::vector<float> accum(n, 0.0f);
    try {
      codec->decode_add(payload, accum);
    } catch (const gradwire::Error& e) {
      fail(c, "the decoder refused the encoder's own payload:", e.what());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& cases = gradwire::fuzz::codec_family(GRADWIRE_FUZZ_FAMILY);
  if (cases.empty() || size == 0) return 0;
  const CodecCase& c = cases[(data[0] & 0x7f) % cases.size()];
  if (data[0] & gradwire::fuzz::kEncodeModeBit) {
    encode_mode(c, data + 1, size - 1);
  } else {
    decode_mode(c, data + 1, size - 1);
  }
  return 0;
}
