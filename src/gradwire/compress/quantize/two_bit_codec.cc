// `2bit`: MXNet's threshold quantization (ALGORITHMS.md 2.1). Per element with threshold t:
//   a >= t  -> code 11, decodes to +t
//   a <= -t -> code 10, decodes to -t
//   else    -> code 00, decodes to 0          (code 01 never occurs: corruption)
// With error feedback (the default) this is exactly MXNet kvstore's '2bit': the residual
// update r <- a - D(C(a)) is r -= t / r += t / unchanged, done in the encoding pass.
//
// Threshold: `threshold=T` fixes t = T for every tensor and step (MXNet; its default is
// 0.5). The default `threshold=auto` adapts it per tensor and step, t = alpha * mean|a|
// (alpha = 1), as the Hylo design does for fully-connected layers (ALGORITHMS.md 4.3):
// a fixed t only works when it matches the gradients' scale. When per-step |a| exceeds a
// fixed t, at most t can leave per step, the residual grows without bound and the sent
// signs lag the gradient; when t is far above |a|, rare sends of +-t are large jumps. On
// the Fashion-MNIST CNN (4 workers, lr 0.05, momentum 0.9) t = 0.002, 0.01 and 0.5 all
// end at 10% accuracy and t = 0.05 at 71% after one epoch (fp32: 86%). The payload
// carries t, so decoders need not know which mode the sender used.
//
// Body: f32 v | u8 codes[ceil(N/4)], codes decoding to +-v, laid out as in ternary_codes.h.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <utility>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/error_feedback.h"
#include "gradwire/compress/quantize/quantizers.h"
#include "gradwire/compress/quantize/ternary_codes.h"
#include "gradwire/core/half.h"

