#include <fftw3.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include "codec_test_util.h"
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/error_feedback.h"
#include "gradwire/compress/registry.h"
#include "gradwire/compress/spectral/range_float.h"
#include "gradwire/compress/spectral/spectral_codec.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::random_vector;
using testing::same_bits;
using testing::tensor_of;

// --- range-based float ---------------------------------------------------------------------

std::vector<float> range_round_trip(const std::vector<float>& values, int bits,
                                    RangeFloatBlock* block_out = nullptr,
                                    ExponentWidthRule rule = ExponentWidthRule::kMinError) {
  const RangeFloatBlock block = range_float_block(values, bits, rule);
  std::vector<uint8_t> bytes(range_float_bytes(values.size(), bits, block.width) + 1, 0xab);
  range_float_encode(values, block, bits, bytes.data());
  EXPECT_EQ(bytes.back(), 0xab) << "encoder wrote past range_float_bytes()";
  EXPECT_TRUE(range_float_padding_is_zero(bytes.data(), values.size(), bits, block.width));
  std::vector<float> out(values.size(), -1.0f);
  range_float_decode(bytes.data(), block, bits, out);
  if (block_out) *block_out = block;
  return out;
}

// Checks the documented per-value bounds: relative error within range_float_relative_bound
// for values at least s/2 (that includes those rounded up to s), else the value becomes 0
// or s; signs are kept; zero stays zero.
void expect_within_bounds(const std::vector<float>& values, const std::vector<float>& out,
                          const RangeFloatBlock& block, int bits, const std::string& what) {
  if (block.width == 0) {
    for (const float v : out) ASSERT_EQ(v, 0.0f) << what;
    return;
  }
  const double bound = range_float_relative_bound(bits, block.width);
  const double s = std::ldexp(1.0, block.e_max - (1 << block.width) + 2);  // smallest
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    const double d = out[i];
    if (v == 0.0) {
      ASSERT_EQ(d, 0.0) << what << " #" << i;
      continue;
    }
    if (d != 0.0) {
      ASSERT_EQ(std::signbit(d), std::signbit(v)) << what << " #" << i;
    }
    if (std::fabs(v) >= s) {
      // Subnormal results round once more (by at most 2^-150).
      ASSERT_LE(std::fabs(d - v), bound * std::fabs(v) + 0x1p-150)
          << what << " #" << i << " v=" << v;
    } else if (std::fabs(v) >= s / 2) {
      ASSERT_EQ(std::fabs(d), s) << what << " #" << i << " v=" << v;
    } else {
      ASSERT_EQ(d, 0.0) << what << " #" << i << " v=" << v;
    }
  }
}

TEST(RangeFloat, RoundTripWithinBoundsForEveryWidthAndRule) {
  std::mt19937 rng(1);
  for (int bits = kRangeFloatMinBits; bits <= kRangeFloatMaxBits; ++bits) {
    for (const double decades : {0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 12.0}) {
      for (const auto rule : {ExponentWidthRule::kRange, ExponentWidthRule::kMinError}) {
        std::uniform_real_distribution<double> exponent(-decades, 0.0);
        std::vector<float> values(999);
        for (auto& v : values) {
          v = static_cast<float>(std::pow(10.0, exponent(rng)) * (rng() % 2 ? 3.0 : -3.0));
        }
        values[5] = 0.0f;
        values[6] = -0.0f;
        RangeFloatBlock block;
        const auto out = range_round_trip(values, bits, &block, rule);
        ASSERT_GE(block.width, 1);
        ASSERT_LE(block.width, std::min(4, bits - 1));
        expect_within_bounds(
            values, out, block, bits,
            "bits " + std::to_string(bits) + " decades " + std::to_string(decades));
      }
    }
  }
}

TEST(RangeFloat, RangeRuleIsTheFormulaOfAlgorithmsMd) {
  // E = min(4, ceil(log2(e_max - e_min + 2))): spans of 0, 1, 2, 3, 6, 7, 14, 30 octaves.
  const std::pair<int, int> cases[] = {{0, 1}, {1, 2}, {2, 2},  {3, 3},
                                       {6, 3}, {7, 4}, {14, 4}, {30, 4}};
  for (const auto& [span, width] : cases) {
    const std::vector<float> values = {std::ldexp(1.5f, 3), std::ldexp(-1.25f, 3 - span)};
    const RangeFloatBlock block = range_float_block(values, 8, ExponentWidthRule::kRange);
    EXPECT_EQ(block.e_max, 3) << span;
    EXPECT_EQ(block.width, width) << span;
    // The range rule always fits every exponent: both values come back within the bound.
    if (span <= 14) {
      RangeFloatBlock b;
      const auto out = range_round_trip(values, 8, &b, ExponentWidthRule::kRange);
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_NEAR(out[i], values[i], range_float_relative_bound(8, width) * std::fabs(values[i]));
      }
    }
  }
}

TEST(RangeFloat, AllEqualMagnitudesUseOneExponentBitAndAreExact) {
  const std::vector<float> values = {3.0f, -3.0f, 3.0f, 3.0f, -3.0f};
  RangeFloatBlock block;
  const auto out = range_round_trip(values, 8, &block);
  EXPECT_EQ(block.e_max, 1);
  EXPECT_EQ(block.width, 1);
  EXPECT_EQ(out, values);  // 3 = 2 * 1.5 needs one mantissa bit of six
}

