#include "gradwire/strategy/gossip/gossip_strategy.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "gradwire/compress/policy.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/agreement.h"

namespace gradwire::strategy::gossip {
namespace {

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

// This worker's exchange in flight: an offer waiting for its answer, or a push for its
// Taken (a declined push goes back into the model).
struct GossipStrategy::Pending {
  int peer = -1;
  uint64_t exchange = 0;
  Clock::time_point sent;
  Model decoded;        // x^_i: what the peer decodes from the offer or push
  double weight = 1.0;  // push-sum: the weight that went with the push
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
         options_.merge + ", codec " + options_.codec +
         (options_.wait ? ", waits for answers" : "");
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
  policy.check_tensors(tensors);  // the same model everywhere: every rank throws alike
  broadcast_from_rank0(collectives_, params);
  tensors_.assign(tensors.begin(), tensors.end());
  for (const auto& t : tensors_) {
    codecs_.push_back(policy.create(t));
    exact_codecs_.push_back(compress::create_codec("none", t));
  }
  params_ = params;
  copy_into(params, reference_);
  copy_into(params, previous_);
  transport_ = connect_(collectives_);
  if (!transport_ || transport_->name() != peer_name(collectives_.rank())) {
    throw Error("gossip: the transport of rank " + std::to_string(collectives_.rank()) +
                " must be named " + peer_name(collectives_.rank()));
  }
  // Nobody sends before every worker can receive (a send to a peer not there yet would
  // count as the peer gone). The last collective of the job.
  collectives_.barrier();
  last_heard_.assign(collectives_.size(), Clock::now());
  last_heartbeat_ = Clock::now();
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

Model GossipStrategy::decode_model(const Message& m, bool exact) const {
  if (m.tensors.size() != tensors_.size()) {
    throw PayloadError("a model of " + std::to_string(m.tensors.size()) +
                       " tensors; this job has " + std::to_string(tensors_.size()));
  }
  Model out(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    out[t].assign(tensors_[t].numel(), 0.0f);
    (exact ? exact_codecs_ : codecs_)[t]->decode_add(m.tensors[t], out[t]);
  }
  return out;
}

bool GossipStrategy::send(int peer, const Message& m) {
  const Bytes bytes = encode(m);
  if (!transport_->send(peer_name(peer), bytes)) return false;
  const bool exchange = m.type == MessageType::kOffer || m.type == MessageType::kAnswer ||
                        m.type == MessageType::kBusy || m.type == MessageType::kPush ||
                        m.type == MessageType::kTaken;
  if (!exchange) {  // the job's bookkeeping, not training traffic
    stats_.bytes_bookkeeping += bytes.size();
    return true;
  }
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
  auto pending = std::make_unique<Pending>();
  pending->peer = peer;
  pending->exchange = m.exchange;
  m.type = push_sum_ ? MessageType::kPush : MessageType::kOffer;
  if (push_sum_) {
    // Keep half the weight, send the other half with the model: the weighted sum and the
    // total weight stay where they were.
    pending->weight = weight_ / 2;
    m.weight = pending->weight;
  }
  encode_model(params, m, &pending->decoded);
  if (!send(peer, m)) {  // not sent: nothing moved
    topology_.drop(peer);
    stats_.dropped_peers = topology_.dropped();
    return;
  }
  if (push_sum_) weight_ -= pending->weight;
  pending->sent = Clock::now();
  pending_ = std::move(pending);
  ++stats_.offers;
  stats_.steps_between.push_back(steps_since_offer_);
  steps_since_offer_ = 0;
}

void GossipStrategy::handle(const Message& m, const FloatSpans& params, bool finishing) {
  const int sender = static_cast<int>(m.sender);
  const auto reply_to = [&](MessageType type) {
    Message reply;
    reply.type = type;
    reply.token = options_.token;
    reply.sender = static_cast<uint32_t>(collectives_.rank());
    reply.exchange = m.exchange;
    return reply;
  };
  const bool mine = pending_ && pending_->peer == sender && pending_->exchange == m.exchange;
  switch (m.type) {
    case MessageType::kOffer: {
      if (finishing || push_sum_) {
        send(sender, reply_to(MessageType::kBusy));
        return;
      }
      const Model theirs = decode_model(m, false);  // throws before anything changes
      Message reply = reply_to(MessageType::kAnswer);
      Model own;
      encode_model(params, reply, &own);
      if (!send(sender, reply)) return;  // the offerer is gone: no merge on either side
      // x_j += (x^_i - x^_j) / 2
      for (size_t t = 0; t < params.size(); ++t) {
        for (size_t i = 0; i < params[t].size(); ++i) {
          params[t][i] += (theirs[t][i] - own[t][i]) * 0.5f;
        }
      }
      ++stats_.merges;
      return;
    }
    case MessageType::kAnswer: {
      if (!mine || push_sum_) {
        ++stats_.dropped_messages;  // an answer to an offer given up on
        return;
      }
      const Model theirs = decode_model(m, false);
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
      if (!mine) {
        ++stats_.dropped_messages;
        return;
      }
      if (push_sum_) merge_push(params, pending_->decoded, pending_->weight);  // back home
      pending_.reset();
      ++stats_.busy;
      return;
    case MessageType::kPush: {
      if (!push_sum_) {
        ++stats_.dropped_messages;
        return;
      }
      if (finishing) {
        send(sender, reply_to(MessageType::kBusy));  // the pusher takes it back
        return;
      }
      const Model theirs = decode_model(m, false);
      // Taken before merging: if the pusher cannot hear it, it times out and forgets the
      // push, whose mass is here, where a sent push's mass belongs.
      send(sender, reply_to(MessageType::kTaken));
      merge_push(params, theirs, m.weight);
      ++stats_.merges;
      return;
    }
    case MessageType::kTaken:
      if (!mine || !push_sum_) {
        ++stats_.dropped_messages;
        return;
      }
      pending_.reset();
      return;
    case MessageType::kReport:
    case MessageType::kDone: {
      if (!root()) {
        ++stats_.dropped_messages;
        return;
      }
      decode_model(m, true);  // a malformed model is dropped here, not when collected
      parse_report_body(m.attachment);
      inbox_[{m.type, m.exchange, sender}] = m;
      if (m.type == MessageType::kDone &&
          std::find(waiting_.begin(), waiting_.end(), sender) == waiting_.end()) {
        waiting_.push_back(sender);  // it waits for the consensus: hears rank 0's heartbeats
      }
      return;
    }
    case MessageType::kConsensus:
      if (sender != 0 || !finishing) {
        ++stats_.dropped_messages;
        return;
      }
      decode_model(m, true);
      consensus_ = m;
      return;
    case MessageType::kAlive:
      return;  // heard: service() noted the time
  }
}

void GossipStrategy::merge_push(const FloatSpans& params, const Model& x, double w) {
  // x_j = (w_j x_j + w x^_i) / (w_j + w)
  const double total = weight_ + w;
  const auto own = static_cast<float>(weight_ / total);
  const auto in = static_cast<float>(w / total);
  for (size_t t = 0; t < params.size(); ++t) {
    for (size_t i = 0; i < params[t].size(); ++i) {
      params[t][i] = own * params[t][i] + in * x[t][i];
    }
  }
  weight_ = total;
}

void GossipStrategy::service(const FloatSpans& params, bool finishing) {
  while (auto received = transport_->receive(std::chrono::milliseconds(0))) {
    take(*received, params, finishing);
  }
  expire_offer();
  send_heartbeats();
}

void GossipStrategy::take(const comm::Received& received, const FloatSpans& params,
                          bool finishing) {
  try {
    const Message m = parse(received.bytes);
    const int sender = static_cast<int>(m.sender);
    // A peer this worker dropped is not offered to any more, but what it still sends is
    // taken: a push carries mass, an offer can be answered. An answer that comes after
    // its offer timed out finds no pending offer and is dropped (the price of never
    // waiting forever: that merge then happened on the peer's side only).
    if (m.token != options_.token || sender < 0 || sender >= collectives_.size() ||
        sender == collectives_.rank() || received.peer != peer_name(sender)) {
      ++stats_.dropped_messages;
      return;
    }
    last_heard_[sender] = Clock::now();
    handle(m, params, finishing);
  } catch (const PayloadError&) {
    ++stats_.dropped_messages;
  } catch (const MismatchError&) {
    ++stats_.dropped_messages;
  }
}

void GossipStrategy::expire_offer() {
  if (pending_ && Clock::now() - pending_->sent > options_.peer_timeout) {
    topology_.drop(pending_->peer);  // silent past the timeout: presumed gone
    stats_.dropped_peers = topology_.dropped();
    pending_.reset();  // a push's mass went with it, or is at the peer: nothing to restore
  }
}

void GossipStrategy::await_answer(const FloatSpans& params) {
  TimelineSpan span("gossip wait", "wait");
  constexpr auto kSlice = std::chrono::milliseconds(50);  // heartbeats go on meanwhile
  while (pending_) {
    if (auto received = transport_->receive(kSlice)) take(*received, params, false);
    expire_offer();
    send_heartbeats();
  }
}

void GossipStrategy::send_heartbeats() {
  if (Clock::now() - last_heartbeat_ < options_.peer_timeout / 4) return;
  last_heartbeat_ = Clock::now();
  Message m;
  m.type = MessageType::kAlive;
  m.token = options_.token;
  m.sender = static_cast<uint32_t>(collectives_.rank());
  if (!root()) {
    send(0, m);
  } else {
    for (int r : waiting_) send(r, m);
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
    if (options_.wait) await_answer(params);
    trigger_.exchanged();
    copy_into(params, reference_);
  }
  copy_into(params, previous_);
}

Message GossipStrategy::model_message(MessageType type, uint64_t round, Bytes note) {
  Message m;
  m.type = type;
  m.token = options_.token;
  m.sender = static_cast<uint32_t>(collectives_.rank());
  m.exchange = round;
  m.weight = weight_;
  m.tensors.resize(params_.size());
  for (size_t t = 0; t < params_.size(); ++t) exact_codecs_[t]->encode(params_[t], m.tensors[t]);
  m.attachment = encode(ReportBody{stats_, std::move(note)});
  return m;
}

JobView GossipStrategy::collect(MessageType type, uint64_t round, Bytes own_note) {
  const int world = collectives_.size();
  const auto waiting_since = Clock::now();
  const auto arrived = [&](int r) { return inbox_.count({type, round, r}) > 0; };
  for (;;) {
    service(params_, /*finishing=*/type == MessageType::kDone);
    bool complete = true;
    for (int r = 1; r < world; ++r) {
      if (arrived(r)) {
        lost_.erase(r);  // a late report: alive after all
        continue;
      }
      // Silent for peer_timeout: presumed lost. A rank lost before is waited for only if it
      // has been heard from since (heartbeats), so a dead one costs one timeout, not one per
      // round.
      const auto since = lost_.count(r) ? last_heard_[r] : std::max(waiting_since, last_heard_[r]);
      if (Clock::now() - since > options_.peer_timeout) {
        lost_.insert(r);
        continue;
      }
      lost_.erase(r);
      complete = false;
    }
    if (complete) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  JobView view;
  view.step = stats_.steps;
  view.notes.assign(world, Bytes());
  view.lost.assign(lost_.begin(), lost_.end());
  // (rank, model, weight): rank 0's own first.
  std::vector<std::tuple<int, Model, double>> models;
  Model own;
  copy_into(params_, own);
  models.emplace_back(0, std::move(own), weight_);
  view.notes[0] = std::move(own_note);
  view.totals = stats_;
  for (int r = 1; r < world; ++r) {
    auto it = inbox_.find({type, round, r});
    if (it == inbox_.end()) continue;
    ReportBody body = parse_report_body(it->second.attachment);  // checked on arrival
    const GossipStats& s = body.stats;
    view.totals.steps += s.steps;
    view.totals.offers += s.offers;
    view.totals.merges += s.merges;
    view.totals.busy += s.busy;
    view.totals.dropped_messages += s.dropped_messages;
    view.totals.bytes_sent += s.bytes_sent;
    view.totals.bytes_bookkeeping += s.bytes_bookkeeping;
    view.totals.steps_between.insert(view.totals.steps_between.end(), s.steps_between.begin(),
                                     s.steps_between.end());
    for (int p : s.dropped_peers) view.totals.dropped_peers.push_back(p);
    view.notes[r] = std::move(body.note);
    models.emplace_back(r, decode_model(it->second, true), it->second.weight);
    inbox_.erase(it);
  }
  std::sort(view.totals.dropped_peers.begin(), view.totals.dropped_peers.end());
  view.totals.dropped_peers.erase(
      std::unique(view.totals.dropped_peers.begin(), view.totals.dropped_peers.end()),
      view.totals.dropped_peers.end());
  // Reports of this round from ranks given up on, arriving later, are stale: drop them then.
  // The average, in double: (sum_i w_i x_i) / (sum_i w_i), w_i = 1 for pairwise merges.
  double total_weight = 0;
  for (const auto& [r, x, w] : models) {
    view.reported.push_back(r);
    total_weight += push_sum_ ? w : 1.0;
  }
  view.average.resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    std::vector<double> sum(tensors_[t].numel(), 0.0);
    for (const auto& [r, x, w] : models) {
      const double scale = push_sum_ ? w : 1.0;
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += scale * x[t][i];
    }
    view.average[t].resize(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) {
      view.average[t][i] = static_cast<float>(sum[i] / total_weight);
    }
  }
  double distance_sum = 0;
  for (const auto& [r, x, w] : models) {
    double sq = 0;
    for (size_t t = 0; t < x.size(); ++t) {
      for (size_t i = 0; i < x[t].size(); ++i) {
        const double d = static_cast<double>(x[t][i]) - view.average[t][i];
        sq += d * d;
      }
    }
    distance_sum += std::sqrt(sq);
  }
  view.consensus_distance = distance_sum / static_cast<double>(models.size());
  // Drop what earlier rounds left behind (reports from ranks then presumed lost).
  for (auto it = inbox_.begin(); it != inbox_.end();) {
    const auto& [t, r, sender] = it->first;
    if (t == type && r <= round) {
      ++stats_.dropped_messages;
      it = inbox_.erase(it);
    } else {
      ++it;
    }
  }
  return view;
}

std::optional<JobView> GossipStrategy::report(Bytes note) {
  if (!transport_) throw Error("GossipStrategy::report called before start");
  if (finished_) throw Error("GossipStrategy::report called after finish");
  TimelineSpan span("gossip report", "communicate");
  const uint64_t round = ++reports_;
  if (!root()) {
    send(0, model_message(MessageType::kReport, round, std::move(note)));
    return std::nullopt;
  }
  return collect(MessageType::kReport, round, std::move(note));
}

std::optional<JobView> GossipStrategy::finish_job(Bytes note) {
  if (!transport_ || finished_) return std::nullopt;
  finished_ = true;
  TimelineSpan span("gossip consensus", "communicate");
  // Drain: until this worker's own exchange is answered, declined or timed out (offers and
  // pushes that come meanwhile are declined).
  while (pending_) {
    service(params_, /*finishing=*/true);
    if (pending_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!root()) {
    send(0, model_message(MessageType::kDone, 0, std::move(note)));
    auto since = Clock::now();
    while (!consensus_) {
      service(params_, /*finishing=*/true);
      if (consensus_) break;
      if (Clock::now() - std::max(since, last_heard_[0]) > options_.peer_timeout) {
        throw Error("gossip: rank 0 sent no consensus model and nothing else for " +
                    std::to_string(options_.peer_timeout.count() / 1000.0) +
                    " s; this worker keeps its own model");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const Model average = decode_model(*consensus_, true);
    for (size_t t = 0; t < params_.size(); ++t) {
      std::copy(average[t].begin(), average[t].end(), params_[t].begin());
    }
    weight_ = 1.0;
    return std::nullopt;
  }
  JobView view = collect(MessageType::kDone, 0, std::move(note));
  Message consensus;
  consensus.type = MessageType::kConsensus;
  consensus.token = options_.token;
  consensus.sender = 0;
  consensus.tensors.resize(params_.size());
  for (size_t t = 0; t < params_.size(); ++t) {
    std::copy(view.average[t].begin(), view.average[t].end(), params_[t].begin());
    exact_codecs_[t]->encode(params_[t], consensus.tensors[t]);
  }
  for (int r : view.reported) {
    if (r != 0) send(r, consensus);
  }
  waiting_.clear();
  weight_ = 1.0;
  return view;
}

std::optional<JobSummary> GossipStrategy::finish() {
  finish_job({});
  return std::nullopt;
}

}  // namespace gradwire::strategy::gossip
