// `qsgd`: QSGD stochastic quantization (Alistarh et al. 2017; ALGORITHMS.md 2.2). Per bucket
// of d consecutive elements (key `bucket`, default 512) with s levels (key `levels`, 1..127,
// default 7) and norm = ||v||_2 of the bucket:
//   l_i = floor(s |v_i| / norm);  xi_i = (l_i + 1) / s with probability s |v_i| / norm - l_i,
//   else l_i / s;  Q(v_i) = norm sign(v_i) xi_i
// E Q(v) = v (unbiased, so error feedback is off by default) and
// E ||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2 per bucket.
//
// Body: u8 levels s | u32 bucket d | f32 norm[ceil(N / d)] | codes[ceil(N b / 8)], with
// b = ceil(log2(2s + 1)) bits per element (s = 7: 4 bits). Element i, in bucket k = i / d,
// has a code c_i in [0, 2s] and decodes to (c_i - s) * (norm[k] / s): code s is zero, a code
// above 2s is corruption. Codes are packed
//  - for b = 2, 4, 8 (s = 1, 4..7, 64..127) in groups of G = 128 / b elements per 16 bytes,
//    element 16q + j of a group in bits bq .. bq + b - 1 of byte j, so the loops vectorize
//    (b = 2 is the 2bit codec's layout; b = 8 is one byte per element, in order); the last
//    N mod G elements follow in order, 8 / b to a byte from the low bits;
//  - for b = 3, 5, 6, 7 as a bit stream in element order: element i in bits bi .. bi + b - 1,
//    bit k being bit k % 8 of byte k / 8.
// Unused high bits of the last byte are zero. Norms are finite and >= +0 (sign bit clear). A
// bucket whose norm is below 2^-118 (~3e-36: all zeros, or values so small that s / norm
// would overflow float) is sent as norm 0, i.e. as zeros.
// The payload carries s and d, so a decoder needs neither (nor any randomness).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/quantize/quantizers.h"
#include "gradwire/core/half.h"

