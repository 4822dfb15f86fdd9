#include <gtest/gtest.h>

#include <cmath>

#include "codec_test_util.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::compress {
namespace {

using namespace std::chrono_literals;

const TensorInfo kMatrix{"fc.weight", {6, 10}, LayerKind::kFcWeight};

// u v^T: exactly rank one.
std::vector<float> rank_one(float scale) {
  std::vector<float> m(60);
  for (size_t i = 0; i < 6; ++i) {
    for (size_t k = 0; k < 10; ++k) m[i * 10 + k] = scale * float(i + 1) * float(k % 3 - 1.0f);
  }
  return m;
}

TEST(PowerSgdTest, SpecAndFaces) {
  EXPECT_EQ(canonical_spec("powersgd"), "powersgd:ef=1,min_rate=0,rank=2,seed=0,start=0");
  EXPECT_EQ(canonical_spec("powersgd:rank=4,ef=0,min_rate=2"),
            "powersgd:ef=0,min_rate=2,rank=4,seed=0,start=0");
  EXPECT_THROW(canonical_spec("powersgd:min_rate=-1"), ConfigError);
  EXPECT_THROW(canonical_spec("powersgd:rank=0"), ConfigError);
  EXPECT_THROW(canonical_spec("powersgd:density=1"), ConfigError);
  auto matrix = create_codec("powersgd", kMatrix);
  EXPECT_NE(matrix->low_rank(), nullptr);
  EXPECT_FALSE(matrix->additive_wire());
  auto vector = create_codec("powersgd", testing::tensor_of(7));  // 1-D: uncompressed
  EXPECT_EQ(vector->low_rank(), nullptr);
  EXPECT_EQ(vector->additive_wire(), WireType::kFloat32);
}

// DDP's min_compression_rate: a matrix whose factors are not min_rate times smaller than
// it goes dense, exactly, like a vector; one whose factors are stays low rank.
TEST(PowerSgdTest, AMatrixThatCompressesTooLittleGoesDense) {
  const TensorInfo conv1{"conv1.weight", {32, 1, 5, 5}, LayerKind::kConvWeight};
  const TensorInfo conv2{"conv2.weight", {64, 32, 5, 5}, LayerKind::kConvWeight};
  // conv1 at rank 8: (32 + 25) 8 = 456 floats for 800; 2 x 456 >= 800.
  auto dense = create_codec("powersgd:rank=8,min_rate=2", conv1);
  EXPECT_EQ(dense->low_rank(), nullptr);
  EXPECT_EQ(dense->additive_wire(), WireType::kFloat32);
  const auto g = testing::random_vector(800, 5, 1.0f);
  EXPECT_EQ(testing::decode(*dense, testing::encode(*dense, g), 800), g);
  EXPECT_NE(create_codec("powersgd:rank=8", conv1)->low_rank(), nullptr);  // min_rate 0
  // conv2: (64 + 800) 8 = 6912 floats for 51200: compressed.
  EXPECT_NE(create_codec("powersgd:rank=8,min_rate=2", conv2)->low_rank(), nullptr);
  // The bound itself: 6 x 10 at rank 2 sends 32 for 60, 1.875 times smaller.
  EXPECT_NE(create_codec("powersgd:rank=2,min_rate=1.8", kMatrix)->low_rank(), nullptr);
  EXPECT_EQ(create_codec("powersgd:rank=2,min_rate=1.875", kMatrix)->low_rank(), nullptr);
}

// Orthonormal vectors of length n: the DCT-II basis, u_k[i] = cos(pi (i + 1/2) k / n).
std::vector<float> dct_vector(size_t n, size_t k) {
  std::vector<float> u(n);
  double norm = 0;
  for (size_t i = 0; i < n; ++i) {
    u[i] = static_cast<float>(std::cos(M_PI * (double(i) + 0.5) * double(k) / double(n)));
    norm += double(u[i]) * u[i];
  }
  for (float& v : u) v = static_cast<float>(v / std::sqrt(norm));
  return u;
}

// sum_k s_k u_k v_k^T (rows x cols, row-major), with u_k, v_k DCT vectors 1, 2, ...
std::vector<float> with_singular_values(size_t rows, size_t cols, const std::vector<double>& s) {
  std::vector<float> m(rows * cols, 0.0f);
  for (size_t k = 0; k < s.size(); ++k) {
    const auto u = dct_vector(rows, k + 1), v = dct_vector(cols, k + 1);
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < cols; ++j) m[i * cols + j] += static_cast<float>(s[k] * u[i] * v[j]);
    }
  }
  return m;
}

