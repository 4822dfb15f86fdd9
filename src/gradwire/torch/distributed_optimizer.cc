#include "gradwire/distributed_optimizer.h"

#include <torch/torch.h>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/zmq_transport.h"
#include "gradwire/compress/layer_classification.h"
#include "gradwire/compress/policy.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/strategy/ps/ps_strategy.h"
#include "gradwire/strategy/ps/updater.h"
#include "gradwire/strategy/registry.h"

namespace gradwire {
namespace {

std::span<float> float_span(const torch::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<size_t>(t.numel())};
}

void require_dense_cpu_float(const std::string& what, const std::string& name,
                             const torch::Tensor& t) {
  if (!t.device().is_cpu() || t.scalar_type() != torch::kFloat || !t.is_contiguous() ||
      t.is_sparse()) {
    throw ConfigError(what + " '" + name + "' is " + std::string(t.toString()) +
                      (t.is_contiguous() ? "" : " (non-contiguous)") +
                      "; this build of gradwire exchanges contiguous float32 CPU tensors");
  }
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

// Moves heavy-ball momentum from `optimizer` into the codecs when some tensor's codec uses
// error feedback on the allgather path (DistributedOptimizer's header says why). Returns
// the policy to use.
std::string apply_momentum_correction(torch::optim::Optimizer& optimizer, const std::string& codec,
                                      const std::vector<compress::TensorInfo>& tensors) {
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (!sgd) return codec;
  const auto policy = compress::CodecPolicy::parse(codec);
  bool needed = false;
  for (const auto& tensor : tensors) {
    const std::string spec = policy.spec_for(tensor);
    const Spec parsed = Spec::parse(spec);
    if (parsed.params.count("momentum")) return codec;  // the user chose
    const auto codec_instance = policy.create(tensor);
    if (compress::uses_error_feedback(spec) && !codec_instance->additive_wire() &&
        !codec_instance->low_rank()) {
      needed = true;
    }
  }
  const double momentum = needed ? common_heavy_ball_momentum(*sgd) : 0.0;
  if (momentum <= 0) return codec;
  for (auto& group : sgd->param_groups()) {
    static_cast<torch::optim::SGDOptions&>(group.options()).momentum(0);
  }
  return policy.with_momentum(momentum).canonical();
}

std::unique_ptr<strategy::Strategy> make_ps_strategy(const Context& context,
                                                     torch::optim::Optimizer& optimizer,
                                                     const std::string& codec,
                                                     const ParameterServerOptions& ps) {
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
  o.config.momentum = group.momentum();  // 0 after momentum correction moved it into codecs
  o.config.weight_decay = group.weight_decay();
  o.config.pull = strategy::ps::PullCodec::parse(ps.pull);
  o.config.continue_on_worker_loss = ps.continue_on_worker_loss;
  o.config.worker_timeout_s = ps.worker_timeout_s;
  o.config.checkpoint_dir = ps.checkpoint_dir;
  o.config.checkpoint_every = ps.checkpoint_every;
  o.config.sample_budget = ps.sample_budget;
  o.codec = codec;
  o.worker = context.rank();
  o.token = servers->token;
  o.timeout = InitOptions::from_environment().collective_timeout;
  std::vector<std::pair<std::string, std::string>> peers;
  for (size_t s = 0; s < servers->endpoints.size(); ++s) {
    o.servers.push_back("server" + std::to_string(s));
    peers.emplace_back(o.servers.back(), servers->endpoints[s]);
  }
  auto transport =
      std::make_unique<comm::ZmqClientTransport>("worker" + std::to_string(context.rank()), peers);
  return std::make_unique<strategy::ps::ParameterServerStrategy>(std::move(transport), o);
}

}  // namespace

struct DistributedOptimizer::Impl {
  std::shared_ptr<Context> context;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> params;
  std::unique_ptr<strategy::Strategy> strategy;
  std::string codec_spec;
};

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<Context> context,
                                           std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           const torch::nn::Module& model,
                                           const DistributedOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (!context) throw ConfigError("DistributedOptimizer needs the context from gradwire::init()");
  if (!optimizer) throw ConfigError("DistributedOptimizer needs an optimizer");
  impl_->context = std::move(context);
  impl_->optimizer = std::move(optimizer);

