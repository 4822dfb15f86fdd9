// Header, names and round trips of the built-in codecs (ef=0 unless said otherwise).
#include "gradwire/compress/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "codec_test_util.h"
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/error_feedback.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/half.h"

namespace gradwire::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::random_vector;
using testing::tensor_of;

TEST(PayloadHeader, WritesEightLittleEndianBytes) {
  Bytes out;
  ByteWriter writer(out);
  PayloadHeader{CodecId::kTopK, 3, 0x01020304u}.write(writer);
  EXPECT_EQ(out, (Bytes{0x47, 3, 3, 0, 0x04, 0x03, 0x02, 0x01}));
  ASSERT_EQ(out.size(), PayloadHeader::kSize);

  ByteReader reader(out);
  const PayloadHeader header = PayloadHeader::read_expected(reader, CodecId::kTopK, 3, 0x01020304u);
  EXPECT_EQ(header.codec, CodecId::kTopK);
  EXPECT_EQ(header.version, 3);
  EXPECT_EQ(header.count, 0x01020304u);
  EXPECT_EQ(reader.remaining(), 0u);
}

TEST(PayloadHeader, MismatchedCodecMessage) {
  Bytes out;
  ByteWriter writer(out);
  PayloadHeader{CodecId::kTopK, 1, 10}.write(writer);
  ByteReader reader(out);
  try {
    PayloadHeader::read_expected(reader, CodecId::kTwoBit, 1, 10);
    FAIL() << "expected MismatchError";
  } catch (const MismatchError& e) {
    EXPECT_STREQ(e.what(),
                 "payload was encoded by codec 'topk' but this rank decodes with '2bit' (ranks "
                 "must use the same --compressor)");
  }
}

TEST(PayloadHeader, RejectsEachBadField) {
  const auto read = [](Bytes bytes) {
    ByteReader reader(bytes);
    PayloadHeader::read_expected(reader, CodecId::kNone, 1, 5);
  };
  const Bytes good = {0x47, 1, 1, 0, 5, 0, 0, 0};
  EXPECT_NO_THROW(read(good));
  Bytes bad = good;
  bad[0] = 0x48;
  EXPECT_THROW(read(bad), PayloadError);
  bad = good;
  bad[1] = 2;
  EXPECT_THROW(read(bad), MismatchError);
  bad[1] = 200;  // not a codec at all: corruption, not a configuration mismatch
  EXPECT_THROW(read(bad), PayloadError);
  bad = good;
  bad[2] = 2;
  EXPECT_THROW(read(bad), PayloadError);
  bad = good;
  bad[3] = 1;
  EXPECT_THROW(read(bad), PayloadError);
  bad = good;
  bad[4] = 6;
  EXPECT_THROW(read(bad), PayloadError);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(read(Bytes(good.begin(), good.begin() + n)), PayloadError) << n;
  }
}

TEST(CodecNames, IdsLayerKindsAndWireTypes) {
  EXPECT_STREQ(codec_id_name(CodecId::kNone), "none");
  EXPECT_STREQ(codec_id_name(CodecId::kFp16), "fp16");
  EXPECT_STREQ(codec_id_name(CodecId::kTopK), "topk");
  EXPECT_STREQ(codec_id_name(CodecId::kTwoBit), "2bit");
  EXPECT_STREQ(layer_kind_name(LayerKind::kConvWeight), "conv_weight");
  EXPECT_STREQ(layer_kind_name(LayerKind::kFcWeight), "fc_weight");
  EXPECT_STREQ(layer_kind_name(LayerKind::kBias), "bias");
  EXPECT_STREQ(layer_kind_name(LayerKind::kNorm), "norm");
  EXPECT_STREQ(layer_kind_name(LayerKind::kOther), "other");
  EXPECT_EQ(wire_type_size(WireType::kFloat32), 4u);
  EXPECT_EQ(wire_type_size(WireType::kFloat16), 2u);
}

TEST(TensorInfo, Numel) {
  EXPECT_EQ((TensorInfo{"w", {32, 1, 5, 5}, LayerKind::kConvWeight}.numel()), 800u);
  EXPECT_EQ((TensorInfo{"s", {}, LayerKind::kOther}.numel()), 1u);
  EXPECT_EQ((TensorInfo{"e", {3, 0}, LayerKind::kOther}.numel()), 0u);
  EXPECT_THROW((TensorInfo{"bad", {3, -1}, LayerKind::kOther}.numel()), ConfigError);
  EXPECT_THROW((TensorInfo{"huge", {1ll << 40, 1ll << 40}, LayerKind::kOther}.numel()),
               ConfigError);
}

