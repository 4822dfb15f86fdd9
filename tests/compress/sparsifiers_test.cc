// laplace-topk, gaussiank, randomk and dgc (src/gradwire/compress/sparsify/sparsifiers.h):
// round trips, achieved counts against k, random-k's shared-seed indices, error feedback,
// specs and corrupt payloads.
#include "gradwire/compress/sparsify/sparsifiers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "codec_test_util.h"
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/error_feedback.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::random_vector;
using testing::same_bits;
using testing::tensor_of;

const char* const kThresholdCodecs[] = {"laplace-topk", "gaussiank", "dgc"};
const char* const kAllCodecs[] = {"laplace-topk", "gaussiank", "dgc", "randomk"};

// --- inputs --------------------------------------------------------------------------------

std::vector<float> laplace_vector(size_t n, uint32_t seed, double b = 1e-3, double mu = 0.0) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    const double u = (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53 - 0.5;
    x = static_cast<float>(mu - b * std::copysign(std::log1p(-2.0 * std::fabs(u)), u));
  }
  return v;
}

// Heavy tails as real layers have them: Student-t (3 degrees of freedom) values with a
// log-normal scale per row of 256, and 5% exact zeros (dead units).
std::vector<float> heavy_tailed_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t3(3.0f);
  std::normal_distribution<float> log_scale(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> v(n);
  float scale = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % 256 == 0) scale = 1e-3f * std::exp(log_scale(rng));
    v[i] = unit(rng) < 0.05f ? 0.0f : scale * t3(rng);
  }
  return v;
}

// Positions of the k largest |a_i|, ties to the lowest position, increasing.
std::vector<uint32_t> brute_force_topk(const std::vector<float>& a, size_t k) {
  std::vector<uint32_t> order(a.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t x, uint32_t y) { return std::fabs(a[x]) > std::fabs(a[y]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<uint32_t> nonzero_positions(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0.0f) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

const SelectionStats& stats_of(const Codec& codec) {
  const SelectionStats* stats = selection_stats(codec);
  if (!stats) throw std::runtime_error("not a sparsifier");
  return *stats;
}

// --- round trips -----------------------------------------------------------------------------

// Without the exact fallback, a threshold codec sends exactly {i : |a_i| > t} (>= for dgc);
// with it, the exact top-k. Either way the values are exact and everything else is zero.
TEST(Sparsifiers, ThresholdCodecsSendTheSurvivorsExactly) {
  const size_t n = 100003;
  for (const char* name : kThresholdCodecs) {
    for (const uint32_t seed : {1u, 2u, 3u}) {
      auto codec = create_codec(std::string(name) + ":density=0.01,ef=0", tensor_of(n));
      const auto input = seed == 3 ? heavy_tailed_vector(n, seed) : laplace_vector(n, seed);
      const Bytes payload = encode(*codec, input);
      const auto out = decode(*codec, payload, n);
      const SelectionStats& stats = stats_of(*codec);
      EXPECT_EQ(stats.target, 1001u);
      size_t sent = 0;
      for (size_t i = 0; i < n; ++i) {
        if (out[i] != 0.0f) {
          ASSERT_EQ(out[i], input[i]) << name << " " << i;
          ++sent;
        }
      }
      EXPECT_EQ(sent, stats.selected) << name;
      if (stats.exact_fallback) {
        EXPECT_EQ(nonzero_positions(out), brute_force_topk(input, stats.target)) << name;
      } else {
        const bool at_least = std::string(name) == "dgc";
        for (size_t i = 0; i < n; ++i) {
          const float d = std::fabs(input[i]);
          const bool survives = at_least ? d >= stats.threshold : d > stats.threshold;
          ASSERT_EQ(out[i] != 0.0f, survives) << name << " seed " << seed << " i " << i;
        }
      }
    }
  }
}

TEST(Sparsifiers, EncodeResidualZeroesExactlyTheSentPositions) {
  const size_t n = 20000;
  for (const char* name : kAllCodecs) {
    auto codec = create_codec(std::string(name) + ":density=0.02,ef=0", tensor_of(n));
    auto a = laplace_vector(n, 4);
    const auto original = a;
    Bytes out;
    codec->encode_residual(a, out);
    const auto decoded = decode(*codec, out, n);
    size_t zeroed = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i] + decoded[i], original[i]) << name << " " << i;
      ASSERT_TRUE(a[i] == 0.0f || decoded[i] == 0.0f) << name << " " << i;
      zeroed += a[i] == 0.0f;
    }
    EXPECT_EQ(zeroed, stats_of(*codec).selected) << name;
  }
}