TEST(RangeFloat, HugeDynamicRangeFlushesTheSmallest) {
  const std::vector<float> values = {1e30f, -1e-30f, 2e29f, 1e20f};
  RangeFloatBlock block;
  const auto out = range_round_trip(values, 8, &block, ExponentWidthRule::kRange);
  EXPECT_EQ(block.width, 4);
  EXPECT_EQ(block.e_max, std::ilogb(1e30f));
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_NEAR(out[0], 1e30f, 1e30 * range_float_relative_bound(8, 4));
  EXPECT_NEAR(out[2], 2e29f, 2e29 * range_float_relative_bound(8, 4));
  expect_within_bounds(values, out, block, 8, "huge range");
}

TEST(RangeFloat, ValuesJustBelowTheSmallestRoundToNearest) {
  // E = 4 from the range rule: offsets 0..14 representable, s = 2^(e_max - 14).
  const float s = std::ldexp(1.0f, -14);
  const std::vector<float> values = {
      1.0f, std::ldexp(1.0f, -30), 0.75f * s, 0.5f * s, 0.49f * s, -0.9f * s};
  RangeFloatBlock block;
  const auto out = range_round_trip(values, 8, &block, ExponentWidthRule::kRange);
  ASSERT_EQ(block.width, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], s);
  EXPECT_EQ(out[3], s);
  EXPECT_EQ(out[4], 0.0f);
  EXPECT_EQ(out[5], -s);
}

TEST(RangeFloat, MantissaOverflowAtTheTopSaturates) {
  // 1.99 rounds (M = 6, E = 1) to 2.0, which is beyond e_max = 0: it saturates.
  const std::vector<float> values = {1.999f, 1.0f};
  RangeFloatBlock block;
  const auto out = range_round_trip(values, 8, &block);
  ASSERT_EQ(block.width, 1);
  EXPECT_EQ(out[0], 1.0f + 63.0f / 64.0f);
  EXPECT_EQ(out[1], 1.0f);
  // Below the top, overflow moves to the next exponent.
  const std::vector<float> lower = {4.0f, 1.999f};
  const auto out2 = range_round_trip(lower, 8, &block, ExponentWidthRule::kRange);
  EXPECT_EQ(out2[1], 2.0f);
}

TEST(RangeFloat, ZerosAreExactAndAllZerosSendNothing) {
  const std::vector<float> zeros = {0.0f, -0.0f, 0.0f};
  RangeFloatBlock block;
  const auto out = range_round_trip(zeros, 8, &block);
  EXPECT_EQ(block.width, 0);
  EXPECT_EQ(block.e_max, 0);
  EXPECT_EQ(range_float_bytes(zeros.size(), 8, block.width), 0u);
  for (const float v : out) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u);
  EXPECT_EQ(range_float_block({}, 8).width, 0);
}

TEST(RangeFloat, Denormals) {
  // Largest magnitude with e_max = -128 (fits the i8) and subnormal neighbours.
  const float top = std::ldexp(1.5f, -128);
  const std::vector<float> values = {top, -std::ldexp(1.0f, -135), std::ldexp(1.25f, -140),
                                     std::numeric_limits<float>::denorm_min()};
  RangeFloatBlock block;
  const auto out = range_round_trip(values, 8, &block, ExponentWidthRule::kRange);
  EXPECT_EQ(block.e_max, -128);
  EXPECT_EQ(block.width, 4);
  expect_within_bounds(values, out, block, 8, "denormals");
  EXPECT_EQ(out[0], top);
  EXPECT_EQ(out[1], -std::ldexp(1.0f, -135));
  // Entirely below 2^-128: e_max would not fit an i8; sent as zeros.
  const std::vector<float> tiny = {std::ldexp(1.0f, -130), -std::ldexp(1.0f, -149)};
  const auto out2 = range_round_trip(tiny, 8, &block);
  EXPECT_EQ(block.width, 0);
  EXPECT_EQ(out2, (std::vector<float>{0.0f, 0.0f}));
}

TEST(RangeFloat, FiveBitsLeaveNoMantissa) {
  // Exponents 3 down to -4: E = ceil(log2 9) = 4, M = 0; 3 = 2 * 1.5 rounds up to 4.
  const std::vector<float> values = {8.0f, -4.0f, 3.0f, 1.0f, 0.0625f};
  RangeFloatBlock block;
  const auto out = range_round_trip(values, 5, &block, ExponentWidthRule::kRange);
  ASSERT_EQ(block.width, 4);
  EXPECT_EQ(out, (std::vector<float>{8.0f, -4.0f, 4.0f, 1.0f, 0.0625f}));
}

TEST(RangeFloat, NonFiniteValuesThrow) {
  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()}) {
    const std::vector<float> values = {1.0f, bad};
    EXPECT_THROW(range_float_block(values, 8), Error);
  }
}

