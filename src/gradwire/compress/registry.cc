#include "gradwire/compress/registry.h"

#include <functional>
#include <map>
#include <set>

#include "gradwire/compress/codecs.h"
// codec family headers:
#include "gradwire/compress/error_feedback.h"
#include "gradwire/compress/layer_codecs.h"
#include "gradwire/compress/quantize/quantizers.h"
#include "gradwire/compress/sparsify/sparsifiers.h"
#include "gradwire/compress/spectral/spectral_codec.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"

namespace gradwire::compress {
namespace {

using CodecFactory = std::function<std::unique_ptr<Codec>(SpecReader&, const TensorInfo&)>;

struct CodecEntry {
  CodecFactory factory;
  bool default_ef;     // error feedback unless the spec says ef=0
  bool mask_momentum;  // with momentum correction, sent coordinates restart their momentum
                       // (DGC's masking: right for codecs that send a subset, wrong for
                       // dense ones, where it would cancel momentum altogether)
};

using CodecTable = std::map<std::string, CodecEntry>;

// Codecs that read `ef` themselves and are never wrapped in ErrorFeedback: PowerSGD
// computes its error inside its low-rank protocol, SparseLoCo's accumulator decays.
const std::set<std::string>& own_error_feedback() {
  static const std::set<std::string> names{"powersgd", "sparseloco"};
  return names;
}

void add(CodecTable& table, const std::string& name, CodecFactory factory, bool default_ef,
         bool mask_momentum = false) {
  if (!table.emplace(name, CodecEntry{std::move(factory), default_ef, mask_momentum}).second) {
    throw Error("codec '" + name + "' is registered twice");
  }
}

// Built once, on first use, in this translation unit only (no static registration from
// other files, so there is no initialisation-order question).
const CodecTable& codec_table() {
  static const CodecTable table = [] {
    CodecTable t;
    add(t, "none", make_none_codec, false);
    add(t, "fp16", make_fp16_codec, false);
    add(t, "topk", make_topk_codec, true, /*mask_momentum=*/true);
    add(t, "2bit", make_two_bit_codec, true, /*mask_momentum=*/true);
    // sparsifiers:
    add(t, "laplace-topk", make_laplace_topk_codec, true, /*mask_momentum=*/true);
    add(t, "gaussiank", make_gaussian_k_codec, true, /*mask_momentum=*/true);
    add(t, "randomk", make_random_k_codec, true, /*mask_momentum=*/true);
    add(t, "dgc", make_dgc_codec, true, /*mask_momentum=*/true);
    add(t, "sparseloco", make_sparseloco_codec, /*default_ef=*/false);  // own_error_feedback()
    // quantizers:
    add(t, "qsgd", make_qsgd_codec, false);
    add(t, "terngrad", make_terngrad_codec, false);
    add(t, "signsgd", make_sign_sgd_codec, true);
    add(t, "bf16", make_bf16_codec, false);
    add(t, "int8", make_int8_codec, true);
    add(t, "int4", make_int4_codec, true);
    // spectral:
    add(t, "spectral", make_spectral_codec, true);
    // layer-aware:
    add(t, "filter-topk", make_filter_topk_codec, true, /*mask_momentum=*/true);
    add(t, "powersgd", make_powersgd_codec, /*default_ef=*/false);  // own_error_feedback()
    return t;
  }();
  return table;
}

}  // namespace

std::unique_ptr<Codec> create_codec(const std::string& spec_text, const TensorInfo& tensor) {
  const Spec spec = Spec::parse(spec_text);
  const CodecTable& table = codec_table();
  const auto it = table.find(spec.name);
  if (it == table.end()) {
    throw ConfigError("unknown codec '" + spec.name + "'; available: " + join(codec_names()));
  }
  const size_t numel = tensor.numel();
  if (numel > UINT32_MAX) {
    throw ConfigError("tensor '" + tensor.name + "' has " + std::to_string(numel) +
                      " elements; codecs handle at most 2^32-1 per tensor");
  }
  SpecReader reader(spec, "codec");
  std::unique_ptr<Codec> codec = it->second.factory(reader, tensor);
  if (own_error_feedback().count(spec.name)) {
    reader.finish();
    return codec;
  }
  const bool ef = reader.get_bool("ef", it->second.default_ef);
  const double momentum = reader.get_double_in("momentum", 0.0, 0.0, 0.999);
  reader.finish();
  if (momentum > 0.0 && !ef) {
    throw ConfigError("codec '" + spec.name +
                      "': momentum (applied before compression) needs error feedback (ef=1)");
  }
  if (ef) {
    codec = std::make_unique<ErrorFeedback>(std::move(codec), static_cast<float>(momentum),
                                            it->second.mask_momentum, numel);
  }
  return codec;
}

std::string canonical_spec(const std::string& spec) {
  // Codecs allocate nothing at construction, so a one-element placeholder tensor is free.
  return create_codec(spec, TensorInfo{"<canonical spec>", {1}, LayerKind::kOther})->spec();
}

bool uses_error_feedback(const std::string& spec) {
  const Spec canonical = Spec::parse(canonical_spec(spec));
  const auto it = canonical.params.find("ef");
  return it != canonical.params.end() && it->second == "1";
}

std::string with_momentum(const std::string& spec, double momentum) {
  Spec parsed = Spec::parse(spec);
  parsed.params["momentum"] = format_number(momentum);
  return parsed.to_string();
}

std::vector<std::string> codec_names() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : codec_table()) names.push_back(name);
  return names;  // std::map keeps them sorted
}

}  // namespace gradwire::compress
