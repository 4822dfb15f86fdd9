// `terngrad`: TernGrad (Wen et al. 2017; ALGORITHMS.md 2.3). Per tensor and step:
//   sigma = sqrt(mean g_i^2);  c = clip * sigma (key `clip`, default 2.5)
//   g'_i = max(-c, min(g_i, c));  s = max_i |g'_i| = min(max_i |g_i|, c)
//   send s sign(g'_i) b_i with b_i ~ Bernoulli(|g'_i| / s)
// E[sent] = g' (unbiased for the clipped gradient), so error feedback is off by default.
//
// sigma is the spread about zero, sqrt(mean g^2), not about the mean: TernGrad's analysis
// takes gradients as zero-mean, where the two agree, and with the mean subtracted a one-
// element or constant tensor (a bias, say) would have sigma = 0 and be clipped to nothing.
//
// Scaler sharing: TernGrad makes s the maximum over workers so that every worker's ternary
// values are multiples of one scale and a sum can be taken in integers. That needs a
// collective of its own and is out of scope for a codec: here each payload carries its own
// s, and the receiver adds s * code per payload in float, so the sum over workers is exact
// (up to float rounding) without agreeing on s first.
//
// Randomness: a UniformStream seeded from the key `seed` (default 0), the tensor name, the
// call number and s (quantizers.h).
//
// Body: f32 s | u8 codes[ceil(N / 4)], the ternary codes of ternary_codes.h (as 2bit's):
// 11 -> +s, 10 -> -s, 00 -> 0. s is finite and >= +0 (sign bit clear).
#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/quantize/quantizers.h"
#include "gradwire/compress/quantize/ternary_codes.h"
#include "gradwire/core/half.h"

namespace gradwire::compress {
namespace {

constexpr size_t kGroup = kTernaryGroup;
constexpr size_t kGroupBytes = kTernaryGroupBytes;
constexpr uint8_t kStateVersion = 1;

// All ones when element x is sent (u s < min(|x|, s), i.e. with probability min(|x|, s) / s).
inline uint32_t sent_mask(float x, float u, float s) {
  return mask_if(u * s < std::min(std::fabs(x), s));
}
// 11 for +s, 10 for -s, 00 when not sent.
inline uint32_t code_of(float x, uint32_t sent) { return sent & (3u ^ (mask_if(x < 0.0f) & 1u)); }
// The decoded value: +-s when sent (sign of x), else +0.
inline float value_of(float x, uint32_t sent, uint32_t s_bits) {
  return std::bit_cast<float>(sent & (s_bits | (std::bit_cast<uint32_t>(x) & 0x80000000u)));
}

// Codes of one group (or the first m < 64 elements of a tail, four a byte in order).
void encode_tail(const float* a, const float* u, uint8_t* out, size_t m, float s) {
  for (size_t b = 0; 4 * b < m; ++b) {
    uint32_t byte = 0;
    for (size_t q = 0; q < 4 && 4 * b + q < m; ++q) {
      const size_t i = 4 * b + q;
      byte |= code_of(a[i], sent_mask(a[i], u[i], s)) << (2 * q);
    }
    out[b] = static_cast<uint8_t>(byte);
  }
}

// Code of element 16q + j of a group, in place for byte j (bits 2q..2q+1).
inline uint32_t group_code(const float* x, const float* u, size_t j, size_t q, float s) {
  const size_t i = 16 * q + j;
  return code_of(x[i], sent_mask(x[i], u[i], s)) << (2 * q);
}
// As group_code, and x <- x - D(C(x)) for that element.
inline uint32_t group_code_residual(float* x, const float* u, size_t j, size_t q, float s,
                                    uint32_t s_bits) {
  const size_t i = 16 * q + j;
  const uint32_t sent = sent_mask(x[i], u[i], s);
  const uint32_t code = code_of(x[i], sent) << (2 * q);
  x[i] -= value_of(x[i], sent, s_bits);
  return code;
}

// The four elements of byte j are spelled out (not a loop) so that the loop over j is the
// innermost and vectorizes.
[[gnu::noinline]] void encode_kernel(const float* __restrict a, const float* __restrict u,
                                     uint8_t* __restrict out, size_t n, float s) {
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    const float* x = a + kGroup * g;
    const float* r = u + kGroup * g;
    uint8_t* o = out + kGroupBytes * g;
    for (size_t j = 0; j < kGroupBytes; ++j) {
      o[j] = static_cast<uint8_t>(group_code(x, r, j, 0, s) | group_code(x, r, j, 1, s) |
                                  group_code(x, r, j, 2, s) | group_code(x, r, j, 3, s));
    }
  }
  encode_tail(a + kGroup * groups, u + kGroup * groups, out + kGroupBytes * groups, n % kGroup, s);
}

// Codes as encode_kernel, and a <- a - D(C(a)) in the same pass.
[[gnu::noinline]] void encode_residual_kernel(float* __restrict a, const float* __restrict u,
                                              uint8_t* __restrict out, size_t n, float s) {
  const uint32_t s_bits = std::bit_cast<uint32_t>(s);
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    float* x = a + kGroup * g;
    const float* r = u + kGroup * g;
    uint8_t* o = out + kGroupBytes * g;
    for (size_t j = 0; j < kGroupBytes; ++j) {
      uint32_t byte = group_code_residual(x, r, j, 0, s, s_bits);
      byte |= group_code_residual(x, r, j, 1, s, s_bits);
      byte |= group_code_residual(x, r, j, 2, s, s_bits);
      byte |= group_code_residual(x, r, j, 3, s, s_bits);
      o[j] = static_cast<uint8_t>(byte);
    }
  }
  const size_t m = n % kGroup;
  float* tail = a + kGroup * groups;
  const float* ut = u + kGroup * groups;
  encode_tail(tail, ut, out + kGroupBytes * groups, m, s);
  for (size_t i = 0; i < m; ++i) tail[i] -= value_of(tail[i], sent_mask(tail[i], ut[i], s), s_bits);
}

