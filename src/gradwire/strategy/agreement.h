// What every strategy does before its first step: make sure ranks can work together, and
// make them start from the same model.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/compress/codec.h"
#include "gradwire/compress/policy.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy {

// One line per fact that must match across ranks: "strategy allreduce", "codec <policy>",
// then "tensor <name> <shape> <codec spec>" for each tensor. ConfigError when the policy
// names a tensor (@NAME) that `tensors` lacks.
std::vector<std::string> configuration_lines(const std::string& strategy,
                                             const compress::CodecPolicy& policy,
                                             std::span<const compress::TensorInfo> tensors);

// Allgathers the lines and throws MismatchError naming the first rank and line that differ
// from rank 0's (every rank throws the same error).
void check_same_configuration(comm::Collectives& collectives,
                              const std::vector<std::string>& lines);

// Broadcasts every span from rank 0, one collective per span.
void broadcast_from_rank0(comm::Collectives& collectives, const FloatSpans& spans);

}  // namespace gradwire::strategy