TEST(Sparsifiers, PayloadsUseTheTopKBodyUnderTheirOwnId) {
  const size_t n = 5000;
  const std::pair<const char*, CodecId> ids[] = {{"laplace-topk", CodecId::kLaplaceTopK},
                                                 {"gaussiank", CodecId::kGaussianK},
                                                 {"dgc", CodecId::kDgc},
                                                 {"randomk", CodecId::kRandomK}};
  for (const auto& [name, id] : ids) {
    auto codec = create_codec(std::string(name) + ":density=0.01", tensor_of(n));
    EXPECT_EQ(codec->id(), id);
    const Bytes payload = encode(*codec, laplace_vector(n, 5));
    EXPECT_EQ(payload[1], static_cast<uint8_t>(id)) << name;
    const size_t selected = stats_of(*codec).selected;
    if (id == CodecId::kRandomK) {
      EXPECT_EQ(payload.size(), PayloadHeader::kSize + 8 + 4 + 4 * selected);
    } else {
      EXPECT_EQ(payload[PayloadHeader::kSize + 4], static_cast<uint8_t>(TopKLayout::kIndexList));
      EXPECT_EQ(payload.size(), PayloadHeader::kSize + 4 + 1 + 8 * selected) << name;
    }
  }
}

TEST(Sparsifiers, DenseSelectionsUseTheBitmap) {
  const size_t n = 1003;  // not a multiple of 8
  for (const char* name : kThresholdCodecs) {
    auto codec = create_codec(std::string(name) + ":density=0.4,ef=0", tensor_of(n));
    const auto input = laplace_vector(n, 6);
    const Bytes payload = encode(*codec, input);
    const size_t selected = stats_of(*codec).selected;
    ASSERT_GT(selected, n / 16) << name;
    EXPECT_EQ(payload[PayloadHeader::kSize + 4], static_cast<uint8_t>(TopKLayout::kBitmap));
    EXPECT_EQ(payload.size(), PayloadHeader::kSize + 5 + (n + 7) / 8 + 4 * selected) << name;
    const auto out = decode(*codec, payload, n);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(out[i] == 0.0f || out[i] == input[i]) << name;
  }
}

TEST(Sparsifiers, DegenerateInputs) {
  for (const char* name : kAllCodecs) {
    const std::string spec = std::string(name) + ":density=0.01,ef=0";
    // One element.
    auto one = create_codec(spec, tensor_of(1));
    EXPECT_EQ(decode(*one, encode(*one, std::vector<float>{-2.5f}), 1), std::vector<float>{-2.5f})
        << name;
    // All zeros: whatever is sent decodes to zeros.
    auto zeros = create_codec(spec, tensor_of(4096));
    const std::vector<float> z(4096, 0.0f);
    EXPECT_EQ(decode(*zeros, encode(*zeros, z), 4096), z) << name;
    // Empty tensor.
    auto empty = create_codec(spec, tensor_of(0));
    EXPECT_EQ(decode(*empty, encode(*empty, std::vector<float>{}), 0), std::vector<float>{});
  }
}

TEST(Sparsifiers, NonFiniteInputFallsBackToExactTopK) {
  const size_t n = 50000;
  auto input = laplace_vector(n, 7);
  input[123] = std::numeric_limits<float>::quiet_NaN();
  input[4567] = -std::numeric_limits<float>::infinity();
  for (const char* name : kThresholdCodecs) {
    auto codec = create_codec(std::string(name) + ":density=0.001,ef=0", tensor_of(n));
    const auto out = decode(*codec, encode(*codec, input), n);
    EXPECT_TRUE(std::isnan(out[123])) << name;
    EXPECT_EQ(out[4567], -std::numeric_limits<float>::infinity()) << name;
    EXPECT_LE(stats_of(*codec).selected, 65u) << name;  // <= 1.3 k
  }
  // laplace-topk and gaussiank cannot fit at all: exact top-k (NaN ranks highest).
  for (const char* name : {"laplace-topk", "gaussiank"}) {
    auto codec = create_codec(std::string(name) + ":density=0.001,ef=0", tensor_of(n));
    const auto out = decode(*codec, encode(*codec, input), n);
    EXPECT_TRUE(stats_of(*codec).exact_fallback) << name;
    EXPECT_EQ(stats_of(*codec).selected, 50u) << name;
  }
}

TEST(Sparsifiers, ConstantTensorIsStillSent) {
  // Centred fits see no spread; they must not keep a constant tensor in the residual forever.
  const std::vector<float> input(1000, 0.25f);
  for (const char* spec : {"laplace-topk:center=median,density=0.01,ef=0,warmup=0",
                           "gaussiank:density=0.01,ef=0,warmup=0", "dgc:density=0.01,ef=0,warmup=0",
                           "laplace-topk:density=0.01,ef=0,warmup=0"}) {
    auto codec = create_codec(spec, tensor_of(input.size()));
    const auto out = decode(*codec, encode(*codec, input), input.size());
    const size_t sent = nonzero_positions(out).size();
    EXPECT_GE(sent, 8u) << spec;
    EXPECT_LE(sent, 13u) << spec;
  }
}

