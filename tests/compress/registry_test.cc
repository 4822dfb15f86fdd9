#include "gradwire/compress/registry.h"
#include "gradwire/core/spec.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <functional>

#include "codec_test_util.h"
#include "gradwire/compress/error_feedback.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

using testing::tensor_of;

std::string config_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ConfigError";
  return "";
}

TEST(CodecRegistry, NamesAreSortedAndIncludeTheBasics) {
  const auto names = codec_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const char* name : {"2bit", "filter-topk", "fp16", "none", "topk"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

TEST(CodecRegistry, UnknownCodecListsTheAvailableOnes) {
  EXPECT_EQ(config_error_of([] { create_codec("foo", tensor_of(4)); }),
            "unknown codec 'foo'; available: " + join(codec_names()));
  EXPECT_THROW(canonical_spec("topk2:density=0.1"), ConfigError);
}

TEST(CodecRegistry, UnknownKeyListsTheCodecsKeys) {
  const std::string message =
      config_error_of([] { create_codec("topk:desnity=0.1", tensor_of(4)); });
  EXPECT_NE(message.find("codec 'topk' has no parameter desnity"), std::string::npos) << message;
  EXPECT_NE(message.find("its parameters are: density, ef"), std::string::npos) << message;
  const std::string none_message = config_error_of([] { create_codec("none:x=1", tensor_of(4)); });
  EXPECT_NE(none_message.find("its parameters are: ef"), std::string::npos) << none_message;
}

TEST(CodecRegistry, BadValues) {
  for (const char* spec :
       {"topk:density=0", "topk:density=-0.1", "topk:density=1.5", "topk:density=abc",
        "topk:density=nan", "2bit:threshold=0", "2bit:threshold=-1", "2bit:threshold=1e39",
        "2bit:threshold=1e-50", "2bit:threshold=", "topk:ef=maybe,warmup=0", "none:ef=2"}) {
    EXPECT_THROW(create_codec(spec, tensor_of(4)), ConfigError) << spec;
  }
  EXPECT_NE(config_error_of([] {
              create_codec("topk:density=2", tensor_of(4));
            }).find("density=2 is out of range (0, 1]"),
            std::string::npos);
}

TEST(CodecRegistry, MalformedAndDuplicateKeys) {
  EXPECT_THROW(create_codec("topk:density=0.1,density=0.2", tensor_of(4)), ConfigError);
  EXPECT_THROW(create_codec("topk:density", tensor_of(4)), ConfigError);
  EXPECT_THROW(create_codec("", tensor_of(4)), ConfigError);
}

TEST(CodecRegistry, TensorTooLargeForThe32BitCount) {
  EXPECT_THROW(create_codec("topk", TensorInfo{"big", {1ll << 16, 1ll << 16}, LayerKind::kOther}),
               ConfigError);
}

TEST(CodecRegistry, CanonicalSpecsSpellOutEveryKey) {
  EXPECT_EQ(canonical_spec("topk"), "topk:density=0.01,ef=1,warmup=0");
  EXPECT_EQ(canonical_spec("topk:density=0.001"), "topk:density=0.001,ef=1,warmup=0");
  EXPECT_EQ(canonical_spec(" topk : ef = 0 , density = 1e-3 "), "topk:density=0.001,ef=0,warmup=0");
  EXPECT_EQ(canonical_spec("2bit"), "2bit:alpha=1,ef=1,threshold=auto");
  EXPECT_EQ(canonical_spec("2bit:alpha=0.5"), "2bit:alpha=0.5,ef=1,threshold=auto");
  EXPECT_EQ(canonical_spec("2bit:threshold=0.1,ef=off"), "2bit:ef=0,threshold=0.1");
  EXPECT_EQ(canonical_spec("none"), "none:ef=0");
  EXPECT_EQ(canonical_spec("fp16"), "fp16:ef=0");
  EXPECT_EQ(canonical_spec("fp16:ef=true"), "fp16:ef=1");
}

TEST(CodecRegistry, SpecOfEveryCodecEqualsCanonicalSpecAndIsStable) {
  for (const char* text :
       {"none", "none:ef=1", "fp16", "fp16:ef=1", "topk", "topk:density=0.07",
        "topk:density=0.123456789012345,ef=0,warmup=0", "topk:density=1", "2bit",
        "2bit:threshold=0.1", "2bit:threshold=0.123456789012345", "2bit:ef=0,threshold=3"}) {
    const auto codec = create_codec(text, tensor_of(100));
    const std::string canonical = canonical_spec(text);
    EXPECT_EQ(codec->spec(), canonical) << text;
    EXPECT_EQ(canonical_spec(canonical), canonical) << text;
    EXPECT_EQ(create_codec(canonical, tensor_of(3))->spec(), canonical) << text;
  }
}

TEST(CodecRegistry, EfDefaultsPerCodec) {
  const auto wrapped = [](const char* spec) {
    auto codec = create_codec(spec, tensor_of(4));
    return dynamic_cast<ErrorFeedback*>(codec.get()) != nullptr;
  };
  EXPECT_FALSE(wrapped("none"));
  EXPECT_FALSE(wrapped("fp16"));
  EXPECT_TRUE(wrapped("topk"));
  EXPECT_TRUE(wrapped("2bit"));
  EXPECT_TRUE(wrapped("none:ef=1"));
  EXPECT_FALSE(wrapped("topk:ef=0,warmup=0"));
}

TEST(CodecRegistry, IdsMatchNames) {
  EXPECT_EQ(create_codec("none", tensor_of(1))->id(), CodecId::kNone);
  EXPECT_EQ(create_codec("fp16", tensor_of(1))->id(), CodecId::kFp16);
  EXPECT_EQ(create_codec("topk", tensor_of(1))->id(), CodecId::kTopK);
  EXPECT_EQ(create_codec("2bit", tensor_of(1))->id(), CodecId::kTwoBit);
}

}  // namespace
}  // namespace gradwire::compress