class TernGradCodec final : public Codec {
 public:
  TernGradCodec(double clip, uint64_t seed, const TensorInfo& tensor)
      : clip_(clip), seed_(seed), key_(stream_key(seed, tensor.name)), numel_(tensor.numel()) {}

  CodecId id() const override { return CodecId::kTernGrad; }
  std::string spec() const override {
    return bare_spec("terngrad", {{"clip", format_number(clip_)}, {"seed", std::to_string(seed_)}});
  }

  void encode(std::span<const float> input, Bytes& out) override {
    quantize(input.data(), nullptr, input.size(), out);
  }

  void encode_residual(std::span<float> a, Bytes& out) override {
    quantize(a.data(), a.data(), a.size(), out);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kTernGrad, kTernGradVersion, accum.size());
    const size_t n = accum.size();
    const float s = reader.get<float>("terngrad scale");
    const auto codes = reader.get_bytes(ternary_code_bytes(n), "terngrad codes");
    reader.expect_end("'terngrad' payload");
    if (!std::isfinite(s) || std::signbit(s)) {
      throw PayloadError("corrupt 'terngrad' payload: scale " + format_number(s) +
                         " is not a finite number >= +0");
    }
    ternary_check_and_decode_add(codes, accum, s, "terngrad");
  }

  // Checkpoints: the calls so far, which seed the next call's random stream (reseeded at
  // every call, so the generator's own state is not carried).
  void save_state(Bytes& out) const override {
    write_state_header(out, *this, kStateVersion, numel_);
    ByteWriter(out).put<uint64_t>(calls_);
  }
  void load_state(ByteReader& in) override {
    read_state_header(in, *this, kStateVersion, numel_);
    calls_ = in.get<uint64_t>("terngrad calls");
  }

 private:
  // Writes the payload of `v`; with `residual` (== v), also v <- v - D(C(v)).
  void quantize(const float* v, float* residual, size_t n, Bytes& out) {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kTernGrad, kTernGradVersion, checked_count(n, id())}.write(writer);
    const float s = scale_of(v, n);
    writer.put<float>(s);
    uint8_t* codes = writer.reserve_tail(ternary_code_bytes(n));
    if (n == 0) return;
    if (uniform_.size() < std::min(n, kQuantBlock) + kVectorBlock) {
      uniform_.resize(std::min(n, kQuantBlock) + kVectorBlock);
    }
    stream_.reseed(call_seed(key_, calls_++, std::bit_cast<uint32_t>(s)));
    for (size_t c0 = 0; c0 < n; c0 += kQuantBlock) {  // kQuantBlock is a multiple of kGroup
      const size_t m = std::min(kQuantBlock, n - c0);
      stream_.fill(uniform_.data(), m);
      uint8_t* block_codes = codes + c0 / 4;
      if (residual) {
        encode_residual_kernel(residual + c0, uniform_.data(), block_codes, m, s);
      } else {
        encode_kernel(v + c0, uniform_.data(), block_codes, m, s);
      }
    }
  }

  // s = min(max |v_i|, clip * sqrt(mean v_i^2)).
  float scale_of(const float* v, size_t n) const {
    if (n == 0) return 0.0f;
    const SquareSum squares = sum_squares(v, n);
    if (!std::isfinite(squares.sum)) throw_non_finite_input("terngrad");
    const double limit = clip_ * std::sqrt(squares.sum / static_cast<double>(n));
    return std::min(squares.max_abs, static_cast<float>(limit));
  }

  double clip_;
  uint64_t seed_;
  uint64_t key_;
  size_t numel_;
  uint64_t calls_ = 0;
  UniformStream stream_;
  std::vector<float> uniform_;  // one block of uniforms (scratch)
};

}  // namespace

std::unique_ptr<Codec> make_terngrad_codec(SpecReader& reader, const TensorInfo& tensor) {
  const double clip = reader.get_double("clip", 2.5);
  if (!(clip > 0.0 && clip <= 1e6)) {
    throw ConfigError("codec 'terngrad': clip=" + format_number(clip) +
                      " must be in (0, 1e6] (values are clipped to +-clip * sigma)");
  }
  const auto seed = reader.get_int_in("seed", 0, 0, INT64_MAX);
  return std::make_unique<TernGradCodec>(clip, static_cast<uint64_t>(seed), tensor);
}

}  // namespace gradwire::compress
