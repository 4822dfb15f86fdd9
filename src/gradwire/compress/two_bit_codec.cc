// `2bit`: MXNet's threshold quantization (ALGORITHMS.md 2.1). Per element with threshold t:
//   a >= t  -> code 11, decodes to +t
//   a <= -t -> code 10, decodes to -t
//   else    -> code 00, decodes to 0          (code 01 never occurs: corruption)
// With error feedback (the default) this is exactly MXNet kvstore's '2bit': the residual
// update r <- a - D(C(a)) is r -= t / r += t / unchanged, done in the encoding pass.
//
// Body: f32 t | u8 codes[ceil(N/4)]. Codes are packed for vector loads: each full group of
// 64 elements takes 16 bytes, element 16q + j of the group in bits 2q..2q+1 of byte j; the
// last N % 64 elements follow four a byte in order (element 4b + q of the tail in bits
// 2q..2q+1 of tail byte b), unused high bits zero.
#include <cmath>
#include <cstdio>

#include "gradwire/compress/codecs.h"

namespace gradwire::compress {
namespace {

constexpr size_t kGroup = 64;       // elements per group
constexpr size_t kGroupBytes = 16;  // bytes per group

inline uint32_t code_of(float v, float t) { return (v >= t ? 3u : 0u) | (v <= -t ? 2u : 0u); }
inline float decoded_of(float v, float t) {
  const float d = v >= t ? t : 0.0f;
  return v <= -t ? -t : d;
}
inline float value_of_code(uint32_t code, float t) {
  const float v = code == 3u ? t : 0.0f;
  return code == 2u ? -t : v;
}

size_t body_bytes(size_t n) { return (n + 3) / 4; }

// Codes of the tail (fewer than 64 elements), four a byte in order.
void encode_tail(const float* a, uint8_t* out, size_t m, float t) {
  for (size_t b = 0; 4 * b < m; ++b) {
    uint32_t byte = 0;
    for (size_t q = 0; q < 4 && 4 * b + q < m; ++q) byte |= code_of(a[4 * b + q], t) << (2 * q);
    out[b] = static_cast<uint8_t>(byte);
  }
}

[[gnu::noinline]] void encode_kernel(const float* __restrict a, uint8_t* __restrict out, size_t n,
                                     float t) {
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    const float* x = a + kGroup * g;
    uint8_t* o = out + kGroupBytes * g;
    for (size_t j = 0; j < kGroupBytes; ++j) {
      o[j] = static_cast<uint8_t>(code_of(x[j], t) | (code_of(x[16 + j], t) << 2) |
                                  (code_of(x[32 + j], t) << 4) | (code_of(x[48 + j], t) << 6));
    }
  }
  encode_tail(a + kGroup * groups, out + kGroupBytes * groups, n % kGroup, t);
}

// Codes as encode_kernel, and r <- a - D(C(a)) in the same pass.
[[gnu::noinline]] void encode_residual_kernel(float* __restrict a, uint8_t* __restrict out,
                                              size_t n, float t) {
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    float* x = a + kGroup * g;
    uint8_t* o = out + kGroupBytes * g;
    for (size_t j = 0; j < kGroupBytes; ++j) {
      o[j] = static_cast<uint8_t>(code_of(x[j], t) | (code_of(x[16 + j], t) << 2) |
                                  (code_of(x[32 + j], t) << 4) | (code_of(x[48 + j], t) << 6));
    }
    for (size_t j = 0; j < kGroup; ++j) x[j] -= decoded_of(x[j], t);
  }
  float* tail = a + kGroup * groups;
  const size_t m = n % kGroup;
  encode_tail(tail, out + kGroupBytes * groups, m, t);
  for (size_t i = 0; i < m; ++i) tail[i] -= decoded_of(tail[i], t);
}

[[gnu::noinline]] void decode_add_kernel(const uint8_t* __restrict in, float* __restrict accum,
                                         size_t n, float t) {
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    float* x = accum + kGroup * g;
    const uint8_t* c = in + kGroupBytes * g;
    for (size_t q = 0; q < 4; ++q) {
      for (size_t j = 0; j < kGroupBytes; ++j) {
        x[16 * q + j] += value_of_code((static_cast<uint32_t>(c[j]) >> (2 * q)) & 3u, t);
      }
    }
  }
  float* tail = accum + kGroup * groups;
  const uint8_t* c = in + kGroupBytes * groups;
  for (size_t i = 0; i < n % kGroup; ++i) {
    tail[i] += value_of_code((static_cast<uint32_t>(c[i / 4]) >> (2 * (i % 4))) & 3u, t);
  }
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

class TwoBitCodec final : public Codec {
 public:
  explicit TwoBitCodec(float threshold) : threshold_(threshold) {}

  CodecId id() const override { return CodecId::kTwoBit; }
  std::string spec() const override {
    return bare_spec("2bit", {{"threshold", format_number(threshold_)}});
  }

  void encode(std::span<const float> input, Bytes& out) override {
    uint8_t* codes = write_prefix(input.size(), out);
    encode_kernel(input.data(), codes, input.size(), threshold_);
  }

  void encode_residual(std::span<float> a, Bytes& out) override {
    uint8_t* codes = write_prefix(a.size(), out);
    encode_residual_kernel(a.data(), codes, a.size(), threshold_);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kTwoBit, kTwoBitVersion, accum.size());
    const size_t n = accum.size();
    const float t = reader.get<float>("2bit threshold");
    const auto codes = reader.get_bytes(body_bytes(n), "2bit codes");
    reader.expect_end("'2bit' payload");
    if (!(std::isfinite(t) && t > 0.0f)) {
      throw PayloadError("corrupt '2bit' payload: threshold " + format_number(t) +
                         " is not a finite positive number");
    }
    if (invalid_code_bits(codes.data(), codes.size()) != 0) {
      size_t at = 0;
      while (invalid_code_bits(codes.data() + at, 1) == 0) ++at;
      throw PayloadError("corrupt '2bit' payload: code 01 (never produced) in code byte " +
                         std::to_string(at) + " of " + std::to_string(codes.size()));
    }
    const size_t tail = n % kGroup;
    if (tail % 4 != 0 && (codes.back() >> (2 * (tail % 4))) != 0) {
      throw PayloadError("corrupt '2bit' payload: padding bits after the last element are set");
    }
    decode_add_kernel(codes.data(), accum.data(), n, t);
  }

 private:
  // Header and threshold; returns the (zeroed) code bytes to fill.
  uint8_t* write_prefix(size_t n, Bytes& out) const {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kTwoBit, kTwoBitVersion, checked_count(n, id())}.write(writer);
    writer.put<float>(threshold_);
    return writer.reserve_tail(body_bytes(n));
  }

  float threshold_;
};

}  // namespace

std::unique_ptr<Codec> make_two_bit_codec(SpecReader& reader, const TensorInfo&) {
  const double value = reader.get_double("threshold", 0.5);
  const auto threshold = static_cast<float>(value);
  if (!(value > 0.0 && std::isfinite(threshold) && threshold > 0.0f)) {
    throw ConfigError("codec '2bit': threshold=" + format_number(value) +
                      " must be a positive number representable as float32 (e.g. "
                      "threshold=0.5)");
  }
  return std::make_unique<TwoBitCodec>(threshold);
}

}  // namespace gradwire::compress
