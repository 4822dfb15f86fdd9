#include "gradwire/distributed_optimizer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "gradwire/comm/collectives.h"
#include "gradwire/compress/layer_classification.h"
#include "gradwire/compress/policy.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/agreement.h"
#include "gradwire/strategy/gossip/gossip_strategy.h"
#include "gradwire/strategy/registry.h"
#include "gradwire/torch/optimizer_impl.h"
#include "gradwire/torch/peer_strategies.h"

namespace gradwire {
namespace {

std::span<float> float_span(const torch::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<size_t>(t.numel())};
}

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

std::string shape_string(const torch::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

// "Double on cpu", "Float on cuda:0, non-contiguous": what a user needs to fix a tensor.
std::string describe(const torch::Tensor& t) {
  std::string out = std::string(c10::toString(t.scalar_type())) + " on " + t.device().str();
  if (t.layout() != torch::kStrided) return out + ", not dense";
  return out + (t.is_contiguous() ? "" : ", non-contiguous");
}

bool dense_cpu(const torch::Tensor& t) {
  return t.layout() == torch::kStrided && t.device().is_cpu() && t.is_contiguous();
}

// The model's parameters that take part, each checked to be exchangeable.
NamedTensors exchanged_parameters(const torch::nn::Module& model) {
  NamedTensors params;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (!dense_cpu(p) || p.scalar_type() != torch::kFloat) {
      throw ConfigError("parameter '" + item.key() + "' is " + describe(p) +
                        "; DistributedOptimizer exchanges contiguous float32 CPU parameters "
                        "only (keep the model on the CPU in float32)");
    }
    params.emplace_back(item.key(), p);
  }
  return params;
}

NamedTensors model_buffers(const torch::nn::Module& model) {
  NamedTensors buffers;
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    if (!dense_cpu(item.value())) {
      throw ConfigError("buffer '" + item.key() + "' is " + describe(item.value()) +
                        "; buffers must be contiguous CPU tensors");
    }
    buffers.emplace_back(item.key(), item.value());
  }
  return buffers;
}

// The parameters exchanged come from the model, those updated from the optimizer: they
// must be the same set, or an update would skip an exchanged gradient (or the reverse).
void require_same_parameters(const NamedTensors& params, torch::optim::Optimizer& optimizer) {
  std::unordered_set<const void*> in_optimizer, in_model;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) in_optimizer.insert(p.unsafeGetTensorImpl());
  }
  for (const auto& [name, p] : params) {
    in_model.insert(p.unsafeGetTensorImpl());
    if (!in_optimizer.count(p.unsafeGetTensorImpl())) {
      throw ConfigError("parameter '" + name +
                        "' of the model is not in the optimizer: build the optimizer on the "
                        "model's parameters (every parameter that requires grad is exchanged)");
    }
  }
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.requires_grad() && !in_model.count(p.unsafeGetTensorImpl())) {
        throw ConfigError("the optimizer updates a tensor of shape " + shape_string(p) +
                          " that is not a parameter of the model given to "
                          "DistributedOptimizer: its gradient would never be exchanged");
      }
    }
  }
}

// Which DistributedOptimizer holds a parameter: one at a time per process, since each
// registers a gradient hook that feeds its own strategy.
std::mutex g_claims_mutex;
std::unordered_set<const void*> g_claimed;

void claim_parameters(const NamedTensors& params) {
  std::lock_guard<std::mutex> lock(g_claims_mutex);
  for (const auto& [name, p] : params) {
    if (g_claimed.count(p.unsafeGetTensorImpl())) {
      throw ConfigError("parameter '" + name +
                        "' already belongs to another DistributedOptimizer; a parameter "
                        "belongs to one at a time: destroy the first before building another");
    }
  }
  for (const auto& [name, p] : params) g_claimed.insert(p.unsafeGetTensorImpl());
}

void release_parameters(const std::vector<torch::Tensor>& params) {
  std::lock_guard<std::mutex> lock(g_claims_mutex);
  for (const auto& p : params) g_claimed.erase(p.unsafeGetTensorImpl());
}