// --- achieved counts ---------------------------------------------------------------------------

struct CountCase {
  const char* input;
  size_t n;
  double density;
};

std::vector<float> input_of(const std::string& kind, size_t n, uint32_t seed) {
  if (kind == "laplace") return laplace_vector(n, seed);
  if (kind == "gaussian") return random_vector(n, seed, 1e-3f);
  return heavy_tailed_vector(n, seed);
}

class SelectionCounts : public ::testing::TestWithParam<CountCase> {};

TEST_P(SelectionCounts, LaplaceTopKStaysInTheBracket) {
  const CountCase& c = GetParam();
  for (const char* center : {"zero", "median"}) {
    auto codec = create_codec("laplace-topk:ef=0,warmup=0,center=" + std::string(center) +
                                  ",density=" + format_number(c.density),
                              tensor_of(c.n));
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const auto input = input_of(c.input, c.n, seed);
      const Bytes payload = encode(*codec, input);
      const SelectionStats& s = stats_of(*codec);
      const double k = static_cast<double>(s.target);
      const auto selected = static_cast<double>(s.selected);
      EXPECT_GE(selected, 0.8 * k) << c.input << " center=" << center << " seed " << seed;
      EXPECT_LE(selected, 1.2 * k) << c.input << " center=" << center << " seed " << seed;
      EXPECT_LE(s.counts, 8);
      EXPECT_EQ(nonzero_positions(decode(*codec, payload, c.n)).size(), s.selected);
      std::printf(
          "  laplace-topk %-8s %-6s N=%zu k=%zu: selected %zu (%.3f k), %d counts, "
          "%d passes%s\n",
          c.input, center, c.n, s.target, s.selected, selected / k, s.counts, s.full_passes,
          s.exact_fallback ? ", exact fallback" : "");
    }
  }
}