namespace gradwire::compress {
namespace {

constexpr uint8_t kStateVersion = 1;
constexpr long long kMaxLevels = 127;  // codes up to 2s = 254 fit a byte
// Smallest norm sent: above it s / norm <= 127 * 2^118 < FLT_MAX.
constexpr float kSmallestNorm = 0x1p-118f;

unsigned code_bits(unsigned levels) {
  unsigned bits = 1;
  while ((1u << bits) < 2 * levels + 1) ++bits;
  return bits;
}

size_t packed_bytes(size_t n, unsigned bits) { return (n * bits + 7) / 8; }

// --- quantization --------------------------------------------------------------------------

// code_i = s + sign(v_i) * level_i with the level rounded up when u_i < frac(s |v_i| / norm).
// inv = s / norm (0 for a zero bucket). min() guards the largest element against rounding.
inline int32_t signed_level(float v, float u, float inv, float s) {
  const float r = std::min(std::fabs(v) * inv, s);
  const auto whole = static_cast<int32_t>(r);  // r >= 0: truncation is floor
  const float frac = r - static_cast<float>(whole);
  const int32_t level = whole + static_cast<int32_t>(mask_if(u < frac) & 1u);
  const auto negative = static_cast<int32_t>(mask_if(v < 0.0f));  // 0 or -1
  return (level ^ negative) - negative;
}

[[gnu::noinline]] void level_kernel(const float* __restrict v, const float* __restrict u,
                                    uint8_t* __restrict code, size_t n, float inv, float s) {
  const auto offset = static_cast<int32_t>(s);
  vector_loop(n, [=](size_t i) {
    code[i] = static_cast<uint8_t>(offset + signed_level(v[i], u[i], inv, s));
  });
}

// As level_kernel, and a <- a - D(C(a)) with D = level * step (the decoder's arithmetic).
[[gnu::noinline]] void level_residual_kernel(float* __restrict a, const float* __restrict u,
                                             uint8_t* __restrict code, size_t n, float inv, float s,
                                             float step) {
  const auto offset = static_cast<int32_t>(s);
  vector_loop(n, [=](size_t i) {
    const int32_t level = signed_level(a[i], u[i], inv, s);
    code[i] = static_cast<uint8_t>(offset + level);
    a[i] -= static_cast<float>(level) * step;
  });
}

[[gnu::noinline]] void dequantize_add_kernel(const uint8_t* __restrict code,
                                             float* __restrict accum, size_t n, int32_t offset,
                                             float step) {
  vector_loop(n, [=](size_t i) {
    accum[i] += static_cast<float>(static_cast<int32_t>(code[i]) - offset) * step;
  });
}

// Largest code (`#pragma GCC unroll 1`: see quantizer_common.cc).
[[gnu::noinline]] uint8_t max_code_kernel(const uint8_t* __restrict code, size_t n) {
  uint8_t peak[kVectorBlock] = {};
  size_t i = 0;
  for (; i + kVectorBlock <= n; i += kVectorBlock) {
#pragma GCC unroll 1
    for (size_t j = 0; j < kVectorBlock; ++j) {
      peak[j] = code[i + j] > peak[j] ? code[i + j] : peak[j];
    }
  }
  uint8_t result = 0;
  for (; i < n; ++i) result = code[i] > result ? code[i] : result;
  for (const uint8_t p : peak) result = p > result ? p : result;
  return result;
}

// --- packing (see the layout above); `n` codes start at a group boundary -------------------

// Byte j of a group and its 8 / B codes c[16q + j]; the q are spelled out by the fold so that
// every shift is a constant and the loop over j vectorizes at -O2 as at -O3.
template <unsigned B, size_t... Q>
inline uint8_t packed_byte(const uint8_t* c, size_t j, std::index_sequence<Q...>) {
  return static_cast<uint8_t>(((c[16 * Q + j] << (B * Q)) | ...));
}
template <unsigned B, size_t... Q>
inline void unpack_byte(uint8_t byte, uint8_t* c, size_t j, std::index_sequence<Q...>) {
  ((c[16 * Q + j] = static_cast<uint8_t>((byte >> (B * Q)) & ((1u << B) - 1))), ...);
}

template <unsigned B>
[[gnu::noinline]] void pack_groups_kernel(const uint8_t* __restrict code, uint8_t* __restrict out,
                                          size_t n) {
  constexpr size_t kPerByte = 8 / B;
  constexpr size_t kGroup = 16 * kPerByte;
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    const uint8_t* c = code + kGroup * g;
    uint8_t* o = out + 16 * g;
    for (size_t j = 0; j < 16; ++j)
      o[j] = packed_byte<B>(c, j, std::make_index_sequence<kPerByte>{});
  }
  const uint8_t* c = code + kGroup * groups;
  uint8_t* o = out + 16 * groups;
  for (size_t i = 0; i < n % kGroup; ++i) {
    o[i / kPerByte] =
        static_cast<uint8_t>((i % kPerByte ? o[i / kPerByte] : 0) | (c[i] << (B * (i % kPerByte))));
  }
}

template <unsigned B>
[[gnu::noinline]] void unpack_groups_kernel(const uint8_t* __restrict in, uint8_t* __restrict code,
                                            size_t n) {
  constexpr size_t kPerByte = 8 / B;
  constexpr size_t kGroup = 16 * kPerByte;
  const size_t groups = n / kGroup;
  for (size_t g = 0; g < groups; ++g) {
    const uint8_t* p = in + 16 * g;
    uint8_t* c = code + kGroup * g;
    for (size_t j = 0; j < 16; ++j)
      unpack_byte<B>(p[j], c, j, std::make_index_sequence<kPerByte>{});
  }
  const uint8_t* p = in + 16 * groups;
  uint8_t* c = code + kGroup * groups;
  for (size_t i = 0; i < n % kGroup; ++i) {
    c[i] = static_cast<uint8_t>((p[i / kPerByte] >> (B * (i % kPerByte))) & ((1u << B) - 1));
  }
}

// Bit stream: eight codes fill exactly `bits` bytes (little-endian).
void pack_stream(const uint8_t* code, uint8_t* out, size_t n, unsigned bits) {
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = std::min<size_t>(8, n - i);
    uint64_t word = 0;
    for (size_t q = 0; q < m; ++q) word |= static_cast<uint64_t>(code[i + q]) << (bits * q);
    std::memcpy(out + i / 8 * bits, &word, packed_bytes(m, bits));
  }
}

void unpack_stream(const uint8_t* in, uint8_t* code, size_t n, unsigned bits) {
  const uint64_t mask = (1u << bits) - 1;
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = std::min<size_t>(8, n - i);
    uint64_t word = 0;
    std::memcpy(&word, in + i / 8 * bits, packed_bytes(m, bits));
    for (size_t q = 0; q < m; ++q) code[i + q] = static_cast<uint8_t>((word >> (bits * q)) & mask);
  }
}

