// `sparseloco` (sparseloco_codec.cc) against a plain reference of SparseLoCo's rule: the
// top-k of every chunk by magnitude, quantized to 2^(b-1) group means with their signs, an
// accumulator that decays by beta and keeps what was not sent; its payload's size and its
// refusals. Checkpoints and corrupt payloads: codec_state_test.cc, payload_corruption_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "codec_test_util.h"
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/registry.h"
#include "sparseloco_reference.h"

namespace gradwire::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::random_vector;
using testing::reference_sent;
using testing::tensor_of;

// The accumulator e: the last floats of the codec's state (sparseloco_codec.cc).
std::vector<float> accumulator_of(const Codec& codec, size_t n) {
  Bytes state;
  codec.save_state(state);
  std::vector<float> e(n);
  std::memcpy(e.data(), state.data() + state.size() - 4 * n, 4 * n);
  return e;
}

TEST(SparseLoCo, SpecDefaultsAndRanges) {
  EXPECT_EQ(canonical_spec("sparseloco"),
            "sparseloco:beta=0.95,bits=2,chunk=4096,density=0.015625,ef=1");
  EXPECT_EQ(canonical_spec("sparseloco:ef=0,bits=1,chunk=64,density=0.1,beta=1"),
            "sparseloco:beta=1,bits=1,chunk=64,density=0.1,ef=0");
  EXPECT_EQ(create_codec("sparseloco", tensor_of(8))->id(), CodecId::kSparseLoCo);
  for (const char* spec :
       {"sparseloco:chunk=100", "sparseloco:chunk=1", "sparseloco:chunk=131072",
        "sparseloco:bits=0", "sparseloco:bits=5", "sparseloco:beta=1.5", "sparseloco:density=0",
        "sparseloco:density=2", "sparseloco:momentum=0.9"}) {
    EXPECT_THROW(create_codec(spec, tensor_of(8)), ConfigError) << spec;
  }
}

// Without an accumulator, a payload decodes to the reference's Q(top-k) of the input, at
// every width, with a shorter last chunk; k entries a chunk and nothing else.
TEST(SparseLoCo, SendsTheQuantizedTopKOfEveryChunk) {
  const size_t n = 1000;  // 15 chunks of 64 and one of 40
  const auto a = random_vector(n, 3);
  for (int bits = 1; bits <= 4; ++bits) {
    auto codec = create_codec("sparseloco:ef=0,chunk=64,density=0.1,bits=" + std::to_string(bits),
                              tensor_of(n));
    const auto got = decode(*codec, encode(*codec, a), n);
    EXPECT_EQ(got, reference_sent(a, 64, 0.1, bits)) << bits << " bits";
    const auto sent = std::count_if(got.begin(), got.end(), [](float v) { return v != 0.0f; });
    EXPECT_EQ(sent, 15 * 7 + 4) << bits << " bits";
  }
  // Two bits: each chunk's entries decode to two magnitudes with their signs, the smaller
  // one the mean of the chunk's 3 smallest selected magnitudes.
  auto codec = create_codec("sparseloco:ef=0,chunk=64,density=0.1", tensor_of(n));
  const auto got = decode(*codec, encode(*codec, a), n);
  std::vector<float> magnitudes;
  for (size_t i = 0; i < 64; ++i) {
    if (got[i] != 0.0f) magnitudes.push_back(std::fabs(got[i]));
    if (got[i] != 0.0f) EXPECT_EQ(std::signbit(got[i]), std::signbit(a[i])) << i;
  }
  std::sort(magnitudes.begin(), magnitudes.end());
  magnitudes.erase(std::unique(magnitudes.begin(), magnitudes.end()), magnitudes.end());
  EXPECT_EQ(magnitudes.size(), 2u);
}

