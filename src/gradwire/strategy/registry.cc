#include "gradwire/strategy/registry.h"

#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::strategy {

std::vector<std::string> strategy_names() { return {"allreduce", "ps"}; }

std::unique_ptr<Strategy> create_strategy(comm::Collectives& collectives,
                                          const StrategyOptions& options) {
  if (options.name == "allreduce") {
    return std::make_unique<AllreduceStrategy>(
        collectives, AllreduceOptions{.codec = options.codec,
                                      .bucket_bytes = options.bucket_bytes,
                                      .first_bucket_bytes = options.first_bucket_bytes,
                                      .overlap = options.overlap});
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