TEST(RangeFloat, MinErrorRuleBeatsTheRangeRuleOnSpreadBlocks) {
  // Fourier parts of kept coefficients: most near the top, a few tiny components that
  // force E = 4 under the range rule.
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(2000);
  for (auto& v : values) v = dist(rng);
  values[7] = 1e-6f;
  double errors[2] = {0.0, 0.0};
  int widths[2];
  int r = 0;
  for (const auto rule : {ExponentWidthRule::kRange, ExponentWidthRule::kMinError}) {
    RangeFloatBlock block;
    const auto out = range_round_trip(values, 8, &block, rule);
    widths[r] = block.width;
    for (size_t i = 0; i < values.size(); ++i) errors[r] += std::pow(out[i] - values[i], 2.0);
    ++r;
  }
  EXPECT_EQ(widths[0], 4);
  EXPECT_LT(widths[1], 4);
  EXPECT_LT(errors[1], 0.5 * errors[0]);
}

TEST(RangeFloat, PaddingCheck) {
  std::vector<uint8_t> bytes = {0xff, 0x01};  // three 5-bit values use bits 0..14
  EXPECT_TRUE(range_float_padding_is_zero(bytes.data(), 3, 5, 4));
  bytes[1] = 0x81;
  EXPECT_FALSE(range_float_padding_is_zero(bytes.data(), 3, 5, 4));
  EXPECT_TRUE(range_float_padding_is_zero(bytes.data(), 2, 8, 4));
}

// --- payload parsing helpers ---------------------------------------------------------------

constexpr size_t kBodyOffset = PayloadHeader::kSize + 2;

struct ParsedChunk {
  size_t offset;  // of the chunk header
  int8_t e_max;
  uint8_t width;
  uint32_t count;
  bool bitmap;
  size_t positions;  // offset
  size_t values;     // offset
  size_t end;
  std::vector<uint32_t> kept;
};

std::vector<ParsedChunk> parse_chunks(const Bytes& payload, size_t numel, size_t chunk) {
  std::vector<ParsedChunk> chunks;
  const int bits = payload[PayloadHeader::kSize + 1];
  size_t at = kBodyOffset;
  for (size_t start = 0; start < numel; start += chunk) {
    const size_t n = start + chunk <= numel ? chunk : spectral_last_chunk(numel, chunk);
    const size_t m = n / 2 + 1;
    ParsedChunk c;
    c.offset = at;
    c.e_max = static_cast<int8_t>(payload[at]);
    c.width = payload[at + 1];
    std::memcpy(&c.count, payload.data() + at + 2, 4);
    c.positions = at + 6;
    c.bitmap = (m + 7) / 8 <= 2 * size_t{c.count};
    if (c.bitmap) {
      for (size_t j = 0; j < m; ++j) {
        if (payload[c.positions + j / 8] >> (j % 8) & 1) c.kept.push_back(static_cast<uint32_t>(j));
      }
      c.values = c.positions + (m + 7) / 8;
    } else {
      for (size_t i = 0; i < c.count; ++i) {
        uint16_t j;
        std::memcpy(&j, payload.data() + c.positions + 2 * i, 2);
        c.kept.push_back(j);
      }
      c.values = c.positions + 2 * size_t{c.count};
    }
    c.end = c.values + range_float_bytes(2 * size_t{c.count}, bits, c.width);
    at = c.end;
    chunks.push_back(c);
  }
  EXPECT_EQ(at, payload.size());
  return chunks;
}

// Real FFT (FFTW, same plan flags as the codec) of x zero-padded to n.
std::vector<std::complex<float>> rfft(const float* x, size_t len, size_t n) {
  std::vector<float> in(n, 0.0f);
  std::copy(x, x + len, in.begin());
  std::vector<std::complex<float>> out(n / 2 + 1);
  fftwf_plan plan = fftwf_plan_dft_r2c_1d(static_cast<int>(n), in.data(),
                                          reinterpret_cast<fftwf_complex*>(out.data()),
                                          FFTW_ESTIMATE | FFTW_UNALIGNED);
  fftwf_execute(plan);
  fftwf_destroy_plan(plan);
  return out;
}

double norm2(std::span<const float> x) {
  double s = 0.0;
  for (const float v : x) s += static_cast<double>(v) * v;
  return s;
}

double error2(std::span<const float> x, std::span<const float> y) {
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += std::pow(static_cast<double>(x[i]) - y[i], 2.0);
  return s;
}

// A smooth signal: a few low-frequency sinusoids plus a slow trend.
std::vector<float> smooth_signal(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / 4096.0;
    v[i] = static_cast<float>(0.01 * (std::sin(2.0 * M_PI * 3.0 * t) +
                                      0.5 * std::cos(2.0 * M_PI * 7.3 * t + 1.0) + 0.2 * t));
  }
  return v;
}

std::vector<float> laplace_vector(size_t n, uint32_t seed, double b) {
  std::mt19937 rng(seed);
  std::exponential_distribution<double> exponential(1.0 / b);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng() % 2 ? exponential(rng) : -exponential(rng));
  return v;
}

// --- the codec -----------------------------------------------------------------------------

