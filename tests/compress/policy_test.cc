#include "gradwire/compress/policy.h"

#include <gtest/gtest.h>

#include "codec_test_util.h"
#include "gradwire/compress/layer_codecs.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

const TensorInfo kConv{"conv2.weight", {64, 32, 5, 5}, LayerKind::kConvWeight};      // 51200
const TensorInfo kSmallConv{"conv1.weight", {32, 1, 5, 5}, LayerKind::kConvWeight};  // 800
const TensorInfo kFc{"fc1.weight", {128, 1024}, LayerKind::kFcWeight};               // 131072
const TensorInfo kBias{"fc1.bias", {128}, LayerKind::kBias};
const TensorInfo kNorm{"bn.weight", {10000}, LayerKind::kNorm};

TEST(CodecPolicyTest, OneSpecForEveryTensor) {
  const auto policy = CodecPolicy::parse("topk:density=0.01");
  EXPECT_EQ(policy.canonical(), "topk:density=0.01,ef=1,warmup=0");
  EXPECT_EQ(policy.spec_for(kConv), "topk:density=0.01,ef=1,warmup=0");
  EXPECT_EQ(policy.spec_for(kBias), "topk:density=0.01,ef=1,warmup=0");
}

TEST(CodecPolicyTest, PerKindWithCommasInsideSpecs) {
  const auto policy =
      CodecPolicy::parse("conv=topk:density=0.05,ef=0,warmup=0,fc=2bit, other=fp16");
  EXPECT_EQ(policy.spec_for(kConv), "topk:density=0.05,ef=0,warmup=0");
  EXPECT_EQ(policy.spec_for(kFc), "2bit:alpha=1,ef=1,threshold=auto");
  EXPECT_EQ(policy.spec_for(kBias), "fp16:ef=0");  // not named: uses other
  EXPECT_EQ(
      policy.canonical(),
      "conv=topk:density=0.05,ef=0,warmup=0,fc=2bit:alpha=1,ef=1,threshold=auto,bias=fp16:ef=0,"
      "norm=fp16:ef=0,other=fp16:ef=0");
  // The canonical form parses back to the same policy.
  EXPECT_EQ(CodecPolicy::parse(policy.canonical()).canonical(), policy.canonical());
  EXPECT_EQ(CodecPolicy::parse("fc=2bit").spec_for(kConv), "none:ef=0");  // other defaults to none
}

TEST(CodecPolicyTest, PerKindErrors) {
  EXPECT_THROW(CodecPolicy::parse("conv=topk,conv=2bit"), ConfigError);
  EXPECT_THROW(CodecPolicy::parse("conv=,fc=2bit"), ConfigError);
  EXPECT_THROW(CodecPolicy::parse("conv=zip"), ConfigError);
  EXPECT_THROW(CodecPolicy::parse("hylo:bogus=1"), ConfigError);
  EXPECT_THROW(CodecPolicy::parse("hylo:p_min=0.5,p_max=0.1"), ConfigError);
}

TEST(CodecPolicyTest, PerTensorItemsComeBeforeTheKind) {
  // auto's fit writes policies like this one: one tensor by name, the rest by kind.
  const auto policy = CodecPolicy::parse("other=none,@fc1.weight=fp16,conv=fp16");
  EXPECT_EQ(policy.spec_for(kFc), "fp16:ef=0");
  EXPECT_EQ(policy.spec_for(kBias), "none:ef=0");
  EXPECT_EQ(policy.spec_for(kConv), "fp16:ef=0");
  EXPECT_EQ(policy.canonical(),
            "conv=fp16:ef=0,fc=none:ef=0,bias=none:ef=0,norm=none:ef=0,other=none:ef=0,"
            "@fc1.weight=fp16:ef=0");
  EXPECT_EQ(CodecPolicy::parse(policy.canonical()).canonical(), policy.canonical());
  const std::vector<TensorInfo> model{kConv, kFc, kBias};
  EXPECT_NO_THROW(policy.check_tensors(model));
  // A name the model lacks is an error, not a policy that silently does nothing.
  const std::vector<TensorInfo> other{kConv, kBias};
  EXPECT_THROW(policy.check_tensors(other), ConfigError);
  EXPECT_THROW(CodecPolicy::parse("@fc1.weight=fp16,@fc1.weight=none"), ConfigError);
  EXPECT_THROW(CodecPolicy::parse("@fc1.weight="), ConfigError);
}

TEST(CodecPolicyTest, HyloFollowsTheDesign) {
  const auto policy = CodecPolicy::parse("hylo");
  EXPECT_EQ(policy.spec_for(kSmallConv), "none:ef=0");  // under t_size = 8000
  EXPECT_EQ(policy.spec_for(kBias), "none:ef=0");
  EXPECT_EQ(policy.spec_for(kNorm), "none:ef=0");  // norms always f32
  EXPECT_EQ(policy.spec_for(kFc), "2bit:alpha=1,ef=1,threshold=auto");
  EXPECT_EQ(policy.spec_for(kConv),
            "filter-topk:ef=1,gamma=0.5,p_max=0.3,p_min=0.02,rate=auto,t_size=8000");
  EXPECT_EQ(CodecPolicy::parse(policy.canonical()).canonical(), policy.canonical());
}

