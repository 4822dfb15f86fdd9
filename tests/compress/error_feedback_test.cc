#include "gradwire/compress/error_feedback.h"

#include <gtest/gtest.h>

#include <cmath>

#include "codec_test_util.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/half.h"

namespace gradwire::compress {
namespace {

using testing::random_vector;
using testing::tensor_of;

const ErrorFeedback& as_ef(const Codec& codec) {
  const auto* ef = dynamic_cast<const ErrorFeedback*>(&codec);
  if (!ef) throw std::runtime_error("codec is not wrapped in ErrorFeedback");
  return *ef;
}

// Over many steps: sum of decoded payloads + final residual == sum of gradients.
class ErrorFeedbackConservation : public ::testing::TestWithParam<const char*> {};

TEST_P(ErrorFeedbackConservation, MessageFace) {
  const size_t n = 3001;
  const int steps = 50;
  auto codec = create_codec(GetParam(), tensor_of(n));
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  for (int step = 0; step < steps; ++step) {
    const auto g = random_vector(n, 100 + step, 0.3f);
    for (size_t i = 0; i < n; ++i) given[i] += g[i];
    Bytes payload;
    codec->encode(g, payload);
    std::vector<float> decoded(n, 0.0f);
    codec->decode_add(payload, decoded);
    for (size_t i = 0; i < n; ++i) sent[i] += decoded[i];
  }
  const auto residual = as_ef(*codec).residual();
  ASSERT_EQ(residual.size(), n);
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(sent[i] + residual[i] - given[i]));
  }
  EXPECT_LT(worst, 2e-5) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Codecs, ErrorFeedbackConservation,
                         ::testing::Values("topk", "topk:density=0.3", "2bit",
                                           "2bit:threshold=0.05", "fp16:ef=1", "none:ef=1",
                                           "signsgd", "qsgd:levels=15,bucket=128,ef=1",
                                           "qsgd:levels=127,ef=1", "terngrad:ef=1", "bf16:ef=1"));

// Codecs that fold r += g into their first pass (FusedAccumulate) must give what the two
// steps give apart, bit for bit: the same payloads and the same residual, step after step.
class FusedAccumulateEquivalence : public ::testing::TestWithParam<const char*> {};