TEST(SpectralCodec, SmoothSignalsComeBackClosely) {
  // Measured: 0.024 at 4096 and 136072 (the rounding of the kept parts dominates); 0.097 at
  // 300, whose zero padding to 512 puts a step into the chunk, spreading its spectrum.
  for (const auto& [n, limit] :
       {std::pair<size_t, double>{300, 0.12}, {4096, 0.03}, {2 * 65536 + 5000, 0.03}}) {
    auto codec = create_codec("spectral", tensor_of(n));
    const auto input = smooth_signal(n);
    const Bytes payload = encode(*codec, input);
    const auto out = decode(*codec, payload, n);
    const double relative = std::sqrt(error2(input, out) / norm2(input));
    EXPECT_LT(relative, limit) << n;
    EXPECT_LT(payload.size() * 8, n * 4) << n;  // at least 8x smaller
  }
}

TEST(SpectralCodec, RandomDataLosesExactlyTheDroppedEnergy) {
  // Parseval, per full chunk: ||x - D(C(x))||^2 = (1/n) sum_j w_j |X_j - Y_j|^2 (w_j = 1 at
  // DC and Nyquist, 2 elsewhere), Y = 0 off the kept set: the dropped energy plus the kept
  // parts' rounding. In the zero-padded last chunk only the real elements count, so the
  // error is at most that.
  const size_t chunk = 1024;
  const size_t n = 3 * chunk + 200;  // three full chunks and a 256-point last one
  auto codec = create_codec("spectral:chunk=1024,theta=0.8", tensor_of(n));
  const auto input = random_vector(n, 21);
  const Bytes payload = encode(*codec, input);
  const auto out = decode(*codec, payload, n);
  const auto chunks = parse_chunks(payload, n, chunk);
  ASSERT_EQ(chunks.size(), 4u);
  const double bound = range_float_relative_bound(8, 4);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const size_t start = c * chunk;
    const size_t len = std::min(chunk, n - start);
    const size_t size = c < 3 ? chunk : 256;
    const auto spectrum = rfft(input.data() + start, len, size);
    std::vector<bool> is_kept(spectrum.size(), false);
    for (const uint32_t j : chunks[c].kept) is_kept[j] = true;
    double dropped = 0.0;
    double kept = 0.0;
    float smallest_kept = std::numeric_limits<float>::infinity();
    float largest_dropped = 0.0f;
    for (size_t j = 0; j < spectrum.size(); ++j) {
      const double w = (j == 0 || j == spectrum.size() - 1) ? 1.0 : 2.0;
      const double e = w * std::norm(spectrum[j]) / static_cast<double>(size);
      (is_kept[j] ? kept : dropped) += e;
      if (is_kept[j]) {
        smallest_kept = std::min(smallest_kept, std::abs(spectrum[j]));
      } else {
        largest_dropped = std::max(largest_dropped, std::abs(spectrum[j]));
      }
    }
    EXPECT_GE(smallest_kept, largest_dropped * (1.0f - 1e-5f)) << "chunk " << c;
    const std::span<const float> x(input.data() + start, len);
    const std::span<const float> y(out.data() + start, len);
    const double total = norm2(x);
    const double error = error2(x, y);
    EXPECT_LE(error, dropped + bound * bound * kept * 1.01) << "chunk " << c;
    if (c == 3) continue;
    EXPECT_NEAR(dropped + kept, total, 1e-4 * total) << "chunk " << c;
    EXPECT_GE(error, dropped * (1.0 - 1e-4)) << "chunk " << c;
    // With 20% of the coefficients of white noise, about half the energy remains.
    EXPECT_GT(kept / total, 0.4) << "chunk " << c;
    EXPECT_LT(kept / total, 0.65) << "chunk " << c;
  }
}

TEST(SpectralCodec, KeepsExactlyTheConfiguredCountPerChunk) {
  for (const double theta : {0.0, 0.5, 0.9, 0.99, 0.999}) {
    const size_t chunk = 4096;
    for (const size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000},
                           size_t{4096}, size_t{3 * 4096 + 129}}) {
      auto codec = create_codec("spectral:chunk=4096,theta=" + format_number(theta), tensor_of(n));
      const auto input = random_vector(n, 22);
      const Bytes payload = encode(*codec, input);
      const auto chunks = parse_chunks(payload, n, chunk);
      ASSERT_EQ(chunks.size(), (n + chunk - 1) / chunk);
      for (size_t c = 0; c < chunks.size(); ++c) {
        const size_t size = (c + 1) * chunk <= n ? chunk : spectral_last_chunk(n, chunk);
        const size_t m = size / 2 + 1;
        EXPECT_EQ(chunks[c].count, topk_count(1.0 - theta, m)) << theta << " " << n << " " << c;
        EXPECT_EQ(chunks[c].kept.size(), chunks[c].count);
      }
      // theta = 0 keeps every coefficient: only rounding is lost.
      if (theta == 0.0) {
        const auto out = decode(*codec, payload, n);
        EXPECT_LT(std::sqrt(error2(input, out) / norm2(input)), 0.05) << n;
      }
    }
  }
}

TEST(SpectralCodec, LastChunkSizes) {
  EXPECT_EQ(spectral_last_chunk(1, 65536), 64u);
  EXPECT_EQ(spectral_last_chunk(64, 65536), 64u);
  EXPECT_EQ(spectral_last_chunk(65, 65536), 128u);
  EXPECT_EQ(spectral_last_chunk(65536, 65536), 65536u);
  EXPECT_EQ(spectral_last_chunk(65537, 65536), 64u);
  EXPECT_EQ(spectral_last_chunk(65536 + 40000, 65536), 65536u);
  EXPECT_EQ(spectral_last_chunk(1000, 256), 256u);  // tail 232
}

