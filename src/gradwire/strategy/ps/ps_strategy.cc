#include "gradwire/strategy/ps/ps_strategy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/ps/protocol.h"
#include "gradwire/strategy/ps/staleness.h"

namespace gradwire::strategy::ps {

using Clock = std::chrono::steady_clock;

struct ParameterServerStrategy::Reply {
  int server = 0;
  WeightsMessage weights;
  std::optional<FinalMessage> final;
};

ParameterServerStrategy::ParameterServerStrategy(std::unique_ptr<comm::Transport> transport,
                                                 WorkerOptions options)
    : transport_(std::move(transport)), options_(std::move(options)) {
  options_.config.validate();
  if (options_.worker < 0 || options_.worker >= options_.config.num_workers) {
    throw ConfigError("worker index " + std::to_string(options_.worker) + " is outside [0, " +
                      std::to_string(options_.config.num_workers) + ")");
  }
  if (static_cast<int>(options_.servers.size()) != options_.config.num_servers) {
    throw ConfigError(std::to_string(options_.servers.size()) + " server addresses for " +
                      std::to_string(options_.config.num_servers) + " servers");
  }
}

ParameterServerStrategy::~ParameterServerStrategy() {
  // A program that never called finish() (most do not): say goodbye anyway, without
  // waiting, so the servers neither wait for this worker nor call it lost.
  if (!started_ || finished_) return;
  try {
    send_goodbye(/*wants_final=*/false);
  } catch (const std::exception&) {
    // Nothing to do about it in a destructor; the servers will time this worker out.
  }
}

void ParameterServerStrategy::send_goodbye(bool wants_final) {
  finished_ = true;
  MessageHeader header;
  header.token = options_.token;
  header.sender = static_cast<uint32_t>(options_.worker);
  ByeMessage bye;
  bye.stats = stats_;
  bye.checksum = checksum();
  bye.wants_final = wants_final;
  for (const auto& server : options_.servers) transport_->send(server, encode(header, bye));
}

void ParameterServerStrategy::start(std::span<const compress::TensorInfo> tensors,
                                    const FloatSpans& params) {
  if (started_) throw ConfigError("ParameterServerStrategy::start called twice");
  if (tensors.size() != params.size()) throw ConfigError("start: tensors and params differ");
  const auto policy = compress::CodecPolicy::parse(options_.codec);
  policy.check_tensors(tensors);
  slices_ = plan_slices(tensors, policy, options_.config.num_servers);
  params_ = params;
  server_slices_.assign(options_.config.num_servers, {});
  for (size_t i = 0; i < slices_.size(); ++i) {
    server_slices_[slices_[i].server].push_back(i);
    codecs_.push_back(compress::create_codec(slices_[i].codec, slices_[i].info));
    pull_codecs_.push_back(compress::create_codec(options_.config.pull.codec, slices_[i].info));
    whole_codecs_.push_back(compress::create_codec("none", slices_[i].info));
  }
  versions_.assign(options_.config.num_servers, 0);
  lr_ = options_.config.lr;

  const std::string config = options_.config.to_text();
  MessageHeader header;
  header.token = options_.token;
  header.sender = static_cast<uint32_t>(options_.worker);
  for (int s = 0; s < options_.config.num_servers; ++s) {
    HelloMessage hello;
    hello.config = config;
    hello.has_initial = options_.worker == 0;
    for (size_t i : server_slices_[s]) {
      SliceDescription d;
      d.id = slices_[i].id;
      d.info = slices_[i].info;
      d.codec = slices_[i].codec;
      hello.slices.push_back(std::move(d));
      if (options_.worker == 0) {
        const auto w = params[slices_[i].tensor].subspan(slices_[i].offset, slices_[i].numel);
        hello.initial.emplace_back(w.begin(), w.end());
      }
    }
    if (!transport_->send(options_.servers[s], encode(header, hello))) {
      throw Error("worker " + std::to_string(options_.worker) + " cannot reach server " +
                  std::to_string(s) + " (" + options_.servers[s] + ")");
    }
  }
  for (const auto& reply : await_replies("its first weights")) apply_weights(reply);
  started_ = true;
}

void ParameterServerStrategy::set_learning_rate(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    throw ConfigError("learning rate " + std::to_string(lr) + " is not positive and finite");
  }
  lr_ = lr;
}

void ParameterServerStrategy::count_samples(size_t samples, double loss_sum) {
  stats_.samples += samples;
  stats_.loss_sum += loss_sum;
}

void ParameterServerStrategy::synchronize(const FloatSpans& grads) {
  if (!started_ || finished_) throw ConfigError("synchronize before start() or after finish()");
  if (grads.size() != params_.size()) throw ConfigError("synchronize: wrong number of gradients");
  MessageHeader header;
  header.token = options_.token;
  header.sender = static_cast<uint32_t>(options_.worker);
  ++traffic_.steps;
  for (int s = 0; s < options_.config.num_servers; ++s) {
    PushMessage push;
    push.clock = clock_;
    push.base_version = versions_[s];
    push.lr = lr_;
    for (size_t i : server_slices_[s]) {
      const auto& slice = slices_[i];
      SlicePayload p;
      p.id = slice.id;
      codecs_[i]->encode(grads[slice.tensor].subspan(slice.offset, slice.numel), p.payload);
      traffic_.bytes_contributed += p.payload.size();
      traffic_.bytes_dense += slice.numel * sizeof(float);
      traffic_.bytes_dense_on_wire += slice.numel * sizeof(float);
      push.gradients.push_back(std::move(p));
    }
    stats_.bytes_sent = traffic_.bytes_contributed;
    stats_.bytes_dense = traffic_.bytes_dense;
    push.stats = stats_;
    Bytes message = encode(header, push);
    traffic_.bytes_on_wire += message.size();  // one message to one server: all of it
    if (!transport_->send(options_.servers[s], std::move(message))) {
      throw Error("worker " + std::to_string(options_.worker) + " cannot reach server " +
                  std::to_string(s));
    }
  }
  ++clock_;
  for (const auto& reply : await_replies("the weights after its push")) apply_weights(reply);
}

