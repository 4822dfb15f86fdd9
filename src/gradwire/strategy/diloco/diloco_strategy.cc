#include "gradwire/strategy/diloco/diloco_strategy.h"
#include "gradwire/core/statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "gradwire/compress/policy.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/agreement.h"

namespace gradwire::strategy::diloco {
namespace {

// 2: the in-flight exchange's carried state (carry_broadcast). Version 1 is read too.
constexpr uint8_t kStateVersion = 3;

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace

double outer_lr_at(const gradwire::DiLoCoOptions& o, uint64_t k) {
  if (o.outer_warmup == 0 || k + 1 >= o.outer_warmup) return o.outer_lr;
  return o.outer_lr * static_cast<double>(k + 1) / static_cast<double>(o.outer_warmup);
}

void DiLoCoOptions::check() const {
  if (!(outer_lr > 0) || !std::isfinite(outer_lr)) {
    throw ConfigError("DiLoCo: the outer learning rate must be positive, not " + number(outer_lr));
  }
  if (!(outer_momentum >= 0 && outer_momentum < 1)) {
    throw ConfigError("DiLoCo: the outer momentum must be in [0, 1), not " +
                      number(outer_momentum));
  }
  if (fragments < 1) throw ConfigError("DiLoCo: fragments must be at least 1");
  if (inner_steps > 0) Schedule{inner_steps, delay, fragments, 0}.check();
  if (Spec::parse(codec).name == "powersgd") {
    throw ConfigError("codec '" + codec +
                      "' is low-rank: DiLoCo's outer gradient is exchanged once a round, with "
                      "nothing to warm-start from; use none, fp16, bf16, int8, int4 or sparseloco");
  }
  if (compress::CodecPolicy::parse(codec).canonical() != compress::canonical_spec(codec)) {
    throw ConfigError("DiLoCo exchanges its outer gradient with one codec, not a layer policy ('" +
                      codec + "')");
  }
}

std::vector<std::string> DiLoCoOptions::lines() const {
  return {"inner steps " + (inner_steps ? std::to_string(inner_steps) : std::string("auto")),
          "outer lr " + number(outer_lr),
          "outer momentum " + number(outer_momentum) + (nesterov ? " nesterov" : ""),
          "outer warm-up " + std::to_string(outer_warmup),
          "fragments " + std::to_string(fragments),
          "delay " + std::to_string(delay),
          "link " + number(link.alpha_s) + " s, " + number(link.beta_s_per_byte) + " s/byte"};
}

DiLoCoStrategy::DiLoCoStrategy(comm::Collectives& collectives, DiLoCoOptions options)
    : collectives_(collectives), options_(std::move(options)) {
  options_.check();
}

DiLoCoStrategy::~DiLoCoStrategy() = default;

void DiLoCoStrategy::start(std::span<const compress::TensorInfo> tensors,
                           const FloatSpans& params) {
  if (executor_) throw Error("DiLoCoStrategy::start called twice");
  if (tensors.size() != params.size()) {
    throw Error("start: " + std::to_string(tensors.size()) + " tensor descriptions for " +
                std::to_string(params.size()) + " parameters");
  }
  const auto policy = compress::CodecPolicy::parse(options_.codec);
  auto lines = configuration_lines(name(), policy, tensors);
  for (const auto& line : options_.lines()) lines.push_back(line);
  check_same_configuration(collectives_, lines);
  policy.check_tensors(tensors);  // the same model everywhere: every rank throws alike
  broadcast_from_rank0(collectives_, params);

  std::vector<size_t> numels;
  for (const auto& t : tensors) numels.push_back(t.numel());
  const auto split = split_fragments(numels, options_.fragments);
  for (size_t f = 0; f < split.size(); ++f) {
    Fragment fragment;
    fragment.tensors = split[f];
    for (size_t k : fragment.tensors) fragment.numel += numels[k];
    fragment.exchange = std::make_unique<OuterExchange>(
        collectives_, options_.codec, "fragment " + std::to_string(f), fragment.numel);
    gather(fragment, params, fragment.global);
    fragment.momentum.assign(fragment.numel, 0.0f);
    numel_ += fragment.numel;
    fragments_.push_back(std::move(fragment));
  }
  schedule_ = {options_.inner_steps, options_.delay, options_.fragments, 0};
  scheduled_ = options_.inner_steps > 0;
  params_ = params;
  executor_ = std::make_unique<InOrderExecutor>(collectives_, [this](size_t) {
    TimelineSpan span("outer exchange", "communicate");
    if (span.on()) span.set_args("{\"fragment\":" + std::to_string(in_flight_.fragment) + "}");
    const auto before = collectives_.traffic();
    fragments_[static_cast<size_t>(in_flight_.fragment)].exchange->average(in_flight_.delta);
    if (in_flight_.carries) {
      collectives_.broadcast(in_flight_.carried.data(), in_flight_.carried.size(), 0);
    }
    const auto after = collectives_.traffic();
    in_flight_.wire = after.on_wire - before.on_wire;
    in_flight_.contributed = after.contributed - before.contributed;
  });
  last_update_ = Clock::now();
}

void DiLoCoStrategy::gather(const Fragment& f, const FloatSpans& params,
                            std::vector<float>& out) const {
  out.resize(f.numel);
  size_t offset = 0;
  for (size_t k : f.tensors) {
    std::copy(params[k].begin(), params[k].end(), out.begin() + static_cast<ptrdiff_t>(offset));
    offset += params[k].size();
  }
}

void DiLoCoStrategy::after_update(const FloatSpans& params) {
  if (!executor_) throw Error("DiLoCoStrategy: after_update before start");
  check_not_failed();
  params_ = params;
  ++steps_;
  just_synchronized_ = false;
  // Per inner step, what a per-step fp32 allreduce of the gradients would have sent.
  traffic_.steps = steps_;
  traffic_.bytes_dense += numel_ * sizeof(float);
  traffic_.bytes_dense_on_wire +=
      comm::ring_allreduce_wire_bytes(numel_ * sizeof(float), collectives_.size());
  if (in_flight_.fragment >= 0 && steps_ >= in_flight_.land_at) land(params);
  if (!scheduled_) {
    probe();
    if (!scheduled_) return;
  }
  if (const auto f = schedule_.sent_at(steps_)) {
    send(*f, params);
    if (schedule_.delay == 0) land(params);
  }
}

void DiLoCoStrategy::send(int fragment, const FloatSpans& params) {
  Fragment& f = fragments_[static_cast<size_t>(fragment)];
  InFlight& p = in_flight_;
  p.fragment = fragment;
  p.land_at = steps_ + schedule_.delay;
  {
    TimelineSpan span("outer gradient", "compute");
    gather(f, params, p.sent);
    p.delta.resize(f.numel);
    for (size_t i = 0; i < f.numel; ++i) p.delta[i] = f.global[i] - p.sent[i];
  }
  p.carries = pack_ && fragment + 1 == schedule_.fragments;
  p.carried.clear();
  if (p.carries) pack_(p.carried);
  p.wire = p.contributed = 0;
  executor_->begin_step({0});  // runnable at once: its turn is reserved here
  exchange_running_ = true;
}

void DiLoCoStrategy::wait_in_flight() const {
  check_not_failed();
  if (!exchange_running_) return;
  exchange_running_ = false;
  try {
    executor_->finish_step();
  } catch (const std::exception& e) {
    failed_ = "DiLoCo's outer exchange of fragment " + std::to_string(in_flight_.fragment) +
              " (sent at inner step " + std::to_string(in_flight_.land_at - schedule_.delay) +
              ") failed: " + e.what() +
              "; it was not merged, and the ranks' models are no longer kept together: "
              "restart the job from its last checkpoint";
    // A codec that refused some rank's outer gradient ended every rank's collectives alike:
    // the ranks are still in step, and a checkpoint may be loaded (load_state()).
    failed_in_step_ = dynamic_cast<const RefusedOuterGradient*>(&e) != nullptr;
    failed_by_timeout_ = dynamic_cast<const TimeoutError*>(&e) != nullptr;
    in_flight_.fragment = -1;
    check_not_failed();
  }
  traffic_.bytes_on_wire += in_flight_.wire;
  traffic_.bytes_contributed += in_flight_.contributed;
}

void DiLoCoStrategy::check_not_failed() const {
  if (failed_.empty()) return;
  if (failed_by_timeout_) throw TimeoutError(failed_);
  throw Error(failed_);
}

void DiLoCoStrategy::land(const FloatSpans& params) {
  {
    TimelineSpan span("wait outer exchange", "communicate");
    wait_in_flight();
  }
  TimelineSpan span("outer step", "compute");
  InFlight& p = in_flight_;
  Fragment& f = fragments_[static_cast<size_t>(p.fragment)];
  // The mean is the same on every rank: a non-finite one (fp32 and fp16 carry a diverged
  // rank's values into it) fails every rank alike, before any model takes it.
  if (!std::all_of(p.delta.begin(), p.delta.end(), [](float v) { return std::isfinite(v); })) {
    failed_ = "DiLoCo's averaged outer gradient of fragment " + std::to_string(p.fragment) +
              " has non-finite values: some rank's local model diverged; it was not merged";
    failed_in_step_ = true;  // the same mean, so the same failure, on every rank
    p.fragment = -1;
    check_not_failed();
  }
  // Fragments land in turn (0, 1, ..., F - 1, 0, ...): this is the fragment's k-th.
  const uint64_t k = exchanges_ / static_cast<uint64_t>(schedule_.fragments);
  const auto lr = static_cast<float>(outer_lr_at(options_, k));
  const auto mu = static_cast<float>(options_.outer_momentum);
  for (size_t i = 0; i < f.numel; ++i) {
    const float d = p.delta[i];
    f.momentum[i] = mu * f.momentum[i] + d;
    const float u = options_.nesterov ? d + mu * f.momentum[i] : f.momentum[i];
    f.global[i] -= lr * u;
  }
  size_t offset = 0;
  const bool keep_local = schedule_.delay > 0;
  for (size_t k : f.tensors) {
    std::span<float> t = params[k];
    for (size_t i = 0; i < t.size(); ++i) {
      const size_t j = offset + i;
      t[i] = keep_local ? f.global[j] + (t[i] - p.sent[j]) : f.global[j];
    }
    offset += t.size();
  }
  if (p.carries) unpack_(p.carried);
  p.carries = false;
  ++exchanges_;
  f.synced_at = steps_;
  if (p.fragment + 1 == schedule_.fragments) {
    just_synchronized_ = true;
    last_sync_step_ = steps_;
  }
  p.fragment = -1;
}

void DiLoCoStrategy::probe() {
  const auto now = Clock::now();
  if (steps_ > 1)
    probe_seconds_.push_back(std::chrono::duration<double>(now - last_update_).count());
  last_update_ = now;
  if (probe_seconds_.size() < kProbeSteps) return;
  float slowest = static_cast<float>(median(probe_seconds_));
  collectives_.allreduce_max(&slowest, 1);
  resolve_auto(slowest);
}

uint64_t DiLoCoStrategy::auto_min_inner_steps() const {
  if (Spec::parse(options_.codec).name == "sparseloco") {
    return static_cast<uint64_t>(options_.fragments);
  }
  return kAutoMinInnerSteps;
}

void DiLoCoStrategy::resolve_auto(double t) {
  double exchange_s = 0;
  for (const auto& f : fragments_) {
    exchange_s = std::max(exchange_s, f.exchange->predicted_seconds(options_.link));
  }
  t = std::max(t, 1e-6);
  const bool streaming = options_.fragments > 1 || options_.delay > 0;
  const auto F = static_cast<uint64_t>(options_.fragments);
  const uint64_t least = auto_min_inner_steps();
  uint64_t h = 0, tau = 0;
  if (streaming) {
    tau = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(kAutoMargin * exchange_s / t)));
    h = F * tau;
    if (h < least) h = F * ((least + F - 1) / F);
  } else {
    h = static_cast<uint64_t>(std::ceil(exchange_s / (kAutoBlockingShare * t)));
    h = std::max(h, least);
  }
  schedule_ = {h, tau, options_.fragments, steps_};
  schedule_.check();
  scheduled_ = true;
  char reason[256];
  std::snprintf(reason, sizeof reason,
                "inner step %.1f ms (slowest rank's median of %llu), a fragment's exchange "
                "%.1f ms predicted: %s",
                1e3 * t, static_cast<unsigned long long>(kProbeSteps), 1e3 * exchange_s,
                streaming ? "the smallest H whose exchanges hide under the inner steps"
                          : "the exchange at most 5% of a round");
  char inputs[256];
  std::snprintf(inputs, sizeof inputs,
                "{\"step\":%llu,\"plan\":\"diloco:inner_steps=%llu,delay=%llu\",\"step_s\":%.6g,"
                "\"exchange_s\":%.6g}",
                static_cast<unsigned long long>(steps_), static_cast<unsigned long long>(h),
                static_cast<unsigned long long>(tau), t, exchange_s);
  decisions_.push_back({steps_,
                        "diloco:inner_steps=" + std::to_string(h) + ",delay=" + std::to_string(tau),
                        reason, inputs});
}