TEST(SpectralCodec, PositionsUseTheSmallerFormat) {
  // m = 513: the bitmap takes 65 bytes, the list 2k, so the list wins for k <= 32.
  const size_t n = 1024;
  for (const size_t k : {size_t{1}, size_t{32}, size_t{33}, size_t{100}}) {
    const double theta = 1.0 - static_cast<double>(k) / 513.0;
    auto codec = create_codec("spectral:chunk=1024,theta=" + format_number(theta), tensor_of(n));
    const auto input = random_vector(n, 23);
    const Bytes payload = encode(*codec, input);
    const auto chunks = parse_chunks(payload, n, 1024);
    ASSERT_EQ(chunks.size(), 1u);
    ASSERT_EQ(chunks[0].count, k);
    EXPECT_EQ(chunks[0].bitmap, k > 32) << k;
    EXPECT_EQ(chunks[0].values - chunks[0].positions, std::min<size_t>(65, 2 * k)) << k;
    // Both formats decode to what the spectrum says: the kept coefficients are the largest.
    const auto spectrum = rfft(input.data(), n, n);
    float smallest_kept = std::numeric_limits<float>::infinity();
    for (const uint32_t j : chunks[0].kept)
      smallest_kept = std::min(smallest_kept, std::abs(spectrum[j]));
    size_t above = 0;
    for (const auto& x : spectrum) above += std::abs(x) >= smallest_kept;
    EXPECT_EQ(above, k);
    const auto out = decode(*codec, payload, n);
    EXPECT_LT(error2(input, out), norm2(input));
  }
}

TEST(SpectralCodec, RatioAtTheDefaults) {
  // n = 2^16, theta = 0.9, B = 8: 3277 of 32769 coefficients, a 4097-byte bitmap and 6554
  // value bytes per chunk: about 24.6x.
  const size_t n = 8 * 65536;
  auto codec = create_codec("spectral", tensor_of(n));
  const Bytes payload = encode(*codec, laplace_vector(n, 24, 1e-3));
  EXPECT_EQ(payload.size(), PayloadHeader::kSize + 2 + 8 * (6 + 4097 + 6554));
  EXPECT_GT(4.0 * n / static_cast<double>(payload.size()), 24.0);
}

TEST(SpectralCodec, DecodingIsDeterministicAcrossInstances) {
  const size_t n = 65536 + 3000;
  auto a = create_codec("spectral", tensor_of(n));
  auto b = create_codec("spectral", tensor_of(n));
  const auto input = laplace_vector(n, 25, 1e-3);
  const Bytes pa = encode(*a, input);
  const Bytes pb = encode(*b, input);
  EXPECT_EQ(pa, pb);
  const auto accum = random_vector(n, 26);
  std::vector<float> out_a = accum;
  std::vector<float> out_b = accum;
  a->decode_add(pa, out_a);
  b->decode_add(pa, out_b);
  EXPECT_TRUE(same_bits(out_a, out_b));
  std::vector<float> again = accum;
  a->decode_add(pa, again);
  EXPECT_TRUE(same_bits(out_a, again));
}

TEST(SpectralCodec, TiesAtTheThresholdGoToTheLowestFrequencies) {
  // An impulse has a flat spectrum (|X_j| = 1 for every j): the k lowest j are kept.
  for (const size_t n : {size_t{1024}, size_t{65536}}) {
    auto codec = create_codec("spectral:theta=0.9", tensor_of(n));
    std::vector<float> input(n, 0.0f);
    input[0] = 1.0f;
    const Bytes payload = encode(*codec, input);
    const auto chunks = parse_chunks(payload, n, 65536);
    ASSERT_EQ(chunks.size(), 1u);
    std::vector<uint32_t> expected(topk_count(0.1, n / 2 + 1));
    std::iota(expected.begin(), expected.end(), 0u);
    EXPECT_EQ(chunks[0].kept, expected) << n;
  }
  // Some ties kept, some not: two impulses of which the spectrum has |X_j| in {0, 2} at
  // alternating j (x = delta_0 + delta_{n/2}): X_j = 1 + (-1)^j.
  const size_t n = 256;
  auto codec = create_codec("spectral:theta=0.9", tensor_of(n));
  std::vector<float> input(n, 0.0f);
  input[0] = 1.0f;
  input[n / 2] = 1.0f;
  const auto chunks = parse_chunks(encode(*codec, input), n, 65536);
  std::vector<uint32_t> expected;
  for (uint32_t j = 0; expected.size() < topk_count(0.1, n / 2 + 1); j += 2) expected.push_back(j);
  EXPECT_EQ(chunks[0].kept, expected);
}

