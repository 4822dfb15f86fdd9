#include "gradwire/strategy/gossip/gossip_strategy.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/agreement.h"

namespace gradwire::strategy::gossip {
namespace {

using Clock = std::chrono::steady_clock;
using Model = std::vector<std::vector<float>>;

constexpr double kEps = 1e-12;

double distance(const FloatSpans& x, const Model& y) {
  double sq = 0;
  for (size_t t = 0; t < x.size(); ++t) {
    for (size_t i = 0; i < x[t].size(); ++i) {
      const double d = static_cast<double>(x[t][i]) - y[t][i];
      sq += d * d;
    }
  }
  return std::sqrt(sq);
}

double norm(const Model& y) {
  double sq = 0;
  for (const auto& t : y) {
    for (float v : t) sq += static_cast<double>(v) * v;
  }
  return std::sqrt(sq);
}

void copy_into(const FloatSpans& from, Model& to) {
  to.resize(from.size());
  for (size_t t = 0; t < from.size(); ++t) to[t].assign(from[t].begin(), from[t].end());
}

}  // namespace

std::string peer_name(int rank) { return "worker" + std::to_string(rank); }

struct GossipStrategy::Pending {
  int peer = -1;
  uint64_t exchange = 0;
  Clock::time_point sent;
  Model decoded;  // x^_i: what the peer decodes from the offer
};

GossipStrategy::GossipStrategy(comm::Collectives& collectives, TransportFactory connect,
                               GossipOptions options)
    : collectives_(collectives),
      connect_(std::move(connect)),
      options_(std::move(options)),
      topology_(Topology::parse(options_.topology, collectives.rank(), collectives.size())),
      trigger_(Trigger::parse(options_.trigger)) {
  if (options_.merge == "push-sum") {
    push_sum_ = true;
  } else if (options_.merge != "pairwise") {
    throw ConfigError("unknown gossip merge '" + options_.merge +
                      "'; available: pairwise, push-sum");
  }
  options_.codec = compress::CodecPolicy::parse(options_.codec).canonical();
  if (!connect_) throw ConfigError("gossip needs a transport factory");
}

GossipStrategy::~GossipStrategy() = default;

std::string GossipStrategy::describe() const {
  return "topology " + topology_.canonical() + ", trigger " + trigger_.canonical() + ", merge " +
         options_.merge + ", codec " + options_.codec;
}

void GossipStrategy::start(std::span<const compress::TensorInfo> tensors,
                           const FloatSpans& params) {
  if (transport_) throw Error("GossipStrategy::start called twice");
  if (tensors.size() != params.size()) {
    throw Error("start: " + std::to_string(tensors.size()) + " tensor descriptions for " +
                std::to_string(params.size()) + " parameters");
  }
  const auto policy = compress::CodecPolicy::parse(options_.codec);
  auto lines = configuration_lines(name(), policy, tensors);
  lines.push_back("gossip " + describe());
  check_same_configuration(collectives_, lines);
  broadcast_from_rank0(collectives_, params);
  tensors_.assign(tensors.begin(), tensors.end());
  for (const auto& t : tensors_) codecs_.push_back(policy.create(t));
  params_ = params;
  copy_into(params, reference_);
  copy_into(params, previous_);
  transport_ = connect_(collectives_);
  if (!transport_ || transport_->name() != peer_name(collectives_.rank())) {
    throw Error("gossip: the transport of rank " + std::to_string(collectives_.rank()) +
                " must be named " + peer_name(collectives_.rank()));
  }
  // Nobody sends before every worker can receive (a send to a peer not there yet would
  // count as the peer gone).
  collectives_.barrier();
}

void GossipStrategy::synchronize(const FloatSpans& grads) {
  if (!transport_) throw Error("GossipStrategy::synchronize called before start");
  if (grads.size() != tensors_.size()) {
    throw Error("synchronize: expected " + std::to_string(tensors_.size()) + " gradients, got " +
                std::to_string(grads.size()));
  }
  ++traffic_.steps;
}

void GossipStrategy::set_learning_rate(double lr) {
  if (last_lr_ && lr != *last_lr_) trigger_.learning_rate_changed();
  last_lr_ = lr;
}

void GossipStrategy::encode_model(const FloatSpans& params, Message& m, Model* decoded) {
  m.tensors.assign(params.size(), Bytes());
  if (decoded) decoded->assign(params.size(), {});
  for (size_t t = 0; t < params.size(); ++t) {
    codecs_[t]->encode(params[t], m.tensors[t]);
    if (decoded) {
      (*decoded)[t].assign(params[t].size(), 0.0f);
      codecs_[t]->decode_add(m.tensors[t], (*decoded)[t]);
    }
  }
}

Model GossipStrategy::decode_model(const Message& m) const {
  if (m.tensors.size() != tensors_.size()) {
    throw PayloadError("a model of " + std::to_string(m.tensors.size()) +
                       " tensors; this job has " + std::to_string(tensors_.size()));
  }
  Model out(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    out[t].assign(tensors_[t].numel(), 0.0f);
    codecs_[t]->decode_add(m.tensors[t], out[t]);
  }
  return out;
}

bool GossipStrategy::send(int peer, const Message& m) {
  const Bytes bytes = encode(m);
  if (!transport_->send(peer_name(peer), bytes)) return false;
  stats_.bytes_sent += bytes.size();
  traffic_.bytes_contributed += bytes.size();
  traffic_.bytes_on_wire += bytes.size();
  size_t dense = 0;
  for (const auto& t : tensors_) dense += m.tensors.empty() ? 0 : t.numel() * sizeof(float);
  traffic_.bytes_dense += dense;
  traffic_.bytes_dense_on_wire += dense;
  return true;
}

void GossipStrategy::offer(int peer, const FloatSpans& params) {
  Message m;
  m.token = options_.token;
  m.sender = static_cast<uint32_t>(collectives_.rank());
  m.exchange = next_exchange_++;
  TimelineSpan span("gossip offer", "communicate");
  if (push_sum_) {
    // Keep half the weight, send the other half with the model: the weighted sum and the
    // total weight stay where they were.
    weight_ /= 2;
    m.type = MessageType::kPush;
    m.weight = weight_;
    encode_model(params, m, nullptr);
    if (!send(peer, m)) {
      weight_ *= 2;  // not sent: nothing moved
      topology_.drop(peer);
      stats_.dropped_peers = topology_.dropped();
      return;
    }
  } else {
    m.type = MessageType::kOffer;
    auto pending = std::make_unique<Pending>();
    pending->peer = peer;
    pending->exchange = m.exchange;
    encode_model(params, m, &pending->decoded);
    if (!send(peer, m)) {
      topology_.drop(peer);
      stats_.dropped_peers = topology_.dropped();
      return;
    }
    pending->sent = Clock::now();
    pending_ = std::move(pending);
  }
  ++stats_.offers;
  stats_.steps_between.push_back(steps_since_offer_);
  steps_since_offer_ = 0;
}

void GossipStrategy::handle(const Message& m, const FloatSpans& params, bool finishing) {
  const int sender = static_cast<int>(m.sender);
  switch (m.type) {
    case MessageType::kOffer: {
      Message reply;
      reply.token = options_.token;
      reply.sender = static_cast<uint32_t>(collectives_.rank());
      reply.exchange = m.exchange;
      if (finishing || push_sum_) {
        reply.type = MessageType::kBusy;
        send(sender, reply);
        return;
      }
      const Model theirs = decode_model(m);  // throws before anything changes
      reply.type = MessageType::kAnswer;
      Model mine;
      encode_model(params, reply, &mine);
      if (!send(sender, reply)) return;  // the offerer is gone: no merge on either side
      // x_j += (x^_i - x^_j) / 2
      for (size_t t = 0; t < params.size(); ++t) {
        for (size_t i = 0; i < params[t].size(); ++i) {
          params[t][i] += (theirs[t][i] - mine[t][i]) * 0.5f;
        }
      }
      ++stats_.merges;
      return;
    }
    case MessageType::kAnswer: {
      if (!pending_ || pending_->peer != sender || pending_->exchange != m.exchange) {
        ++stats_.dropped_messages;  // an answer to an offer given up on
        return;
      }
      const Model theirs = decode_model(m);
      // x_i += (x^_j - x^_i) / 2
      for (size_t t = 0; t < params.size(); ++t) {
        for (size_t i = 0; i < params[t].size(); ++i) {
          params[t][i] += (theirs[t][i] - pending_->decoded[t][i]) * 0.5f;
        }
      }
      pending_.reset();
      ++stats_.merges;
      return;
    }
    case MessageType::kBusy:
      if (pending_ && pending_->peer == sender && pending_->exchange == m.exchange) {
        pending_.reset();
        ++stats_.busy;
      } else {
        ++stats_.dropped_messages;
      }
      return;
    case MessageType::kPush: {
      if (!push_sum_) {
        ++stats_.dropped_messages;
        return;
      }
      const Model theirs = decode_model(m);
      // x_j = (w_j x_j + w x^_i) / (w_j + w)
      const double total = weight_ + m.weight;
      const auto own = static_cast<float>(weight_ / total);
      const auto in = static_cast<float>(m.weight / total);
      for (size_t t = 0; t < params.size(); ++t) {
        for (size_t i = 0; i < params[t].size(); ++i) {
          params[t][i] = own * params[t][i] + in * theirs[t][i];
        }
      }
      weight_ = total;
      ++stats_.merges;
      ++pushes_received_;
      return;
    }
  }
}

void GossipStrategy::service(const FloatSpans& params, bool finishing) {
  while (auto received = transport_->receive(std::chrono::milliseconds(0))) {
    try {
      const Message m = parse(received->bytes);
      const int sender = static_cast<int>(m.sender);
      // A peer this worker dropped is not offered to any more, but what it still sends is
      // taken: a push carries mass, an offer can be answered. An answer that comes after
      // its offer timed out finds no pending offer and is dropped (the price of never
      // waiting forever: that merge then happened on the peer's side only).
      if (m.token != options_.token || sender < 0 || sender >= collectives_.size() ||
          sender == collectives_.rank() || received->peer != peer_name(sender)) {
        ++stats_.dropped_messages;
        continue;
      }
      handle(m, params, finishing);
    } catch (const PayloadError&) {
      ++stats_.dropped_messages;
    } catch (const MismatchError&) {
      ++stats_.dropped_messages;
    }
  }
  if (pending_ && Clock::now() - pending_->sent > options_.peer_timeout) {
    topology_.drop(pending_->peer);  // silent past the timeout: presumed gone
    stats_.dropped_peers = topology_.dropped();
    pending_.reset();
  }
}

void GossipStrategy::after_update(const FloatSpans& params) {
  if (!transport_) throw Error("GossipStrategy::after_update called before start");
  if (finished_) return;
  ++stats_.steps;
  ++steps_since_offer_;
  // This step's own movement, before any merge moves the model further.
  const double step_change = distance(params, previous_) / (norm(previous_) + kEps);
  const double drift = distance(params, reference_) / (norm(reference_) + kEps);
  service(params, /*finishing=*/false);
  if (trigger_.after_step(step_change, drift) && !pending_) {
    if (const auto peer = topology_.next_peer()) offer(*peer, params);
    trigger_.exchanged();
    copy_into(params, reference_);
  }
  copy_into(params, previous_);
}

void GossipStrategy::drain(const FloatSpans& params) {
  // Until no worker has an offer out and every push sent was taken (a push in flight at the
  // consensus would lose its mass): answer offers with Busy, take answers and pushes.
  for (;;) {
    service(params, /*finishing=*/true);
    float open[2] = {pending_ ? 1.0f : 0.0f, push_sum_ ? static_cast<float>(stats_.offers) -
                                                             static_cast<float>(pushes_received_)
                                                       : 0.0f};
    collectives_.allreduce_sum(open, 2, comm::DataType::kFloat32);
    if (open[0] == 0.0f && open[1] == 0.0f) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::optional<JobSummary> GossipStrategy::finish() {
  if (!transport_ || finished_) return std::nullopt;
  finished_ = true;
  drain(params_);
  // Consensus: every worker takes the average model (push-sum: the weighted average).
  TimelineSpan span("gossip consensus", "communicate");
  const auto world = static_cast<float>(collectives_.size());
  float total_weight = push_sum_ ? static_cast<float>(weight_) : world;
  if (push_sum_) collectives_.allreduce_sum(&total_weight, 1, comm::DataType::kFloat32);
  for (auto& x : params_) {
    if (push_sum_) {
      for (float& v : x) v *= static_cast<float>(weight_);
    }
    collectives_.allreduce_sum(x.data(), x.size(), comm::DataType::kFloat32);
    const float scale = 1.0f / total_weight;
    for (float& v : x) v *= scale;
  }
  weight_ = 1.0;
  return std::nullopt;
}

double GossipStrategy::consensus_distance() {
  if (!transport_) throw Error("GossipStrategy::consensus_distance called before start");
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  double sq = 0;
  for (const auto& x : params_) {
    std::vector<float> mean(x.begin(), x.end());
    collectives_.allreduce_sum(mean.data(), mean.size(), comm::DataType::kFloat32);
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = static_cast<double>(x[i]) - mean[i] * scale;
      sq += d * d;
    }
  }
  float mine = static_cast<float>(std::sqrt(sq));
  collectives_.allreduce_sum(&mine, 1, comm::DataType::kFloat32);
  return mine * scale;
}

}  // namespace gradwire::strategy::gossip