TEST_P(SelectionCounts, GaussianKAndDgcStayWithinTheirBounds) {
  const CountCase& c = GetParam();
  const std::pair<const char*, std::pair<double, double>> bounds[] = {
      {"gaussiank", {2.0 / 3.0, 4.0 / 3.0}}, {"dgc", {0.8, 1.3}}};
  for (const auto& [name, bound] : bounds) {
    auto codec = create_codec(std::string(name) + ":ef=0,density=" + format_number(c.density),
                              tensor_of(c.n));
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      encode(*codec, input_of(c.input, c.n, seed));
      const SelectionStats& s = stats_of(*codec);
      const double k = static_cast<double>(s.target);
      const auto selected = static_cast<double>(s.selected);
      EXPECT_LE(selected, bound.second * k) << name << " " << c.input;  // a hard bound
      EXPECT_GE(selected, bound.first * k) << name << " " << c.input;   // on these inputs
      std::printf("  %-12s %-8s N=%zu k=%zu: selected %zu (%.3f k), %d counts%s\n", name, c.input,
                  c.n, s.target, s.selected, selected / k, s.counts,
                  s.exact_fallback ? ", exact fallback" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, SelectionCounts,
    ::testing::Values(CountCase{"laplace", 1 << 20, 0.001}, CountCase{"gaussian", 1 << 20, 0.001},
                      CountCase{"heavy", 1 << 20, 0.001}, CountCase{"laplace", 100000, 0.01},
                      CountCase{"gaussian", 100000, 0.01}, CountCase{"heavy", 100000, 0.01}),
    [](const ::testing::TestParamInfo<CountCase>& info) {
      return std::string(info.param.input) + "_" + std::to_string(info.param.n) + "_" +
             std::to_string(info.index);
    });

// Error feedback changes the distribution (the residual piles up just under the threshold);
// the bracket must hold there too, and the residual must stay bounded.
TEST(SelectionCounts, LaplaceTopKStaysInTheBracketUnderErrorFeedback) {
  const size_t n = 1 << 18;
  for (const char* input : {"laplace", "gaussian", "heavy"}) {
    auto codec = create_codec("laplace-topk:density=0.001", tensor_of(n));
    for (uint32_t step = 0; step < 30; ++step) {
      encode(*codec, input_of(input, n, 100 + step));
      const SelectionStats& s = stats_of(*codec);
      const auto selected = static_cast<double>(s.selected);
      const auto k = static_cast<double>(s.target);
      EXPECT_GE(selected, 0.8 * k) << input << " step " << step;
      EXPECT_LE(selected, 1.2 * k) << input << " step " << step;
      if (step % 10 == 9) {
        std::printf(
            "  laplace-topk+ef %-8s step %u: selected %zu (%.3f k), %d counts, %d "
            "passes%s\n",
            input, step, s.selected, selected / k, s.counts, s.full_passes,
            s.exact_fallback ? ", exact fallback" : "");
      }
    }
  }
}

TEST(SelectionCounts, TightBracketAndFewRounds) {
  const size_t n = 200000;
  const auto input = random_vector(n, 8, 1e-3f);  // Gaussian: the model's t0 is far off
  // eps = 0 demands exactly k: the rounds cannot get there, so the exact fallback does.
  auto exact = create_codec("laplace-topk:density=0.001,eps=0,ef=0,warmup=0", tensor_of(n));
  const auto out = decode(*exact, encode(*exact, input), n);
  EXPECT_EQ(stats_of(*exact).selected, 200u);
  EXPECT_EQ(nonzero_positions(out), brute_force_topk(input, 200));
  // One round: whatever the first count gives, never more than (1 + eps) k.
  auto one = create_codec("laplace-topk:density=0.001,max_rounds=1,ef=0,warmup=0", tensor_of(n));
  encode(*one, input);
  EXPECT_EQ(stats_of(*one).counts, 1);
  EXPECT_LE(stats_of(*one).selected, 240u);
}

TEST(SelectionCounts, MedianCenterFollowsAShiftedDistribution) {
  const size_t n = 1 << 18;
  const auto input = laplace_vector(n, 9, 1e-3, 5e-3);  // mu = 5b
  auto median =
      create_codec("laplace-topk:center=median,density=0.001,ef=0,warmup=0", tensor_of(n));
  const auto out = decode(*median, encode(*median, input), n);
  const SelectionStats& s = stats_of(*median);
  EXPECT_GE(s.selected, 210u);
  EXPECT_LE(s.selected, 315u);
  EXPECT_EQ(s.counts, 1);  // the fit is right at once
  // Both tails are sent: elements far below mu as well as far above.
  size_t below = 0;
  for (size_t i = 0; i < n; ++i) below += out[i] != 0.0f && out[i] < 5e-3f;
  EXPECT_GT(below, s.selected / 4);
}

// --- randomk -----------------------------------------------------------------------------------

// The positions randomk sent: residual entries it zeroed (the input has no zeros).
std::vector<uint32_t> randomk_positions(Codec& codec, size_t n, Bytes& payload) {
  std::vector<float> a(n, 1.0f);
  payload.clear();
  codec.encode_residual(a, payload);
  std::vector<uint32_t> sent;
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == 0.0f) sent.push_back(static_cast<uint32_t>(i));
  }
  return sent;
}

TEST(RandomK, DecoderRegeneratesTheEncodersDistinctIndices) {
  for (const size_t n : {1, 2, 3, 17, 1000, 65536, 100003}) {
    auto codec = create_codec("randomk:density=0.05,ef=0,warmup=0", tensor_of(n));
    Bytes payload;
    const auto sent = randomk_positions(*codec, n, payload);
    const size_t k = topk_count(0.05, n);
    EXPECT_EQ(sent.size(), k) << n;  // distinct: k zeroed positions
    // Values of 1 at each position: a repeated index would decode to 2.
    const auto out = decode(*codec, payload, n);
    EXPECT_EQ(nonzero_positions(out), sent) << n;
    for (const uint32_t i : sent) ASSERT_EQ(out[i], 1.0f) << n;
  }
}

TEST(RandomK, SameSeedSameIndicesAcrossInstancesAndRanks) {
  const size_t n = 10000;
  auto a = create_codec("randomk:density=0.01,seed=42,ef=0,warmup=0", tensor_of(n));
  auto b = create_codec("randomk:density=0.01,seed=42,ef=0,warmup=0", tensor_of(n));
  const auto input = laplace_vector(n, 10);
  for (int step = 0; step < 5; ++step) EXPECT_EQ(encode(*a, input), encode(*b, input)) << step;
  // A receiver with another density still decodes: the payload carries k and the seed.
  auto receiver = create_codec("randomk:density=0.5,ef=0,warmup=0", tensor_of(n));
  const Bytes payload = encode(*a, input);
  EXPECT_EQ(decode(*receiver, payload, n), decode(*a, payload, n));
}

