// `signsgd`: EF-signSGD (Karimireddy et al. 2019; ALGORITHMS.md 2.4). With p = g + e:
//   delta = (||p||_1 / d) sign(p);  e <- p - delta
// d bits and one f32 scale: 32x smaller than float32. Error feedback is on by default (the
// method is defined with it; without it the sign is a biased estimate). Not additive:
// aggregate by allgather and decode_add, one payload per rank.
//
// One bit per element has no room for sign(0) = 0: bit 1 means p_i > 0 and decodes to
// +scale; bit 0 means p_i <= 0 (zero included) and decodes to -scale. A zero coordinate
// therefore sends -scale and error feedback carries +scale into the next step, so nothing is
// lost; the scale is still ||p||_1 / d over every coordinate, zeros included.
//
// Body: f32 scale | u8 bits[ceil(N / 8)]. Bits are packed for vector loads: each full group
// of 128 elements takes 16 bytes, element 16q + j of the group in bit q of byte j; the last
// N % 128 elements follow eight a byte in order (element 8b + q of the tail in bit q of tail
// byte b), unused high bits zero. scale is finite and >= +0 (sign bit clear).
#include <algorithm>
#include <bit>
#include <cmath>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/error_feedback.h"
#include "gradwire/compress/quantize/quantizers.h"
#include "gradwire/core/half.h"

namespace gradwire::compress {
namespace {

constexpr size_t kGroup = 128;      // elements per bit group
constexpr size_t kGroupBytes = 16;  // bytes per bit group

size_t body_bytes(size_t n) { return (n + 7) / 8; }

inline uint32_t positive_mask(float x) { return mask_if(x > 0.0f); }
// +scale for bit 1, -scale for bit 0 (scale_bits has the sign bit clear).
inline float signed_scale(uint32_t positive, uint32_t scale_bits) {
  return std::bit_cast<float>(scale_bits | (~positive & 0x80000000u));
}

void encode_tail(const float* a, uint8_t* out, size_t m) {
  for (size_t b = 0; 8 * b < m; ++b) {
    uint32_t byte = 0;
    for (size_t q = 0; q < 8 && 8 * b + q < m; ++q) {
      byte |= (positive_mask(a[8 * b + q]) & 1u) << q;
    }
    out[b] = static_cast<uint8_t>(byte);
  }
}

// Bit q of byte j: element 16q + j of a group is positive.
inline uint32_t group_bit(const float* x, size_t j, size_t q) {
  return (positive_mask(x[16 * q + j]) & 1u) << q;
}
// As group_bit, and x <- x - D(C(x)) for that element.
inline uint32_t group_bit_residual(float* x, size_t j, size_t q, uint32_t scale_bits) {
  const uint32_t positive = positive_mask(x[16 * q + j]);
  x[16 * q + j] -= signed_scale(positive, scale_bits);
  return (positive & 1u) << q;
}

// The eight elements of byte j are spelled out (not a loop) so that the loop over j is the
// innermost and vectorizes.
[[gnu::noinline]] void encode_kernel(const float* __restrict a, uint8_t* __restrict out, size_t n) {
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    const float* x = a + kGroup * g;
    uint8_t* o = out + kGroupBytes * g;
    for (size_t j = 0; j < kGroupBytes; ++j) {
      o[j] = static_cast<uint8_t>(group_bit(x, j, 0) | group_bit(x, j, 1) | group_bit(x, j, 2) |
                                  group_bit(x, j, 3) | group_bit(x, j, 4) | group_bit(x, j, 5) |
                                  group_bit(x, j, 6) | group_bit(x, j, 7));
    }
  }
  encode_tail(a + kGroup * groups, out + kGroupBytes * groups, n % kGroup);
}

// Bits as encode_kernel, and a <- a - D(C(a)) in the same pass.
[[gnu::noinline]] void encode_residual_kernel(float* __restrict a, uint8_t* __restrict out,
                                              size_t n, float scale) {
  const uint32_t scale_bits = std::bit_cast<uint32_t>(scale);
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    float* x = a + kGroup * g;
    uint8_t* o = out + kGroupBytes * g;
    for (size_t j = 0; j < kGroupBytes; ++j) {
      uint32_t byte = group_bit_residual(x, j, 0, scale_bits);
      byte |= group_bit_residual(x, j, 1, scale_bits);
      byte |= group_bit_residual(x, j, 2, scale_bits);
      byte |= group_bit_residual(x, j, 3, scale_bits);
      byte |= group_bit_residual(x, j, 4, scale_bits);
      byte |= group_bit_residual(x, j, 5, scale_bits);
      byte |= group_bit_residual(x, j, 6, scale_bits);
      byte |= group_bit_residual(x, j, 7, scale_bits);
      o[j] = static_cast<uint8_t>(byte);
    }
  }
  float* tail = a + kGroup * groups;
  const size_t m = n % kGroup;
  encode_tail(tail, out + kGroupBytes * groups, m);
  for (size_t i = 0; i < m; ++i) tail[i] -= signed_scale(positive_mask(tail[i]), scale_bits);
}

