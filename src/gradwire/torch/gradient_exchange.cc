// DistributedOptimizer's exchange: the gradient hooks, the exchange that ends every backward
// of an allreduce job (optimizer_impl.h has the sequence), failed and abandoned steps.
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "gradwire/comm/collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/torch/model_parameters.h"
#include "gradwire/torch/optimizer_impl.h"

namespace gradwire {
namespace {

std::span<float> float_span(const torch::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<size_t>(t.numel())};
}

std::string gradient_error(const std::string& name, const torch::Tensor& grad) {
  return "the gradient of parameter '" + name + "' is " + describe_tensor(grad) +
         "; DistributedOptimizer exchanges dense float32 CPU gradients only (a sparse "
         "embedding gradient needs sparse=false)";
}

}  // namespace

DistributedOptimizer::Impl::~Impl() {
  for (auto& hook : hooks) hook.accumulator->del_post_hook(hook.key);
  correction.restore();
  if (claimed) release_parameters(params);
}

void DistributedOptimizer::Impl::check_parameters_unchanged() const {
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& p = params[i];
    if (!exchangeable(p)) {
      throw ConfigError("parameter '" + names[i] + "' is now " + describe_tensor(p) +
                        "; it was float32 on the CPU when DistributedOptimizer was built, and "
                        "only such parameters are exchanged");
    }
    if (p.requires_grad() &&
        torch::autograd::impl::try_get_grad_accumulator(p) != hooks[i].accumulator) {
      throw ConfigError("parameter '" + names[i] +
                        "' has a new gradient accumulator since DistributedOptimizer was built "
                        "(its data was replaced, by Module::to() or set_data()), so its "
                        "gradient hook is gone: build the DistributedOptimizer after changing "
                        "the model");
    }
  }
  for (size_t j = 0; j < frozen.size(); ++j) {
    if (!frozen_in_optimizer[j]) continue;
    if (frozen[j].requires_grad() || frozen[j].grad().defined()) {
      throw ConfigError("parameter '" + frozen_names[j] +
                        "' was frozen (requires_grad false) when DistributedOptimizer was "
                        "built and now " +
                        (frozen[j].grad().defined() ? "has a gradient" : "requires grad") +
                        "; it is not exchanged, so the ranks would train it apart: build the "
                        "DistributedOptimizer after unfreezing it");
    }
  }
}

void DistributedOptimizer::Impl::add_weight_decay(size_t i, torch::Tensor& grad) {
  if (weight_decay[i] == 0 || decayed[i]) return;
  grad.add_(params[i], weight_decay[i]);
  decayed[i] = 1;
}

void DistributedOptimizer::Impl::open_exchange() {
  check_parameters_unchanged();  // before this rank reports anything
  const size_t n = params.size();
  hooked.assign(n, 0);
  reported.assign(n, 0);
  exchange_grads.assign(n, torch::Tensor());
  local_failure.clear();
  failed.clear();
  exchange_open = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { on_backward_end(); });
}

void DistributedOptimizer::Impl::on_gradient(size_t i) {
  exchanged = false;
  if (!exchange_in_backward || no_sync_depth > 0) return;
  // A hook that already ran in the open exchange: the backward that opened it threw
  // before its final callback, and this is the next one.
  if (exchange_open && hooked[i]) abandon_open_exchange();
  if (!exchange_open) open_exchange();
  hooked[i] = 1;
  if (!strategy->overlaps()) return;
  torch::Tensor grad = params[i].grad();
  if (!exchangeable(grad)) {
    local_failure = gradient_error(names[i], grad);
    throw ConfigError(local_failure);
  }
  torch::NoGradGuard no_grad;
  add_weight_decay(i, grad);
  exchange_grads[i] = grad;
  reported[i] = 1;
  strategy->gradient_ready(i, float_span(grad));
}

void DistributedOptimizer::Impl::on_backward_end() {
  if (!exchange_open) return;
  const std::string failure = exchange();
  if (!failure.empty()) throw Error(failure);
}