TEST(RandomK, StepsTensorsAndSeedsDrawDifferentIndices) {
  const size_t n = 100000;
  const auto draw = [&](const std::string& spec, const std::string& name, int steps) {
    auto codec = create_codec(spec, TensorInfo{name, {static_cast<int64_t>(n)}, LayerKind::kOther});
    Bytes payload;
    std::vector<std::vector<uint32_t>> out;
    for (int s = 0; s < steps; ++s) out.push_back(randomk_positions(*codec, n, payload));
    return out;
  };
  const auto overlap = [](const std::vector<uint32_t>& x, const std::vector<uint32_t>& y) {
    std::vector<uint32_t> both;
    std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(both));
    return both.size();
  };
  const auto steps = draw("randomk:density=0.01,ef=0,warmup=0", "fc1.weight", 3);
  const auto other_tensor = draw("randomk:density=0.01,ef=0,warmup=0", "fc2.weight", 1);
  const auto other_seed = draw("randomk:density=0.01,seed=1,ef=0,warmup=0", "fc1.weight", 1);
  // 1000 of 100000 each: independent draws share about 10.
  EXPECT_LT(overlap(steps[0], steps[1]), 40u);
  EXPECT_LT(overlap(steps[1], steps[2]), 40u);
  EXPECT_LT(overlap(steps[0], other_tensor[0]), 40u);
  EXPECT_LT(overlap(steps[0], other_seed[0]), 40u);
}

TEST(RandomK, EveryPositionIsEquallyLikely) {
  // 2000 steps of k = 16 of N = 64: each position is drawn 500 times in expectation.
  const size_t n = 64;
  auto codec = create_codec("randomk:density=0.25,ef=0,warmup=0", tensor_of(n));
  std::vector<int> hits(n, 0);
  Bytes payload;
  for (int step = 0; step < 2000; ++step) {
    for (const uint32_t i : randomk_positions(*codec, n, payload)) ++hits[i];
  }
  double chi2 = 0.0;
  for (const int h : hits) chi2 += (h - 500.0) * (h - 500.0) / 500.0;
  EXPECT_LT(chi2, 120.0);  // 63 degrees of freedom: p < 1e-5 above 120
}

// Recorded from the first build; a change here breaks compatibility between builds.
constexpr uint64_t kGoldenSeed = 9865103336131909842ull;
const std::vector<float> kGoldenPositions = {381, 804, 496, 800, 333};

TEST(RandomK, IndicesAreFixedByTheWireFormat) {
  // The positions are part of the wire format: every build must draw these for this seed.
  const size_t n = 1000;
  auto codec = create_codec("randomk:density=0.005,seed=7,ef=0,warmup=0", tensor_of(n));
  std::vector<float> input(n);
  for (size_t i = 0; i < n; ++i) input[i] = static_cast<float>(i);
  const Bytes payload = encode(*codec, input);
  uint64_t seed;
  std::memcpy(&seed, payload.data() + PayloadHeader::kSize, 8);
  std::vector<float> values(5);
  std::memcpy(values.data(), payload.data() + PayloadHeader::kSize + 12, 20);
  std::printf("  randomk golden: seed %llu, positions %g %g %g %g %g\n",
              static_cast<unsigned long long>(seed), values[0], values[1], values[2], values[3],
              values[4]);
  EXPECT_EQ(seed, kGoldenSeed);
  EXPECT_EQ(values, kGoldenPositions);
}

// --- error feedback --------------------------------------------------------------------------

class SparsifierConservation : public ::testing::TestWithParam<const char*> {};

