#include "gradwire/distributed_optimizer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <unordered_set>
#include <utility>

#include "gradwire/comm/collectives.h"
#include "gradwire/compress/layer_classification.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/agreement.h"
#include "gradwire/strategy/diloco/diloco_strategy.h"
#include "gradwire/strategy/gossip/gossip_strategy.h"
#include "gradwire/strategy/registry.h"
#include "gradwire/torch/model_parameters.h"
#include "gradwire/torch/optimizer_impl.h"
#include "gradwire/torch/peer_strategies.h"

namespace gradwire {
namespace {

std::span<float> float_span(const torch::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<size_t>(t.numel())};
}

// Options that decide the sequence of collectives, compared across ranks with the model's
// state (a difference would otherwise hang instead of failing).
std::vector<std::string> option_lines(const DistributedOptions& options) {
  auto text = [](double v) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.17g", v);
    return std::string(buffer);
  };
  return {
      "strategy " + options.strategy,
      std::string("overlap ") + (options.overlap ? "on" : "off"),
      std::string("momentum correction ") + (options.momentum_correction ? "on" : "off"),
      "bucket bytes " + std::to_string(options.bucket_bytes),
      "first bucket bytes " + std::to_string(options.first_bucket_bytes),
      std::string("measured buckets ") + (options.measured_buckets ? "on" : "off"),
      "link " + text(options.link_bits_per_s) + " bit/s, " + text(options.link_latency_s) + " s",
      std::string("broadcast buffers ") + (options.broadcast_buffers ? "on" : "off")};
}

// Adam, AdamW, RMSprop and Adagrad divide each coordinate by statistics of its own
// gradients (registry.h: auto's plans under them).
bool scales_per_coordinate(torch::optim::Optimizer& optimizer) {
  return dynamic_cast<torch::optim::Adam*>(&optimizer) ||
         dynamic_cast<torch::optim::AdamW*>(&optimizer) ||
         dynamic_cast<torch::optim::RMSprop*>(&optimizer) ||
         dynamic_cast<torch::optim::Adagrad*>(&optimizer);
}

// The allreduce strategy's options: the user's (the one place they are translated).
strategy::AllreduceOptions allreduce_options(const DistributedOptions& options,
                                             const std::string& codec) {
  strategy::AllreduceOptions o;
  o.codec = codec;
  o.bucket_bytes = options.bucket_bytes;
  o.first_bucket_bytes = options.first_bucket_bytes;
  o.overlap = options.overlap;
  o.sparse_aggregation = options.sparse_aggregation;
  o.quantized_path = options.quantized_path;
  o.link = comm::LinkModel::from_bandwidth(options.link_latency_s, options.link_bits_per_s);
  if (!options.measured_buckets) o.layout_steps = 0;
  return o;
}