// e <- beta e + a; s = Q(top-k of e); e <- e - s: every payload and the accumulator are
// the reference's, step after step; with beta = 1 nothing is lost (sum s + e = sum a).
TEST(SparseLoCo, AccumulatorDecaysAndKeepsWhatWasNotSent) {
  const size_t n = 300;
  for (const double beta : {0.95, 1.0}) {
    auto codec =
        create_codec("sparseloco:chunk=32,density=0.05,beta=" + std::to_string(beta), tensor_of(n));
    std::vector<float> e(n, 0.0f);
    std::vector<double> sent_sum(n, 0.0), input_sum(n, 0.0);
    for (int step = 0; step < 6; ++step) {
      const auto a = random_vector(n, 10 + static_cast<uint32_t>(step));
      for (size_t i = 0; i < n; ++i) e[i] = static_cast<float>(beta) * e[i] + a[i];
      const auto want = reference_sent(e, 32, 0.05, 2);
      for (size_t i = 0; i < n; ++i) e[i] -= want[i];
      const auto got = decode(*codec, encode(*codec, a), n);
      ASSERT_EQ(got, want) << "beta " << beta << ", step " << step;
      EXPECT_EQ(accumulator_of(*codec, n), e) << "beta " << beta << ", step " << step;
      for (size_t i = 0; i < n; ++i) {
        sent_sum[i] += got[i];
        input_sum[i] += a[i];
      }
    }
    if (beta == 1.0) {
      for (size_t i = 0; i < n; ++i) EXPECT_NEAR(sent_sum[i] + e[i], input_sum[i], 1e-5) << i;
    }
  }
}

// B = log2(chunk) bits a position and b a code: at chunk 4096, 2 bits and density 1/64 a
// payload is about 0.73% of fp32's bytes.
TEST(SparseLoCo, PayloadIsItsLayoutsSize) {
  const auto size_of = [](const std::string& spec, size_t n) {
    auto codec = create_codec(spec, tensor_of(n));
    return encode(*codec, random_vector(n, 1)).size();
  };
  // 10000 = 2 x 4096 + 1808: 2 x 64 + 29 entries of 14 bits, 3 x 2 levels.
  EXPECT_EQ(size_of("sparseloco", 10000), 8u + 12 + 3 * 2 * 4 + (157 * 14 + 7) / 8);
  const size_t million = 4096 * 256;
  const size_t big = size_of("sparseloco", million);
  EXPECT_EQ(big, 8u + 12 + 256 * 2 * 4 + 256 * 64 * 14 / 8);
  EXPECT_LT(static_cast<double>(big) / (4.0 * million), 0.0075);
  EXPECT_EQ(size_of("sparseloco:bits=4,chunk=256,density=0.25", 256),
            8u + 12 + 8 * 4 + 64 * 12 / 8);
  EXPECT_EQ(size_of("sparseloco", 0), 8u + 12);
  EXPECT_EQ(size_of("sparseloco", 1), 8u + 12 + 2 * 4 + 2);  // one entry of 14 bits
}

// A non-finite input is refused with the state as it was: the next finite one encodes as
// if the refused one had not come.
TEST(SparseLoCo, RefusesNonFiniteValuesAndChangesNothing) {
  const size_t n = 200;
  auto codec = create_codec("sparseloco:chunk=64,density=0.05", tensor_of(n));
  auto twin = create_codec("sparseloco:chunk=64,density=0.05", tensor_of(n));
  const auto a = random_vector(n, 1), b = random_vector(n, 2);
  encode(*codec, a);
  encode(*twin, a);
  auto bad = random_vector(n, 3);
  bad[17] = std::nanf("");
  Bytes out;
  EXPECT_THROW(codec->encode(bad, out), Error);
  // Finite inputs whose accumulation overflows: refused too.
  auto huge = std::vector<float>(n, 3.4e38f);
  auto overflow = create_codec("sparseloco:chunk=64,density=0.05,beta=1", tensor_of(n));
  encode(*overflow, huge);
  EXPECT_THROW(overflow->encode(huge, out), Error);
  EXPECT_EQ(encode(*codec, b), encode(*twin, b));
}

}  // namespace
}  // namespace gradwire::compress