void pack(const uint8_t* code, uint8_t* out, size_t n, unsigned bits) {
  switch (bits) {
    case 2:
      return pack_groups_kernel<2>(code, out, n);
    case 4:
      return pack_groups_kernel<4>(code, out, n);
    case 8:
      return pack_groups_kernel<8>(code, out, n);
    default:
      return pack_stream(code, out, n, bits);
  }
}

void unpack(const uint8_t* in, uint8_t* code, size_t n, unsigned bits) {
  switch (bits) {
    case 2:
      return unpack_groups_kernel<2>(in, code, n);
    case 4:
      return unpack_groups_kernel<4>(in, code, n);
    case 8:
      return unpack_groups_kernel<8>(in, code, n);
    default:
      return unpack_stream(in, code, n, bits);
  }
}

// ||v||_2 of one bucket as sent: throws on non-finite input, 0 below kSmallestNorm.
float bucket_norm(const float* v, size_t n) {
  const double squares = sum_squares(v, n).sum;
  if (!std::isfinite(squares)) throw_non_finite_input("qsgd");
  const auto norm = static_cast<float>(std::sqrt(squares));
  if (!std::isfinite(norm)) {
    throw Error("codec 'qsgd': a bucket's L2 norm (" + format_number(std::sqrt(squares)) +
                ") exceeds the float range; training diverged (lower the learning rate)");
  }
  return norm >= kSmallestNorm ? norm : 0.0f;
}

class QsgdCodec final : public Codec {
 public:
  QsgdCodec(unsigned levels, uint32_t bucket, uint64_t seed, const TensorInfo& tensor)
      : levels_(levels),
        bits_(code_bits(levels)),
        bucket_(bucket),
        seed_(seed),
        key_(stream_key(seed, tensor.name)),
        numel_(tensor.numel()) {}

  CodecId id() const override { return CodecId::kQsgd; }
  std::string spec() const override {
    return bare_spec("qsgd", {{"bucket", std::to_string(bucket_)},
                              {"levels", std::to_string(levels_)},
                              {"seed", std::to_string(seed_)}});
  }

  void encode(std::span<const float> input, Bytes& out) override {
    quantize(input.data(), nullptr, input.size(), out);
  }

  // One pass: the residual update rides along with the quantization.
  void encode_residual(std::span<float> a, Bytes& out) override {
    quantize(a.data(), a.data(), a.size(), out);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kQsgd, kQsgdVersion, accum.size());
    const size_t n = accum.size();
    const unsigned levels = reader.get<uint8_t>("qsgd levels");
    const uint32_t bucket = reader.get<uint32_t>("qsgd bucket size");
    if (levels < 1 || levels > kMaxLevels) {
      throw PayloadError("corrupt 'qsgd' payload: " + std::to_string(levels) +
                         " levels (must be 1 to " + std::to_string(kMaxLevels) + ")");
    }
    if (bucket == 0) throw PayloadError("corrupt 'qsgd' payload: bucket size 0");
    const unsigned bits = code_bits(levels);
    const size_t buckets = n == 0 ? 0 : (n - 1) / bucket + 1;
    const auto norms = reader.get_bytes(4 * buckets, "qsgd norms");
    const auto codes = reader.get_bytes(packed_bytes(n, bits), "qsgd codes");
    reader.expect_end("'qsgd' payload");

    for (size_t k = 0; k < buckets; ++k) {
      const float norm = load_f32(norms.data(), k);
      if (!std::isfinite(norm) || std::signbit(norm)) {
        throw PayloadError("corrupt 'qsgd' payload: norm of bucket " + std::to_string(k) + " is " +
                           format_number(norm) + " (must be finite and >= +0)");
      }
    }
    const size_t used_bits = n * bits % 8;
    if (used_bits != 0 && (codes.back() >> used_bits) != 0) {
      throw PayloadError("corrupt 'qsgd' payload: padding bits after the last code are set");
    }
    uint8_t block[kQuantBlock];
    for (size_t c0 = 0; c0 < n; c0 += kQuantBlock) {
      const size_t m = std::min(kQuantBlock, n - c0);
      unpack(codes.data() + c0 * bits / 8, block, m, bits);
      if (max_code_kernel(block, m) > 2 * levels) {
        throw PayloadError("corrupt 'qsgd' payload: a code in elements " + std::to_string(c0) +
                           ".." + std::to_string(c0 + m - 1) + " exceeds " +
                           std::to_string(2 * levels) + " (2 * levels)");
      }
    }