[[gnu::noinline]] void decode_add_kernel(const uint8_t* __restrict in, float* __restrict accum,
                                         size_t n, float scale) {
  const uint32_t scale_bits = std::bit_cast<uint32_t>(scale);
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    float* x = accum + kGroup * g;
    const uint8_t* c = in + kGroupBytes * g;
    for (size_t q = 0; q < 8; ++q) {
      for (size_t j = 0; j < kGroupBytes; ++j) {
        const uint32_t positive = 0u - ((static_cast<uint32_t>(c[j]) >> q) & 1u);
        x[16 * q + j] += signed_scale(positive, scale_bits);
      }
    }
  }
  float* tail = accum + kGroup * groups;
  const uint8_t* c = in + kGroupBytes * groups;
  for (size_t i = 0; i < n % kGroup; ++i) {
    const uint32_t positive = 0u - ((static_cast<uint32_t>(c[i / 8]) >> (i % 8)) & 1u);
    tail[i] += signed_scale(positive, scale_bits);
  }
}

class SignSgdCodec final : public Codec, public FusedAccumulate {
 public:
  CodecId id() const override { return CodecId::kSignSgd; }
  std::string spec() const override { return bare_spec("signsgd", {}); }

  void encode(std::span<const float> input, Bytes& out) override {
    uint8_t* bits = write_prefix(input.size(), scale_of(input), out);
    encode_kernel(input.data(), bits, input.size());
  }

  // Two passes over a (the scale, then bits and residual together); no decoding.
  void encode_residual(std::span<float> a, Bytes& out) override {
    const float scale = scale_of(a);
    uint8_t* bits = write_prefix(a.size(), scale, out);
    encode_residual_kernel(a.data(), bits, a.size(), scale);
  }

  // With error feedback (the default): r += g folded into the pass that sums |a|.
  void add_encode_residual(std::span<const float> g, std::span<float> r, Bytes& out) override {
    if (g.size() != r.size()) {
      throw Error("codec 'signsgd': gradient of " + std::to_string(g.size()) +
                  " elements for a residual of " + std::to_string(r.size()));
    }
    const float scale = mean_of(add_sum_abs(g.data(), r.data(), r.size()), r.size());
    uint8_t* bits = write_prefix(r.size(), scale, out);
    encode_residual_kernel(r.data(), bits, r.size(), scale);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kSignSgd, kSignSgdVersion, accum.size());
    const size_t n = accum.size();
    const float scale = reader.get<float>("signsgd scale");
    const auto bits = reader.get_bytes(body_bytes(n), "signsgd bits");
    reader.expect_end("'signsgd' payload");
    if (!std::isfinite(scale) || std::signbit(scale)) {
      throw PayloadError("corrupt 'signsgd' payload: scale " + format_number(scale) +
                         " is not a finite number >= +0");
    }
    const size_t tail = n % 8;
    if (tail != 0 && (bits.back() >> tail) != 0) {
      throw PayloadError("corrupt 'signsgd' payload: padding bits after the last element are set");
    }
    decode_add_kernel(bits.data(), accum.data(), n, scale);
  }

 private:
  // ||a||_1 / d (float blocks summed in double: a float sum of 25M terms drifts).
  static float scale_of(std::span<const float> a) {
    return mean_of(sum_abs(a.data(), a.size()), a.size());
  }
  static float mean_of(double l1, size_t n) {
    if (n == 0) return 0.0f;
    if (!std::isfinite(l1)) throw_non_finite_input("signsgd");
    return static_cast<float>(l1 / static_cast<double>(n));
  }

  // Header and scale; returns the (zeroed) bit bytes to fill.
  uint8_t* write_prefix(size_t n, float scale, Bytes& out) const {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kSignSgd, kSignSgdVersion, checked_count(n, id())}.write(writer);
    writer.put<float>(scale);
    return writer.reserve_tail(body_bytes(n));
  }
};

}  // namespace

std::unique_ptr<Codec> make_sign_sgd_codec(SpecReader&, const TensorInfo&) {
  return std::make_unique<SignSgdCodec>();
}

}  // namespace gradwire::compress