bool DiLoCoStrategy::carry_broadcast(std::function<void(Bytes&)> pack,
                                     std::function<void(const Bytes&)> unpack) {
  if (!pack || !unpack) return false;
  pack_ = std::move(pack);
  unpack_ = std::move(unpack);
  return true;
}

std::vector<CodecDecision> DiLoCoStrategy::take_decisions() {
  return std::exchange(decisions_, {});
}

std::optional<JobSummary> DiLoCoStrategy::finish() {
  if (!executor_) return std::nullopt;
  check_not_failed();
  just_synchronized_ = false;
  if (in_flight_.fragment >= 0) land(params_);  // early: the steps it waited for will not come
  const auto before = collectives_.traffic();
  for (size_t f = 0; f < fragments_.size(); ++f) {
    Fragment& fragment = fragments_[f];
    // Nothing happened to it since it was set to theta_g on every rank.
    if (schedule_.delay == 0 && fragment.synced_at == steps_ && steps_ > 0) continue;
    TimelineSpan span("final average", "communicate");
    std::vector<float> theta;
    gather(fragment, params_, theta);
    std::vector<float> delta(fragment.numel);
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = fragment.global[i] - theta[i];
    fragment.exchange->average(delta);
    for (size_t i = 0; i < delta.size(); ++i) fragment.global[i] -= delta[i];
    size_t offset = 0;
    for (size_t k : fragment.tensors) {
      std::copy_n(fragment.global.begin() + static_cast<ptrdiff_t>(offset), params_[k].size(),
                  params_[k].begin());
      offset += params_[k].size();
    }
    fragment.synced_at = steps_;
  }
  const auto after = collectives_.traffic();
  traffic_.bytes_on_wire += after.on_wire - before.on_wire;
  traffic_.bytes_contributed += after.contributed - before.contributed;
  just_synchronized_ = true;
  last_sync_step_ = steps_;
  return std::nullopt;
}