std::string DistributedOptimizer::Impl::exchange() {
  const size_t n = params.size();
  if (!exchange_open) {  // from step() or synchronize(): nothing was reported
    hooked.assign(n, 0);
    reported.assign(n, 0);
    exchange_grads.assign(n, torch::Tensor());
  }
  exchange_open = false;
  torch::NoGradGuard no_grad;
  std::vector<uint8_t> used(n, 0);
  spans.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (!reported[i]) {
      torch::Tensor grad = params[i].grad();
      if (grad.defined() && !exchangeable(grad)) {
        if (grad.layout() == torch::kStrided && grad.device().is_cpu() &&
            grad.scalar_type() == torch::kFloat) {
          params[i].mutable_grad() = grad = grad.contiguous();
        } else {
          if (local_failure.empty()) local_failure = gradient_error(names[i], grad);
          grad = torch::Tensor();
        }
      }
      used[i] = grad.defined();
      // A parameter without a gradient here contributes zeros; it keeps no .grad unless
      // another rank had one (as DDP's find_unused_parameters).
      if (!grad.defined()) grad = torch::zeros_like(params[i]);
      add_weight_decay(i, grad);
      exchange_grads[i] = grad;
    } else {
      used[i] = 1;
    }
    spans[i] = float_span(exchange_grads[i]);
  }
  // The status: did this rank fail, and which parameters had a gradient here. The
  // strategy carries it on its last collective where it can (status_carried).
  std::fill(status.begin(), status.end(), 0.0f);
  status[0] = local_failure.empty() ? 0.0f : 1.0f;
  for (size_t i = 0; i < n; ++i) status[i + 1] = used[i];
  try {
    strategy->synchronize(spans);  // a failed collective throws on every rank
  } catch (const std::exception& e) {
    failed = std::string("the gradient exchange failed: ") + e.what() +
             ". No rank's .grad holds the aggregate";
    exchange_grads.assign(n, torch::Tensor());
    local_failure.clear();
    throw;
  }

  // The status over all ranks: any failure, and which parameters got a gradient somewhere.
  if (context->world_size() > 1 && !status_carried) {
    TimelineSpan span("exchange status", "communicate");
    context->collectives().allreduce_max(status.data(), status.size());
  }
  const bool any_failed = status[0] > 0;
  std::vector<uint8_t> used_anywhere(n);
  for (size_t i = 0; i < n; ++i) used_anywhere[i] = status[i + 1] > 0;
  std::string failure;
  if (any_failed) {
    // Every rank learns every cause (an allgather only when some rank failed).
    std::vector<Bytes> causes{Bytes(local_failure.begin(), local_failure.end())};
    if (context->world_size() > 1) {
      causes = context->collectives().allgather_bytes(
          std::span<const uint8_t>(causes[0].data(), causes[0].size()));
    }
    failure = "the gradient exchange failed on";
    const char* separator = " rank ";
    for (size_t r = 0; r < causes.size(); ++r) {
      if (causes[r].empty()) continue;
      failure +=
          separator + std::to_string(r) + ": " + std::string(causes[r].begin(), causes[r].end());
      separator = "; rank ";
    }
    failure += ". No rank's .grad holds the aggregate: zero_grad() and go on with the next batch";
    failed = failure;
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (used_anywhere[i] && !used[i]) params[i].mutable_grad() = exchange_grads[i];
    }
    exchanged = true;
  }
  exchange_grads.assign(n, torch::Tensor());
  local_failure.clear();
  return failure;
}

void DistributedOptimizer::Impl::abandon_open_exchange() {
  if (local_failure.empty()) {
    local_failure =
        "its backward ended before every gradient was final (an exception in backward or in a "
        "gradient hook); the step was abandoned";
  }
  exchange();  // this rank knows; the others throw the message from their backward
}

void DistributedOptimizer::Impl::exchange_in_step() {
  torch::NoGradGuard no_grad;
  spans.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    if (!p.grad().defined()) {
      p.mutable_grad() = torch::zeros_like(p);
    } else if (!p.grad().is_contiguous()) {
      p.mutable_grad() = p.grad().contiguous();
    }
    if (!exchangeable(p.grad())) throw ConfigError(gradient_error(names[i], p.grad()));
    add_weight_decay(i, p.mutable_grad());
    spans[i] = float_span(p.grad());
  }
  strategy->synchronize(spans);
  exchanged = true;
}

void DistributedOptimizer::Impl::broadcast_from_rank0(bool frozen_too) {
  if (context->world_size() == 1) return;
  std::vector<torch::Tensor> tensors = buffers;
  if (frozen_too) tensors.insert(tensors.end(), frozen.begin(), frozen.end());
  if (tensors.empty()) return;
  size_t total = 0;
  for (const auto& t : tensors) total += t.nbytes();
  staging.resize(total);
  const bool root = context->rank() == 0;
  if (root) {
    size_t offset = 0;
    for (const auto& t : tensors) {
      std::memcpy(staging.data() + offset, t.data_ptr(), t.nbytes());
      offset += t.nbytes();
    }
  }
  context->collectives().broadcast(staging.data(), total, 0);
  if (!root) {
    size_t offset = 0;
    for (auto& t : tensors) {
      std::memcpy(t.data_ptr(), staging.data() + offset, t.nbytes());
      offset += t.nbytes();
    }
  }
}

}  // namespace gradwire