TEST_P(FusedAccumulateEquivalence, SamePayloadsAndResidualAsAccumulateThenEncode) {
  const size_t n = 20000 + 13;  // a tail outside the vector blocks
  const std::string spec = GetParam();
  const std::string join = spec.find(':') == std::string::npos ? ":" : ",";
  auto fused = create_codec(spec + join + "ef=1", tensor_of(n));
  auto plain = create_codec(spec + join + "ef=0", tensor_of(n));
  ASSERT_NE(dynamic_cast<FusedAccumulate*>(const_cast<Codec*>(&as_ef(*fused).inner())), nullptr)
      << spec << " does not fuse";
  std::vector<float> r(n, 0.0f);
  for (int step = 0; step < 6; ++step) {
    const auto g = random_vector(n, 7 + step, 0.5f);
    Bytes a, b;
    fused->encode(g, a);
    for (size_t i = 0; i < n; ++i) r[i] += g[i];
    plain->encode_residual(r, b);
    ASSERT_EQ(a, b) << spec << " step " << step;
    const auto residual = as_ef(*fused).residual();
    ASSERT_TRUE(std::equal(residual.begin(), residual.end(), r.begin()))
        << spec << " step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, FusedAccumulateEquivalence,
                         ::testing::Values("laplace-topk:density=0.01",
                                           "laplace-topk:density=0.01,center=median",
                                           "2bit:alpha=1", "signsgd"));

// Momentum correction against a plain reference: u = m u + g; a = u + r; send top-k(a);
// r = a with the sent entries zeroed; u zeroed at the sent entries (DGC's masking).
TEST(ErrorFeedback, MomentumCorrectionMatchesDgcReference) {
  const size_t n = 257;
  const float m = 0.9f;
  auto codec = create_codec("topk:density=0.1,momentum=0.9", tensor_of(n));
  EXPECT_EQ(codec->spec(), "topk:density=0.1,ef=1,momentum=0.9,warmup=0");
  std::vector<float> u(n, 0.0f), r(n, 0.0f);
  for (int step = 0; step < 30; ++step) {
    const auto g = random_vector(n, 500 + step, 1.0f);
    std::vector<float> a(n);
    for (size_t i = 0; i < n; ++i) {
      u[i] = m * u[i] + g[i];
      a[i] = u[i] + r[i];
    }
    Bytes payload;
    codec->encode(g, payload);
    const auto decoded = testing::decode(*codec, payload, n);
    size_t sent = 0;
    for (size_t i = 0; i < n; ++i) {
      if (decoded[i] != 0.0f) {
        ++sent;
        EXPECT_EQ(decoded[i], a[i]) << "step " << step << " element " << i;
        r[i] = 0.0f;
        u[i] = 0.0f;
      } else {
        r[i] = a[i];
      }
    }
    EXPECT_EQ(sent, 26u);  // ceil(0.1 * 257)
    const auto residual = as_ef(*codec).residual();
    for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(residual[i], r[i]) << "step " << step;
  }
}

TEST(ErrorFeedback, MomentumNeedsErrorFeedbackAndARange) {
  EXPECT_THROW(create_codec("topk:ef=0,momentum=0.9,warmup=0", tensor_of(4)), ConfigError);
  EXPECT_THROW(create_codec("2bit:momentum=1", tensor_of(4)), ConfigError);
  EXPECT_THROW(create_codec("2bit:momentum=-0.1", tensor_of(4)), ConfigError);
  EXPECT_EQ(canonical_spec("2bit:momentum=0"), "2bit:alpha=1,ef=1,threshold=auto");
}

TEST(ErrorFeedback, SpecHelpers) {
  EXPECT_TRUE(uses_error_feedback("topk"));
  EXPECT_TRUE(uses_error_feedback("fp16:ef=1"));
  EXPECT_FALSE(uses_error_feedback("2bit:ef=0"));
  EXPECT_FALSE(uses_error_feedback("none"));
  EXPECT_EQ(with_momentum("topk:density=0.01", 0.9), "topk:density=0.01,momentum=0.9");
}

TEST(ErrorFeedback, TopKResidualHoldsTheUnsentEntries) {
  auto codec = create_codec("topk:density=0.25", tensor_of(4));
  const std::vector<float> g1 = {1.0f, -4.0f, 2.0f, 3.0f};
  Bytes p1;
  codec->encode(g1, p1);
  const auto& ef = as_ef(*codec);
  EXPECT_EQ(std::vector<float>(ef.residual().begin(), ef.residual().end()),
            (std::vector<float>{1.0f, 0.0f, 2.0f, 3.0f}));
  // a = g2 + r = {1.5, 0, 2, 3.5}: sends 3.5, keeps the rest.
  const std::vector<float> g2 = {0.5f, 0.0f, 0.0f, 0.5f};
  Bytes p2;
  codec->encode(g2, p2);
  EXPECT_EQ(testing::decode(*codec, p2, 4), (std::vector<float>{0.0f, 0.0f, 0.0f, 3.5f}));
  EXPECT_EQ(std::vector<float>(ef.residual().begin(), ef.residual().end()),
            (std::vector<float>{1.5f, 0.0f, 2.0f, 0.0f}));
}

TEST(ErrorFeedback, TwoBitMatchesMxnetReference) {
  const size_t n = 517;
  const float t = 0.5f;
  auto codec = create_codec("2bit:threshold=0.5", tensor_of(n));
  std::vector<float> mxnet_residual(n, 0.0f);
  for (int step = 0; step < 20; ++step) {
    const auto g = random_vector(n, 200 + step, 0.4f);
    Bytes payload;
    codec->encode(g, payload);
    const auto decoded = testing::decode(*codec, payload, n);
    for (size_t i = 0; i < n; ++i) {
      // MXNet gradient_compression-inl.h: r += g; quantize; r -= decoded.
      float& r = mxnet_residual[i];
      r += g[i];
      float q = 0.0f;
      if (r >= t) {
        q = t;
        r -= t;
      } else if (r <= -t) {
        q = -t;
        r += t;
      }
      ASSERT_EQ(decoded[i], q) << "step " << step << " i " << i;
    }
    const auto residual = as_ef(*codec).residual();
    ASSERT_TRUE(std::equal(residual.begin(), residual.end(), mxnet_residual.begin()));
  }
}

TEST(ErrorFeedback, AdditiveFaceConservesWithScale) {
  const size_t n = 999;
  const float scale = 0.25f;  // e.g. 1 / world size
  auto codec = create_codec("fp16:ef=1", tensor_of(n));
  ASSERT_EQ(codec->additive_wire(), WireType::kFloat16);
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  std::vector<uint16_t> wire(n);
  std::vector<float> out(n);
  for (int step = 0; step < 30; ++step) {
    // Values near the top of half's range: the scale keeps them finite.
    const auto g = random_vector(n, 300 + step, 3000.0f);
    for (size_t i = 0; i < n; ++i) given[i] += g[i];
    codec->to_wire(g, scale, wire.data());
    codec->from_wire(wire.data(), out);
    for (size_t i = 0; i < n; ++i) sent[i] += out[i] / scale;
  }
  const auto residual = as_ef(*codec).residual();
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(sent[i] + residual[i], given[i], 1e-2) << i;  // float rounding of g + r
    EXPECT_LE(std::fabs(residual[i]), 8.0f) << i;             // bounded by half an fp16 ulp / scale
  }
}