TEST(SpectralCodec, ConcurrentDecodesAgreeWithSequentialOnes) {
  const size_t n = 3 * 65536 + 100;
  auto codec = create_codec("spectral", tensor_of(n));
  const Bytes payload = encode(*codec, laplace_vector(n, 30, 1e-3));
  const auto expected = decode(*codec, payload, n);
  std::vector<std::vector<float>> outs(4, std::vector<float>(n, 0.0f));
  std::vector<std::thread> threads;
  for (auto& out : outs) {
    threads.emplace_back([&codec, &payload, &out] {
      for (int r = 0; r < 3; ++r) {
        std::fill(out.begin(), out.end(), 0.0f);
        codec->decode_add(payload, out);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : outs) EXPECT_TRUE(same_bits(out, expected));
}

TEST(SpectralCodec, EncodeResidualIsInputMinusDecodedBitwise) {
  for (const size_t n : {size_t{100}, size_t{2 * 4096 + 77}}) {
    auto codec = create_codec("spectral:chunk=4096,ef=0", tensor_of(n));
    auto a = laplace_vector(n, 27, 1e-3);
    const auto original = a;
    Bytes out;
    codec->encode_residual(a, out);
    EXPECT_EQ(out, encode(*codec, original));
    const auto decoded = decode(*codec, out, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(original[i] - decoded[i]))
          << n << " #" << i;
    }
  }
}

TEST(SpectralCodec, ErrorFeedbackConservesTheGradientSum) {
  const size_t n = 5000;
  auto codec = create_codec("spectral:chunk=1024,theta=0.95,ef=1", tensor_of(n));
  ASSERT_NE(dynamic_cast<ErrorFeedback*>(codec.get()), nullptr);
  std::vector<double> sent(n, 0.0);
  std::vector<double> total(n, 0.0);
  for (uint32_t step = 0; step < 20; ++step) {
    const auto g = laplace_vector(n, 100 + step, 1e-3);
    for (size_t i = 0; i < n; ++i) total[i] += g[i];
    const auto decoded = decode(*codec, encode(*codec, g), n);
    for (size_t i = 0; i < n; ++i) sent[i] += decoded[i];
  }
  const auto residual = dynamic_cast<ErrorFeedback&>(*codec).residual();
  double worst = 0.0;
  double scale = 0.0;
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(sent[i] + residual[i] - total[i]));
    scale = std::max(scale, std::fabs(total[i]));
  }
  EXPECT_LT(worst, 1e-5 * scale);
}

TEST(SpectralCodec, TinyAndEmptyTensors) {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{64}}) {
    auto codec = create_codec("spectral:theta=0", tensor_of(n));
    std::vector<float> input(n, 0.25f);
    const Bytes payload = encode(*codec, input);
    const auto out = decode(*codec, payload, n);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], 0.25f, 0.25f * 0.07f) << n;
  }
  auto codec = create_codec("spectral", tensor_of(64));
  const std::vector<float> zeros(64, 0.0f);
  const Bytes payload = encode(*codec, zeros);
  EXPECT_EQ(decode(*codec, payload, 64), zeros);
}

TEST(SpectralCodec, NonFiniteInputIsAnError) {
  auto codec = create_codec("spectral:chunk=64", tensor_of(200));
  auto input = random_vector(200, 28);
  input[150] = std::numeric_limits<float>::quiet_NaN();
  Bytes out;
  try {
    codec->encode(input, out);
    FAIL() << "expected gradwire::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[128, 192)"), std::string::npos) << e.what();
  }
  input[150] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(codec->encode(input, out), Error);
}

TEST(SpectralCodec, WrongTensorSizeIsAnError) {
  auto codec = create_codec("spectral", tensor_of(100));
  Bytes out;
  EXPECT_THROW(codec->encode(random_vector(101, 1), out), Error);
}

// --- spec parsing --------------------------------------------------------------------------

TEST(SpectralSpec, DefaultsAndCanonicalRoundTrip) {
  EXPECT_EQ(canonical_spec("spectral"),
            "spectral:bits=8,chunk=65536,ef=1,theta=0.9,theta_end=0.9,theta_steps=0");
  EXPECT_EQ(canonical_spec("spectral:theta=0.95,ef=0"),
            "spectral:bits=8,chunk=65536,ef=0,theta=0.95,theta_end=0.95,theta_steps=0");
  EXPECT_EQ(canonical_spec("spectral:chunk=1024,bits=12,theta=0,theta_end=0.5,theta_steps=9"),
            "spectral:bits=12,chunk=1024,ef=1,theta=0,theta_end=0.5,theta_steps=9");
  for (const char* spec : {"spectral", "spectral:theta=0.99,ef=1,chunk=64,bits=5",
                           "spectral:theta=0.5,bits=16,momentum=0.9,ef=1"}) {
    const std::string canonical = canonical_spec(spec);
    EXPECT_EQ(canonical_spec(canonical), canonical) << spec;
  }
  EXPECT_TRUE(uses_error_feedback("spectral"));
  EXPECT_FALSE(uses_error_feedback("spectral:theta=0.99,ef=0"));
  EXPECT_EQ(create_codec("spectral", tensor_of(10))->id(), CodecId::kSpectral);
  EXPECT_FALSE(create_codec("spectral", tensor_of(10))->additive_wire().has_value());
}