DiLoCoStats DiLoCoStrategy::stats() const {
  DiLoCoStats s;
  s.inner_steps = scheduled_ ? schedule_.inner_steps : 0;
  s.delay = schedule_.delay;
  s.fragments = options_.fragments;
  s.steps = steps_;
  s.exchanges = exchanges_;
  s.rounds = exchanges_ / static_cast<uint64_t>(options_.fragments);
  s.bytes_on_wire = traffic_.bytes_on_wire;
  s.last_sync_step = last_sync_step_;
  return s;
}

std::vector<std::vector<size_t>> DiLoCoStrategy::fragment_tensors() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& f : fragments_) out.push_back(f.tensors);
  return out;
}

// State: version | steps, exchanges, last sync | scheduled, H, tau, origin | probe times |
// traffic | per fragment: synced_at, theta_g, m, codec states | the exchange in flight
// (fragment or -1, land_at, its mean, theta_sent, its traffic): waited for first, so a
// resumed job merges at the same step what the saved one would have.
void DiLoCoStrategy::global_parameters(const FloatSpans& out) const {
  if (!executor_) throw Error("DiLoCoStrategy: global_parameters before start");
  for (const Fragment& fragment : fragments_) {
    size_t offset = 0;
    for (size_t k : fragment.tensors) {
      if (k >= out.size() || out[k].size() != params_[k].size()) {
        throw Error("global_parameters: the output does not have the parameters' shapes");
      }
      std::copy_n(fragment.global.begin() + static_cast<ptrdiff_t>(offset), out[k].size(),
                  out[k].begin());
      offset += out[k].size();
    }
  }
}

