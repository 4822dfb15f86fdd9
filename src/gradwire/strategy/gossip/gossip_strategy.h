// Strategy "gossip": decentralized SGD (ALGORITHMS.md 7). Every worker trains on its own
// (the optimizer steps on the local gradient: synchronize() leaves gradients as they are)
// and, when its trigger says so, averages its model with one peer of its topology over a
// message Transport. No server, no collective while training.
//
// Pairwise merge (default), with x^ the decoded wire value of a model:
//   i sends Offer(x_i) to j and keeps x^_i;
//   j, at its next step: answers with x_j, then x_j += (x^_i - x^_j) / 2;
//   i, when the answer arrives: x_i += (x^_j - x^_i) / 2.
// Both corrections cancel: the sum of the models is preserved (exactly, for exactly
// representable halves), whatever each worker did in between, and nobody waits: the
// offering worker goes on training and applies the answer at a later step. A worker has at
// most one offer out; while it is out, the trigger's wish to exchange waits for a later step.
// Push-sum merge: i keeps half its weight w_i and sends Push(x_i, w_i / 2); j sets
//   x_j = (w_j x_j + w x^_i) / (w_j + w), w_j += w; the weighted sum and the total weight
// are preserved and every x converges to the average.
//
// Messages are serviced at every step (after the optimizer's update), so an answer takes
// at most one of the peer's steps. A peer that has not answered an offer within
// `peer_timeout` is dropped from the topology: no more offers to it (an answer that comes
// after the timeout is dropped, so that merge happened on the peer's side only: the price
// of never waiting forever). Messages with a wrong token, from an unknown sender, or
// malformed, are dropped and counted.
//
// finish(): stops offering, drains (answers offers with Busy, waits for its own offer to
// be answered) until no worker has an offer out, then replaces every model by the average
// of all (one allreduce per tensor; push-sum: the weighted average): the job ends with one
// model. The parameters given to start() must stay where they are until then
// (DistributedOptimizer's do: the optimizer updates them in place).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/transport.h"
#include "gradwire/strategy/gossip/protocol.h"
#include "gradwire/strategy/gossip/topology.h"
#include "gradwire/strategy/gossip/trigger.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy::gossip {

struct GossipOptions {
  std::string topology = "ring";     // topology.h
  std::string trigger = "adaptive";  // trigger.h
  std::string merge = "pairwise";    // or "push-sum"
  std::string codec = "none";        // layer policy for the exchanged models
  uint64_t token = 0;                // the job's token: messages without it are dropped
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(30)};
};

// What a worker did, for the metrics.
struct GossipStats {
  uint64_t steps = 0;
  uint64_t offers = 0;            // offers (or pushes) sent
  uint64_t merges = 0;            // merges applied: answers received, offers answered, pushes taken
  uint64_t busy = 0;              // offers answered busy by a peer
  uint64_t dropped_messages = 0;  // wrong token, unknown sender, malformed, stale
  uint64_t bytes_sent = 0;
  std::vector<uint64_t> steps_between;  // local steps between consecutive offers
  std::vector<int> dropped_peers;
};

// The worker's transport, created in start() once the collectives are up: its name must be
// peer_name(rank), and it must reach peer_name(r) for every r.
using TransportFactory = std::function<std::unique_ptr<comm::Transport>(comm::Collectives&)>;
std::string peer_name(int rank);  // "worker3"

class GossipStrategy : public Strategy {
 public:
  // Throws ConfigError for a bad topology, trigger, merge or codec.
  GossipStrategy(comm::Collectives& collectives, TransportFactory connect, GossipOptions options);
  ~GossipStrategy() override;

  std::string name() const override { return "gossip"; }
  void start(std::span<const compress::TensorInfo> tensors, const FloatSpans& params) override;
  // Local SGD: the gradients stay this worker's own.
  void synchronize(const FloatSpans& grads) override;
  void after_update(const FloatSpans& params) override;
  void set_learning_rate(double lr) override;
  TrafficStats traffic() const override { return traffic_; }
  std::optional<JobSummary> finish() override;

  const GossipStats& stats() const { return stats_; }
  // Collective (every worker calls it at the same point): the mean over workers of
  // ||x_i - x_bar||, x_bar the average model. 0 after finish().
  double consensus_distance();
  // The canonical options, for logs ("ring, adaptive:..., pairwise, codec none").
  std::string describe() const;

 private:
  struct Pending;
  void service(const FloatSpans& params, bool finishing);
  void handle(const Message& m, const FloatSpans& params, bool finishing);
  void offer(int peer, const FloatSpans& params);
  // Encodes params into m.tensors; fills `decoded` with what the peer will decode.
  void encode_model(const FloatSpans& params, Message& m, std::vector<std::vector<float>>* decoded);
  std::vector<std::vector<float>> decode_model(const Message& m) const;
  bool send(int peer, const Message& m);
  void drain(const FloatSpans& params);

  comm::Collectives& collectives_;
  TransportFactory connect_;
  GossipOptions options_;
  Topology topology_;
  Trigger trigger_;
  bool push_sum_ = false;
  std::unique_ptr<comm::Transport> transport_;
  std::vector<compress::TensorInfo> tensors_;
  FloatSpans params_;  // start()'s: the model's memory, which stays put (finish() uses it)
  std::vector<std::unique_ptr<compress::Codec>> codecs_;
  std::vector<std::vector<float>> reference_;  // x_ref: the model after the last offer
  std::vector<std::vector<float>> previous_;   // the model after the last step
  std::unique_ptr<Pending> pending_;           // this worker's offer in flight
  uint64_t next_exchange_ = 1;
  double weight_ = 1.0;  // push-sum's w
  uint64_t pushes_received_ = 0;
  uint64_t steps_since_offer_ = 0;
  std::optional<double> last_lr_;
  GossipStats stats_;
  TrafficStats traffic_;
  bool finished_ = false;
};

}  // namespace gradwire::strategy::gossip