// A diminishing theta keeps more coefficients as training goes on: the kept count per
// chunk follows start + (end - start) step / steps, then stays at the end value.
TEST(SpectralSpec, ThetaScheduleSetsTheKeptCount) {
  const size_t n = 1024;  // one chunk of 1024: m = 513 coefficients
  auto codec =
      create_codec("spectral:chunk=1024,theta=0.9,theta_end=0.5,theta_steps=4,ef=0", tensor_of(n));
  const auto input = random_vector(n, 3);
  // Body: header 8 | log2 chunk | B | e_max | E | u32 count.
  for (const double theta : {0.9, 0.8, 0.7, 0.6, 0.5, 0.5}) {
    Bytes payload;
    codec->encode(input, payload);
    uint32_t count = 0;
    std::memcpy(&count, payload.data() + 12, 4);
    EXPECT_EQ(count, topk_count(1.0 - theta, 513)) << "theta " << theta;
    std::vector<float> out(n, 0.0f);
    EXPECT_NO_THROW(codec->decode_add(payload, out));
  }
  EXPECT_THROW(canonical_spec("spectral:theta_end=1"), ConfigError);
  EXPECT_THROW(canonical_spec("spectral:theta_steps=-1"), ConfigError);
}

TEST(SpectralSpec, RejectsBadValues) {
  for (const char* spec :
       {"spectral:chunk=1000", "spectral:chunk=32", "spectral:chunk=131072", "spectral:chunk=0",
        "spectral:chunk=-64", "spectral:chunk=abc", "spectral:theta=1", "spectral:theta=-0.1",
        "spectral:theta=1.5", "spectral:theta=nan", "spectral:bits=4", "spectral:bits=17",
        "spectral:density=0.1"}) {
    EXPECT_THROW(canonical_spec(spec), ConfigError) << spec;
  }
  try {
    canonical_spec("spectral:chunk=1000");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("power of two"), std::string::npos) << e.what();
  }
}

// --- corrupt payloads ----------------------------------------------------------------------

template <typename E>
void expect_rejected(const Codec& codec, const Bytes& payload, size_t n, const std::string& what) {
  std::vector<float> accum = random_vector(n, 77);
  const auto before = accum;
  EXPECT_THROW(codec.decode_add(payload, accum), E) << what;
  EXPECT_TRUE(same_bits(accum, before)) << what << ": accumulator modified";
}

struct CorruptionCase {
  const char* spec;
  size_t n;
};

// A multi-chunk bitmap payload (two full chunks and a tail), a list payload, 12-bit values.
const CorruptionCase kCorruptionCases[] = {{"spectral:chunk=256,theta=0.8", 2 * 256 + 70},
                                           {"spectral:chunk=256,theta=0.98", 2 * 256 + 70},
                                           {"spectral:chunk=64,theta=0.5,bits=13", 100}};

class SpectralCorruption : public ::testing::TestWithParam<CorruptionCase> {
 protected:
  void SetUp() override {
    codec_ = create_codec(GetParam().spec, tensor_of(n()));
    codec_->encode(laplace_vector(n(), 29, 1e-3), payload_);
    const auto spec = Spec::parse(GetParam().spec);
    chunk_ = std::stoul(spec.params.at("chunk"));
    chunks_ = parse_chunks(payload_, n(), chunk_);
    std::vector<float> accum(n(), 0.0f);
    ASSERT_NO_THROW(codec_->decode_add(payload_, accum));
  }
  size_t n() const { return GetParam().n; }

  std::unique_ptr<Codec> codec_;
  Bytes payload_;
  size_t chunk_ = 0;
  std::vector<ParsedChunk> chunks_;
};

TEST_P(SpectralCorruption, TruncatedAtEveryLength) {
  for (size_t len = 0; len < payload_.size(); ++len) {
    const Bytes truncated(payload_.begin(), payload_.begin() + static_cast<std::ptrdiff_t>(len));
    expect_rejected<PayloadError>(*codec_, truncated, n(), "length " + std::to_string(len));
  }
}

TEST_P(SpectralCorruption, TrailingBytes) {
  Bytes longer = payload_;
  longer.push_back(0);
  expect_rejected<PayloadError>(*codec_, longer, n(), "one trailing byte");
}

TEST_P(SpectralCorruption, HeaderAndBodyHeader) {
  Bytes bad = payload_;
  bad[1] = static_cast<uint8_t>(CodecId::kTopK);
  expect_rejected<MismatchError>(*codec_, bad, n(), "codec id");
  bad = payload_;
  bad[2] = 2;
  expect_rejected<PayloadError>(*codec_, bad, n(), "version");
  expect_rejected<PayloadError>(*codec_, payload_, n() + 1, "accumulator size");
  bad = payload_;
  bad[PayloadHeader::kSize] += 1;  // another valid chunk size
  expect_rejected<MismatchError>(*codec_, bad, n(), "chunk size");
  for (const uint8_t log2 : {0, 5, 17, 255}) {
    bad[PayloadHeader::kSize] = log2;
    expect_rejected<PayloadError>(*codec_, bad, n(), "chunk 2^" + std::to_string(log2));
  }
  for (const uint8_t bits : {0, 4, 17, 255}) {
    bad = payload_;
    bad[PayloadHeader::kSize + 1] = bits;
    expect_rejected<PayloadError>(*codec_, bad, n(), "bits " + std::to_string(bits));
  }
}