// DiLoCo's options: the user's, with the outer codec and the link.
strategy::diloco::DiLoCoOptions diloco_options(const DistributedOptions& options,
                                               const std::string& codec) {
  strategy::diloco::DiLoCoOptions o;
  static_cast<DiLoCoOptions&>(o) = options.diloco;
  o.codec = codec;
  o.link = comm::LinkModel::from_bandwidth(options.link_latency_s, options.link_bits_per_s);
  return o;
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<Context> context,
                                           std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           const torch::nn::Module& model,
                                           const DistributedOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (!context) throw ConfigError("DistributedOptimizer needs the context from gradwire::init()");
  if (context->is_server()) {
    throw ConfigError(
        "this process served as a parameter server and the job is over: a program checks "
        "context->is_server() after gradwire::init() and returns");
  }
  if (!optimizer) throw ConfigError("DistributedOptimizer needs an optimizer");
  strategy::check_strategy_name(options.strategy);
  if (!(options.link_bits_per_s > 0) || !(options.link_latency_s >= 0)) {
    throw ConfigError("the link needs a positive bandwidth and a latency of 0 or more");
  }
  Impl& m = *impl_;
  m.context = std::move(context);
  m.optimizer = std::move(optimizer);
  // Parameter-server and gossip workers do not step together: no per-step collective, and
  // the exchange happens in step(). DiLoCo workers step together but exchange rarely, in
  // step(), and their buffers meet when their models do.
  const bool allreduce = options.strategy == "allreduce";
  const bool diloco = options.strategy == "diloco";
  m.broadcast_buffers = options.broadcast_buffers && (allreduce || diloco);
  m.exchange_in_backward = allreduce;

  // Everything a user can get wrong locally is checked before any collective.
  const ModelParameters model_params = collect_model_parameters(model);
  require_same_parameters(model_params, *m.optimizer);
  claim_parameters(model_params.exchanged);
  m.claimed = true;

  std::vector<compress::TensorInfo> tensors;
  strategy::FloatSpans param_spans;
  for (const auto& [name, p] : model_params.exchanged) {
    compress::TensorInfo info;
    info.name = name;
    info.shape = p.sizes().vec();
    info.kind = compress::classify_parameter(info.name, info.shape);
    tensors.push_back(std::move(info));
    m.params.push_back(p);
    m.names.push_back(name);
    m.numels.push_back(p.numel());
    param_spans.push_back(float_span(p));
  }
  {
    std::unordered_set<const void*> in_optimizer;
    for (auto& group : m.optimizer->param_groups()) {
      for (auto& p : group.params()) in_optimizer.insert(p.unsafeGetTensorImpl());
    }
    for (const auto& [name, p] : model_params.frozen) {
      m.frozen.push_back(p);
      m.frozen_names.push_back(name);
      m.frozen_in_optimizer.push_back(in_optimizer.count(p.unsafeGetTensorImpl()) ? 1 : 0);
    }
  }
  for (const auto& [name, b] : model_params.buffers) m.buffers.push_back(b);

  std::string codec = strategy::codec_or_default(options.compressor, options.strategy);
  const bool adaptive = strategy::is_adaptive_codec(codec);
  if (adaptive && scales_per_coordinate(*m.optimizer)) {
    codec = strategy::codec_for_per_coordinate_optimizer(codec);
  }
  if (adaptive && options.strategy != "allreduce") {
    throw ConfigError("codec '" + codec + "' chooses among allreduce plans; strategy '" +
                      options.strategy + "' needs a fixed codec");
  }
  // The adaptive codecs' plans (none, fp16, bf16, int8, powersgd) need no momentum
  // correction: none of them feeds error feedback through an allgather. Gossip's codec
  // compresses models, not gradients: the optimizer keeps its momentum. Planned now,
  // applied once every rank agreed.
  if (options.momentum_correction && !adaptive && options.strategy != "gossip" && !diloco) {
    m.correction = MomentumCorrection::plan(*m.optimizer, codec, tensors);
    codec = m.correction.codec();
  }
  for (const auto& p : m.params) m.weight_decay.push_back(m.correction.weight_decay(p));
  m.decayed.assign(m.params.size(), 0);
  m.codec_spec = strategy::canonical_codec(codec);

  if (options.strategy == "ps") {
    m.strategy =
        make_ps_strategy(*m.context, *m.optimizer, codec, options.ps, m.correction.active());
  } else if (options.strategy == "gossip") {
    auto gossip = make_gossip_strategy(m.context, codec, options.gossip);
    m.gossip = gossip.get();
    m.strategy = std::move(gossip);
  } else if (diloco) {
    auto d = std::make_unique<strategy::diloco::DiLoCoStrategy>(m.context->collectives(),
                                                                diloco_options(options, codec));
    m.diloco = d.get();
    m.strategy = std::move(d);
  } else {
    m.strategy = strategy::create_allreduce_strategy(m.context->collectives(),
                                                     allreduce_options(options, codec));
  }
  {
    torch::NoGradGuard no_grad;
    // The model's state and the options are checked across ranks before the first tensor
    // moves, then the strategy checks its configuration and the parameters the same way
    // before broadcasting them.
    auto lines = model_state_lines(model_params);
    if (allreduce || diloco) {
      const auto more = option_lines(options);
      lines.insert(lines.end(), more.begin(), more.end());
    }
    strategy::check_same_configuration(m.context->collectives(), lines);
    m.broadcast_from_rank0(/*frozen_too=*/true);
    m.strategy->start(tensors, param_spans);
  }
  m.status.assign(Impl::status_words(m.params.size()), 0.0f);
  // The strategy's callbacks and the gradient hooks hold the Impl: the strategy dies with
  // it, and ~Impl removes the hooks, so the raw pointer never dangles.
  Impl* impl = impl_.get();
  if (m.broadcast_buffers && !m.buffers.empty() && m.context->world_size() > 1) {
    // A strategy that synchronizes on its own thread takes the buffers along (DiLoCo: in
    // the round's last exchange), so their broadcast does not wait for an exchange.
    m.buffers_carried = m.strategy->carry_broadcast(
        [impl](Bytes& out) { Impl::pack_tensors(impl->buffers, out); },
        [impl](const Bytes& in) { Impl::unpack_tensors(in, impl->buffers); });
  }
  m.status_carried = allreduce && m.context->world_size() > 1 && m.strategy->carry_status(m.status);
  m.correction.apply();  // every check passed: the optimizer changes only now

  // Tell the strategy when each gradient is final, so it can exchange it during backward
  // (as DDP does).
  for (size_t i = 0; i < m.params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(m.params[i]);
    const uintptr_t key =
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [impl, i](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list&) {
              impl->on_gradient(i);
              return outputs;
            }));
    m.hooks.push_back({std::move(accumulator), key});
  }
}

