// The strategies whose workers talk to peers over ZeroMQ rather than through the job's
// collectives: a parameter-server worker (its servers) and a gossip worker (the other
// workers). Private to DistributedOptimizer's construction.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <string>

#include "gradwire/distributed_optimizer.h"
#include "gradwire/strategy/gossip/gossip_strategy.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire {

// A gossip worker: the job's token drawn by rank 0 and broadcast, then a peer socket per
// worker whose endpoints the workers allgather. ConfigError for a timeout that is not
// positive.
std::unique_ptr<strategy::gossip::GossipStrategy> make_gossip_strategy(
    const std::shared_ptr<Context>& context, const std::string& codec, const GossipOptions& gossip);

// A parameter-server worker connected to the job's servers, with the SGD settings of
// `optimizer` (which must be a torch::optim::SGD without Nesterov or dampening: the servers
// apply the update). With `momentum_in_codec` (momentum correction) the servers get
// momentum and weight decay 0: the workers' codecs carry them. ConfigError where the job
// has no servers or the optimizer is not one.
std::unique_ptr<strategy::Strategy> make_ps_strategy(const Context& context,
                                                     torch::optim::Optimizer& optimizer,
                                                     const std::string& codec,
                                                     const ParameterServerOptions& ps,
                                                     bool momentum_in_codec);

}  // namespace gradwire