// One line per buffer, checked across ranks like the parameters (agreement.h) before any
// buffer is broadcast.
std::vector<std::string> buffer_lines(const NamedTensors& buffers) {
  std::vector<std::string> lines{"buffers " + std::to_string(buffers.size())};
  for (const auto& [name, b] : buffers) {
    lines.push_back("buffer " + name + " " + c10::toString(b.scalar_type()) + " " +
                    shape_string(b));
  }
  return lines;
}

// The heavy-ball momentum every group of `sgd` uses, or 0 when the groups differ or use
// Nesterov or dampening (then the optimizer is left alone).
double common_heavy_ball_momentum(torch::optim::SGD& sgd) {
  double momentum = -1;
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (o.nesterov() || o.dampening() != 0) return 0;
    if (momentum >= 0 && o.momentum() != momentum) return 0;
    momentum = o.momentum();
  }
  return momentum > 0 ? momentum : 0;
}

struct MomentumCorrection {
  std::string codec;  // the policy to use
  // Weight decay moved out of the optimizer, by parameter (TensorImpl*): each rank adds
  // wd x w to the gradient before the exchange, inside the corrected momentum.
  std::unordered_map<const void*, double> weight_decay;
};

// Moves heavy-ball momentum (and with it weight decay) from `optimizer` into the codecs
// when some tensor's codec uses error feedback on the allgather path (the header says why).
MomentumCorrection apply_momentum_correction(torch::optim::Optimizer& optimizer,
                                             const std::string& codec,
                                             const std::vector<compress::TensorInfo>& tensors) {
  MomentumCorrection out{codec, {}};
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (!sgd) return out;
  const auto policy = compress::CodecPolicy::parse(codec);
  bool needed = false;
  for (const auto& tensor : tensors) {
    const std::string spec = policy.spec_for(tensor);
    const Spec parsed = Spec::parse(spec);
    if (parsed.params.count("momentum")) return out;  // the user chose
    const auto codec_instance = policy.create(tensor);
    if (compress::uses_error_feedback(spec) && !codec_instance->additive_wire() &&
        !codec_instance->low_rank() && !codec_instance->shared_scale()) {
      needed = true;
    }
  }
  const double momentum = needed ? common_heavy_ball_momentum(*sgd) : 0.0;
  if (momentum <= 0) return out;
  for (auto& group : sgd->param_groups()) {
    auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
    if (o.weight_decay() != 0) {
      for (auto& p : group.params()) out.weight_decay[p.unsafeGetTensorImpl()] = o.weight_decay();
    }
    o.momentum(0);
    o.weight_decay(0);
  }
  out.codec = policy.with_momentum(momentum).canonical();
  return out;
}

}  // namespace

DistributedOptimizer::Impl::~Impl() {
  for (auto& hook : hooks) hook.accumulator->del_post_hook(hook.key);
  if (claimed) release_parameters(params);
}

void DistributedOptimizer::Impl::on_gradient(size_t i) {
  exchanged.store(false, std::memory_order_relaxed);
  if (!strategy->overlaps()) return;
  const torch::Tensor& p = params[i];
  torch::Tensor grad = p.grad();
  if (!grad.defined() || !dense_cpu(grad) || grad.scalar_type() != torch::kFloat) {
    return;  // synchronize() makes it exchangeable and reports it
  }
  if (reported[i]) {
    // A second backward before step(): the strategy refuses it by name.
    strategy->gradient_ready(i, float_span(grad));
    return;
  }
  torch::NoGradGuard no_grad;
  if (weight_decay[i] != 0) grad.add_(p, weight_decay[i]);
  reported[i] = 1;
  strategy->gradient_ready(i, float_span(grad));
}