void DiLoCoStrategy::save_state(Bytes& out) const {
  wait_in_flight();
  ByteWriter w(out);
  w.put<uint8_t>(kStateVersion);
  w.put<uint64_t>(steps_);
  w.put<uint64_t>(exchanges_);
  w.put<uint64_t>(last_sync_step_);
  w.put<uint8_t>(scheduled_ ? 1 : 0);
  w.put<uint64_t>(schedule_.inner_steps);
  w.put<uint64_t>(schedule_.delay);
  w.put<uint64_t>(schedule_.origin);
  w.put<uint32_t>(static_cast<uint32_t>(probe_seconds_.size()));
  for (double v : probe_seconds_) w.put<double>(v);
  w.put<uint64_t>(traffic_.bytes_contributed);
  w.put<uint64_t>(traffic_.bytes_on_wire);
  w.put<uint64_t>(traffic_.bytes_dense);
  w.put<uint64_t>(traffic_.bytes_dense_on_wire);
  w.put<uint32_t>(static_cast<uint32_t>(fragments_.size()));
  for (const auto& f : fragments_) {
    w.put<uint64_t>(f.synced_at);
    w.put<uint64_t>(f.numel);
    w.put_array<float>(f.global);
    w.put_array<float>(f.momentum);
    Bytes codec;
    f.exchange->save_state(codec);
    put_section(out, codec);
  }
  w.put<int32_t>(in_flight_.fragment);
  if (in_flight_.fragment >= 0) {
    w.put<uint64_t>(in_flight_.land_at);
    w.put<uint64_t>(in_flight_.delta.size());
    w.put_array<float>(in_flight_.delta);
    w.put<uint64_t>(in_flight_.sent.size());
    w.put_array<float>(in_flight_.sent);
    w.put<uint8_t>(in_flight_.carries ? 1 : 0);
    w.put<uint64_t>(in_flight_.carried.size());
    w.put_array<uint8_t>(in_flight_.carried);
  }
}