DistributedOptimizer::~DistributedOptimizer() = default;

DistributedOptimizer::NoSync::NoSync(std::shared_ptr<int> depth) : depth_(std::move(depth)) {
  ++*depth_;
}

DistributedOptimizer::NoSync::NoSync(NoSync&& other) noexcept : depth_(std::move(other.depth_)) {}

DistributedOptimizer::NoSync::~NoSync() {
  if (depth_) --*depth_;
}

DistributedOptimizer::NoSync DistributedOptimizer::no_sync() {
  return NoSync(impl_->no_sync_depth);
}

void DistributedOptimizer::zero_grad(bool set_to_none) {
  Impl& m = *impl_;
  // A backward that threw left its exchange open: end it now, so that the other ranks,
  // waiting in it, learn that this step was abandoned.
  if (m.exchange_open) m.abandon_open_exchange();
  // No exchange since the last step began: this rank skipped it (its backward threw before
  // any gradient was final, and the loop went on). It takes part in the exchange the others
  // made of that step, so that every rank's step fails alike and the next steps pair.
  if (m.exchange_in_backward && m.strategy->exchanges_gradients() && m.ledger.skipped_a_step()) {
    m.local_failure = strategy::StepLedger::kSkippedStep;
    m.exchange(/*make_up=*/true);  // the others throw the message from their backward
  }
  m.ledger.count_zero_grad();
  m.exchanges_this_step = 0;
  m.failed.clear();
  m.exchanged = false;
  m.decayed.assign(m.params.size(), 0);
  for (auto& group : m.optimizer->param_groups()) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.mutable_grad() = torch::Tensor();
      } else {
        p.mutable_grad().detach_();
        p.mutable_grad().zero_();
      }
    }
  }
}

void DistributedOptimizer::synchronize() {
  Impl& m = *impl_;
  if (m.exchange_open) {
    m.abandon_open_exchange();
    throw Error(
        "the last backward on this rank threw before its gradients were final; the "
        "step was abandoned on every rank: zero_grad() and go on with the next batch");
  }
  if (!m.failed.empty()) throw Error(m.failed);
  // The rate of this step's update, whenever the caller set it (before backward, or after
  // it, as a schedule set at the step's end): the parameter servers apply it in the
  // exchange below, auto's regime detector looks for its decays (an exchange that ran in
  // backward, before the caller may have set it, does not need it).
  const auto& groups = m.optimizer->param_groups();
  if (!groups.empty() && groups[0].options().get_lr() > 0) {
    m.strategy->set_learning_rate(groups[0].options().get_lr());
  }
  if (m.exchanged) return;
  m.check_parameters_unchanged();
  if (!m.strategy->exchanges_gradients()) return;  // DiLoCo: .grad stays this rank's
  if (!m.exchange_in_backward) {
    m.exchange_in_step();
    return;
  }
  m.check_one_exchange_per_step();
  const std::string failure = m.exchange();
  if (!failure.empty()) throw Error(failure);
}