TEST_P(SpectralCorruption, ChunkHeaders) {
  const size_t at = chunks_.back().offset;  // the last chunk: every earlier one is valid
  Bytes bad = payload_;
  bad[at + 1] = 5;
  expect_rejected<PayloadError>(*codec_, bad, n(), "E = 5");
  bad[at + 1] = 255;
  expect_rejected<PayloadError>(*codec_, bad, n(), "E = 255");
  bad = payload_;
  bad[at + 1] = 0;
  bad[at] = 3;
  expect_rejected<PayloadError>(*codec_, bad, n(), "E = 0 with e_max != 0");
  for (const uint32_t count : {chunks_.back().count + 1, 0xffffffffu, 1000000u}) {
    bad = payload_;
    std::memcpy(bad.data() + at + 2, &count, 4);
    expect_rejected<PayloadError>(*codec_, bad, n(), "count " + std::to_string(count));
  }
  const uint32_t zero = 0;
  bad = payload_;
  std::memcpy(bad.data() + at + 2, &zero, 4);
  expect_rejected<PayloadError>(*codec_, bad, n(), "count 0 with E != 0");
  // The first chunk too.
  bad = payload_;
  bad[chunks_[0].offset + 1] = 9;
  expect_rejected<PayloadError>(*codec_, bad, n(), "first chunk E = 9");
}

TEST_P(SpectralCorruption, Positions) {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const ParsedChunk& chunk = chunks_[c];
    const size_t size = (c + 1) * chunk_ <= n() ? chunk_ : spectral_last_chunk(n(), chunk_);
    const size_t m = size / 2 + 1;
    const std::string where = "chunk " + std::to_string(c);
    if (chunk.bitmap) {
      const size_t last = chunk.positions + (m + 7) / 8 - 1;
      Bytes bad = payload_;
      bad[last] |= static_cast<uint8_t>(0x80);  // m % 8 != 0 here: past the last coefficient
      ASSERT_NE(m % 8, 0u);
      expect_rejected<PayloadError>(*codec_, bad, n(), where + " bitmap padding");
      bad = payload_;
      const uint32_t j = chunk.kept[0];
      bad[chunk.positions + j / 8] &= static_cast<uint8_t>(~(1u << (j % 8)));
      expect_rejected<PayloadError>(*codec_, bad, n(), where + " popcount below count");
      bad = payload_;
      for (size_t b = chunk.positions; b <= last; ++b) {
        if (bad[b] != 0xff) {
          bad[b] |= static_cast<uint8_t>(bad[b] + 1);
          break;
        }
      }
      expect_rejected<PayloadError>(*codec_, bad, n(), where + " popcount above count");
    } else {
      const size_t last = chunk.positions + 2 * (chunk.count - 1);
      Bytes bad = payload_;
      for (const uint16_t j : {static_cast<uint16_t>(m), static_cast<uint16_t>(0xffff)}) {
        std::memcpy(bad.data() + last, &j, 2);
        expect_rejected<PayloadError>(*codec_, bad, n(), where + " position " + std::to_string(j));
      }
      ASSERT_GE(chunk.count, 2u);
      bad = payload_;
      std::memcpy(bad.data() + last, bad.data() + last - 2, 2);
      expect_rejected<PayloadError>(*codec_, bad, n(), where + " repeated position");
    }
  }
}

TEST_P(SpectralCorruption, ValuePaddingBits) {
  const int bits = payload_[PayloadHeader::kSize + 1];
  for (const ParsedChunk& chunk : chunks_) {
    const size_t total = 2 * size_t{chunk.count} * static_cast<size_t>(bits);
    if (chunk.width == 0 || total % 8 == 0) continue;
    Bytes bad = payload_;
    bad[chunk.end - 1] |= 0x80;
    expect_rejected<PayloadError>(*codec_, bad, n(), "value padding");
    return;
  }
  GTEST_SKIP() << "no chunk with value padding";
}

TEST_P(SpectralCorruption, FuzzedPayloadsDecodeOrThrowGradwireErrors) {
  EXPECT_GT(testing::decode_mutations(*codec_, payload_, n(), 4321, 2000), 0u);
}

INSTANTIATE_TEST_SUITE_P(Payloads, SpectralCorruption, ::testing::ValuesIn(kCorruptionCases),
                         [](const ::testing::TestParamInfo<CorruptionCase>& info) {
                           return "case" + std::to_string(info.index);
                         });

TEST(SpectralCorruption, CasesCoverBothPositionFormatsAndValuePadding) {
  bool bitmap = false;
  bool list = false;
  for (const auto& c : kCorruptionCases) {
    auto codec = create_codec(c.spec, tensor_of(c.n));
    const Bytes payload = encode(*codec, laplace_vector(c.n, 29, 1e-3));
    const size_t chunk = std::stoul(Spec::parse(c.spec).params.at("chunk"));
    for (const auto& parsed : parse_chunks(payload, c.n, chunk)) {
      (parsed.bitmap ? bitmap : list) = true;
    }
  }
  EXPECT_TRUE(bitmap);
  EXPECT_TRUE(list);
}

}  // namespace
}  // namespace gradwire::compress
