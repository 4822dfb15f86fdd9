// The quantizer family: qsgd, terngrad, signsgd, bf16 (ALGORITHMS.md 2.2-2.5).
#include "gradwire/compress/quantize/quantizers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "gradwire/compress/error_feedback.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/bf16.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::random_vector;
using testing::same_bits;
using testing::tensor_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

float f32_at(const Bytes& bytes, size_t offset) {
  float v;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}
void put_f32(Bytes& bytes, size_t offset, float v) { std::memcpy(bytes.data() + offset, &v, 4); }
void put_u32(Bytes& bytes, size_t offset, uint32_t v) { std::memcpy(bytes.data() + offset, &v, 4); }

// Decoding `payload` must throw E and leave the accumulator bit-for-bit unchanged.
template <typename E>
void expect_rejected(const Codec& codec, const Bytes& payload, size_t n, const std::string& what) {
  std::vector<float> accum = random_vector(n, 77);
  const auto before = accum;
  EXPECT_THROW(codec.decode_add(payload, accum), E) << what;
  EXPECT_TRUE(same_bits(accum, before)) << what << ": accumulator modified";
}

double norm2(std::span<const float> v) {
  double sum = 0.0;
  for (const float x : v) sum += static_cast<double>(x) * x;
  return std::sqrt(sum);
}

double squared_distance(std::span<const float> a, std::span<const float> b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sum += d * d;
  }
  return sum;
}

// --- specs ---------------------------------------------------------------------------------

TEST(Quantizers, CanonicalSpecsSpellOutEveryKey) {
  EXPECT_EQ(canonical_spec("qsgd"), "qsgd:bucket=512,ef=0,levels=7,seed=0");
  EXPECT_EQ(canonical_spec("qsgd:levels=1,bucket=64,seed=3,ef=1"),
            "qsgd:bucket=64,ef=1,levels=1,seed=3");
  EXPECT_EQ(canonical_spec("terngrad"), "terngrad:clip=2.5,ef=0,seed=0");
  EXPECT_EQ(canonical_spec("terngrad:clip=3,seed=9"), "terngrad:clip=3,ef=0,seed=9");
  EXPECT_EQ(canonical_spec("signsgd"), "signsgd:ef=1");
  EXPECT_EQ(canonical_spec("signsgd:ef=0"), "signsgd:ef=0");
  EXPECT_EQ(canonical_spec("bf16"), "bf16:ef=0");
  EXPECT_EQ(canonical_spec("bf16:ef=1"), "bf16:ef=1");
  EXPECT_EQ(canonical_spec("int8"), "int8:block=256,ef=1");
  EXPECT_EQ(canonical_spec("int8:block=64,ef=0"), "int8:block=64,ef=0");
  EXPECT_EQ(canonical_spec("int4"), "int4:block=128,ef=1");
}

TEST(Quantizers, SpecOfEveryCodecEqualsCanonicalSpecAndIsStable) {
  for (const char* text :
       {"qsgd", "qsgd:levels=127,bucket=1", "qsgd:levels=3,bucket=4294967295,seed=12345678901",
        "qsgd:ef=1,momentum=0.9", "terngrad", "terngrad:clip=0.123456789012345", "terngrad:ef=1",
        "signsgd", "signsgd:momentum=0.5", "bf16", "bf16:ef=1", "int8", "int8:block=3,ef=0", "int4",
        "int4:block=5,ef=0"}) {
    const auto codec = create_codec(text, tensor_of(100));
    const std::string canonical = canonical_spec(text);
    EXPECT_EQ(codec->spec(), canonical) << text;
    EXPECT_EQ(canonical_spec(canonical), canonical) << text;
    EXPECT_EQ(create_codec(canonical, tensor_of(3))->spec(), canonical) << text;
  }
}

TEST(Quantizers, BadValues) {
  for (const char* spec :
       {"qsgd:levels=0",    "qsgd:levels=128",   "qsgd:levels=-1",    "qsgd:levels=7.5",
        "qsgd:levels=",     "qsgd:bucket=0",     "qsgd:bucket=-4",    "qsgd:bucket=4294967296",
        "qsgd:seed=-1",     "qsgd:seed=x",       "qsgd:density=0.1",  "terngrad:clip=0",
        "terngrad:clip=-1", "terngrad:clip=nan", "terngrad:clip=1e7", "terngrad:levels=3",
        "terngrad:seed=-2", "signsgd:seed=1",    "signsgd:ef=2",      "bf16:scale=2",
        "int8:block=0",     "int8:block=x",      "int8:levels=7",     "int4:block=0",
        "int4:levels=3"}) {
    EXPECT_THROW(create_codec(spec, tensor_of(4)), ConfigError) << spec;
  }
}