torch::Tensor DistributedOptimizer::step() {
  Impl& m = *impl_;
  struct CountStep {  // step() counts in the ledger as it ends, thrown or not
    Impl& m;
    ~CountStep() { m.ledger.count_step(); }
  } count{m};
  synchronize();
  m.exchanges_this_step = 0;
  m.exchanged = false;
  m.decayed.assign(m.params.size(), 0);
  torch::Tensor result;
  if (!m.strategy->applies_update()) {
    TimelineSpan span("optimizer update", "compute");
    result = m.optimizer->step();
  }
  torch::NoGradGuard no_grad;
  strategy::FloatSpans params;
  for (auto& p : m.params) params.push_back(float_span(p));
  m.strategy->after_update(params);
  if (m.broadcast_buffers && !m.buffers.empty() && !m.buffers_carried &&
      m.strategy->just_synchronized()) {
    TimelineSpan span("broadcast buffers", "communicate");
    m.broadcast_from_rank0(/*frozen_too=*/false);
  }
  return result;
}

torch::optim::Optimizer& DistributedOptimizer::optimizer() { return *impl_->optimizer; }

const std::string& DistributedOptimizer::codec_spec() const { return impl_->codec_spec; }

std::string DistributedOptimizer::bucket_layout() const {
  return impl_->strategy->bucket_layout_summary();
}

namespace {

GossipSummary public_summary(const strategy::gossip::GossipStats& s) {
  GossipSummary out;
  out.offers = s.offers;
  out.merges = s.merges;
  out.busy = s.busy;
  out.dropped_messages = s.dropped_messages;
  out.bytes_sent = s.bytes_sent;
  out.bytes_bookkeeping = s.bytes_bookkeeping;
  out.dropped_peers = s.dropped_peers;
  if (!s.steps_between.empty()) {
    std::vector<uint64_t> sorted = s.steps_between;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (uint64_t v : sorted) sum += static_cast<double>(v);
    out.steps_between_mean = sum / static_cast<double>(sorted.size());
    out.steps_between_p50 = sorted[sorted.size() / 2];
    out.steps_between_max = sorted.back();
  }
  return out;
}

GossipReport public_report(const strategy::gossip::JobView& view,
                           const std::vector<torch::Tensor>& params) {
  GossipReport out;
  out.summary = public_summary(view.totals);
  out.summary.reported = view.reported;
  out.summary.lost = view.lost;
  out.summary.consensus_distance = view.consensus_distance;
  for (size_t i = 0; i < params.size(); ++i) {
    out.average.push_back(torch::from_blob(const_cast<float*>(view.average[i].data()),
                                           params[i].sizes(), torch::kFloat32)
                              .clone());
  }
  for (const auto& note : view.notes) out.notes.emplace_back(note.begin(), note.end());
  return out;
}

Bytes note_bytes(const std::string& note) { return Bytes(note.begin(), note.end()); }

}  // namespace

std::optional<GossipSummary> DistributedOptimizer::gossip_summary() const {
  if (!impl_->gossip) return std::nullopt;
  if (impl_->gossip_final) return impl_->gossip_final;
  return public_summary(impl_->gossip->stats());
}

namespace {

// The job's gossip strategy; ConfigError naming `call` for any other strategy.
strategy::gossip::GossipStrategy& gossip_of(strategy::gossip::GossipStrategy* gossip,
                                            const char* call) {
  if (!gossip) throw ConfigError(std::string(call) + ": this job's strategy is not gossip");
  return *gossip;
}

}  // namespace

