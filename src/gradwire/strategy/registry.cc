#include "gradwire/strategy/registry.h"

#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::strategy {

std::vector<std::string> strategy_names() { return {"allreduce"}; }

std::unique_ptr<Strategy> create_strategy(comm::Collectives& collectives,
                                          const StrategyOptions& options) {
  if (options.name == "allreduce") {
    return std::make_unique<AllreduceStrategy>(
        collectives,
        AllreduceOptions{.codec = options.codec, .bucket_bytes = options.bucket_bytes});
  }
  throw ConfigError("unknown strategy '" + options.name +
                    "'; available: " + join(strategy_names()));
}

}  // namespace gradwire::strategy