TEST(Quantizers, RegisteredWithTheirIdsAndEfDefaults) {
  const auto names = codec_names();
  for (const char* name : {"qsgd", "terngrad", "signsgd", "bf16"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_EQ(create_codec("qsgd", tensor_of(1))->id(), CodecId::kQsgd);
  EXPECT_EQ(create_codec("terngrad", tensor_of(1))->id(), CodecId::kTernGrad);
  EXPECT_EQ(create_codec("signsgd", tensor_of(1))->id(), CodecId::kSignSgd);
  EXPECT_EQ(create_codec("bf16", tensor_of(1))->id(), CodecId::kBf16);
  EXPECT_FALSE(uses_error_feedback("qsgd"));
  EXPECT_FALSE(uses_error_feedback("terngrad"));
  EXPECT_TRUE(uses_error_feedback("signsgd"));
  EXPECT_FALSE(uses_error_feedback("bf16"));
  for (const char* spec : {"qsgd", "terngrad", "signsgd", "bf16"}) {
    EXPECT_FALSE(create_codec(spec, tensor_of(4))->additive_wire().has_value()) << spec;
  }
}

// --- the random stream --------------------------------------------------------------------

TEST(UniformStream, ReproducibleUniformAndLaneIndependent) {
  const size_t n = 1 << 20;
  std::vector<float> a(n), b(n);
  UniformStream stream, twin;
  stream.reseed(123);
  twin.reseed(123);
  stream.fill(a.data(), n);
  twin.fill(b.data(), n);
  EXPECT_EQ(a, b);
  double sum = 0.0, lag = 0.0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_GE(a[i], 0.0f);
    ASSERT_LT(a[i], 1.0f);
    ASSERT_EQ(a[i], std::ldexp(std::round(std::ldexp(a[i], 24)), -24));  // a multiple of 2^-24
    sum += a[i];
    if (i > 0) lag += (a[i] - 0.5) * (a[i - 1] - 0.5);  // neighbours come from different lanes
  }
  EXPECT_NEAR(sum / n, 0.5, 0.002);   // sd of the mean: 0.0003
  EXPECT_NEAR(lag / n, 0.0, 0.0005);  // sd: 0.00008
  stream.fill(a.data(), 16);          // the stream moves on
  EXPECT_NE(std::vector<float>(a.begin(), a.begin() + 16),
            std::vector<float>(b.begin(), b.begin() + 16));
  twin.reseed(124);
  twin.fill(b.data(), 16);
  EXPECT_NE(std::vector<float>(a.begin(), a.begin() + 16),
            std::vector<float>(b.begin(), b.begin() + 16));
  EXPECT_NE(stream_key(1, "a"), stream_key(1, "b"));
  EXPECT_NE(stream_key(1, "a"), stream_key(2, "a"));
}

// --- qsgd ----------------------------------------------------------------------------------

constexpr size_t kQsgdNorms = PayloadHeader::kSize + 1 + 4;  // after u8 levels | u32 bucket

unsigned qsgd_bits(unsigned levels) {
  return levels == 1    ? 2
         : levels <= 3  ? 3
         : levels <= 7  ? 4
         : levels <= 15 ? 5
         : levels <= 31 ? 6
         : levels <= 63 ? 7
                        : 8;
}

std::string qsgd_spec(unsigned levels, size_t bucket) {
  return "qsgd:levels=" + std::to_string(levels) + ",bucket=" + std::to_string(bucket);
}

TEST(Qsgd, PayloadSizeAndHeaderFields) {
  for (const unsigned levels : {1u, 2u, 3u, 7u, 8u, 15u, 31u, 63u, 127u}) {
    for (const size_t bucket : {1ul, 7ul, 512ul, 5000ul}) {
      for (const size_t n : {0ul, 1ul, 5ul, 33ul, 128ul, 513ul, 2048ul, 2049ul, 4500ul}) {
        auto codec = create_codec(qsgd_spec(levels, bucket), tensor_of(n));
        const Bytes payload = encode(*codec, random_vector(n, 1));
        const size_t buckets = (n + bucket - 1) / bucket;
        ASSERT_EQ(payload.size(), kQsgdNorms + 4 * buckets + (n * qsgd_bits(levels) + 7) / 8)
            << "levels " << levels << " bucket " << bucket << " n " << n;
        EXPECT_EQ(payload[PayloadHeader::kSize], levels);
        uint32_t b;
        std::memcpy(&b, payload.data() + PayloadHeader::kSize + 1, 4);
        EXPECT_EQ(b, bucket);
      }
    }
  }
  // s = 7: 4 bits an element, one f32 a bucket.
  auto codec = create_codec("qsgd", tensor_of(1024));
  EXPECT_EQ(encode(*codec, random_vector(1024, 2)).size(), kQsgdNorms + 8 + 512);
}

// Every decoded value is norm * l / s for an integer l with |l| in {floor(r), floor(r) + 1},
// r = s |v| / norm, and the sign of v.
TEST(Qsgd, DecodedValuesAreOnTheLevelGrid) {
  for (const unsigned levels : {1u, 2u, 3u, 5u, 7u, 12u, 40u, 127u}) {
    for (const size_t bucket : {3ul, 64ul, 512ul}) {
      const size_t n = 2500;  // a whole block, a partial one, a partial bucket
      auto codec = create_codec(qsgd_spec(levels, bucket), tensor_of(n));
      auto input = random_vector(n, levels * 1000 + static_cast<uint32_t>(bucket));
      input[7] = 0.0f;
      input[8] = -0.0f;
      const Bytes payload = encode(*codec, input);
      const auto decoded = decode(*codec, payload, n);
      const float s = static_cast<float>(levels);
      for (size_t k = 0; k * bucket < n; ++k) {
        const size_t lo = k * bucket;
        const size_t hi = std::min(n, lo + bucket);
        const float norm = f32_at(payload, kQsgdNorms + 4 * k);
        const double reference = norm2(std::span<const float>(input).subspan(lo, hi - lo));
        ASSERT_NEAR(norm, reference, 1e-6 * reference) << "bucket " << k;
        const float step = norm / s;
        for (size_t i = lo; i < hi; ++i) {
          const long l = std::lround(decoded[i] / step);
          ASSERT_EQ(decoded[i], static_cast<float>(l) * step) << i;
          ASSERT_LE(std::labs(l), static_cast<long>(levels)) << i;
          if (l != 0) {
            ASSERT_EQ(l < 0, input[i] < 0.0f) << i;
          }
          const double r = s * std::fabs(input[i]) / reference;
          ASSERT_GE(std::labs(l), std::floor(r - 1e-3)) << "levels " << levels << " i " << i;
          ASSERT_LE(std::labs(l), std::floor(r + 1e-3) + 1) << "levels " << levels << " i " << i;
        }
      }
    }
  }
}

// The mean of many decodes of one input converges to the input: per element within 5 of its
// own standard errors (sigma_i^2 = step^2 f (1 - f), f = frac(s |v_i| / norm)), and the sum
// of squared errors matches its expectation.
TEST(Qsgd, UnbiasedOverManyDraws) {
  for (const unsigned levels : {1u, 7u}) {
    const size_t n = 700, bucket = 256;
    const int draws = 2000;
    auto codec = create_codec(qsgd_spec(levels, bucket), tensor_of(n));
    const auto input = random_vector(n, 11 + levels);
    std::vector<double> sum(n, 0.0);
    std::vector<float> step(n);
    for (int d = 0; d < draws; ++d) {
      const Bytes payload = encode(*codec, input);
      const auto decoded = decode(*codec, payload, n);
      for (size_t i = 0; i < n; ++i) {
        sum[i] += decoded[i];
        step[i] = f32_at(payload, kQsgdNorms + 4 * (i / bucket)) / static_cast<float>(levels);
      }
    }
    double chi2 = 0.0, dof = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double mean = sum[i] / draws;
      const double r = std::fabs(input[i]) / step[i];
      const double f = r - std::floor(r);
      const double sigma = step[i] * std::sqrt(f * (1.0 - f) / draws);
      ASSERT_LE(std::fabs(mean - input[i]), 5.0 * sigma + 1e-6 * std::fabs(input[i]))
          << "levels " << levels << " element " << i;
      if (sigma > 0.0) {
        chi2 += (mean - input[i]) * (mean - input[i]) / (sigma * sigma);
        dof += 1.0;
      }
    }
    EXPECT_NEAR(chi2 / dof, 1.0, 0.2) << "levels " << levels;
  }
}

