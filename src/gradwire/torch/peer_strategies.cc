#include "gradwire/torch/peer_strategies.h"

#include <torch/optim/sgd.h>

#include <random>
#include <utility>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/rendezvous.h"
#include "gradwire/comm/zmq_transport.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/gossip/gossip_strategy.h"
#include "gradwire/strategy/ps/ps_strategy.h"
#include "gradwire/strategy/ps/updater.h"

namespace gradwire {

std::unique_ptr<strategy::gossip::GossipStrategy> make_gossip_strategy(
    const std::shared_ptr<Context>& context, const std::string& codec,
    const GossipOptions& gossip) {
  if (!(gossip.peer_timeout_s > 0)) throw ConfigError("gossip peer timeout must be positive");
  auto& collectives = context->collectives();
  strategy::gossip::GossipOptions o;
  o.topology = gossip.topology;
  o.trigger = gossip.trigger;
  o.merge = gossip.merge;
  o.wait = gossip.wait;
  o.codec = codec;
  o.peer_timeout = std::chrono::milliseconds(static_cast<int64_t>(gossip.peer_timeout_s * 1000));
  // The job's token: rank 0 draws it, every worker learns it before any message flows.
  uint64_t token = 0;
  if (collectives.rank() == 0)
    token = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  collectives.broadcast(&token, sizeof token, 0);
  o.token = token;
  const std::string bind = context->options().ps_bind;
  const std::string ifname = context->options().socket_ifname;
  auto connect = [bind, ifname](comm::Collectives& c) -> std::unique_ptr<comm::Transport> {
    auto transport =
        std::make_unique<comm::ZmqPeerTransport>(strategy::gossip::peer_name(c.rank()), bind);
    const std::string mine = comm::advertised_endpoint(transport->endpoint(), ifname);
    const auto all = c.allgather_bytes(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mine.data()), mine.size()));
    std::vector<std::pair<std::string, std::string>> peers;
    for (int r = 0; r < c.size(); ++r) {
      if (r != c.rank())
        peers.emplace_back(strategy::gossip::peer_name(r),
                           std::string(all[r].begin(), all[r].end()));
    }
    transport->connect(std::move(peers));
    return transport;
  };
  return std::make_unique<strategy::gossip::GossipStrategy>(collectives, connect, o);
}

std::unique_ptr<strategy::Strategy> make_ps_strategy(const Context& context,
                                                     torch::optim::Optimizer& optimizer,
                                                     const std::string& codec,
                                                     const ParameterServerOptions& ps,
                                                     bool momentum_in_codec) {
  const ParameterServers* servers = context.parameter_servers();
  if (!servers) {
    throw ConfigError(
        "strategy 'ps' needs parameter servers: start the job with `gradwire train --strategy ps "
        "--servers S` (or set GRADWIRE_NUM_SERVERS for the launcher)");
  }
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (!sgd || sgd->param_groups().empty()) {
    throw ConfigError(
        "strategy 'ps': the servers apply SGD-family updates; wrap a torch::optim::SGD, whose "
        "lr, momentum and weight_decay they use");
  }
  const auto& group =
      static_cast<const torch::optim::SGDOptions&>(sgd->param_groups()[0].options());
  if (group.nesterov() || group.dampening() != 0) {
    throw ConfigError("strategy 'ps': the servers' SGD has no Nesterov momentum or dampening");
  }
  strategy::ps::WorkerOptions o;
  o.config.num_workers = context.world_size();
  o.config.num_servers = static_cast<int>(servers->endpoints.size());
  o.config.consistency = strategy::ps::Consistency::parse(ps.consistency);
  o.config.updater = strategy::ps::UpdaterOptions::parse(ps.updater).spec();
  o.config.lr = group.lr();
  // Both 0 when momentum correction moves them into the codecs and the gradients.
  o.config.momentum = momentum_in_codec ? 0.0 : group.momentum();
  o.config.weight_decay = momentum_in_codec ? 0.0 : group.weight_decay();
  o.config.pull = strategy::ps::PullCodec::parse(ps.pull);
  o.config.continue_on_worker_loss = ps.continue_on_worker_loss;
  o.config.worker_timeout_s = ps.worker_timeout_s;
  o.config.checkpoint_dir = ps.checkpoint_dir;
  o.config.checkpoint_every = ps.checkpoint_every;
  o.config.sample_budget = ps.sample_budget;
  o.codec = codec;
  o.worker = context.rank();
  o.token = servers->token;
  o.timeout = context.options().collective_timeout;
  std::vector<std::pair<std::string, std::string>> peers;
  for (size_t s = 0; s < servers->endpoints.size(); ++s) {
    o.servers.push_back("server" + std::to_string(s));
    peers.emplace_back(o.servers.back(), servers->endpoints[s]);
  }
  auto transport =
      std::make_unique<comm::ZmqClientTransport>("worker" + std::to_string(context.rank()), peers);
  return std::make_unique<strategy::ps::ParameterServerStrategy>(std::move(transport), o);
}

}  // namespace gradwire