// A gradient whose singular values span four decades, as a layer's late in training under
// clipping: warm-started PowerSGD of its rank sends every direction, the weakest too (its
// singular value within 1%). Q is orthonormalised before P = MQ, as DDP's hook does:
// without it P = M M^T P has columns of norm sigma_i^2 (1e-4 to 1e-12 here), the weak ones
// lost to fp32 rounding beside the strong, and an absolute epsilon in the normalisation
// (1e-8 there before) shrinks them further.
TEST(PowerSgdTest, WarmStartKeepsADirectionFourDecadesBelowTheStrongest) {
  const size_t rows = 32, cols = 40;
  const std::vector<double> s{1e-2, 1e-4, 1e-5, 1e-6};
  const auto m = with_singular_values(rows, cols, s);
  auto codec = create_codec("powersgd:rank=4,ef=0", {"fc.weight", {32, 40}, LayerKind::kFcWeight});
  std::vector<float> decoded;
  for (int step = 0; step < 4; ++step) {
    decoded = testing::decode(*codec, testing::encode(*codec, m), rows * cols);
  }
  for (size_t k = 0; k < s.size(); ++k) {
    const auto u = dct_vector(rows, k + 1), v = dct_vector(cols, k + 1);
    double got = 0;
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < cols; ++j) got += double(u[i]) * decoded[i * cols + j] * v[j];
    }
    EXPECT_NEAR(got, s[k], 0.01 * s[k]) << "singular value " << k;
  }
}

// Orthonormalisation without an epsilon: a column of P that vanishes becomes zero, so a
// zero gradient decodes to zeros (not NaN) and one of lower rank than the codec's is sent
// exactly; and a Q that a zero gradient zeroed restarts, so the gradients after it are
// sent again (not zero for ever, as a warm start from Q = 0 would leave them).
TEST(PowerSgdTest, AGradientOfLowerRankThanTheCodecsIsSentExactly) {
  const TensorInfo info{"fc.weight", {32, 40}, LayerKind::kFcWeight};
  const auto m = with_singular_values(32, 40, {1.0, 0.5});  // rank 2 of 4
  auto codec = create_codec("powersgd:rank=4,ef=0", info);
  const std::vector<float> zeros(32 * 40, 0.0f);
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(testing::decode(*codec, testing::encode(*codec, zeros), zeros.size()), zeros);
  }
  for (int step = 0; step < 3; ++step) {
    const auto decoded = testing::decode(*codec, testing::encode(*codec, m), m.size());
    for (size_t i = 0; i < m.size(); ++i) ASSERT_NEAR(decoded[i], m[i], 1e-5) << step << " " << i;
  }
}

TEST(PowerSgdTest, MessageFaceReconstructsARankOneMatrix) {
  auto codec = create_codec("powersgd:rank=1,ef=0", kMatrix);
  const auto m = rank_one(0.5f);
  const Bytes payload = testing::encode(*codec, m);
  EXPECT_EQ(payload.size(), 8u + 12u + 4u * (6 + 10));  // header, dims, P and Q
  const auto decoded = testing::decode(*codec, payload, 60);
  for (size_t i = 0; i < 60; ++i) EXPECT_NEAR(decoded[i], m[i], 1e-5) << i;
}

TEST(PowerSgdTest, ErrorFeedbackConservesOnTheMessageFace) {
  auto codec = create_codec("powersgd:rank=1", kMatrix);
  std::vector<double> fed(60, 0.0), sent(60, 0.0);
  std::vector<float> last(60);
  for (int step = 0; step < 20; ++step) {
    const auto g = testing::random_vector(60, 40 + step, 1.0f);
    for (size_t i = 0; i < 60; ++i) fed[i] += g[i];
    const auto decoded = testing::decode(*codec, testing::encode(*codec, g), 60);
    for (size_t i = 0; i < 60; ++i) sent[i] += decoded[i];
  }
  // What is still owed is bounded (the error stays in E, not lost): feeding zeros drains
  // part of it, and the running sums stay close.
  double gap = 0, total = 0;
  for (size_t i = 0; i < 60; ++i) {
    gap += (fed[i] - sent[i]) * (fed[i] - sent[i]);
    total += fed[i] * fed[i];
  }
  EXPECT_LT(gap, total);
}

