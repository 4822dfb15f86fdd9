// Strategy registry: a strategy name and its options -> a Strategy over some Collectives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy {

struct StrategyOptions {
  std::string name = "allreduce";
  // Its codec is a layer policy, or an adaptive codec (auto, accordion: their plans take
  // the rest of these options).
  AllreduceOptions allreduce;
};

// Throws ConfigError for an unknown name, listing the available strategies.
std::unique_ptr<Strategy> create_strategy(comm::Collectives& collectives,
                                          const StrategyOptions& options);

std::vector<std::string> strategy_names();

// `codec`, or when it is empty the strategy's default: "auto" for allreduce (it measures
// the plans in the job and picks, ALGORITHMS.md 9; where the link is fast it keeps fp32),
// "none" for ps and gossip, which run fixed codecs.
std::string codec_or_default(const std::string& codec, const std::string& strategy);

// True for the adaptive codecs (auto, accordion: strategy/adaptive/adaptive_strategy.h),
// which only the allreduce strategy runs.
bool is_adaptive_codec(const std::string& codec);
// A codec's canonical spelling, a layer policy's or an adaptive codec's; throws ConfigError
// for a malformed one.
std::string canonical_codec(const std::string& codec);

}  // namespace gradwire::strategy