// E ||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2 (QSGD Lemma 3.1), and the measured
// error matches the exact expectation sum_i step^2 f_i (1 - f_i).
TEST(Qsgd, RelativeErrorWithinTheVarianceBound) {
  struct Case {
    unsigned levels;
    size_t bucket;
  };
  for (const Case c : {Case{7, 512}, Case{127, 16}, Case{1, 4096}, Case{3, 64}, Case{1, 2}}) {
    const size_t n = 4096;
    auto codec = create_codec(qsgd_spec(c.levels, c.bucket), tensor_of(n));
    const auto input = random_vector(n, 5);
    const double s = c.levels;
    const double d = static_cast<double>(c.bucket);
    const double bound = std::min(d / (s * s), std::sqrt(d) / s);
    double expected = 0.0;
    for (size_t lo = 0; lo < n; lo += c.bucket) {
      const auto b = std::span<const float>(input).subspan(lo, std::min(c.bucket, n - lo));
      const double step = norm2(b) / s;
      for (const float x : b) {
        const double r = std::fabs(x) / step;
        const double f = r - std::floor(r);
        expected += step * step * f * (1.0 - f);
      }
    }
    const double norm_sq = norm2(input) * norm2(input);
    const int draws = 200;
    double measured = 0.0;
    for (int t = 0; t < draws; ++t) {
      const auto decoded = decode(*codec, encode(*codec, input), n);
      measured += squared_distance(decoded, input) / norm_sq / draws;
    }
    EXPECT_LE(measured, bound) << "levels " << c.levels << " bucket " << c.bucket;
    EXPECT_NEAR(measured, expected / norm_sq, 0.05 * expected / norm_sq)
        << "levels " << c.levels << " bucket " << c.bucket;
  }
}

TEST(Qsgd, SeedAndTensorNameFixTheStream) {
  const size_t n = 300;
  const auto input = random_vector(n, 3);
  const TensorInfo a{"layer.a", {300}, LayerKind::kOther};
  const TensorInfo b{"layer.b", {300}, LayerKind::kOther};
  auto first = create_codec("qsgd:levels=1,seed=5", a);
  auto again = create_codec("qsgd:levels=1,seed=5", a);
  auto other_name = create_codec("qsgd:levels=1,seed=5", b);
  auto other_seed = create_codec("qsgd:levels=1,seed=6", a);
  for (int call = 0; call < 3; ++call) {
    const Bytes p = encode(*first, input);
    EXPECT_EQ(p, encode(*again, input)) << call;
    EXPECT_NE(p, encode(*other_name, input)) << call;
    EXPECT_NE(p, encode(*other_seed, input)) << call;
    if (call == 0) {
      EXPECT_NE(p, encode(*first, input));  // the stream moves on between calls
      encode(*again, input);
      encode(*other_name, input);
      encode(*other_seed, input);
    }
  }
}

TEST(Qsgd, EncodeResidualIsEncodeAndTheExactError) {
  for (const unsigned levels : {1u, 3u, 7u, 127u}) {
    const size_t n = 2100;
    auto encoder = create_codec(qsgd_spec(levels, 100) + ",seed=4", tensor_of(n));
    auto twin = create_codec(qsgd_spec(levels, 100) + ",seed=4", tensor_of(n));
    auto a = random_vector(n, 21);
    const auto original = a;
    Bytes payload;
    twin->encode_residual(a, payload);
    EXPECT_EQ(payload, encode(*encoder, original)) << levels;
    const auto decoded = decode(*encoder, payload, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], original[i] - decoded[i]) << i;
  }
}

TEST(Qsgd, ZeroTinyAndHugeBuckets) {
  const size_t n = 64;
  auto codec = create_codec("qsgd:bucket=16", tensor_of(n));
  std::vector<float> input(n, 0.0f);  // bucket 0: zeros
  for (size_t i = 16; i < 32; ++i) input[i] = 1e-25f * static_cast<float>(i % 5) - 2e-25f;
  for (size_t i = 32; i < 48; ++i) input[i] = 1e30f * static_cast<float>(i % 7) - 3e30f;
  for (size_t i = 48; i < 64; ++i) input[i] = 1e-42f;  // subnormal: norm below FLT_MIN
  std::vector<float> accum(n, 1.0f);
  const Bytes payload = encode(*codec, input);
  codec->decode_add(payload, accum);
  EXPECT_EQ(f32_at(payload, kQsgdNorms), 0.0f);
  EXPECT_EQ(f32_at(payload, kQsgdNorms + 12), 0.0f);
  for (const size_t k : {1ul, 2ul}) {
    const double reference = norm2(std::span<const float>(input).subspan(16 * k, 16));
    EXPECT_NEAR(f32_at(payload, kQsgdNorms + 4 * k), reference, 1e-6 * reference) << k;
  }
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(accum[i], 1.0f);
  for (size_t i = 48; i < 64; ++i) EXPECT_EQ(accum[i], 1.0f);
  for (const float x : accum) EXPECT_TRUE(std::isfinite(x));
}