// --- none ---------------------------------------------------------------------------------

TEST(NoneCodec, RoundTripIsExactAndAdds) {
  auto codec = create_codec("none", tensor_of(1000));
  const auto input = random_vector(1000, 1);
  const Bytes payload = encode(*codec, input);
  EXPECT_EQ(payload.size(), PayloadHeader::kSize + 4 * 1000);
  std::vector<float> accum(1000, 2.0f);
  codec->decode_add(payload, accum);
  for (size_t i = 0; i < input.size(); ++i) EXPECT_EQ(accum[i], 2.0f + input[i]);
}

TEST(NoneCodec, EncodeAppendsWithoutReadingOldBytes) {
  auto codec = create_codec("none", tensor_of(3));
  Bytes out = {1, 2, 3};
  const std::vector<float> input = {1.0f, 2.0f, 3.0f};
  codec->encode(input, out);
  ASSERT_EQ(out.size(), 3 + PayloadHeader::kSize + 12);
  EXPECT_EQ(decode(*codec, std::span<const uint8_t>(out).subspan(3), 3), input);
}

TEST(NoneCodec, EncodeResidualLeavesZero) {
  auto codec = create_codec("none", tensor_of(50));
  auto a = random_vector(50, 2);
  const auto original = a;
  Bytes out;
  codec->encode_residual(a, out);
  EXPECT_EQ(decode(*codec, out, 50), original);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float x) { return x == 0.0f; }));
}

TEST(NoneCodec, AdditiveFaceWithScale) {
  auto codec = create_codec("none", tensor_of(37));
  ASSERT_EQ(codec->additive_wire(), WireType::kFloat32);
  const auto x = random_vector(37, 3);
  const auto y = random_vector(37, 4);
  std::vector<float> wx(37), wy(37);
  codec->to_wire(x, 0.5f, wx.data());
  codec->to_wire(y, 0.5f, wy.data());
  // What an allreduce would do: sum the wire values elementwise.
  for (size_t i = 0; i < 37; ++i) wx[i] += wy[i];
  std::vector<float> out(37);
  codec->from_wire(wx.data(), out);
  for (size_t i = 0; i < 37; ++i) EXPECT_FLOAT_EQ(out[i], 0.5f * (x[i] + y[i]));

  auto a = x;
  std::vector<float> wire(37);
  codec->to_wire_residual(a, 0.25f, wire.data());
  for (size_t i = 0; i < 37; ++i) {
    EXPECT_EQ(wire[i], 0.25f * x[i]);
    EXPECT_EQ(a[i], 0.0f);  // power-of-two scale: exact
  }
  EXPECT_THROW(codec->to_wire_residual(a, 0.0f, wire.data()), Error);
}

// --- fp16 ---------------------------------------------------------------------------------

TEST(Fp16Codec, RoundTripWithinHalfPrecision) {
  auto codec = create_codec("fp16", tensor_of(1001));
  const auto input = random_vector(1001, 5, 10.0f);
  const Bytes payload = encode(*codec, input);
  EXPECT_EQ(payload.size(), PayloadHeader::kSize + 2 * 1001);
  const auto out = decode(*codec, payload, 1001);
  for (size_t i = 0; i < input.size(); ++i) {
    // Relative error of a normal half is at most 2^-11; absolute 2^-25 near zero.
    EXPECT_NEAR(out[i], input[i], std::fabs(input[i]) * 0x1p-11f + 0x1p-25f) << i;
    EXPECT_EQ(out[i], half_to_float(float_to_half(input[i])));
  }
}

TEST(Fp16Codec, EncodeResidualIsTheCastError) {
  auto codec = create_codec("fp16", tensor_of(200));
  auto a = random_vector(200, 6);
  const auto original = a;
  Bytes out;
  codec->encode_residual(a, out);
  const auto decoded = decode(*codec, out, 200);
  for (size_t i = 0; i < 200; ++i) EXPECT_EQ(a[i], original[i] - decoded[i]);
}

