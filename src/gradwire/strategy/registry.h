// Strategy registry: the strategies' names, the allreduce strategy for a codec, and what
// the codec names mean to the strategies (defaults, adaptive or fixed, canonical spelling).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy {

// The allreduce strategy for `options.codec`: an AdaptiveStrategy for an adaptive codec
// (auto, accordion: their plans take the rest of the options), else an AllreduceStrategy
// running the codec or layer policy. Strategies "ps" and "gossip" talk to servers and
// peers over messages, not collectives: DistributedOptimizer creates them.
std::unique_ptr<Strategy> create_allreduce_strategy(comm::Collectives& collectives,
                                                    const AllreduceOptions& options);

// Throws ConfigError for a name that is none of strategy_names(), listing them.
void check_strategy_name(const std::string& name);

std::vector<std::string> strategy_names();

// `codec`, or when it is empty the strategy's default: "auto" for allreduce (it measures
// the plans in the job and picks, ALGORITHMS.md 9; where the link is fast it keeps fp32),
// "int4" for diloco's outer gradients (its tuning's choice), "none" for ps and gossip.
std::string codec_or_default(const std::string& codec, const std::string& strategy);

// The codec for a job whose optimizer scales each coordinate by statistics of its own
// gradient (Adam, AdamW, RMSprop, Adagrad): `codec` itself, except `auto`: auto with no
// rank given runs its PowerSGD plan at kPerCoordinateRank (with its plans given too: before,
// `auto:plans=powersgd` under AdamW ran rank 8: on gpt at 100 Mbit one tuning seed of three
// stalled at loss 3.07 at step 32 and ended at 2.40, the other two ended 0.06 and 0.11
// above fixed rank 16's loss, docs/results/e2e-gpt-4hosts-100mbit-tuning-quality-seeds),
// auto with no penalty given charges kPerCoordinatePenalty, and auto with no dense start given runs
// kPerCoordinateDense dense steps first. Error feedback assumes the optimizer is
// linear in the gradient; under Adam a residual fed back later makes step sizes of its
// own. On gpt with AdamW (3 seeds, docs/results/gpt-adamw-codecs) rank 4 ended 15-19%
// above none's validation loss, rank 16 0-2% above, as fp16 and int8 did (-1 to +1%).
// The penalty: rank 16 after 2 dense steps needed 0.978x fp32's steps to gpt's targets
// (docs/results/auto-penalty, issue 62); a penalty is not a reward, so 0.
inline constexpr int kPerCoordinateRank = 16;
inline constexpr double kPerCoordinatePenalty = 0;
// The dense start: from the first step PowerSGD at rank 16 stayed on gpt's early plateau
// near 2.4 in one seed of two and ended at 2.25 (fp32: 1.86); after 2 dense steps, DDP's
// shortest start, it left the plateau with fp32 in every seed (docs/results/auto-penalty).
inline constexpr size_t kPerCoordinateDense = 2;
std::string codec_for_per_coordinate_optimizer(const std::string& codec);

// True for the adaptive codecs (auto, accordion: strategy/adaptive/adaptive_strategy.h),
// which only the allreduce strategy runs.
bool is_adaptive_codec(const std::string& codec);
// A codec's canonical spelling, a layer policy's or an adaptive codec's; throws ConfigError
// for a malformed one.
std::string canonical_codec(const std::string& codec);

}  // namespace gradwire::strategy