// Norms just above FLT_MIN: s / norm would overflow float (127 / 8e-38 > FLT_MAX), so such
// buckets must go as zeros, not as garbage codes.
TEST(Qsgd, NormsNearTheBottomOfTheFloatRange) {
  for (const float x : {2e-38f, 1e-37f, 3e-37f, 1e-36f, 1e-35f}) {
    auto codec = create_codec("qsgd:levels=127,bucket=16", tensor_of(32));
    std::vector<float> input(32, x);
    input[5] = 0.0f;
    input[20] = -x;
    std::vector<float> accum(32, 0.0f);
    const Bytes payload = encode(*codec, input);
    codec->decode_add(payload, accum);
    for (size_t i = 0; i < 32; ++i) {
      ASSERT_TRUE(std::isfinite(accum[i])) << x << " " << i;
      ASSERT_LE(std::fabs(accum[i]), 5.0f * x) << x << " " << i;
      if (accum[i] != 0.0f) {
        ASSERT_EQ(accum[i] < 0.0f, input[i] < 0.0f) << x << " " << i;
      }
    }
  }
}

TEST(Qsgd, NonFiniteInputIsAnError) {
  for (const float bad : {kNaN, kInf, -kInf}) {
    auto codec = create_codec("qsgd:bucket=4", tensor_of(10));
    std::vector<float> input(10, 1.0f);
    input[9] = bad;
    Bytes out;
    EXPECT_THROW(codec->encode(input, out), Error);
  }
  // Finite but with a norm past float's range.
  auto codec = create_codec("qsgd", tensor_of(4));
  const std::vector<float> huge(4, 3e38f);
  Bytes out;
  EXPECT_THROW(codec->encode(huge, out), Error);
}

// Byte and bit of element i's code, for the packed layouts of qsgd_codec.cc.
struct CodeAt {
  size_t byte;
  unsigned shift;
};
CodeAt code_position(size_t i, size_t n, unsigned bits) {
  if (bits == 2 || bits == 4 || bits == 8) {
    const size_t per_byte = 8 / bits, group = 16 * per_byte;
    const size_t full = n / group * group;
    if (i < full) {
      const size_t r = i % group;
      return {16 * (i / group) + r % 16, static_cast<unsigned>(bits * (r / 16))};
    }
    const size_t t = i - full;
    return {full / per_byte + t / per_byte, static_cast<unsigned>(bits * (t % per_byte))};
  }
  return {i * bits / 8, static_cast<unsigned>(i * bits % 8)};  // bit stream
}

unsigned code_of(const Bytes& codes, size_t offset, size_t i, size_t n, unsigned bits) {
  const CodeAt at = code_position(i, n, bits);
  unsigned word = codes[offset + at.byte];
  if (offset + at.byte + 1 < codes.size()) word |= unsigned{codes[offset + at.byte + 1]} << 8;
  return (word >> at.shift) & ((1u << bits) - 1);
}

TEST(Qsgd, CodeLayoutMatchesTheDocumentation) {
  for (const unsigned levels : {1u, 3u, 7u, 15u, 127u}) {
    for (const size_t n : {37ul, 203ul, 2048ul + 77}) {
      auto codec = create_codec(qsgd_spec(levels, 50), tensor_of(n));
      const auto input = random_vector(n, 8);
      const Bytes payload = encode(*codec, input);
      const auto decoded = decode(*codec, payload, n);
      const size_t codes = kQsgdNorms + 4 * ((n + 49) / 50);
      const unsigned bits = qsgd_bits(levels);
      for (size_t i = 0; i < n; ++i) {
        const float step = f32_at(payload, kQsgdNorms + 4 * (i / 50)) / static_cast<float>(levels);
        const int c = static_cast<int>(code_of(payload, codes, i, n, bits));
        ASSERT_EQ(decoded[i], static_cast<float>(c - static_cast<int>(levels)) * step)
            << "levels " << levels << " n " << n << " i " << i;
      }
    }
  }
}

TEST(QsgdCorruption, FieldsNormsCodesAndPadding) {
  const size_t n = 203;  // 4 buckets of 64; 4-bit codes: the last byte is half padding
  auto codec = create_codec("qsgd:bucket=64", tensor_of(n));
  const Bytes payload = encode(*codec, random_vector(n, 4));
  const size_t codes = kQsgdNorms + 16;
  ASSERT_EQ(payload.size(), codes + 102);

  Bytes bad = payload;
  for (const uint8_t levels : {0, 128, 255, 8}) {  // 8: 5-bit codes, so the length is wrong
    bad = payload;
    bad[PayloadHeader::kSize] = levels;
    expect_rejected<PayloadError>(*codec, bad, n, "levels " + std::to_string(levels));
  }
  for (const uint32_t bucket : {0u, 50u, 300u, 0xffffffffu}) {  // 0, or 5 / 1 norms
    bad = payload;
    put_u32(bad, PayloadHeader::kSize + 1, bucket);
    expect_rejected<PayloadError>(*codec, bad, n, "bucket " + std::to_string(bucket));
  }
  for (const float norm : {kNaN, kInf, -kInf, -1.0f, -FLT_MIN, -0.0f}) {
    for (size_t k = 0; k < 4; ++k) {
      bad = payload;
      put_f32(bad, kQsgdNorms + 4 * k, norm);
      expect_rejected<PayloadError>(*codec, bad, n, "norm " + std::to_string(norm));
    }
  }
  for (const size_t i : {0ul, 17ul, 31ul, 100ul, 191ul, 192ul, 202ul}) {
    bad = payload;
    const CodeAt at = code_position(i, n, 4);
    bad[codes + at.byte] |= static_cast<uint8_t>(15u << at.shift);  // code 15 > 2s = 14
    expect_rejected<PayloadError>(*codec, bad, n, "code 15 at element " + std::to_string(i));
  }
  bad = payload;
  bad.back() |= 0x10;
  expect_rejected<PayloadError>(*codec, bad, n, "padding bits");

  // Codes above 2s that still fit the width: s = 4 (4 bits, 9..15 invalid) and s = 3
  // (3-bit stream, 7 invalid).
  for (const unsigned levels : {4u, 3u}) {
    auto small = create_codec(qsgd_spec(levels, 64), tensor_of(n));
    const Bytes p = encode(*small, random_vector(n, 5));
    const size_t start = kQsgdNorms + 16;
    const unsigned bits = qsgd_bits(levels);
    for (const size_t i : {0ul, 5ul, 64ul, 202ul}) {
      Bytes b = p;
      const CodeAt at = code_position(i, n, bits);
      const unsigned mask = ((1u << bits) - 1) << at.shift;
      const unsigned value = (2 * levels + 1) << at.shift;
      unsigned word =
          b[start + at.byte] | (start + at.byte + 1 < b.size() ? b[start + at.byte + 1] << 8 : 0);
      word = (word & ~mask) | value;
      b[start + at.byte] = static_cast<uint8_t>(word);
      if (start + at.byte + 1 < b.size()) b[start + at.byte + 1] = static_cast<uint8_t>(word >> 8);
      expect_rejected<PayloadError>(*small, b, n,
                                    "code " + std::to_string(2 * levels + 1) + " at " +
                                        std::to_string(i) + " levels " + std::to_string(levels));
    }
  }
}

