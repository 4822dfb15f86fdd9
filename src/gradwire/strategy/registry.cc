#include "gradwire/strategy/registry.h"

#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/strategy/adaptive/adaptive_strategy.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::strategy {

std::vector<std::string> strategy_names() { return {"allreduce", "ps", "gossip"}; }

std::string codec_or_default(const std::string& codec, const std::string& strategy) {
  if (!codec.empty()) return codec;
  return strategy == "allreduce" ? "auto" : "none";
}

bool is_adaptive_codec(const std::string& codec) { return AdaptiveOptions::matches(codec); }

std::string canonical_codec(const std::string& codec) {
  return is_adaptive_codec(codec) ? AdaptiveOptions::parse(codec).canonical
                                  : compress::CodecPolicy::parse(codec).canonical();
}

std::unique_ptr<Strategy> create_strategy(comm::Collectives& collectives,
                                          const StrategyOptions& options) {
  if (options.name == "allreduce") {
    const AllreduceOptions& allreduce = options.allreduce;
    if (AdaptiveOptions::matches(allreduce.codec)) {
      return std::make_unique<AdaptiveStrategy>(collectives,
                                                AdaptiveOptions::parse(allreduce.codec), allreduce);
    }
    return std::make_unique<AllreduceStrategy>(collectives, allreduce);
  }
  if (options.name == "gossip") {
    throw ConfigError(
        "strategy 'gossip' talks to peers over messages: DistributedOptimizer creates it "
        "(DistributedOptions{.strategy = \"gossip\"})");
  }
  if (options.name == "ps") {
    throw ConfigError(
        "strategy 'ps' talks to parameter servers, not collectives: DistributedOptimizer "
        "creates it from the job's servers (gradwire::init() in a job with servers)");
  }
  throw ConfigError("unknown strategy '" + options.name +
                    "'; available: " + join(strategy_names()));
}

}  // namespace gradwire::strategy