void DistributedOptimizer::Impl::broadcast_buffers_from_rank0() {
  if (buffers.empty() || context->world_size() == 1) return;
  size_t total = 0;
  for (const auto& b : buffers) total += b.nbytes();
  buffer_staging.resize(total);
  const bool root = context->rank() == 0;
  if (root) {
    size_t offset = 0;
    for (const auto& b : buffers) {
      std::memcpy(buffer_staging.data() + offset, b.data_ptr(), b.nbytes());
      offset += b.nbytes();
    }
  }
  context->collectives().broadcast(buffer_staging.data(), total, 0);
  if (!root) {
    size_t offset = 0;
    for (auto& b : buffers) {
      std::memcpy(b.data_ptr(), buffer_staging.data() + offset, b.nbytes());
      offset += b.nbytes();
    }
  }
}

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
  impl_->context = std::move(context);
  impl_->optimizer = std::move(optimizer);
  // Parameter-server and gossip workers do not step together: no per-step collective.
  impl_->broadcast_buffers =
      options.broadcast_buffers && options.strategy != "ps" && options.strategy != "gossip";

  // Everything a user can get wrong locally is checked before any collective.
  const NamedTensors params = exchanged_parameters(model);
  require_same_parameters(params, *impl_->optimizer);
  const NamedTensors buffers = model_buffers(model);
  claim_parameters(params);
  impl_->claimed = true;

  std::vector<compress::TensorInfo> tensors;
  strategy::FloatSpans param_spans;
  for (const auto& [name, p] : params) {
    compress::TensorInfo info;
    info.name = name;
    info.shape = p.sizes().vec();
    info.kind = compress::classify_parameter(info.name, info.shape);
    tensors.push_back(std::move(info));
    impl_->params.push_back(p);
    param_spans.push_back(float_span(p));
  }
  for (const auto& [name, b] : buffers) impl_->buffers.push_back(b);

  std::string codec = strategy::codec_or_default(options.compressor, options.strategy);
  const bool adaptive = strategy::is_adaptive_codec(codec);
  if (adaptive && options.strategy != "allreduce") {
    throw ConfigError("codec '" + codec + "' chooses among allreduce plans; strategy '" +
                      options.strategy + "' needs a fixed codec");
  }
  // The adaptive codecs' plans (none, fp16, bf16, int8, powersgd) need no momentum
  // correction: none of them feeds error feedback through an allgather.
  // Gossip's codec compresses models, not gradients: the optimizer keeps its momentum.
  if (options.momentum_correction && !adaptive && options.strategy != "gossip") {
    auto correction = apply_momentum_correction(*impl_->optimizer, codec, tensors);
    codec = std::move(correction.codec);
    for (const auto& p : impl_->params) {
      const auto it = correction.weight_decay.find(p.unsafeGetTensorImpl());
      impl_->weight_decay.push_back(it == correction.weight_decay.end() ? 0.0 : it->second);
    }
  }
  impl_->weight_decay.resize(impl_->params.size(), 0.0);
  impl_->codec_spec = strategy::canonical_codec(codec);

  if (options.strategy == "ps") {
    impl_->strategy = make_ps_strategy(*impl_->context, *impl_->optimizer, codec, options.ps);
  } else if (options.strategy == "gossip") {
    impl_->strategy = make_gossip_strategy(impl_->context, codec, options.gossip);
  } else {
    strategy::StrategyOptions strategy_options;
    strategy_options.name = options.strategy;
    strategy_options.codec = codec;
    strategy_options.bucket_bytes = options.bucket_bytes;
    strategy_options.first_bucket_bytes = options.first_bucket_bytes;
    strategy_options.overlap = options.overlap;
    strategy_options.sparse_aggregation = options.sparse_aggregation;
    if (!(options.link_bits_per_s > 0) || !(options.link_latency_s >= 0)) {
      throw ConfigError("the link needs a positive bandwidth and a latency of 0 or more");
    }
    strategy_options.link =
        comm::LinkModel::from_bandwidth(options.link_latency_s, options.link_bits_per_s);
    impl_->strategy = strategy::create_strategy(impl_->context->collectives(), strategy_options);
  }
  {
    torch::NoGradGuard no_grad;
    // Buffers are checked across ranks before the first of them moves, then the strategy
    // checks its configuration and the parameters the same way before broadcasting them.
    strategy::check_same_configuration(impl_->context->collectives(), buffer_lines(buffers));
    impl_->broadcast_buffers_from_rank0();
    impl_->strategy->start(tensors, param_spans);
  }

  // Tell the strategy when each gradient is final, so it can exchange it during backward
  // (as DDP does). The hooks are removed by ~Impl, so the raw pointer never dangles.
  impl_->reported.assign(impl_->params.size(), 0);
  Impl* impl = impl_.get();
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(impl_->params[i]);
    const uintptr_t key =
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [impl, i](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list&) {
              impl->on_gradient(i);
              return outputs;
            }));
    impl_->hooks.push_back({std::move(accumulator), key});
  }
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zero_grad() { impl_->optimizer->zero_grad(); }