TEST_P(SparsifierConservation, DecodedPlusResidualIsWhatWasFed) {
  const size_t n = 30011;
  const int steps = 50;
  auto codec = create_codec(GetParam(), tensor_of(n));
  const auto* ef = dynamic_cast<const ErrorFeedback*>(codec.get());
  ASSERT_NE(ef, nullptr);
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  for (int step = 0; step < steps; ++step) {
    const auto g = laplace_vector(n, 300 + step, 0.3);
    for (size_t i = 0; i < n; ++i) given[i] += g[i];
    Bytes payload;
    codec->encode(g, payload);
    std::vector<float> decoded(n, 0.0f);
    codec->decode_add(payload, decoded);
    for (size_t i = 0; i < n; ++i) sent[i] += decoded[i];
  }
  double worst = 0.0;
  double residual_norm = 0.0;
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(sent[i] + ef->residual()[i] - given[i]));
    residual_norm += static_cast<double>(ef->residual()[i]) * ef->residual()[i];
  }
  EXPECT_LT(worst, 1e-4) << GetParam();
  EXPECT_GT(residual_norm, 0.0) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Codecs, SparsifierConservation,
                         ::testing::Values("laplace-topk:density=0.01",
                                           "laplace-topk:density=0.01,center=median",
                                           "gaussiank:density=0.01", "dgc:density=0.01",
                                           "randomk:density=0.01", "randomk:density=0.2"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = std::to_string(info.index) + "_" + info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// DGC's momentum correction and masking, against a plain reference:
// u = m u + g; a = u + r; send C(a); r = a with the sent entries zeroed; u zeroed there too.
TEST(Dgc, MomentumCorrectionMatchesTheReference) {
  const size_t n = 20000;
  const float m = 0.9f;
  auto codec = create_codec("dgc:density=0.001,momentum=0.9", tensor_of(n));
  EXPECT_EQ(codec->spec(), "dgc:density=0.001,ef=1,momentum=0.9,sample=0.01,warmup=0");
  const auto& ef = dynamic_cast<const ErrorFeedback&>(*codec);
  std::vector<float> u(n, 0.0f), r(n, 0.0f);
  for (int step = 0; step < 20; ++step) {
    const auto g = laplace_vector(n, 700 + step);
    std::vector<float> a(n);
    for (size_t i = 0; i < n; ++i) {
      u[i] = m * u[i] + g[i];
      a[i] = u[i] + r[i];
    }
    Bytes payload;
    codec->encode(g, payload);
    const auto decoded = decode(*codec, payload, n);
    size_t sent = 0;
    for (size_t i = 0; i < n; ++i) {
      if (decoded[i] != 0.0f) {
        ++sent;
        ASSERT_EQ(decoded[i], a[i]) << "step " << step << " element " << i;
        r[i] = 0.0f;
        u[i] = 0.0f;
      } else {
        r[i] = a[i];
      }
    }
    EXPECT_GE(sent, 16u) << step;  // 0.8 k
    EXPECT_LE(sent, 26u) << step;  // 1.3 k
    for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(ef.residual()[i], r[i]) << "step " << step;
  }
}

// --- specs ---------------------------------------------------------------------------------------

TEST(SparsifierSpecs, CanonicalSpecsSpellOutTheDefaults) {
  EXPECT_EQ(canonical_spec("laplace-topk"),
            "laplace-topk:center=zero,density=0.001,ef=1,eps=0.2,max_rounds=8,warmup=0");
  EXPECT_EQ(
      canonical_spec("laplace-topk:density=1e-2,center=median,eps=0.1,max_rounds=3,ef=0,warmup=0"),
      "laplace-topk:center=median,density=0.01,ef=0,eps=0.1,max_rounds=3,warmup=0");
  EXPECT_EQ(canonical_spec("gaussiank"), "gaussiank:density=0.001,ef=1,warmup=0");
  EXPECT_EQ(canonical_spec("randomk"), "randomk:density=0.001,ef=1,seed=0,warmup=0");
  EXPECT_EQ(canonical_spec("randomk:seed=12345678901"),
            "randomk:density=0.001,ef=1,seed=12345678901,warmup=0");
  EXPECT_EQ(canonical_spec("dgc"), "dgc:density=0.001,ef=1,sample=0.01,warmup=0");
  EXPECT_EQ(canonical_spec("dgc:density=0.001,momentum=0.9"),
            "dgc:density=0.001,ef=1,momentum=0.9,sample=0.01,warmup=0");
  for (const char* text : {"laplace-topk", "laplace-topk:density=0.123456789,eps=0,max_rounds=64",
                           "gaussiank:ef=0,warmup=0", "randomk:density=1,seed=9", "dgc:sample=1",
                           "dgc:density=0.01,momentum=0.5"}) {
    const std::string canonical = canonical_spec(text);
    EXPECT_EQ(canonical_spec(canonical), canonical) << text;
    EXPECT_EQ(create_codec(canonical, tensor_of(100))->spec(), canonical) << text;
  }
  for (const char* name : kAllCodecs) {
    EXPECT_TRUE(uses_error_feedback(name)) << name;
    EXPECT_NE(selection_stats(*create_codec(name, tensor_of(4))), nullptr) << name;
  }
  EXPECT_EQ(selection_stats(*create_codec("topk", tensor_of(4))), nullptr);
}

TEST(SparsifierSpecs, BadValuesAreConfigErrors) {
  for (const char* spec :
       {"laplace-topk:density=0", "laplace-topk:density=1.5", "laplace-topk:density=x",
        "laplace-topk:center=mean", "laplace-topk:eps=-0.1", "laplace-topk:eps=1.5",
        "laplace-topk:max_rounds=0", "laplace-topk:max_rounds=65", "laplace-topk:max_rounds=2.5",
        "laplace-topk:sample=0.1", "gaussiank:density=-1", "gaussiank:eps=0.1", "randomk:density=0",
        "randomk:seed=-1", "randomk:seed=x", "dgc:density=2", "dgc:sample=0.001", "dgc:sample=1.5",
        "dgc:ef=0,momentum=0.9,warmup=0"}) {
    EXPECT_THROW(create_codec(spec, tensor_of(10)), ConfigError) << spec;
  }
}

// --- corrupt payloads ------------------------------------------------------------------------

template <typename E>
void expect_rejected(const Codec& codec, const Bytes& payload, size_t n, const std::string& what) {
  std::vector<float> accum = random_vector(n, 77);
  const auto before = accum;
  EXPECT_THROW(codec.decode_add(payload, accum), E) << what;
  EXPECT_TRUE(same_bits(accum, before)) << what << ": accumulator modified";
}

void put_u32(Bytes& bytes, size_t offset, uint32_t v) { std::memcpy(bytes.data() + offset, &v, 4); }
uint32_t get_u32(const Bytes& bytes, size_t offset) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

class SparsifierCorruption : public ::testing::TestWithParam<const char*> {};

TEST_P(SparsifierCorruption, TruncatedTrailingAndHeader) {
  for (const size_t n : {size_t{203}, size_t{2000}}) {  // bitmap (density 0.3) and index list
    for (const char* density : {"0.3", "0.005"}) {
      auto codec = create_codec(std::string(GetParam()) + ":ef=0,density=" + density, tensor_of(n));
      const Bytes payload = encode(*codec, laplace_vector(n, 11));
      std::vector<float> accum(n, 0.0f);
      ASSERT_NO_THROW(codec->decode_add(payload, accum));
      for (size_t len = 0; len < payload.size(); ++len) {
        const Bytes cut(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(len));
        expect_rejected<PayloadError>(*codec, cut, n, "length " + std::to_string(len));
      }
      Bytes longer = payload;
      longer.push_back(0);
      expect_rejected<PayloadError>(*codec, longer, n, "trailing byte");
      Bytes bad = payload;
      bad[1] = static_cast<uint8_t>(CodecId::kTopK);
      expect_rejected<MismatchError>(*codec, bad, n, "topk's id");
      bad[1] = 200;
      expect_rejected<PayloadError>(*codec, bad, n, "unknown id");
      bad = payload;
      bad[2] = 2;
      expect_rejected<PayloadError>(*codec, bad, n, "version");
      expect_rejected<PayloadError>(*codec, payload, n + 1, "receiving tensor size");
    }
  }
}

TEST_P(SparsifierCorruption, FuzzedPayloadsDecodeOrThrowGradwireErrors) {
  const size_t n = 203;
  auto codec = create_codec(std::string(GetParam()) + ":ef=0,density=0.05", tensor_of(n));
  const Bytes payload = encode(*codec, laplace_vector(n, 12));
  EXPECT_GT(testing::decode_mutations(*codec, payload, n, 99, 2000), 0u);
}

INSTANTIATE_TEST_SUITE_P(Codecs, SparsifierCorruption,
                         ::testing::Values("laplace-topk", "gaussiank", "dgc", "randomk"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

constexpr size_t kKOffset = PayloadHeader::kSize;
constexpr size_t kLayoutOffset = kKOffset + 4;
constexpr size_t kBodyOffset = kLayoutOffset + 1;

TEST(SparsifierCorruption, SparseBodyFields) {
  const size_t n = 2000;
  for (const char* name : kThresholdCodecs) {
    auto codec = create_codec(std::string(name) + ":density=0.005,ef=0", tensor_of(n));
    const Bytes payload = encode(*codec, laplace_vector(n, 13));
    ASSERT_EQ(payload[kLayoutOffset], static_cast<uint8_t>(TopKLayout::kIndexList)) << name;
    const uint32_t k = get_u32(payload, kKOffset);
    ASSERT_GE(k, 2u) << name;
    const size_t last = kBodyOffset + 4 * (k - 1);
    Bytes bad = payload;
    put_u32(bad, last, static_cast<uint32_t>(n));
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": index == N");
    put_u32(bad, last, 0xffffffffu);
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": index 2^32-1");
    bad = payload;
    put_u32(bad, last, get_u32(payload, last - 4));
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": repeated index");
    bad = payload;
    put_u32(bad, kBodyOffset, get_u32(payload, kBodyOffset + 4));
    put_u32(bad, kBodyOffset + 4, get_u32(payload, kBodyOffset));
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": decreasing indices");
    bad = payload;
    put_u32(bad, kKOffset, static_cast<uint32_t>(n + 1));
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": k > N");
    put_u32(bad, kKOffset, k - 1);
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": k - 1");
    put_u32(bad, kKOffset, k + 1);
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": k + 1");
    bad = payload;
    bad[kLayoutOffset] = 2;
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": unknown layout");
    bad[kLayoutOffset] = static_cast<uint8_t>(TopKLayout::kBitmap);
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": layout flipped");
  }
}