namespace gradwire::compress {
namespace {

constexpr size_t kGroup = kTernaryGroup;
constexpr size_t kGroupBytes = kTernaryGroupBytes;

inline uint32_t code_of(float v, float t) { return (v >= t ? 3u : 0u) | (v <= -t ? 2u : 0u); }
inline float decoded_of(float x, float t, float v) {
  const float d = x >= t ? v : 0.0f;
  return x <= -t ? -v : d;
}

// The same code and decoded value with masks (t > 0, so |x| >= t is "x >= t or x <= -t" and
// the sign bit tells them apart), for the fused residual loop below: one compare serves both.
inline uint32_t selected_mask(float x, float t) { return mask_if(std::fabs(x) >= t); }
inline float masked_decoded(float x, uint32_t selected, uint32_t v_bits) {
  return std::bit_cast<float>(selected & (v_bits | (std::bit_cast<uint32_t>(x) & 0x80000000u)));
}
// Code of element 16q + j of a group, in place for byte j (bits 2q, 2q + 1), from its
// selection mask: 11 when selected, 10 when selected and negative. Built from masks narrowed
// to 8 bits, which GCC packs with fewer instructions than 32-bit codes.
inline uint8_t group_code(float x, uint32_t selected, size_t q) {
  const auto negative =
      static_cast<uint8_t>(static_cast<int32_t>(std::bit_cast<uint32_t>(x)) >> 31);
  return static_cast<uint8_t>(static_cast<uint8_t>(selected) &
                              ((3u << (2 * q)) ^ (negative & (1u << (2 * q)))));
}

// As group_code, and x <- x - D(C(x)) for element 16q + j.
inline uint8_t group_code_residual(float* x, size_t j, size_t q, float t, uint32_t v_bits) {
  const float a = x[16 * q + j];
  const uint32_t selected = selected_mask(a, t);
  x[16 * q + j] = a - masked_decoded(a, selected, v_bits);
  return group_code(a, selected, q);
}

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

// Codes as encode_kernel, and r <- a - D(C(a)) in the same pass (codes decode to +-v). The
// four elements of byte j are spelled out so that the loop over j is the innermost and
// vectorizes, each element loaded and compared once.
[[gnu::noinline]] void encode_residual_kernel(float* __restrict a, uint8_t* __restrict out,
                                              size_t n, float t, float v) {
  const uint32_t v_bits = std::bit_cast<uint32_t>(v);
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    float* x = a + kGroup * g;
    uint8_t* o = out + kGroupBytes * g;
    for (size_t j = 0; j < kGroupBytes; ++j) {
      o[j] = static_cast<uint8_t>(
          group_code_residual(x, j, 0, t, v_bits) | group_code_residual(x, j, 1, t, v_bits) |
          group_code_residual(x, j, 2, t, v_bits) | group_code_residual(x, j, 3, t, v_bits));
    }
  }
  float* tail = a + kGroup * groups;
  const size_t m = n % kGroup;
  encode_tail(tail, out + kGroupBytes * groups, m, t);
  for (size_t i = 0; i < m; ++i) tail[i] -= decoded_of(tail[i], t, v);
}

// r += g, then encode_residual_kernel's codes and update, in one pass (fixed threshold).
[[gnu::noinline]] void add_encode_residual_kernel(const float* __restrict g, float* __restrict r,
                                                  uint8_t* __restrict out, size_t n, float t) {
  const uint32_t t_bits = std::bit_cast<uint32_t>(t);
  const size_t groups = n / kGroup;
  for (size_t gi = 0; gi < groups; ++gi) {
    const float* y = g + kGroup * gi;
    float* x = r + kGroup * gi;
    uint8_t* o = out + kGroupBytes * gi;
    for (size_t j = 0; j < kGroup; ++j) x[j] += y[j];
    for (size_t j = 0; j < kGroupBytes; ++j) {
      o[j] = static_cast<uint8_t>(
          group_code_residual(x, j, 0, t, t_bits) | group_code_residual(x, j, 1, t, t_bits) |
          group_code_residual(x, j, 2, t, t_bits) | group_code_residual(x, j, 3, t, t_bits));
    }
  }
  const size_t done = kGroup * groups;
  for (size_t i = done; i < n; ++i) r[i] += g[i];
  encode_tail(r + done, out + kGroupBytes * groups, n - done, t);
  for (size_t i = done; i < n; ++i) r[i] -= decoded_of(r[i], t, t);
}

// Adds element 16q + j of a group to lane j's selected sum and count; returns its code.
// (m >= t ? m : +0) as a mask, so the sums are those of the plain ternary.
inline uint8_t group_select(const float* x, size_t j, size_t q, float t, float& sum,
                            uint32_t& count) {
  const float m = std::fabs(x[16 * q + j]);
  const uint32_t selected = mask_if(m >= t);
  sum += std::bit_cast<float>(std::bit_cast<uint32_t>(m) & selected);
  count -= selected;  // + 1 when selected
  return group_code(x[16 * q + j], selected, q);
}

// sum |a_i| over the elements with |a_i| >= t and how many there are, in kVectorBlock lanes
// (element i in lane i % 16, each lane summed in index order, then the lanes in order), and
// the codes of encode_kernel, in one pass. n <= UINT32_MAX, so the u32 lane counts cannot
// overflow.
[[gnu::noinline]] std::pair<float, size_t> selected_sum_codes_kernel(const float* __restrict a,
                                                                     uint8_t* __restrict out,
                                                                     size_t n, float t) {
  static_assert(kGroupBytes == kVectorBlock);
  float partial[kVectorBlock] = {};
  uint32_t counts[kVectorBlock] = {};
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    const float* x = a + kGroup * g;
    uint8_t* o = out + kGroupBytes * g;
#pragma GCC unroll 1
    for (size_t j = 0; j < kGroupBytes; ++j) {
      float sum = partial[j];
      uint32_t count = counts[j];
      uint8_t byte = group_select(x, j, 0, t, sum, count);
      byte |= group_select(x, j, 1, t, sum, count);
      byte |= group_select(x, j, 2, t, sum, count);
      byte |= group_select(x, j, 3, t, sum, count);
      partial[j] = sum;
      counts[j] = count;
      o[j] = byte;
    }
  }
  size_t i = kGroup * groups;
  encode_tail(a + i, out + kGroupBytes * groups, n - i, t);
  for (; i + kVectorBlock <= n; i += kVectorBlock) {
    for (size_t j = 0; j < kVectorBlock; ++j) {
      const float m = std::fabs(a[i + j]);
      partial[j] += m >= t ? m : 0.0f;
      counts[j] += m >= t ? 1u : 0u;
    }
  }
  float sum = 0.0f;
  size_t count = 0;
  for (; i < n; ++i) {
    const float m = std::fabs(a[i]);
    if (m >= t) {
      sum += m;
      ++count;
    }
  }
  for (size_t j = 0; j < kVectorBlock; ++j) {
    sum += partial[j];
    count += counts[j];
  }
  return {sum, count};
}