std::vector<ParameterServerStrategy::Reply> ParameterServerStrategy::await_replies(
    const char* what) {
  const int servers = options_.config.num_servers;
  std::vector<std::optional<Reply>> replies(servers);
  int missing = servers;
  const auto deadline = Clock::now() + options_.timeout;
  while (missing > 0) {
    const auto now = Clock::now();
    if (now >= deadline) {
      std::string names;
      for (int s = 0; s < servers; ++s) {
        if (!replies[s]) names += (names.empty() ? "" : ", ") + std::to_string(s);
      }
      throw TimeoutError("worker " + std::to_string(options_.worker) + " waited " +
                         std::to_string(options_.timeout.count() / 1000) + " s for " + what +
                         " from server(s) " + names + " (GRADWIRE_TIMEOUT sets the limit)");
    }
    auto message = transport_->receive(std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(200),
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
            std::chrono::milliseconds(1)));
    if (!message) continue;
    const auto it = std::find(options_.servers.begin(), options_.servers.end(), message->peer);
    if (it == options_.servers.end()) continue;  // not from a server of this job
    const int s = static_cast<int>(it - options_.servers.begin());
    ByteReader reader(message->bytes);
    const MessageHeader h = MessageHeader::read(reader);
    if (h.token != options_.token) {
      throw PayloadError("server " + std::to_string(s) + " answered with another job's token");
    }
    if (h.type == MessageType::kError) {
      throw Error(parse_error(reader));
    }
    if (replies[s]) throw PayloadError("server " + std::to_string(s) + " answered twice");
    Reply reply;
    reply.server = s;
    if (h.type == MessageType::kWeights) {
      reply.weights = parse_weights(reader);
    } else if (h.type == MessageType::kFinal) {
      reply.final = parse_final(reader);
      reply.weights = reply.final->weights;
    } else {
      throw PayloadError("server " + std::to_string(s) + " sent a " + message_type_name(h.type) +
                         " message");
    }
    replies[s] = std::move(reply);
    --missing;
  }
  std::vector<Reply> out;
  for (auto& r : replies) out.push_back(std::move(*r));
  return out;
}

void ParameterServerStrategy::apply_weights(const Reply& reply) {
  const auto& m = reply.weights;
  const auto& mine = server_slices_[reply.server];
  if (reply.server == 0) {
    JobProgress p;
    p.samples = m.progress.samples;
    p.loss_sum = m.progress.loss_sum;
    p.bytes_sent = m.progress.bytes_sent;
    p.bytes_dense = m.progress.bytes_dense;
    p.bytes_received = m.progress.bytes_received;
    p.live_workers = static_cast<int>(m.progress.live_workers);
    p.done = m.progress.done;
    progress_ = p;
  }
  versions_[reply.server] = m.version;
  for (const auto& w : m.weights) stats_.bytes_received += w.payload.size();
  if (m.weights.empty()) return;  // a goodbye acknowledged
  if (m.weights.size() != mine.size()) {
    throw PayloadError("server " + std::to_string(reply.server) + " sent " +
                       std::to_string(m.weights.size()) + " slices; it owns " +
                       std::to_string(mine.size()));
  }
  for (size_t k = 0; k < mine.size(); ++k) {
    const auto& slice = slices_[mine[k]];
    if (m.weights[k].id != slice.id) throw PayloadError("server sent slices out of order");
    auto w = params_[slice.tensor].subspan(slice.offset, slice.numel);
    if (m.delta) {
      pull_codecs_[mine[k]]->decode_add(m.weights[k].payload, w);
    } else {
      // Decode into a scratch buffer first: a bad payload must not zero the model.
      std::vector<float> fresh(w.size(), 0.0f);
      const bool whole = m.weights[k].payload.size() >= 2 &&
                         m.weights[k].payload[1] == static_cast<uint8_t>(compress::CodecId::kNone);
      (whole ? whole_codecs_ : pull_codecs_)[mine[k]]->decode_add(m.weights[k].payload, fresh);
      std::copy(fresh.begin(), fresh.end(), w.begin());
    }
  }
}

std::string ParameterServerStrategy::checksum() const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const auto& p : params_) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(p.data());
    for (size_t i = 0; i < p.size_bytes(); ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::optional<JobSummary> ParameterServerStrategy::finish() {
  if (!started_ || finished_) throw ConfigError("finish before start() or twice");
  send_goodbye(/*wants_final=*/true);
  const auto replies = await_replies(options_.worker == 0 ? "the end of the job" : "goodbye");
  JobSummary summary;
  StalenessHistogram staleness;
  for (const auto& reply : replies) {
    if (!reply.final) throw PayloadError("server answered goodbye without a final message");
    staleness.merge(StalenessHistogram(reply.final->staleness_histogram));
    if (reply.server == 0) {
      summary.version = reply.final->weights.version;
      summary.checksums = reply.final->checksums;
    }
    apply_weights(reply);
  }
  if (progress_) summary.progress = *progress_;
  const auto s = staleness.summary();
  summary.staleness_count = s.count;
  summary.staleness_mean = s.mean;
  summary.staleness_p50 = s.p50;
  summary.staleness_p99 = s.p99;
  summary.staleness_max = s.max;
  return summary;
}

}  // namespace gradwire::strategy::ps