void DistributedOptimizer::synchronize() {
  torch::NoGradGuard no_grad;
  const auto& groups = impl_->optimizer->param_groups();
  if (!groups.empty() && groups[0].options().get_lr() > 0) {
    impl_->strategy->set_learning_rate(groups[0].options().get_lr());
  }
  strategy::FloatSpans grads;
  grads.reserve(impl_->params.size());
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    auto& p = impl_->params[i];
    if (!impl_->reported[i]) {  // else the hook finished it, and the strategy has it
      if (!p.grad().defined()) {
        p.mutable_grad() = torch::zeros_like(p);
      } else if (!p.grad().is_contiguous()) {
        p.mutable_grad() = p.grad().contiguous();
      }
      if (impl_->weight_decay[i] != 0) p.mutable_grad().add_(p, impl_->weight_decay[i]);
    }
    grads.push_back(float_span(p.grad()));
  }
  impl_->reported.assign(impl_->params.size(), 0);
  impl_->strategy->synchronize(grads);
  impl_->exchanged.store(true, std::memory_order_relaxed);
}

torch::Tensor DistributedOptimizer::step() {
  if (!impl_->exchanged.load(std::memory_order_relaxed)) synchronize();
  impl_->exchanged.store(false, std::memory_order_relaxed);
  torch::Tensor result;
  if (!impl_->strategy->applies_update()) {
    TimelineSpan span("optimizer update", "compute");
    result = impl_->optimizer->step();
  }
  torch::NoGradGuard no_grad;
  strategy::FloatSpans params;
  for (auto& p : impl_->params) params.push_back(float_span(p));
  impl_->strategy->after_update(params);
  if (impl_->broadcast_buffers && !impl_->buffers.empty()) {
    TimelineSpan span("broadcast buffers", "communicate");
    impl_->broadcast_buffers_from_rank0();
  }
  return result;
}

torch::optim::Optimizer& DistributedOptimizer::optimizer() { return *impl_->optimizer; }

const std::string& DistributedOptimizer::codec_spec() const { return impl_->codec_spec; }

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
  const auto* gossip = dynamic_cast<strategy::gossip::GossipStrategy*>(impl_->strategy.get());
  if (!gossip) return std::nullopt;
  if (impl_->gossip_final) return impl_->gossip_final;
  return public_summary(gossip->stats());
}

namespace {

// The job's gossip strategy; ConfigError naming `call` for any other strategy.
strategy::gossip::GossipStrategy& gossip_of(strategy::Strategy& s, const char* call) {
  auto* gossip = dynamic_cast<strategy::gossip::GossipStrategy*>(&s);
  if (!gossip) throw ConfigError(std::string(call) + ": this job's strategy is not gossip");
  return *gossip;
}

}  // namespace

std::optional<GossipReport> DistributedOptimizer::gossip_report(const std::string& note) {
  auto& gossip = gossip_of(*impl_->strategy, "gossip_report");
  torch::NoGradGuard no_grad;
  const auto view = gossip.report(note_bytes(note));
  if (!view) return std::nullopt;
  return public_report(*view, impl_->params);
}

std::optional<GossipReport> DistributedOptimizer::finish_gossip(const std::string& note) {
  auto& gossip = gossip_of(*impl_->strategy, "finish_gossip");
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
  if (dynamic_cast<strategy::gossip::GossipStrategy*>(impl_->strategy.get())) {
    finish_gossip();
    return std::nullopt;
  }
  torch::NoGradGuard no_grad;
  const auto s = impl_->strategy->finish();
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