// a <- a - D(C(a)) for threshold t and magnitude v.
[[gnu::noinline]] void subtract_decoded_kernel(float* __restrict a, size_t n, float t, float v) {
  const uint32_t v_bits = std::bit_cast<uint32_t>(v);
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    float* x = a + kGroup * g;
    for (size_t j = 0; j < kGroup; ++j)
      x[j] -= masked_decoded(x[j], selected_mask(x[j], t), v_bits);
  }
  for (size_t i = kGroup * groups; i < n; ++i) {
    a[i] -= masked_decoded(a[i], selected_mask(a[i], t), v_bits);
  }
}

// The threshold t that selects elements, and the magnitude v that their codes decode to.
struct Levels {
  float t;
  float v;
};

// alpha > 0: adaptive, t = alpha * mean|a| and v = mean of the selected |a_i|;
// alpha == 0: MXNet's fixed threshold, v = t.
class TwoBitCodec final : public Codec, public FusedAccumulate {
 public:
  TwoBitCodec(float threshold, float alpha) : threshold_(threshold), alpha_(alpha) {}

  CodecId id() const override { return CodecId::kTwoBit; }
  std::string spec() const override {
    if (alpha_ > 0.0f) {
      return bare_spec("2bit", {{"threshold", "auto"}, {"alpha", format_number(alpha_)}});
    }
    return bare_spec("2bit", {{"threshold", format_number(threshold_)}});
  }

  void encode(std::span<const float> input, Bytes& out) override {
    if (alpha_ == 0.0f) {
      uint8_t* codes = write_prefix(input.size(), threshold_, out);
      encode_kernel(input.data(), codes, input.size(), threshold_);
      return;
    }
    encode_adaptive(input, sum_abs_kernel(input.data(), input.size()), out);
  }

  void encode_residual(std::span<float> a, Bytes& out) override {
    if (alpha_ == 0.0f) {
      uint8_t* codes = write_prefix(a.size(), threshold_, out);
      encode_residual_kernel(a.data(), codes, a.size(), threshold_, threshold_);
      return;
    }
    const Levels levels = encode_adaptive(a, sum_abs_kernel(a.data(), a.size()), out);
    subtract_decoded_kernel(a.data(), a.size(), levels.t, levels.v);
  }