std::optional<GossipReport> DistributedOptimizer::gossip_report(const std::string& note) {
  auto& gossip = gossip_of(impl_->gossip, "gossip_report");
  torch::NoGradGuard no_grad;
  const auto view = gossip.report(note_bytes(note));
  if (!view) return std::nullopt;
  return public_report(*view, impl_->params);
}

std::optional<GossipReport> DistributedOptimizer::finish_gossip(const std::string& note) {
  auto& gossip = gossip_of(impl_->gossip, "finish_gossip");
  torch::NoGradGuard no_grad;
  const auto view = gossip.finish_job(note_bytes(note));
  if (!view) return std::nullopt;
  auto report = public_report(*view, impl_->params);
  impl_->gossip_final = report.summary;
  return report;
}

std::vector<CodecDecision> DistributedOptimizer::take_codec_decisions() {
  std::vector<CodecDecision> out;
  for (auto& d : impl_->strategy->take_decisions()) {
    out.push_back({d.step, std::move(d.plan), std::move(d.reason), std::move(d.inputs_json)});
  }
  return out;
}

TrafficCounters DistributedOptimizer::traffic() const {
  const auto t = impl_->strategy->traffic();
  return {t.steps, t.bytes_contributed, t.bytes_on_wire, t.bytes_dense, t.bytes_dense_on_wire};
}

const Context& DistributedOptimizer::context() const { return *impl_->context; }

std::optional<DiLoCoSummary> DistributedOptimizer::diloco_summary() const {
  if (!impl_->diloco) return std::nullopt;
  const auto s = impl_->diloco->stats();
  return DiLoCoSummary{s.inner_steps, s.delay,  s.fragments,     s.steps,
                       s.exchanges,   s.rounds, s.bytes_on_wire, s.last_sync_step};
}

void DistributedOptimizer::with_synchronized_model(const std::function<void()>& use) {
  Impl& m = *impl_;
  if (!m.diloco) {
    use();
    return;
  }
  // Copies through detached views: `use` runs in the caller's grad mode.
  m.check_parameters_unchanged();
  std::vector<torch::Tensor> own;
  strategy::FloatSpans params;
  for (auto& p : m.params) {
    own.push_back(p.detach().clone());
    params.push_back(float_span(p));
  }
  m.diloco->global_parameters(params);
  struct PutBack {
    std::vector<torch::Tensor>& params;
    std::vector<torch::Tensor>& own;
    ~PutBack() {
      for (size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(own[i]);
    }
  } put_back{m.params, own};
  use();
}

void DistributedOptimizer::count_samples(size_t samples, double loss_sum) {
  impl_->strategy->count_samples(samples, loss_sum);
}

namespace {
JobProgress public_progress(const strategy::JobProgress& p) {
  return {p.samples,        p.loss_sum,     p.bytes_sent, p.bytes_dense,
          p.bytes_received, p.live_workers, p.done};
}
}  // namespace

std::optional<JobProgress> DistributedOptimizer::job_progress() const {
  const auto p = impl_->strategy->job_progress();
  if (!p) return std::nullopt;
  return public_progress(*p);
}

std::optional<JobSummary> DistributedOptimizer::finish() {
  if (impl_->gossip) {
    finish_gossip();
    return std::nullopt;
  }
  torch::NoGradGuard no_grad;
  Impl& m = *impl_;
  m.check_parameters_unchanged();
  {
    strategy::FloatSpans params;
    for (auto& p : m.params) params.push_back(float_span(p));
    m.strategy->follow_parameters(params);
  }
  const auto s = m.strategy->finish();
  if (m.diloco && m.broadcast_buffers && !m.buffers.empty() && m.strategy->just_synchronized()) {
    m.broadcast_from_rank0(/*frozen_too=*/false);
  }
  if (!s) return std::nullopt;
  JobSummary out;
  out.progress = public_progress(s->progress);
  out.version = s->version;
  out.staleness_count = s->staleness_count;
  out.staleness_mean = s->staleness_mean;
  out.staleness_p50 = s->staleness_p50;
  out.staleness_p99 = s->staleness_p99;
  out.staleness_max = s->staleness_max;
  out.checksums = s->checksums;
  return out;
}

}  // namespace gradwire
