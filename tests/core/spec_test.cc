#include "gradwire/core/spec.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "gradwire/core/error.h"

namespace gradwire {
namespace {

std::string config_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ConfigError";
  return "";
}

TEST(SpecParse, NameOnly) {
  const Spec spec = Spec::parse("topk");
  EXPECT_EQ(spec.name, "topk");
  EXPECT_TRUE(spec.params.empty());
  EXPECT_EQ(spec.to_string(), "topk");
}

TEST(SpecParse, ParamsAreTrimmedAndSorted) {
  const Spec spec = Spec::parse(" topk : ef = 1 , density=0.01 ");
  EXPECT_EQ(spec.name, "topk");
  ASSERT_EQ(spec.params.size(), 2u);
  EXPECT_EQ(spec.params.at("density"), "0.01");
  EXPECT_EQ(spec.params.at("ef"), "1");
  EXPECT_EQ(spec.to_string(), "topk:density=0.01,ef=1");
}

TEST(SpecParse, EmptyValueIsKept) {
  const Spec spec = Spec::parse("x:key=");
  EXPECT_EQ(spec.params.at("key"), "");
}

TEST(SpecParse, RejectsMalformedText) {
  EXPECT_THROW(Spec::parse(""), ConfigError);
  EXPECT_THROW(Spec::parse(":a=1"), ConfigError);
  EXPECT_THROW(Spec::parse("topk:"), ConfigError);
  EXPECT_THROW(Spec::parse("topk:density"), ConfigError);
  EXPECT_THROW(Spec::parse("topk:=1"), ConfigError);
  EXPECT_THROW(Spec::parse("topk:density=0.1,"), ConfigError);
  EXPECT_NE(config_error_of([] { Spec::parse("topk:density"); }).find("expected key=value"),
            std::string::npos);
}

TEST(SpecParse, RejectsDuplicateKeys) {
  const std::string message = config_error_of([] { Spec::parse("topk:density=0.1,density=0.2"); });
  EXPECT_NE(message.find("'density' given twice"), std::string::npos) << message;
}

TEST(SpecReader, ReadsTypedValuesWithDefaults) {
  const Spec spec = Spec::parse("c:d=0.25,i=-7,b=on,s=hello");
  SpecReader reader(spec, "codec");
  EXPECT_DOUBLE_EQ(reader.get_double("d", 1.0), 0.25);
  EXPECT_EQ(reader.get_int("i", 0), -7);
  EXPECT_TRUE(reader.get_bool("b", false));
  EXPECT_EQ(reader.get_string("s", ""), "hello");
  EXPECT_DOUBLE_EQ(reader.get_double("missing", 3.5), 3.5);
  EXPECT_EQ(reader.get_int_in("missing_int", 4, 0, 10), 4);
  EXPECT_TRUE(reader.has("d"));
  EXPECT_FALSE(reader.has("missing"));
  EXPECT_NO_THROW(reader.finish());
}

TEST(SpecReader, BoolSpellings) {
  for (const char* yes : {"1", "true", "on", "yes"}) {
    const Spec spec = Spec::parse(std::string("c:b=") + yes);
    SpecReader reader(spec, "codec");
    EXPECT_TRUE(reader.get_bool("b", false)) << yes;
  }
  for (const char* no : {"0", "false", "off", "no"}) {
    const Spec spec = Spec::parse(std::string("c:b=") + no);
    SpecReader reader(spec, "codec");
    EXPECT_FALSE(reader.get_bool("b", true)) << no;
  }
  const Spec spec = Spec::parse("c:b=maybe");
  SpecReader reader(spec, "codec");
  EXPECT_THROW(reader.get_bool("b", true), ConfigError);
}

TEST(SpecReader, RejectsBadNumbers) {
  for (const char* text : {"abc", "1.5x", "", "1e999", "nan", "inf"}) {
    const Spec spec = Spec::parse(std::string("c:d=") + text);
    SpecReader reader(spec, "codec");
    EXPECT_THROW(reader.get_double("d", 0.0), ConfigError) << text;
  }
  for (const char* text : {"1.5", "x", "", "99999999999999999999999"}) {
    const Spec spec = Spec::parse(std::string("c:i=") + text);
    SpecReader reader(spec, "codec");
    EXPECT_THROW(reader.get_int("i", 0), ConfigError) << text;
  }
}

TEST(SpecReader, RangeChecks) {
  const Spec spec = Spec::parse("c:d=2,i=11");
  SpecReader reader(spec, "codec");
  EXPECT_THROW(reader.get_double_in("d", 0.5, 0.0, 1.0), ConfigError);
  EXPECT_THROW(reader.get_int_in("i", 0, 0, 10), ConfigError);
  const std::string message = config_error_of([&] { reader.get_double_in("d", 0.5, 0.0, 1.0); });
  EXPECT_NE(message.find("codec 'c': parameter d=2"), std::string::npos) << message;
}

TEST(SpecReader, FinishListsUnknownAndKnownKeys) {
  const Spec spec = Spec::parse("topk:density=0.1,desnity=0.2");
  SpecReader reader(spec, "codec");
  reader.get_double("density", 0.01);
  reader.get_bool("ef", true);
  const std::string message = config_error_of([&] { reader.finish(); });
  EXPECT_NE(message.find("has no parameter desnity"), std::string::npos) << message;
  EXPECT_NE(message.find("its parameters are: density, ef"), std::string::npos) << message;
}

TEST(SpecReader, FinishWithNoKnownKeys) {
  const Spec spec = Spec::parse("none:x=1");
  SpecReader reader(spec, "codec");
  const std::string message = config_error_of([&] { reader.finish(); });
  EXPECT_NE(message.find("takes no parameters"), std::string::npos) << message;
}

TEST(Join, JoinsWithSeparator) {
  EXPECT_EQ(join({}), "");
  EXPECT_EQ(join({"a"}), "a");
  EXPECT_EQ(join({"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(join({"a", "b"}, "|"), "a|b");
}

}  // namespace
}  // namespace gradwire