    const auto offset = static_cast<int32_t>(levels);
    for (size_t c0 = 0; c0 < n; c0 += kQuantBlock) {
      const size_t c1 = std::min(n, c0 + kQuantBlock);
      unpack(codes.data() + c0 * bits / 8, block, c1 - c0, bits);
      for (size_t k = c0 / bucket; k * bucket < c1; ++k) {
        const size_t lo = std::max(c0, k * bucket);
        const size_t hi = std::min(c1, (k + 1) * bucket);
        const float step = load_f32(norms.data(), k) / static_cast<float>(levels);
        dequantize_add_kernel(block + (lo - c0), accum.data() + lo, hi - lo, offset, step);
      }
    }
  }

  // Checkpoints: the calls so far, which seed the next call's random stream (reseeded at
  // every call, so the generator's own state is not carried).
  void save_state(Bytes& out) const override {
    write_state_header(out, *this, kStateVersion, numel_);
    ByteWriter(out).put<uint64_t>(calls_);
  }
  void load_state(ByteReader& in) override {
    read_state_header(in, *this, kStateVersion, numel_);
    calls_ = in.get<uint64_t>("qsgd calls");
  }

 private:
  // Writes the payload of `v`; with `residual` (== v), also v <- v - D(C(v)).
  void quantize(const float* v, float* residual, size_t n, Bytes& out) {
    const uint32_t count = checked_count(n, id());
    const size_t buckets = n == 0 ? 0 : (n - 1) / bucket_ + 1;
    ByteWriter writer(out);
    PayloadHeader{CodecId::kQsgd, kQsgdVersion, count}.write(writer);
    writer.put<uint8_t>(static_cast<uint8_t>(levels_));
    writer.put<uint32_t>(bucket_);
    uint8_t* norms = writer.reserve_tail(4 * buckets + packed_bytes(n, bits_));
    uint8_t* packed = norms + 4 * buckets;
    if (n == 0) return;
    const size_t scratch = std::min(n, kQuantBlock) + kVectorBlock;
    if (uniform_.size() < scratch) {
      uniform_.resize(scratch);
      code_.resize(scratch);
    }

    const auto s = static_cast<float>(levels_);
    size_t normed = 0;  // norms[0, normed) are computed (before any of their elements change)
    for (size_t c0 = 0; c0 < n; c0 += kQuantBlock) {
      const size_t c1 = std::min(n, c0 + kQuantBlock);
      for (; normed * bucket_ < c1; ++normed) {
        const size_t start = normed * bucket_;
        store_f32(norms, normed, bucket_norm(v + start, std::min<size_t>(bucket_, n - start)));
      }
      if (c0 == 0) {
        stream_.reseed(call_seed(key_, calls_++, std::bit_cast<uint32_t>(load_f32(norms, 0))));
      }
      stream_.fill(uniform_.data(), c1 - c0);
      for (size_t k = c0 / bucket_; k * bucket_ < c1; ++k) {
        const size_t lo = std::max(c0, k * bucket_);
        const size_t hi = std::min(c1, (k + 1) * bucket_);
        const float norm = load_f32(norms, k);
        const float inv = norm > 0.0f ? s / norm : 0.0f;
        const float* u = uniform_.data() + (lo - c0);
        uint8_t* code = code_.data() + (lo - c0);
        if (residual) {
          level_residual_kernel(residual + lo, u, code, hi - lo, inv, s, norm / s);
        } else {
          level_kernel(v + lo, u, code, hi - lo, inv, s);
        }
      }
      pack(code_.data(), packed + c0 * bits_ / 8, c1 - c0, bits_);
    }
  }

  unsigned levels_;
  unsigned bits_;
  uint32_t bucket_;
  uint64_t seed_;
  uint64_t key_;
  size_t numel_;
  uint64_t calls_ = 0;
  UniformStream stream_;
  std::vector<float> uniform_;  // one block of uniforms (scratch)
  std::vector<uint8_t> code_;   // one block of codes before packing (scratch)
};

}  // namespace

std::unique_ptr<Codec> make_qsgd_codec(SpecReader& reader, const TensorInfo& tensor) {
  const auto levels = reader.get_int_in("levels", 7, 1, kMaxLevels);
  const auto bucket = reader.get_int_in("bucket", 512, 1, UINT32_MAX);
  const auto seed = reader.get_int_in("seed", 0, 0, INT64_MAX);
  return std::make_unique<QsgdCodec>(static_cast<unsigned>(levels), static_cast<uint32_t>(bucket),
                                     static_cast<uint64_t>(seed), tensor);
}

}  // namespace gradwire::compress