TEST(Fp16Codec, AdditiveFaceScalesBeforeTheCast) {
  auto codec = create_codec("fp16", tensor_of(64));
  ASSERT_EQ(codec->additive_wire(), WireType::kFloat16);
  // 60000 * 4 ranks would overflow half; pre-scaled by 1/4 the sum fits.
  std::vector<float> x(64, 60000.0f);
  std::vector<uint16_t> wire(64);
  codec->to_wire(x, 0.25f, wire.data());
  std::vector<uint16_t> sum(64);
  for (size_t i = 0; i < 64; ++i) {
    sum[i] = float_to_half(4.0f * half_to_float(wire[i]));  // a 4-rank allreduce of halves
  }
  std::vector<float> out(64);
  codec->from_wire(sum.data(), out);
  for (const float v : out) EXPECT_EQ(v, 60000.0f);

  auto a = random_vector(64, 7);
  const auto original = a;
  codec->to_wire_residual(a, 0.125f, wire.data());
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_EQ(wire[i], float_to_half(0.125f * original[i]));
    EXPECT_EQ(a[i], original[i] - half_to_float(wire[i]) / 0.125f);
  }
}

// --- not additive -------------------------------------------------------------------------

TEST(Codec, LossyCodecsAreNotAdditive) {
  for (const char* spec : {"topk", "2bit", "topk:ef=0", "2bit:ef=0"}) {
    auto codec = create_codec(spec, tensor_of(8));
    EXPECT_FALSE(codec->additive_wire().has_value()) << spec;
    std::vector<float> x(8, 1.0f), wire(8);
    try {
      codec->to_wire(x, 1.0f, wire.data());
      FAIL() << spec;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not additive"), std::string::npos) << e.what();
    }
    EXPECT_THROW(codec->from_wire(wire.data(), x), Error);
    EXPECT_THROW(codec->to_wire_residual(x, 1.0f, wire.data()), Error);
    // A refused to_wire() on an error-feedback codec must not have touched its residual.
    if (const auto* ef = dynamic_cast<const ErrorFeedback*>(codec.get())) {
      EXPECT_TRUE(ef->residual().empty()) << spec;
    }
  }
}

TEST(Codec, DefaultEncodeResidualIsEncodeMinusDecode) {
  // The base-class path (used by codecs that do not override it), via 2bit's encode().
  auto codec = create_codec("2bit:ef=0", tensor_of(100));
  auto a = random_vector(100, 8);
  const auto original = a;
  Bytes out;
  codec->Codec::encode_residual(a, out);
  const auto decoded = decode(*codec, out, 100);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(a[i], original[i] - decoded[i]);
}

TEST(Codec, EmptyTensors) {
  for (const char* spec : {"none", "fp16", "topk", "2bit"}) {
    auto codec = create_codec(spec, tensor_of(0));
    std::vector<float> empty;
    Bytes out;
    codec->encode(empty, out);
    EXPECT_NO_THROW(codec->decode_add(out, empty)) << spec;
  }
}

TEST(Codec, HelperFunctions) {
  EXPECT_EQ(topk_count(0.01, 0), 0u);
  EXPECT_EQ(topk_count(0.01, 1), 1u);
  EXPECT_EQ(topk_count(0.01, 100), 1u);
  EXPECT_EQ(topk_count(0.01, 101), 2u);
  EXPECT_EQ(topk_count(0.07, 100), 7u);  // 0.07 * 100 is 7.000000000000001 in double
  EXPECT_EQ(topk_count(1.0, 100), 100u);
  EXPECT_EQ(topk_count(1e-9, 1000), 1u);
  EXPECT_EQ(format_number(0.01), "0.01");
  EXPECT_EQ(format_number(0.5f), "0.5");
  EXPECT_EQ(format_number(0.1f), "0.1");
  EXPECT_EQ(format_number(1e-5), "1e-05");
  EXPECT_EQ(bare_spec("topk", {{"density", "0.5"}}), "topk:density=0.5,ef=0");
  EXPECT_EQ(checked_count(7, CodecId::kNone), 7u);
  EXPECT_THROW(checked_count(size_t{1} << 32, CodecId::kNone), Error);
}

}  // namespace
}  // namespace gradwire::compress