TEST(SparsifierCorruption, Bitmap) {
  const size_t n = 203;
  for (const char* name : kThresholdCodecs) {
    auto codec = create_codec(std::string(name) + ":density=0.5,ef=0", tensor_of(n));
    const Bytes payload = encode(*codec, laplace_vector(n, 14));
    ASSERT_EQ(payload[kLayoutOffset], static_cast<uint8_t>(TopKLayout::kBitmap)) << name;
    const size_t last_byte = kBodyOffset + (n + 7) / 8 - 1;
    Bytes bad = payload;
    bad[last_byte] |= 0x80;  // past N
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": padding bit");
    bad = payload;
    for (size_t b = kBodyOffset; b <= last_byte; ++b) {
      if (bad[b] != 0) {
        bad[b] &= static_cast<uint8_t>(bad[b] - 1);
        break;
      }
    }
    expect_rejected<PayloadError>(*codec, bad, n, std::string(name) + ": popcount below k");
  }
}

TEST(SparsifierCorruption, RandomKBody) {
  const size_t n = 1000;
  auto codec = create_codec("randomk:density=0.01,ef=0,warmup=0", tensor_of(n));
  const Bytes payload = encode(*codec, laplace_vector(n, 15));
  constexpr size_t kRandomKOffset = PayloadHeader::kSize + 8;
  ASSERT_EQ(get_u32(payload, kRandomKOffset), 10u);
  Bytes bad = payload;
  put_u32(bad, kRandomKOffset, static_cast<uint32_t>(n + 1));
  expect_rejected<PayloadError>(*codec, bad, n, "k > N");
  put_u32(bad, kRandomKOffset, 9);
  expect_rejected<PayloadError>(*codec, bad, n, "k - 1");
  put_u32(bad, kRandomKOffset, 11);
  expect_rejected<PayloadError>(*codec, bad, n, "k + 1");
  put_u32(bad, kRandomKOffset, 0xffffffffu);
  expect_rejected<PayloadError>(*codec, bad, n, "k = 2^32-1");
  // Any seed is a valid seed: a flipped seed decodes (to other positions).
  bad = payload;
  bad[PayloadHeader::kSize] ^= 1;
  std::vector<float> accum(n, 0.0f);
  EXPECT_NO_THROW(codec->decode_add(bad, accum));
}