TEST(PowerSgdTest, CorruptPayloadsAreRejected) {
  auto codec = create_codec("powersgd:rank=2", kMatrix);
  const Bytes good = testing::encode(*codec, testing::random_vector(60, 3, 1.0f));
  std::vector<float> accum(60, 1.0f);
  for (size_t cut = 0; cut < good.size(); ++cut) {
    EXPECT_THROW(codec->decode_add(std::span(good).first(cut), accum), Error) << cut;
  }
  Bytes bad_rank = good;
  bad_rank[16] = 3;  // rank field
  EXPECT_THROW(codec->decode_add(bad_rank, accum), MismatchError);
  EXPECT_EQ(accum, std::vector<float>(60, 1.0f));
}

TEST(PowerSgdTest, AllreduceStrategyAveragesFactorsAndKeepsVectorsExact) {
  const std::vector<TensorInfo> tensors{kMatrix, {"fc.bias", {6}, LayerKind::kBias}};
  std::vector<std::vector<float>> results(2);
  std::vector<uint64_t> sent(2), dense(2);
  comm::run_local_ranks(2, 5s, [&](comm::Collectives& c) {
    strategy::AllreduceStrategy s(c, {.codec = "powersgd:rank=1,ef=0"});
    std::vector<float> w(60), b(6);
    s.start(tensors, {w, b});
    // Both ranks hold multiples of the same rank-one matrix: the mean is rank one too.
    auto g = rank_one(c.rank() == 0 ? 1.0f : 3.0f);
    std::vector<float> bias(6, float(c.rank()));
    s.synchronize({g, bias});
    const auto expected = rank_one(2.0f);
    for (size_t i = 0; i < 60; ++i) EXPECT_NEAR(g[i], expected[i], 1e-4) << i;
    EXPECT_EQ(bias, std::vector<float>(6, 0.5f));
    results[c.rank()] = g;
    sent[c.rank()] = s.traffic().bytes_contributed;
    dense[c.rank()] = s.traffic().bytes_dense;
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(dense[0], (60u + 6u) * 4);
  EXPECT_EQ(sent[0], (6u + 10u + 6u) * 4);  // P (6x1) + Q (10x1) + the bias
}

// start=2: the first two steps are dense and exact, as DDP's start_powerSGD_iter; then
// the factors. On both faces.
TEST(PowerSgdTest, DenseStartSendsTheGradientItselfFirst) {
  auto codec = create_codec("powersgd:rank=1,ef=0,start=2", kMatrix);
  std::vector<float> g(60);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.7f * static_cast<float>(i));  // rank > 1
  for (int step = 0; step < 3; ++step) {
    Bytes payload;
    codec->encode(g, payload);
    std::vector<float> decoded(60, 0.0f);
    codec->decode_add(payload, decoded);
    if (step < 2) {
      EXPECT_EQ(decoded, g) << step;
      EXPECT_EQ(payload.size(), PayloadHeader::kSize + 12 + 60 * 4) << step;
    } else {
      EXPECT_NE(decoded, g);
      EXPECT_EQ(payload.size(), PayloadHeader::kSize + 12 + (6 + 10) * 4);
    }
  }
  std::vector<std::vector<float>> firsts(2), thirds(2);
  comm::run_local_ranks(2, 5s, [&](comm::Collectives& c) {
    strategy::AllreduceStrategy s(c, {.codec = "powersgd:rank=1,ef=0,start=2"});
    std::vector<float> w(60);
    s.start(std::vector<TensorInfo>{kMatrix}, {w});
    for (int step = 0; step < 3; ++step) {
      std::vector<float> grad(60);
      for (size_t i = 0; i < 60; ++i) grad[i] = g[i] * static_cast<float>(c.rank() + 1);
      s.synchronize({grad});
      if (step == 0) firsts[c.rank()] = grad;
      if (step == 2) thirds[c.rank()] = grad;
    }
  });
  for (size_t i = 0; i < 60; ++i) EXPECT_FLOAT_EQ(firsts[0][i], 1.5f * g[i]) << i;  // the mean
  EXPECT_EQ(thirds[0], thirds[1]);
  bool exact = true;
  for (size_t i = 0; i < 60; ++i) exact = exact && thirds[0][i] == 1.5f * g[i];
  EXPECT_FALSE(exact);  // rank one now
}

}  // namespace
}  // namespace gradwire::compress
