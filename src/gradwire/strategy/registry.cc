#include "gradwire/strategy/registry.h"

#include <algorithm>

#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/core/number_text.h"
#include "gradwire/core/spec.h"
#include "gradwire/strategy/adaptive/adaptive_strategy.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::strategy {

std::vector<std::string> strategy_names() { return {"allreduce", "ps", "gossip", "diloco"}; }

std::string codec_or_default(const std::string& codec, const std::string& strategy) {
  if (!codec.empty()) return codec;
  if (strategy == "allreduce") return "auto";
  return strategy == "diloco" ? "int4" : "none";
}

bool is_adaptive_codec(const std::string& codec) { return AdaptiveOptions::matches(codec); }

std::string codec_for_per_coordinate_optimizer(const std::string& codec) {
  if (!is_adaptive_codec(codec)) return codec;
  Spec spec = Spec::parse(codec);
  if (spec.name != "auto") return codec;
  if (!spec.params.count("rank")) {
    spec.params["rank"] = std::to_string(kPerCoordinateRank);
  }
  if (!spec.params.count("penalty")) {
    spec.params["penalty"] = format_parameter(kPerCoordinatePenalty);
  }
  if (!spec.params.count("dense")) spec.params["dense"] = std::to_string(kPerCoordinateDense);
  return spec.to_string();
}

std::string canonical_codec(const std::string& codec) {
  return is_adaptive_codec(codec) ? AdaptiveOptions::parse(codec).canonical
                                  : compress::CodecPolicy::parse(codec).canonical();
}

std::unique_ptr<Strategy> create_allreduce_strategy(comm::Collectives& collectives,
                                                    const AllreduceOptions& options) {
  if (AdaptiveOptions::matches(options.codec)) {
    return std::make_unique<AdaptiveStrategy>(collectives, AdaptiveOptions::parse(options.codec),
                                              options);
  }
  return std::make_unique<AllreduceStrategy>(collectives, options);
}

void check_strategy_name(const std::string& name) {
  const auto names = strategy_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    throw ConfigError("unknown strategy '" + name + "'; available: " + join(names));
  }
}

}  // namespace gradwire::strategy