TEST(ErrorFeedback, AdditiveFaceRefusedForNonAdditiveInner) {
  auto codec = create_codec("topk", tensor_of(4));
  std::vector<float> g(4, 1.0f), wire(4);
  EXPECT_THROW(codec->to_wire(g, 1.0f, wire.data()), Error);
  EXPECT_TRUE(as_ef(*codec).residual().empty());
}

TEST(ErrorFeedback, ResidualIsTiedToTheFirstSize) {
  auto codec = create_codec("topk", tensor_of(10));
  Bytes out;
  codec->encode(std::vector<float>(10, 1.0f), out);
  try {
    codec->encode(std::vector<float>(11, 1.0f), out);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("residual of 10 elements"), std::string::npos) << e.what();
  }
}

TEST(ErrorFeedback, SpecAndIdComeFromTheInnerCodec) {
  auto codec = create_codec("2bit:threshold=0.25", tensor_of(4));
  EXPECT_EQ(codec->id(), CodecId::kTwoBit);
  EXPECT_EQ(codec->spec(), "2bit:ef=1,threshold=0.25");
  EXPECT_EQ(as_ef(*codec).inner().spec(), "2bit:ef=0,threshold=0.25");
  EXPECT_THROW(ErrorFeedback(nullptr), Error);
}

TEST(ErrorFeedback, DecodeDelegates) {
  auto sender = create_codec("topk:density=0.5", tensor_of(6));
  auto receiver = create_codec("topk:density=0.5,ef=0,warmup=0", tensor_of(6));
  const std::vector<float> g = {1, -2, 3, -4, 5, -6};
  Bytes payload;
  sender->encode(g, payload);
  EXPECT_EQ(testing::decode(*sender, payload, 6), testing::decode(*receiver, payload, 6));
}

// A codec that refuses a non-finite gradient (int8, qsgd, signsgd and the other
// quantizers) leaves its error feedback as it was: the next finite gradient encodes exactly
// as if the refused one had not come. Before, the refused gradient stayed in the residual
// (NaN for good) and every later step of that tensor was refused too.
TEST(ErrorFeedback, ARefusedNonFiniteGradientLeavesTheStateAsItWas) {
  const size_t n = 1000;
  auto nan_gradient = random_vector(n, 7, 0.3f);
  nan_gradient[17] = std::nanf("");
  nan_gradient[400] = INFINITY;
  for (const char* spec : {"int8:ef=1", "qsgd:levels=15,bucket=128,ef=1", "signsgd",
                           "topk:density=0.1,momentum=0.9", "terngrad:ef=1"}) {
    SCOPED_TRACE(spec);
    auto refused = create_codec(spec, tensor_of(n));
    auto clean = create_codec(spec, tensor_of(n));
    const auto g1 = random_vector(n, 1, 0.3f), g3 = random_vector(n, 3, 0.3f);
    Bytes a, b;
    refused->encode(g1, a);
    clean->encode(g1, b);
    Bytes ignored;
    bool threw = false;
    try {
      refused->encode(nan_gradient, ignored);
    } catch (const Error&) {
      threw = true;
    }
    if (!threw) continue;  // this codec takes non-finite values (top-k sends them)
    a.clear();
    b.clear();
    refused->encode(g3, a);
    clean->encode(g3, b);
    // The coordinates the refused gradient made non-finite lose their residual (set to 0);
    // every other one is back to what it was, within a rounding of r + g - g.
    std::vector<float> da(n, 0.0f), db(n, 0.0f);
    refused->decode_add(a, da);
    clean->decode_add(b, db);
    const auto ra = as_ef(*refused).residual(), rb = as_ef(*clean).residual();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(ra[i])) << i;
      if (i == 17 || i == 400) continue;
      EXPECT_NEAR(da[i] + ra[i], db[i] + rb[i], 1e-5) << i;
    }
  }
  // The shared-scale face (int8 in allreduce) the same way.
  auto refused = create_codec("int8:ef=1", tensor_of(n));
  auto* face = refused->shared_scale();
  ASSERT_NE(face, nullptr);
  std::vector<float> maxima(face->blocks());
  EXPECT_THROW(face->local_maxima(nan_gradient, maxima), Error);
  const auto residual = as_ef(*refused).residual();
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(residual[i], 0.0f) << i;  // as before the step
}

}  // namespace
}  // namespace gradwire::compress