void DiLoCoStrategy::load_state(ByteReader& in) {
  if (!executor_) throw Error("DiLoCoStrategy: load_state before start");
  // A rollback (a checkpoint loaded into a running job, after a loss spike): the exchange
  // thread still reads in_flight_ while an exchange runs, and every rank is in it. Finish it
  // on every rank alike, then discard it: the state below replaces it.
  if (exchange_running_) {
    try {
      wait_in_flight();
    } catch (const std::exception&) {
      if (!failed_in_step_) throw;  // a collective failed: the ranks may be out of step
    }
  }
  // After a failure every rank agreed on (a diverged rank), loading is the way on; after a
  // failed collective it is not (the ranks may be in different collectives).
  if (!failed_.empty() && !failed_in_step_) {
    throw Error(failed_ + " (a checkpoint cannot be loaded into this job: restart it)");
  }
  const auto version = in.get<uint8_t>("DiLoCo state version");
  if (version < 1 || version > kStateVersion) {
    throw PayloadError("DiLoCo state of version " + std::to_string(version) +
                       ", this build reads 1 to " + std::to_string(kStateVersion));
  }
  // Version 3: every outer codec but fp32 goes by the reduce-scatter, which keeps error
  // feedback's residuals itself (codec_reduce_scatter.h); before, the codecs kept them.
  if (version < 3 && !fragments_.empty() && !fragments_[0].exchange->reads_version_2_state()) {
    throw PayloadError("a DiLoCo checkpoint of an earlier build (state version " +
                       std::to_string(version) + ") whose outer codec '" + options_.codec +
                       "' kept its state in a layout this build no longer has; resume it "
                       "with the build that wrote it");
  }
  // Read everything into locals first: a state that does not fit changes nothing here.
  const auto steps = in.get<uint64_t>("DiLoCo steps");
  const auto exchanges = in.get<uint64_t>("DiLoCo exchanges");
  const auto last_sync = in.get<uint64_t>("DiLoCo last synchronization");
  const bool scheduled = in.get<uint8_t>("DiLoCo schedule flag") != 0;
  Schedule schedule{in.get<uint64_t>("DiLoCo inner steps"), in.get<uint64_t>("DiLoCo delay"),
                    options_.fragments, 0};
  schedule.origin = in.get<uint64_t>("DiLoCo schedule origin");
  if (scheduled) schedule.check();
  if (options_.inner_steps > 0 &&
      (schedule.inner_steps != options_.inner_steps || schedule.delay != options_.delay)) {
    throw PayloadError("the checkpoint's DiLoCo schedule (H " +
                       std::to_string(schedule.inner_steps) + ", delay " +
                       std::to_string(schedule.delay) + ") is not this job's");
  }
  const auto probes = in.get<uint32_t>("DiLoCo probe count");
  if (probes > kProbeSteps) throw PayloadError("DiLoCo state: too many probe times");
  std::vector<double> probe(probes);
  for (auto& v : probe) v = in.get<double>("DiLoCo probe time");
  TrafficStats traffic;
  traffic.steps = steps;
  traffic.bytes_contributed = in.get<uint64_t>("DiLoCo traffic");
  traffic.bytes_on_wire = in.get<uint64_t>("DiLoCo traffic");
  traffic.bytes_dense = in.get<uint64_t>("DiLoCo traffic");
  traffic.bytes_dense_on_wire = in.get<uint64_t>("DiLoCo traffic");
  const auto count = in.get<uint32_t>("DiLoCo fragment count");
  if (count != fragments_.size()) {
    throw PayloadError("the checkpoint has " + std::to_string(count) +
                       " DiLoCo fragments, this job " + std::to_string(fragments_.size()));
  }
  struct Saved {
    uint64_t synced_at;
    std::vector<float> global, momentum;
    ByteReader codec;
  };
  std::vector<Saved> saved;
  for (const auto& f : fragments_) {
    const auto synced_at = in.get<uint64_t>("DiLoCo fragment sync step");
    const auto numel = in.get<uint64_t>("DiLoCo fragment size");
    if (numel != f.numel) {
      throw PayloadError("a DiLoCo fragment of " + std::to_string(numel) +
                         " elements in the checkpoint, of " + std::to_string(f.numel) + " here");
    }
    std::vector<float> global(numel), momentum(numel);
    in.get_array<float>(global, "DiLoCo global parameters");
    in.get_array<float>(momentum, "DiLoCo outer momentum");
    saved.push_back(
        {synced_at, std::move(global), std::move(momentum), get_section(in, "DiLoCo codec state")});
  }
  InFlight flight;
  flight.fragment = in.get<int32_t>("DiLoCo fragment in flight");
  if (flight.fragment >= static_cast<int>(fragments_.size()) || flight.fragment < -1) {
    throw PayloadError("DiLoCo state: fragment in flight out of range");
  }
  if (flight.fragment >= 0) {
    const size_t n = fragments_[static_cast<size_t>(flight.fragment)].numel;
    flight.land_at = in.get<uint64_t>("DiLoCo landing step");
    if (in.get<uint64_t>("DiLoCo mean size") != n) throw PayloadError("DiLoCo state: bad mean");
    flight.delta.resize(n);
    in.get_array<float>(flight.delta, "DiLoCo mean");
    const auto sent = in.get<uint64_t>("DiLoCo sent size");
    if (sent != n) throw PayloadError("DiLoCo state: bad sent parameters");
    flight.sent.resize(n);
    in.get_array<float>(flight.sent, "DiLoCo sent parameters");
    if (version >= 2) {
      flight.carries = in.get<uint8_t>("DiLoCo carried flag") != 0;
      const auto size = in.get<uint64_t>("DiLoCo carried size");
      if (size > in.remaining()) throw PayloadError("DiLoCo state: bad carried state");
      flight.carried.resize(size);
      in.get_array<uint8_t>(flight.carried, "DiLoCo carried state");
      if (flight.carries && !unpack_) {
        throw PayloadError("DiLoCo state: an exchange carrying buffers, for a job without");
      }
    }
  }
  // The codec states last (one that does not fit leaves the strategy unusable, as
  // Strategy::load_state allows).
  for (size_t f = 0; f < fragments_.size(); ++f) fragments_[f].exchange->load_state(saved[f].codec);
  for (size_t f = 0; f < fragments_.size(); ++f) {
    fragments_[f].synced_at = saved[f].synced_at;
    fragments_[f].global = std::move(saved[f].global);
    fragments_[f].momentum = std::move(saved[f].momentum);
  }
  steps_ = steps;
  exchanges_ = exchanges;
  last_sync_step_ = last_sync;
  scheduled_ = scheduled;
  schedule_ = schedule;
  probe_seconds_ = std::move(probe);
  traffic_ = traffic;
  in_flight_ = std::move(flight);
  exchange_running_ = false;
  failed_.clear();
  failed_in_step_ = false;
  failed_by_timeout_ = false;
  last_update_ = Clock::now();
}

}  // namespace gradwire::strategy::diloco