// DGC's warm-up: 25%, 6.25%, 1.56%, 0.39% in four equal stages, then the target density.
TEST(DensityWarmup, ScheduleFollowsDgcStages) {
  DensitySchedule schedule(0.001, 8);
  const double expected[] = {0.25,     0.25,       0.0625,     0.0625, 0.015625,
                             0.015625, 0.00390625, 0.00390625, 0.001,  0.001};
  for (const double d : expected) EXPECT_DOUBLE_EQ(schedule.next(), d);
  DensitySchedule dense(0.5, 4);  // never below the target
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(dense.next(), 0.5);
  DensitySchedule off(0.01, 0);
  EXPECT_DOUBLE_EQ(off.next(), 0.01);
}

TEST(DensityWarmup, EverySparsifierSendsTheScheduledCount) {
  const size_t n = 20000;
  const auto input = random_vector(n, 11);
  for (const char* name : {"topk", "laplace-topk", "gaussiank", "dgc", "randomk"}) {
    const std::string spec = std::string(name) + ":density=0.001,warmup=4,ef=0";
    auto codec = create_codec(spec, tensor_of(n));
    EXPECT_NE(codec->spec().find("warmup=4"), std::string::npos) << codec->spec();
    for (const double density : {0.25, 0.0625, 0.015625, 0.00390625, 0.001, 0.001}) {
      const auto out = decode(*codec, encode(*codec, input), n);
      const size_t sent = static_cast<size_t>(
          std::count_if(out.begin(), out.end(), [](float v) { return v != 0.0f; }));
      const size_t k = topk_count(density, n);
      // Threshold codecs land within their bracket around k (sparsifiers.h); the others hit k.
      EXPECT_GE(sent, k * 2 / 3) << spec << " at density " << density;
      EXPECT_LE(sent, k * 4 / 3) << spec << " at density " << density;
      if (const SelectionStats* stats = selection_stats(*codec)) {
        EXPECT_EQ(stats->target, k) << spec << " at density " << density;
      }
    }
  }
  EXPECT_THROW(create_codec("topk:warmup=-1", tensor_of(10)), ConfigError);
  EXPECT_THROW(create_codec("dgc:warmup=x", tensor_of(10)), ConfigError);
}

}  // namespace
}  // namespace gradwire::compress