  std::vector<compress::TensorInfo> tensors;
  strategy::FloatSpans param_spans, buffer_spans;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    require_dense_cpu_float("parameter", item.key(), p);
    compress::TensorInfo info;
    info.name = item.key();
    info.shape = p.sizes().vec();
    info.kind = compress::classify_parameter(info.name, info.shape);
    tensors.push_back(std::move(info));
    impl_->params.push_back(p);
    param_spans.push_back(float_span(p));
  }
  auto& collectives = impl_->context->collectives();
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    torch::Tensor b = item.value();
    if (!b.device().is_cpu() || !b.is_contiguous()) {
      throw ConfigError("buffer '" + item.key() + "' must be a contiguous CPU tensor");
    }
    if (b.scalar_type() == torch::kFloat) {
      buffer_spans.push_back(float_span(b));
    } else {
      // Non-float buffers (e.g. BatchNorm's num_batches_tracked) travel as raw bytes.
      collectives.broadcast(b.data_ptr(), b.numel() * b.element_size(), 0);
    }
  }

  std::string codec = options.compressor;
  if (options.momentum_correction) {
    codec = apply_momentum_correction(*impl_->optimizer, codec, tensors);
  }
  impl_->codec_spec = compress::CodecPolicy::parse(codec).canonical();

  if (options.strategy == "ps") {
    impl_->strategy = make_ps_strategy(*impl_->context, *impl_->optimizer, codec, options.ps);
  } else {
    strategy::StrategyOptions strategy_options;
    strategy_options.name = options.strategy;
    strategy_options.codec = codec;
    strategy_options.bucket_bytes = options.bucket_bytes;
    impl_->strategy = strategy::create_strategy(collectives, strategy_options);
  }
  {
    torch::NoGradGuard no_grad;
    impl_->strategy->start(tensors, param_spans, buffer_spans);
  }

  // Tell the strategy when each gradient is produced, so it can start exchanging during
  // backward (as Horovod does). The tensor hook runs just before accumulation into .grad.
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    strategy::Strategy* s = impl_->strategy.get();
    impl_->params[i].register_hook([s, i](const torch::Tensor&) { s->gradient_ready(i); });
  }
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zero_grad() { impl_->optimizer->zero_grad(); }

void DistributedOptimizer::synchronize() {
  torch::NoGradGuard no_grad;
  strategy::FloatSpans grads;
  grads.reserve(impl_->params.size());
  for (auto& p : impl_->params) {
    if (!p.grad().defined()) {
      p.mutable_grad() = torch::zeros_like(p);
    } else if (!p.grad().is_contiguous()) {
      p.mutable_grad() = p.grad().contiguous();
    }
    grads.push_back(float_span(p.grad()));
  }
  impl_->strategy->synchronize(grads);
}

torch::Tensor DistributedOptimizer::step() {
  if (impl_->strategy->applies_update()) {
    const auto& groups = impl_->optimizer->param_groups();
    if (!groups.empty() && groups[0].options().get_lr() > 0) {
      impl_->strategy->set_learning_rate(groups[0].options().get_lr());
    }
  }
  synchronize();
  torch::Tensor result;
  if (!impl_->strategy->applies_update()) result = impl_->optimizer->step();
  strategy::FloatSpans params;
  for (auto& p : impl_->params) params.push_back(float_span(p));
  impl_->strategy->after_update(params);
  return result;
}

torch::optim::Optimizer& DistributedOptimizer::optimizer() { return *impl_->optimizer; }

const std::string& DistributedOptimizer::codec_spec() const { return impl_->codec_spec; }

TrafficCounters DistributedOptimizer::traffic() const {
  const auto t = impl_->strategy->traffic();
  return {t.steps, t.bytes_sent, t.bytes_dense};
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