// --- terngrad ------------------------------------------------------------------------------

constexpr size_t kTernCodes = PayloadHeader::kSize + 4;

// s = min(max |g|, clip * sqrt(mean g^2)), in double.
double terngrad_scale(std::span<const float> g, double clip = 2.5) {
  double max_abs = 0.0;
  for (const float x : g) max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
  return std::min(max_abs, clip * norm2(g) / std::sqrt(static_cast<double>(g.size())));
}

std::vector<float> with_outliers(size_t n, uint32_t seed) {
  auto g = random_vector(n, seed);
  g[3] = 50.0f;  // far beyond 2.5 sigma: clipped
  g[10] = -40.0f;
  g[11] = 0.0f;
  return g;
}

TEST(TernGrad, ValuesAreMinusZeroOrPlusTheClippedScale) {
  const size_t n = 1000;
  auto codec = create_codec("terngrad", tensor_of(n));
  const auto g = with_outliers(n, 31);
  const Bytes payload = encode(*codec, g);
  ASSERT_EQ(payload.size(), kTernCodes + 250);
  const float s = f32_at(payload, PayloadHeader::kSize);
  const double reference = terngrad_scale(g);
  EXPECT_NEAR(s, reference, 1e-6 * reference);
  EXPECT_LT(s, 40.0f);  // the outliers were clipped
  const auto decoded = decode(*codec, payload, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(decoded[i] == 0.0f || decoded[i] == s || decoded[i] == -s) << i;
    if (decoded[i] != 0.0f) {
      ASSERT_EQ(decoded[i] < 0.0f, g[i] < 0.0f) << i;
    }
    if (std::fabs(g[i]) >= s) {
      ASSERT_EQ(decoded[i], std::copysign(s, g[i])) << i;  // p = 1
    }
  }
  EXPECT_EQ(decoded[11], 0.0f);
}

