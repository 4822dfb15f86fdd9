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
    if (p.numel() != numels[i]) {
      throw ConfigError("parameter '" + names[i] + "' now has " + std::to_string(p.numel()) +
                        " elements, " + std::to_string(numels[i]) +
                        " when DistributedOptimizer was built (its data was replaced by a "
                        "tensor of another size): build the DistributedOptimizer after "
                        "changing the model");
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

void DistributedOptimizer::Impl::check_one_exchange_per_step() const {
  if (exchanges_this_step == 0 || !correction.active()) return;
  throw ConfigError(
      "a second gradient exchange before step() under momentum correction (codec '" + codec_spec +
      "'): the codec keeps the SGD momentum, and the second exchange's input would hold the "
      "first's averaged velocity, counting momentum twice. Accumulate the step's backward "
      "passes inside no_sync() (all but the last), or set "
      "DistributedOptions::momentum_correction = false");
}

void DistributedOptimizer::Impl::add_weight_decay(size_t i, torch::Tensor& grad) {
  if (weight_decay[i] == 0 || decayed[i]) return;
  grad.add_(params[i], weight_decay[i]);
  decayed[i] = 1;
}

void DistributedOptimizer::Impl::open_exchange() {
  // After a failed exchange .grad holds no aggregate (and perhaps part of a backward): the
  // next backward would exchange a mixture. Every rank knows of the failure (it was
  // agreed), so every rank refuses here, before any collective.
  if (!failed.empty()) {
    throw Error(failed + " (this backward was refused: call zero_grad() first)");
  }
  check_one_exchange_per_step();
  check_parameters_unchanged();  // before this rank reports anything
  const size_t n = params.size();
  hooked.assign(n, 0);
  reported.assign(n, 0);
  exchange_grads.assign(n, torch::Tensor());
  local_failure.clear();
  exchange_open = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { on_backward_end(); });
}

void DistributedOptimizer::Impl::on_gradient(size_t i) {
  exchanged = false;
  if (!exchange_in_backward || *no_sync_depth > 0) return;
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

std::string DistributedOptimizer::Impl::exchange(bool make_up) {
  const size_t n = params.size();
  if (!exchange_open) {  // from step(), synchronize() or a make-up: nothing was reported
    hooked.assign(n, 0);
    reported.assign(n, 0);
    exchange_grads.assign(n, torch::Tensor());
  }
  exchange_open = false;
  torch::NoGradGuard no_grad;
  std::vector<uint8_t> used(n, 0);
  spans.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (make_up) {  // this rank had no gradient in the step it skipped
      exchange_grads[i] = torch::zeros_like(params[i]);
      spans[i] = float_span(exchange_grads[i]);
      continue;
    }
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
  // The status: did this rank fail, which parameters had a gradient here, and where this
  // rank's loop is (the ledger). The strategy carries it on its last collective where it
  // can (status_carried), and raises the failure word itself if its encoding fails.
  const std::span<float> ledger_words(status.data() + n + 1, strategy::StepLedger::kWords);
  const uint64_t my_sequence = ledger.begin_exchange(ledger_words, make_up);
  ++exchanges_this_step;
  std::fill(status.begin(), status.begin() + static_cast<ptrdiff_t>(n + 1), 0.0f);
  status[0] = local_failure.empty() ? 0.0f : 1.0f;
  for (size_t i = 0; i < n; ++i) status[i + 1] = used[i];
  // Parameters without a gradient here: their codecs' states are put back if no rank had
  // one (the aggregate is then thrown away); a make-up puts every one back.
  for (size_t i = 0; i < n; ++i) {
    if (!used[i] || make_up) strategy->hold_codec_state(i);
  }
  try {
    strategy->synchronize(spans);  // a failed collective throws on every rank
  } catch (const std::exception& e) {
    failed = std::string("the gradient exchange failed: ") + e.what() +
             ". No rank's .grad holds the aggregate";
    exchange_grads.assign(n, torch::Tensor());
    local_failure.clear();
    strategy->restore_codec_states({});  // drops what was held
    ledger.end_exchange(ledger_words, /*failed=*/true);
    throw;
  }
  // A codec that refused this rank's gradient (int8 on non-finite values): the strategy
  // still issued every collective, and this rank's status says it failed.
  if (std::string refused = strategy->take_local_failure(); !refused.empty()) {
    if (local_failure.empty()) local_failure = std::move(refused);
    status[0] = 1.0f;
  }

  // The status over all ranks: any failure, and which parameters got a gradient somewhere.
  if (context->world_size() > 1 && !status_carried) {
    TimelineSpan span("exchange status", "communicate");
    context->collectives().allreduce_max(status.data(), status.size());
  }
  const bool out_of_step = strategy::StepLedger::out_of_step(ledger_words);
  const bool any_failed = status[0] > 0 || out_of_step;
  std::vector<uint8_t> used_anywhere(n), unused_everywhere(n);
  for (size_t i = 0; i < n; ++i) {
    used_anywhere[i] = status[i + 1] > 0;
    unused_everywhere[i] = !used_anywhere[i] || make_up;
  }
  strategy->restore_codec_states(unused_everywhere);
  ledger.end_exchange(ledger_words, any_failed);
  std::string failure;
  if (any_failed) {
    failure = strategy::StepLedger::failure_message(context->collectives(), my_sequence,
                                                    local_failure, out_of_step);
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

void DistributedOptimizer::Impl::pack_tensors(const std::vector<torch::Tensor>& tensors,
                                              Bytes& out) {
  size_t total = 0;
  for (const auto& t : tensors) total += t.nbytes();
  out.resize(total);
  size_t offset = 0;
  for (const auto& t : tensors) {
    std::memcpy(out.data() + offset, t.data_ptr(), t.nbytes());
    offset += t.nbytes();
  }
}

void DistributedOptimizer::Impl::unpack_tensors(const Bytes& in,
                                                const std::vector<torch::Tensor>& tensors) {
  size_t total = 0;
  for (const auto& t : tensors) total += t.nbytes();
  if (in.size() != total) {
    throw Error("rank 0's buffers came as " + std::to_string(in.size()) + " bytes, " +
                std::to_string(total) + " expected");
  }
  size_t offset = 0;
  for (const auto& t : tensors) {
    std::memcpy(t.data_ptr(), in.data() + offset, t.nbytes());
    offset += t.nbytes();
  }
}

void DistributedOptimizer::Impl::broadcast_from_rank0(bool frozen_too) {
  if (context->world_size() == 1) return;
  std::vector<torch::Tensor> tensors = buffers;
  if (frozen_too) tensors.insert(tensors.end(), frozen.begin(), frozen.end());
  if (tensors.empty()) return;
  pack_tensors(tensors, staging);  // every rank sizes it; rank 0's bytes travel
  context->collectives().broadcast(staging.data(), staging.size(), 0);
  if (context->rank() != 0) unpack_tensors(staging, tensors);
}

}  // namespace gradwire