TEST(CodecPolicyTest, MomentumReachesEveryTensor) {
  const auto hylo = CodecPolicy::parse("hylo").with_momentum(0.9);
  EXPECT_EQ(hylo.spec_for(kBias), "none:ef=1,momentum=0.9");
  EXPECT_EQ(hylo.spec_for(kFc), "2bit:alpha=1,ef=1,momentum=0.9,threshold=auto");
  EXPECT_EQ(CodecPolicy::parse(hylo.canonical()).spec_for(kFc), hylo.spec_for(kFc));
  const auto per_kind = CodecPolicy::parse("conv=topk,other=none").with_momentum(0.5);
  EXPECT_EQ(per_kind.spec_for(kBias), "none:ef=1,momentum=0.5");
  EXPECT_EQ(per_kind.spec_for(kConv), "topk:density=0.01,ef=1,momentum=0.5,warmup=0");
}

TEST(CodecPolicyTest, MomentumOnADenseCodecIsPlainMomentum) {
  // Masking is for codecs that send a subset; a lossless codec with momentum correction
  // must send exactly the momentum u = m u + g.
  auto codec = create_codec("none:ef=1,momentum=0.5", testing::tensor_of(3));
  std::vector<float> u(3, 0.0f);
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> g{1.0f, -2.0f, 0.5f};
    for (size_t i = 0; i < 3; ++i) u[i] = 0.5f * u[i] + g[i];
    Bytes payload;
    codec->encode(g, payload);
    EXPECT_EQ(testing::decode(*codec, payload, 3), u) << "step " << step;
  }
}

TEST(FilterTopKTest, SendsTheLargestFiltersWhole) {
  const TensorInfo tensor{"w", {4, 1, 1, 3}, LayerKind::kConvWeight};
  auto codec = create_codec("filter-topk:rate=0.5,ef=0", tensor);
  const std::vector<float> w{0.1f, 0.1f, 0.1f, 3, 0, 0, 0, 0, -0.2f, 1, 1, 1};
  const auto decoded = testing::decode(*codec, testing::encode(*codec, w), 12);
  EXPECT_EQ(decoded, (std::vector<float>{0, 0, 0, 3, 0, 0, 0, 0, 0, 1, 1, 1}));
}

TEST(FilterTopKTest, ResidualKeepsTheOtherFilters) {
  const TensorInfo tensor{"w", {3, 2}, LayerKind::kConvWeight};
  auto codec = create_codec("filter-topk:rate=0.3", tensor);  // ef on: one filter a step
  const std::vector<float> g{1, 1, 5, 5, 2, 2};
  auto d1 = testing::decode(*codec, testing::encode(*codec, g), 6);
  EXPECT_EQ(d1, (std::vector<float>{0, 0, 5, 5, 0, 0}));
  const std::vector<float> zero(6, 0.0f);
  auto d2 = testing::decode(*codec, testing::encode(*codec, zero), 6);
  EXPECT_EQ(d2, (std::vector<float>{0, 0, 0, 0, 2, 2}));  // from the residual
}

TEST(FilterTopKTest, AdaptiveRateFollowsHylo) {
  EXPECT_DOUBLE_EQ(hylo_filter_rate(8000, 0.3, 0.02, 0.5, 8000), 0.3);
  EXPECT_DOUBLE_EQ(hylo_filter_rate(32000, 0.3, 0.02, 0.5, 8000), 0.15);
  EXPECT_DOUBLE_EQ(hylo_filter_rate(8000000, 0.3, 0.02, 0.5, 8000), 0.02);  // clipped
}

TEST(FilterTopKTest, CorruptPayloadsAreRejected) {
  const TensorInfo tensor{"w", {4, 3}, LayerKind::kConvWeight};
  auto codec = create_codec("filter-topk:rate=0.5,ef=0", tensor);
  const std::vector<float> w{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};
  const Bytes good = testing::encode(*codec, w);
  std::vector<float> accum(12, 7.0f);
  for (size_t cut = 0; cut < good.size(); ++cut) {
    Bytes bad(good.begin(), good.begin() + cut);
    EXPECT_THROW(codec->decode_add(bad, accum), Error) << cut;
  }
  Bytes swapped = good;  // indices are at offset 8 + 12: make them decrease
  std::swap(swapped[20], swapped[24]);
  EXPECT_THROW(codec->decode_add(swapped, accum), PayloadError);
  Bytes shape = good;  // filter size field
  shape[12] = 4;
  EXPECT_THROW(codec->decode_add(shape, accum), MismatchError);
  EXPECT_EQ(accum, std::vector<float>(12, 7.0f));
}

}  // namespace
}  // namespace gradwire::compress