// Unbiased for the clipped gradient g' = clamp(g, -s, s): E g~ = g'.
TEST(TernGrad, UnbiasedForTheClippedGradient) {
  const size_t n = 600;
  const int draws = 3000;
  auto codec = create_codec("terngrad", tensor_of(n));
  const auto g = with_outliers(n, 32);
  std::vector<double> sum(n, 0.0);
  float s = 0.0f;
  double measured = 0.0, expected = 0.0;
  for (int d = 0; d < draws; ++d) {
    const Bytes payload = encode(*codec, g);
    s = f32_at(payload, PayloadHeader::kSize);
    const auto decoded = decode(*codec, payload, n);
    for (size_t i = 0; i < n; ++i) {
      sum[i] += decoded[i];
      const double clipped = std::clamp(static_cast<double>(g[i]), -double{s}, double{s});
      measured += (decoded[i] - clipped) * (decoded[i] - clipped) / draws;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const double clipped = std::clamp(static_cast<double>(g[i]), -double{s}, double{s});
    const double p = std::fabs(clipped) / s;
    const double sigma = s * std::sqrt(p * (1.0 - p) / draws);
    ASSERT_LE(std::fabs(sum[i] / draws - clipped), 5.0 * sigma + 1e-6) << i;
    expected += s * std::fabs(clipped) - clipped * clipped;  // E (g~ - g')^2 per element
  }
  EXPECT_NEAR(measured, expected, 0.03 * expected);
}

TEST(TernGrad, ConstantAndSingleElementTensorsPassExactly) {
  // sigma is taken about zero: a constant tensor is not clipped to nothing.
  auto codec = create_codec("terngrad", tensor_of(100));
  const std::vector<float> constant(100, 0.3f);
  EXPECT_EQ(decode(*codec, encode(*codec, constant), 100), constant);
  auto single = create_codec("terngrad", tensor_of(1));
  const std::vector<float> one = {-2.0f};
  EXPECT_EQ(decode(*single, encode(*single, one), 1), one);
  const std::vector<float> zeros(100, 0.0f);
  const Bytes payload = encode(*codec, zeros);
  EXPECT_EQ(f32_at(payload, PayloadHeader::kSize), 0.0f);
  EXPECT_EQ(decode(*codec, payload, 100), zeros);
}

TEST(TernGrad, ClipKeyAndTheTwoBitLayout) {
  // clip large: s = max |g| = 2, so +-2 are sent with probability 1, zeros never.
  const size_t n = 67;  // one group of 64 and a tail of 3
  auto codec = create_codec("terngrad:clip=1e6", tensor_of(n));
  std::vector<float> g(n, 0.0f);
  g[0] = 2.0f;    // byte 0, bits 0-1: 11
  g[16] = -2.0f;  // byte 0, bits 2-3: 10
  g[49] = 2.0f;   // byte 1, bits 6-7: 11
  g[65] = -2.0f;  // tail byte 0, bits 2-3: 10
  const Bytes payload = encode(*codec, g);
  ASSERT_EQ(payload.size(), kTernCodes + 17);
  EXPECT_EQ(f32_at(payload, PayloadHeader::kSize), 2.0f);
  EXPECT_EQ(payload[kTernCodes + 0], 0b00'00'10'11);
  EXPECT_EQ(payload[kTernCodes + 1], 0b11'00'00'00);
  for (size_t j = 2; j < 16; ++j) EXPECT_EQ(payload[kTernCodes + j], 0) << j;
  EXPECT_EQ(payload[kTernCodes + 16], 0b00'00'10'00);
  EXPECT_EQ(decode(*codec, payload, n), g);
}

TEST(TernGrad, EncodeResidualIsEncodeAndTheExactError) {
  const size_t n = 4200;
  auto encoder = create_codec("terngrad:seed=8", tensor_of(n));
  auto twin = create_codec("terngrad:seed=8", tensor_of(n));
  auto a = with_outliers(n, 41);
  const auto original = a;
  Bytes payload;
  twin->encode_residual(a, payload);
  EXPECT_EQ(payload, encode(*encoder, original));
  const auto decoded = decode(*encoder, payload, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], original[i] - decoded[i]) << i;
}

TEST(TernGrad, NonFiniteInputIsAnError) {
  for (const float bad : {kNaN, kInf}) {
    auto codec = create_codec("terngrad", tensor_of(5));
    std::vector<float> input(5, 1.0f);
    input[2] = bad;
    Bytes out;
    EXPECT_THROW(codec->encode(input, out), Error);
  }
}

TEST(TernGradCorruption, ScaleCodesAndPadding) {
  const size_t n = 203;  // 3 groups of 64 + a tail of 11: the last byte has 3 codes
  auto codec = create_codec("terngrad", tensor_of(n));
  const Bytes payload = encode(*codec, random_vector(n, 4));
  for (const float s : {kNaN, kInf, -1.0f, -FLT_MIN, -0.0f}) {
    Bytes bad = payload;
    put_f32(bad, PayloadHeader::kSize, s);
    expect_rejected<PayloadError>(*codec, bad, n, "scale " + std::to_string(s));
  }
  for (size_t byte = kTernCodes; byte < payload.size(); byte += 5) {
    for (int q = 0; q < 4; ++q) {
      if (byte == payload.size() - 1 && q == 3) continue;  // padding, below
      Bytes bad = payload;
      bad[byte] = static_cast<uint8_t>((bad[byte] & ~(3u << (2 * q))) | (1u << (2 * q)));
      expect_rejected<PayloadError>(*codec, bad, n, "code 01 at byte " + std::to_string(byte));
    }
  }
  Bytes bad = payload;
  bad.back() |= 0xc0;
  expect_rejected<PayloadError>(*codec, bad, n, "padding bits");
}

// --- signsgd -------------------------------------------------------------------------------

constexpr size_t kSignBits = PayloadHeader::kSize + 4;

TEST(SignSgd, ScaleIsTheMeanMagnitudeAndZeroGoesNegative) {
  const size_t n = 1001;
  auto codec = create_codec("signsgd:ef=0", tensor_of(n));
  auto p = random_vector(n, 51);
  p[0] = 0.0f;
  p[1] = -0.0f;
  p[2] = std::numeric_limits<float>::denorm_min();
  const Bytes payload = encode(*codec, p);
  ASSERT_EQ(payload.size(), kSignBits + 126);
  double l1 = 0.0;
  for (const float x : p) l1 += std::fabs(x);
  const float scale = f32_at(payload, PayloadHeader::kSize);
  EXPECT_NEAR(scale, l1 / n, 1e-6 * l1 / n);
  const auto decoded = decode(*codec, payload, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(decoded[i], p[i] > 0.0f ? scale : -scale) << i;
  EXPECT_EQ(decoded[0], -scale);  // zero: bit 0, -scale
  EXPECT_EQ(decoded[1], -scale);
  EXPECT_EQ(decoded[2], scale);
}

TEST(SignSgd, BitLayout) {
  const size_t n = 128 + 11;  // one group and a tail of 11 (two bytes)
  auto codec = create_codec("signsgd:ef=0", tensor_of(n));
  std::vector<float> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = (i * 7 % 3 == 0) ? 1.0f : -1.0f;
  const Bytes payload = encode(*codec, p);
  ASSERT_EQ(payload.size(), kSignBits + 16 + 2);
  for (size_t i = 0; i < n; ++i) {
    size_t byte;
    unsigned bit;
    if (i < 128) {
      byte = i % 16;  // element 16q + j in bit q of byte j
      bit = static_cast<unsigned>(i / 16);
    } else {
      byte = 16 + (i - 128) / 8;
      bit = static_cast<unsigned>((i - 128) % 8);
    }
    EXPECT_EQ((payload[kSignBits + byte] >> bit) & 1u, p[i] > 0.0f ? 1u : 0u) << i;
  }
  EXPECT_EQ(payload.back() >> 3, 0);  // padding
}

TEST(SignSgd, ErrorFeedbackKeepsWhatTheSignDidNotSend) {
  const size_t n = 300;
  auto codec = create_codec("signsgd", tensor_of(n));
  const auto* ef = dynamic_cast<const ErrorFeedback*>(codec.get());
  ASSERT_NE(ef, nullptr);
  auto plain = create_codec("signsgd:ef=0", tensor_of(n));
  std::vector<float> p(n, 0.0f);  // p = g + e, e starts at 0
  for (int step = 0; step < 5; ++step) {
    const auto g = random_vector(n, 60 + step);
    for (size_t i = 0; i < n; ++i) p[i] += g[i];
    const Bytes payload = encode(*codec, g);
    EXPECT_EQ(payload, encode(*plain, p)) << step;  // EF sends C(g + e)
    const auto delta = decode(*codec, payload, n);
    for (size_t i = 0; i < n; ++i) {
      p[i] -= delta[i];  // e = p - delta
      ASSERT_EQ(ef->residual()[i], p[i]) << "step " << step << " i " << i;
    }
  }
}

TEST(SignSgd, AllZerosSendNothing) {
  auto codec = create_codec("signsgd:ef=0", tensor_of(20));
  const std::vector<float> zeros(20, 0.0f);
  const Bytes payload = encode(*codec, zeros);
  EXPECT_EQ(f32_at(payload, PayloadHeader::kSize), 0.0f);
  std::vector<float> accum(20, 1.5f);
  codec->decode_add(payload, accum);
  EXPECT_EQ(accum, std::vector<float>(20, 1.5f));
}

TEST(SignSgd, NonFiniteInputIsAnError) {
  for (const float bad : {kNaN, -kInf}) {
    auto codec = create_codec("signsgd", tensor_of(5));
    std::vector<float> input(5, 1.0f);
    input[4] = bad;
    Bytes out;
    EXPECT_THROW(codec->encode(input, out), Error);
  }
}

TEST(SignSgdCorruption, ScaleAndPadding) {
  const size_t n = 203;  // 1 group + 75: the last byte has 3 bits
  auto codec = create_codec("signsgd", tensor_of(n));
  const Bytes payload = encode(*codec, random_vector(n, 4));
  for (const float s : {kNaN, kInf, -kInf, -0.5f, -0.0f}) {
    Bytes bad = payload;
    put_f32(bad, PayloadHeader::kSize, s);
    expect_rejected<PayloadError>(*codec, bad, n, "scale " + std::to_string(s));
  }
  ASSERT_EQ(payload.size(), kSignBits + 26);
  for (int bit = 3; bit < 8; ++bit) {
    Bytes bad = payload;
    bad[kSignBits + 25] |= static_cast<uint8_t>(1u << bit);
    expect_rejected<PayloadError>(*codec, bad, n, "padding bit " + std::to_string(bit));
  }
}

// --- bf16 ----------------------------------------------------------------------------------

TEST(Bf16Codec, RoundTripIsTheCast) {
  const size_t n = 1003;
  auto codec = create_codec("bf16", tensor_of(n));
  auto input = random_vector(n, 71, 1e3f);
  input[0] = kNaN;
  input[1] = -kInf;
  input[2] = std::numeric_limits<float>::denorm_min();
  input[3] = FLT_MAX;
  const Bytes payload = encode(*codec, input);
  ASSERT_EQ(payload.size(), PayloadHeader::kSize + 2 * n);
  const auto decoded = decode(*codec, payload, n);
  for (size_t i = 0; i < n; ++i) {
    const float expected = bf16_to_float(float_to_bf16(input[i]));
    ASSERT_EQ(std::bit_cast<uint32_t>(decoded[i]), std::bit_cast<uint32_t>(0.0f + expected)) << i;
    if (std::isfinite(input[i]) && std::fabs(input[i]) >= FLT_MIN && i != 3) {
      ASSERT_LE(std::fabs(decoded[i] - input[i]), std::ldexp(std::fabs(input[i]), -8)) << i;
    }
  }
}

TEST(Bf16Codec, MessageFaceOnly) {
  auto codec = create_codec("bf16", tensor_of(4));
  EXPECT_FALSE(codec->additive_wire().has_value());
  std::vector<float> g(4, 1.0f), wire(4);
  EXPECT_THROW(codec->to_wire(g, 1.0f, wire.data()), Error);
  EXPECT_THROW(codec->from_wire(wire.data(), g), Error);
}

TEST(Bf16Codec, EncodeResidualIsEncodeAndTheExactError) {
  const size_t n = 77;
  auto codec = create_codec("bf16", tensor_of(n));
  auto a = random_vector(n, 72);
  const auto original = a;
  Bytes payload;
  codec->encode_residual(a, payload);
  EXPECT_EQ(payload, encode(*codec, original));
  const auto decoded = decode(*codec, payload, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], original[i] - decoded[i]) << i;
}

// --- error feedback on every quantizer (beyond the shared list in error_feedback_test) ------

// sum of decoded payloads + residual == sum of gradients, to float rounding relative to the
// magnitudes involved. That holds for any codec, contractive or not: with qsgd's defaults
// (bucket 512 >= levels^2 = 49) the residual grows without bound (see the next test), and the
// identity still holds to ~1e-7 of it.
TEST(Quantizers, ErrorFeedbackConservesAtOddSizes) {
  for (const char* spec :
       {"signsgd", "qsgd:ef=1", "qsgd:levels=1,bucket=33,ef=1", "qsgd:levels=3,bucket=100,ef=1",
        "qsgd:levels=15,bucket=128,ef=1", "terngrad:ef=1", "bf16:ef=1"}) {
    for (const size_t n : {1ul, 129ul, 2049ul}) {
      auto codec = create_codec(spec, tensor_of(n));
      const auto* ef = dynamic_cast<const ErrorFeedback*>(codec.get());
      ASSERT_NE(ef, nullptr) << spec;
      std::vector<double> sent(n, 0.0), given(n, 0.0);
      for (int step = 0; step < 50; ++step) {
        const auto g = random_vector(n, 900 + step, 0.3f);
        const Bytes payload = encode(*codec, g);
        const auto decoded = decode(*codec, payload, n);
        for (size_t i = 0; i < n; ++i) {
          given[i] += g[i];
          sent[i] += decoded[i];
        }
      }
      double worst = 0.0, scale = 1.0;
      for (size_t i = 0; i < n; ++i) {
        worst = std::max(worst, std::fabs(sent[i] + ef->residual()[i] - given[i]));
        scale = std::max(scale, static_cast<double>(std::fabs(ef->residual()[i])));
      }
      EXPECT_LT(worst, 2e-5 * scale) << spec << " n " << n;
    }
  }
}

// Error feedback needs a contractive compressor, E||a - D(C(a))||^2 < ||a||^2. signsgd is
// one; qsgd is when bucket < levels^2 (its variance bound min(d / s^2, sqrt(d) / s) < 1).
// Then the residual stays a fraction of the gradient; otherwise it grows step after step.
TEST(Quantizers, ErrorFeedbackResidualStaysBoundedWhenContractive) {
  const size_t n = 3001;
  const auto residual_ratio = [&](const char* spec) {
    auto codec = create_codec(spec, tensor_of(n));
    std::vector<float> total(n, 0.0f);
    for (int step = 0; step < 50; ++step) {
      const auto g = random_vector(n, 700 + step, 0.3f);
      encode(*codec, g);
      for (size_t i = 0; i < n; ++i) total[i] += g[i];
    }
    return norm2(dynamic_cast<const ErrorFeedback&>(*codec).residual()) / norm2(total);
  };
  EXPECT_LT(residual_ratio("signsgd"), 0.3);
  EXPECT_LT(residual_ratio("qsgd:levels=15,bucket=128,ef=1"), 0.3);
  EXPECT_LT(residual_ratio("qsgd:levels=127,ef=1"), 0.3);
  EXPECT_GT(residual_ratio("qsgd:levels=1,bucket=100,ef=1"), 100.0);  // not contractive
}

// int8, message face: every value within half a step (max_b / 127 / 2) of its input, and
// error feedback keeps exactly the difference.
TEST(Int8, MessageRoundTripIsWithinHalfAStepPerBlock) {
  const size_t n = 1000, block = 64;
  const auto input = random_vector(n, 11);
  auto codec = create_codec("int8:block=64,ef=0", tensor_of(n));
  Bytes payload;
  codec->encode(input, payload);
  EXPECT_EQ(payload.size(), 8u + 4u + 4u * ((n + block - 1) / block) + n);
  std::vector<float> decoded(n, 0.0f);
  codec->decode_add(payload, decoded);
  for (size_t b = 0; b * block < n; ++b) {
    float m = 0;
    for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
      m = std::max(m, std::fabs(input[i]));
    for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      EXPECT_LE(std::fabs(decoded[i] - input[i]), m / 127 / 2 * 1.0001f) << i;
    }
  }
  std::vector<float> a = input;
  Bytes again;
  codec->encode_residual(a, again);
  EXPECT_EQ(again, payload);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(a[i], input[i] - decoded[i], 1e-6f) << i;
}

// int4: every value within half a step (max_b / 7 / 2) of its input, 4.25 bits per element
// plus the header, odd counts included; error feedback keeps exactly the difference, so
// over many calls the decoded sum tracks the input's sum to within one step.
TEST(Int4, RoundTripIsWithinHalfAStepPerBlockAndErrorFeedbackKeepsTheRest) {
  for (const size_t n : {size_t{1}, size_t{127}, size_t{1001}}) {
    const size_t block = 128, blocks = (n + block - 1) / block;
    const auto input = random_vector(n, 21);
    auto codec = create_codec("int4:ef=0", tensor_of(n));
    Bytes payload;
    codec->encode(input, payload);
    EXPECT_EQ(payload.size(), 8u + 4u + 4u * blocks + (n + 1) / 2) << n;
    std::vector<float> decoded(n, 0.0f);
    codec->decode_add(payload, decoded);
    for (size_t b = 0; b < blocks; ++b) {
      float m = 0;
      for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
        m = std::max(m, std::fabs(input[i]));
      for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
        EXPECT_LE(std::fabs(decoded[i] - input[i]), m / 7 / 2 * 1.0001f) << i;
      }
    }
    std::vector<float> a = input;
    Bytes again;
    codec->encode_residual(a, again);
    EXPECT_EQ(again, payload);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(a[i], input[i] - decoded[i], 1e-6f) << i;
  }
  const size_t n = 300;
  auto ef = create_codec("int4", tensor_of(n));
  std::vector<double> sent(n, 0.0), total(n, 0.0);
  for (int step = 0; step < 40; ++step) {
    const auto g = random_vector(n, 900 + step);
    Bytes payload;
    ef->encode(g, payload);
    std::vector<float> d(n, 0.0f);
    ef->decode_add(payload, d);
    for (size_t i = 0; i < n; ++i) {
      sent[i] += d[i];
      total[i] += g[i];
    }
  }
  const auto& residual = dynamic_cast<const ErrorFeedback&>(*ef).residual();
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(sent[i] + residual[i], total[i], 1e-4) << i;
}

// int8, shared-scale face: W ranks quantize with the agreed maxima to 127 / W levels, their
// int8 sum cannot overflow, and the dequantized mean is within half a step of the exact mean.
TEST(Int8, SharedScaleSumOfWRanksIsTheMeanWithinHalfAStep) {
  const size_t n = 517, block = 32;
  for (const int world : {2, 4, 8, 127}) {
    const int levels = shared_scale_levels(world);
    ASSERT_GT(levels, 0);
    std::vector<std::unique_ptr<Codec>> codecs;
    std::vector<std::vector<float>> inputs;
    const size_t blocks = (n + block - 1) / block;
    std::vector<float> maxima(blocks, 0.0f), local(blocks);
    for (int r = 0; r < world; ++r) {
      codecs.push_back(create_codec("int8:block=32,ef=0", tensor_of(n)));
      inputs.push_back(random_vector(n, 100 + r));
      codecs[r]->shared_scale()->local_maxima(inputs[r], local);
      for (size_t b = 0; b < blocks; ++b) maxima[b] = std::max(maxima[b], local[b]);
    }
    std::vector<int> sum(n, 0);
    std::vector<int8_t> wire(n);
    for (int r = 0; r < world; ++r) {
      codecs[r]->shared_scale()->quantize(inputs[r], maxima, levels, wire.data());
      for (size_t i = 0; i < n; ++i) sum[i] += wire[i];
    }
    std::vector<int8_t> summed(n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::abs(sum[i]), 127) << "world " << world;
      summed[i] = static_cast<int8_t>(sum[i]);
    }
    std::vector<float> out(n);
    codecs[0]->shared_scale()->dequantize(summed.data(), maxima, levels, world, out);
    for (size_t i = 0; i < n; ++i) {
      double mean = 0;
      for (int r = 0; r < world; ++r) mean += inputs[r][i] / world;
      const float step = maxima[i / block] / levels;
      EXPECT_LE(std::fabs(out[i] - mean), step / 2 * 1.001f + 1e-7f) << "world " << world;
    }
  }
  EXPECT_EQ(shared_scale_levels(128), 0);
}

// With error feedback the shared-scale face keeps the residual: what was not sent this
// step is added to the next step's gradient.
TEST(Int8, SharedScaleErrorFeedbackCarriesTheRemainder) {
  const size_t n = 64;
  auto codec = create_codec("int8:block=64", tensor_of(n));
  auto* face = codec->shared_scale();
  ASSERT_NE(face, nullptr);
  std::vector<float> g(n, 0.001f);
  g[0] = 1.0f;  // the block's maximum: 0.001 is far below one of 63 steps of 1/63
  std::vector<float> maxima(1);
  std::vector<int8_t> q(n);
  face->local_maxima(g, maxima);
  EXPECT_EQ(maxima[0], 1.0f);
  face->quantize(g, maxima, /*levels=*/63, q.data());
  EXPECT_EQ(q[0], 63);
  EXPECT_EQ(q[1], 0);
  const auto& ef = dynamic_cast<const ErrorFeedback&>(*codec);
  EXPECT_NEAR(ef.residual()[1], 0.001f, 1e-7f);
  EXPECT_NEAR(ef.residual()[0], 0.0f, 1e-7f);
}

}  // namespace
}  // namespace gradwire::compress
