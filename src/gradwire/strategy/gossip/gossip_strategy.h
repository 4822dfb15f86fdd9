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
// at most one of the peer's steps. With `wait` (--gossip-wait) the offering worker waits
// for its answer before its step ends, servicing what comes meanwhile (so workers waiting
// on each other answer each other): synchronous pairwise gossip, the baseline of the
// adaptive trigger's paper, whose merges are never more than a step old. A peer that has not
// answered an offer within `peer_timeout` is dropped from the topology: no more offers to it (an
// answer that comes after the timeout is dropped, so that merge happened on the peer's side only:
// the price of never waiting forever). Messages with a wrong token, from an unknown sender, or
// malformed, are dropped and counted.
//
// No collective runs after start(), so the others go on when a worker dies. Rank 0 holds
// the job's view: at an evaluation point every worker calls report(), which sends its
// model (fp32) and counters to rank 0; rank 0 waits for them and gets the average model,
// the consensus distance and the summed counters. Every other worker sends a heartbeat to
// rank 0 every peer_timeout/4; a worker rank 0 has not heard from for peer_timeout is
// presumed lost and named in the view (JobView::lost).
//
// finish(): stops offering; drains (answers offers and pushes with Busy, waits until its
// own exchange is answered or timed out); then sends its model to rank 0 (Done) and waits
// for the average of every worker's model (Consensus), which replaces its own: the job
// ends with one model. Pairwise merges preserve the sum of the models, so that average is
// the average of where the workers would be without gossip, up to the timeouts' losses.
// The parameters given to start() must stay where they are until then (DistributedOptimizer's
// do: the optimizer updates them in place).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
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
  bool wait = false;  // the offering worker waits for its answer (see above)
};

// What rank 0 knows of the job at a report or at the end.
struct JobView {
  uint64_t step = 0;
  std::vector<int> reported;  // ranks whose model is in `average` (0 included), ascending
  std::vector<int> lost;      // ranks presumed lost so far (silent past peer_timeout)
  GossipStats totals;         // counters summed over `reported`; intervals of all of them
  std::vector<Bytes> notes;   // by rank: each reporter's note (empty for the others)
  std::vector<std::vector<float>> average;  // of the reported models (push-sum: weighted)
  double consensus_distance = 0;            // mean over `reported` of ||x_i - average||
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

  // Every worker calls it at the same local step. The others send their model, counters
  // and `note` to rank 0 and go on at once (nullopt); rank 0 waits for them (servicing
  // exchanges meanwhile) and returns the job's view.
  std::optional<JobView> report(Bytes note);
  // finish() with a note; rank 0 returns the job's final view (`average` is the model every
  // worker now holds). Throws Error on a worker that rank 0 does not answer within
  // peer_timeout of silence (its model is then its own).
  std::optional<JobView> finish_job(Bytes note);

  const GossipStats& stats() const { return stats_; }
  // The canonical options, for logs ("ring, adaptive:..., pairwise, codec none").
  std::string describe() const;

 private:
  struct Pending;
  using Clock = std::chrono::steady_clock;
  bool root() const { return collectives_.rank() == 0; }
  // Handles every message already here, then gives up on an offer silent past the timeout.
  void service(const FloatSpans& params, bool finishing);
  // One received message: checked, then handled; a bad one is dropped and counted.
  void take(const comm::Received& received, const FloatSpans& params, bool finishing);
  // Drops the peer of an offer unanswered for peer_timeout.
  void expire_offer();
  // --gossip-wait: services messages until this worker's offer is answered or given up.
  void await_answer(const FloatSpans& params);
  void handle(const Message& m, const FloatSpans& params, bool finishing);
  void send_heartbeats();
  Message model_message(MessageType type, uint64_t step, Bytes note);
  // Rank 0: waits until every rank not lost has sent a message of `type` for `step` (kept
  // in inbox_), declaring lost those silent past peer_timeout; then builds the view.
  JobView collect(MessageType type, uint64_t step, Bytes own_note);
  void offer(int peer, const FloatSpans& params);
  // Encodes params into m.tensors; fills `decoded` with what the peer will decode.
  void encode_model(const FloatSpans& params, Message& m, std::vector<std::vector<float>>* decoded);
  // `exact`: the fp32 payloads of reports and the consensus, not the exchange codec's.
  std::vector<std::vector<float>> decode_model(const Message& m, bool exact) const;
  // push-sum: x = (w x + w_in x_in) / (w + w_in), w += w_in.
  void merge_push(const FloatSpans& params, const std::vector<std::vector<float>>& x_in,
                  double w_in);
  bool send(int peer, const Message& m);

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
  std::vector<std::unique_ptr<compress::Codec>> exact_codecs_;  // fp32, for reports
  std::vector<std::vector<float>> reference_;  // x_ref: the model after the last offer
  std::vector<std::vector<float>> previous_;   // the model after the last step
  std::unique_ptr<Pending> pending_;           // this worker's offer in flight
  uint64_t next_exchange_ = 1;
  double weight_ = 1.0;  // push-sum's w
  uint64_t steps_since_offer_ = 0;
  uint64_t reports_ = 0;  // report() calls: the step of a report round
  // Rank 0: reports and dones not yet collected, by (type, step, sender); when each rank
  // was last heard from; who is presumed lost. Everyone: when heartbeats went out.
  std::map<std::tuple<MessageType, uint64_t, int>, Message> inbox_;
  std::vector<Clock::time_point> last_heard_;
  std::set<int> lost_;
  std::vector<int> waiting_;  // rank 0, finishing: ranks that sent Done and wait
  Clock::time_point last_heartbeat_;
  std::optional<Message> consensus_;  // a worker, finishing: rank 0's answer
  std::optional<double> last_lr_;
  GossipStats stats_;
  TrafficStats traffic_;
  bool finished_ = false;
};

}  // namespace gradwire::strategy::gossip