  // Error feedback's r += g folded in: with threshold=auto into the pass that sums |a| (three
  // passes over r in all instead of four), with a fixed threshold into the encoding pass
  // (one instead of two).
  void add_encode_residual(std::span<const float> g, std::span<float> r, Bytes& out) override {
    if (g.size() != r.size()) {
      throw Error("codec '2bit': gradient of " + std::to_string(g.size()) +
                  " elements for a residual of " + std::to_string(r.size()));
    }
    if (alpha_ == 0.0f) {
      uint8_t* codes = write_prefix(r.size(), threshold_, out);
      add_encode_residual_kernel(g.data(), r.data(), codes, r.size(), threshold_);
      return;
    }
    const Levels levels = encode_adaptive(r, add_sum_abs_kernel(g.data(), r.data(), r.size()), out);
    subtract_decoded_kernel(r.data(), r.size(), levels.t, levels.v);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kTwoBit, kTwoBitVersion, accum.size());
    const size_t n = accum.size();
    const float t = reader.get<float>("2bit magnitude");
    const auto codes = reader.get_bytes(ternary_code_bytes(n), "2bit codes");
    reader.expect_end("'2bit' payload");
    if (!(std::isfinite(t) && t > 0.0f)) {
      throw PayloadError("corrupt '2bit' payload: threshold " + format_number(t) +
                         " is not a finite positive number");
    }
    ternary_check_and_decode_add(codes, accum, t, "2bit");
  }

 private:
  // threshold=auto given sum |a_i|: t = alpha mean|a|, then one pass that writes the codes
  // and sums the selected magnitudes for v. Writes the payload; returns t and v.
  Levels encode_adaptive(std::span<const float> a, float sum_abs, Bytes& out) const {
    const size_t n = a.size();
    const float mean = sum_abs / static_cast<float>(std::max<size_t>(1, n));
    if (!std::isfinite(mean)) {
      throw Error(
          "codec '2bit': the gradient (plus residual) has non-finite values; "
          "training diverged (lower the learning rate)");
    }
    const size_t v_at = out.size() + PayloadHeader::kSize;
    uint8_t* codes = write_prefix(n, 0.0f, out);  // v is stored below
    Levels levels{FLT_MIN, FLT_MIN};
    if (mean == 0.0f) {  // all zeros: nothing is selected
      encode_kernel(a.data(), codes, n, levels.t);
    } else {
      const float t = std::max(alpha_ * mean, FLT_MIN);
      const auto [sum, count] = selected_sum_codes_kernel(a.data(), codes, n, t);
      // count >= 1 whenever alpha <= 1 (some |a_i| >= mean); with a larger alpha nothing may
      // pass, and then any positive v sends nothing.
      const float v = count ? sum / static_cast<float>(count) : t;
      levels = {t, std::isfinite(v) && v > 0.0f ? v : t};
    }
    store_f32(out.data() + v_at, 0, levels.v);
    return levels;
  }

  // Header and decode magnitude; returns the (zeroed) code bytes to fill.
  uint8_t* write_prefix(size_t n, float v, Bytes& out) const {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kTwoBit, kTwoBitVersion, checked_count(n, id())}.write(writer);
    writer.put<float>(v);
    return writer.reserve_tail(ternary_code_bytes(n));
  }

  float threshold_;  // fixed threshold (unused when alpha_ > 0)
  float alpha_;
};

}  // namespace

std::unique_ptr<Codec> make_two_bit_codec(SpecReader& reader, const TensorInfo&) {
  if (reader.get_string("threshold", "auto") == "auto") {
    const double alpha = reader.get_double("alpha", 1.0);
    if (!(alpha > 0.0 && alpha <= 1e6)) {
      throw ConfigError("codec '2bit': alpha=" + format_number(alpha) +
                        " must be in (0, 1e6] (threshold = alpha * mean|a|)");
    }
    return std::make_unique<TwoBitCodec>(0.0f, static_cast<float>(alpha));
  }
  if (reader.has("alpha")) {
    throw ConfigError("codec '2bit': alpha applies only to threshold=auto");
  }
  const double value = reader.get_double("threshold", 0.5);
  const auto threshold = static_cast<float>(value);
  if (!(value > 0.0 && std::isfinite(threshold) && threshold > 0.0f)) {
    throw ConfigError("codec '2bit': threshold=" + format_number(value) +
                      " must be a positive number representable as float32 (e.g. "
                      "threshold=0.5)");
  }
  return std::make_unique<TwoBitCodec>(threshold, 0.0f);
}

}  // namespace gradwire::compress
