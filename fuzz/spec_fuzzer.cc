// libFuzzer target for the text users type: --compressor policies and codec specs. Any text
// must either parse or raise gradwire::ConfigError; what parses must be canonical-stable
// (the canonical form parses to itself) and create codecs for every layer kind.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gradwire/compress/policy.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace {

using gradwire::compress::CodecPolicy;
using gradwire::compress::LayerKind;
using gradwire::compress::TensorInfo;

[[noreturn]] void fail(const std::string& text, const std::string& what) {
  std::fprintf(stderr, "spec fuzz failure for \"%s\": %s\n", text.c_str(), what.c_str());
  std::abort();
}

const TensorInfo kTensors[] = {
    {"conv.weight", {8, 3, 3, 3}, LayerKind::kConvWeight},
    {"fc.weight", {10, 300}, LayerKind::kFcWeight},
    {"fc.bias", {10}, LayerKind::kBias},
    {"bn.weight", {8}, LayerKind::kNorm},
    {"other", {17}, LayerKind::kOther},
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256) return 0;  // specs are short; longer inputs only slow the search
  const std::string text(reinterpret_cast<const char*>(data), size);
  CodecPolicy policy;
  try {
    policy = CodecPolicy::parse(text);
  } catch (const gradwire::ConfigError&) {
    return 0;
  }
  const std::string canonical = policy.canonical();
  try {
    if (CodecPolicy::parse(canonical).canonical() != canonical) {
      fail(text, "canonical form \"" + canonical + "\" is not stable");
    }
  } catch (const gradwire::ConfigError& e) {
    fail(text, "canonical form \"" + canonical + "\" does not parse: " + e.what());
  }
  for (const TensorInfo& tensor : kTensors) {
    try {
      const auto codec = policy.create(tensor);
      if (codec->spec() != policy.spec_for(tensor)) {
        fail(text, "codec spec " + codec->spec() + " differs from the policy's " +
                       policy.spec_for(tensor));
      }
    } catch (const gradwire::ConfigError&) {
      // A valid policy may still not fit a tensor (e.g. a shape-bound codec); that must be
      // a ConfigError, which it is when we get here.
    }
  }
  return 0;
}
