#include "gradwire/torch/ddp_comm_hook.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "gradwire/comm/local_collectives.h"
#include "gradwire/compress/layer_classification.h"
#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/agreement.h"
#include "gradwire/strategy/registry.h"

namespace gradwire {
namespace {

constexpr uint32_t kStateMagic = 0x4b484757;  // "GWHK"
// 2: parameters in registration order (1 numbered them in reverse of the first step's).
// 3: the rank and world size it was saved on.
constexpr uint32_t kStateVersion = 3;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? "," : "") + std::to_string(shape[d]);
  return text + "]";
}

size_t numel_of(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ConfigError("a negative dimension in shape " + shape_text(shape));
    n *= static_cast<size_t>(d);
  }
  return n;
}

strategy::AllreduceOptions strategy_options(const CommHookOptions& options) {
  strategy::AllreduceOptions o;
  o.codec = options.codec;
  o.sparse_aggregation = options.sparse_aggregation;
  o.quantized_path = options.quantized_path;
  o.bucket_bytes = options.bucket_bytes;
  o.first_bucket_bytes = options.first_bucket_bytes;
  o.overlap = options.overlap;
  o.link = options.link;
  // Buckets as DDP makes its own, so that none splits what DDP hands over at once (on
  // cnn-wide at 1 Gbit, gradwire's rule split DDP's first bucket in two collectives, and
  // the hook's fp32 step ran 9-14% longer: docs/results/hook-first-bucket-ab).
  o.ddp_bucket_rule = true;
  // The hook checks the configuration once (construction); the "parameters" it starts the
  // strategy with are gradients, which must not be broadcast.
  o.agree_at_start = false;
  return o;
}

}  // namespace

void DdpCommHook::check_options(const CommHookOptions& given) {
  CommHookOptions options = given;
  if (options.codec.empty()) options.codec = "auto";
  options.codec = strategy::canonical_codec(options.codec);
  // A strategy over small tensors (one, and each a layer policy names, whose presence in
  // the model the first step checks), on this rank alone: a bad option throws here.
  comm::LocalCollectives alone(std::make_shared<comm::LocalGroup>(1, std::chrono::seconds(1)), 0);
  auto probe = strategy::create_allreduce_strategy(alone, strategy_options(options));
  std::vector<std::string> names{"probe"};
  if (!strategy::is_adaptive_codec(options.codec)) {
    for (auto& name : compress::CodecPolicy::parse(options.codec).named_tensors()) {
      names.push_back(std::move(name));
    }
  }
  std::vector<std::vector<float>> values(names.size(), std::vector<float>(16, 0.0f));
  std::vector<compress::TensorInfo> infos;
  strategy::FloatSpans spans;
  for (size_t k = 0; k < names.size(); ++k) {
    infos.push_back({names[k], {16}, compress::LayerKind::kOther});
    spans.push_back(std::span<float>(values[k]));
  }
  probe->start(infos, spans);
}

DdpCommHook::DdpCommHook(std::unique_ptr<comm::Collectives> collectives, CommHookOptions options)
    : collectives_(std::move(collectives)),
      options_(std::move(options)),
      had_gradient_(std::make_shared<std::vector<uint8_t>>()) {
  if (options_.codec.empty()) options_.codec = "auto";
  codec_ = strategy::canonical_codec(options_.codec);
  options_.codec = codec_;
  check_options(options_);  // every rank alike, before the ranks compare configurations
  strategy::check_same_configuration(
      *collectives_,
      {"ddp comm hook", "codec " + codec_, "sparse aggregation " + options_.sparse_aggregation,
       "quantized path " + options_.quantized_path,
       "bucket bytes " + std::to_string(options_.bucket_bytes) + " first " +
           std::to_string(options_.first_bucket_bytes),
       std::string("overlap ") + (options_.overlap ? "on" : "off"),
       "link " + std::to_string(8.0 / options_.link.beta_s_per_byte) + " bit/s, " +
           std::to_string(options_.link.alpha_s) + " s a message step"});
}

DdpCommHook::~DdpCommHook() { unwatch(); }

void DdpCommHook::unwatch() {
  for (auto& watch : watches_) watch.accumulator->del_post_hook(watch.key);
  watches_.clear();
  had_gradient_->clear();
}

size_t DdpCommHook::watch_gradients(const std::vector<int64_t>& keys,
                                    const std::vector<at::Tensor>& params) {
  if (keys.size() != params.size()) {
    throw ConfigError(std::to_string(keys.size()) + " keys for " + std::to_string(params.size()) +
                      " parameters");
  }
  unwatch();
  if (!strategy_) return 0;
  for (size_t j = 0; j < keys.size(); ++j) {
    const auto found = index_of_.find(keys[j]);
    if (found == index_of_.end() || !params[j].requires_grad() || !params[j].is_leaf()) continue;
    const size_t k = found->second;
    // A post-hook of the parameter's gradient accumulator (it runs once backward has
    // accumulated the parameter's gradient), put first among them: DDP's own post-hook,
    // registered when DDP was built, hands the bucket over and may end the step, and must
    // find the flag set. Not a tensor hook: torch 1.13 keeps a tensor's C++ and Python
    // hooks in one list that registering either kind clears.
    auto accumulator = torch::autograd::impl::grad_accumulator(params[j]);
    auto hook = std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [flags = had_gradient_, k](const torch::autograd::variable_list& outputs,
                                   const torch::autograd::variable_list&) {
          if (k < flags->size()) (*flags)[k] = 1;
          return outputs;
        });
    const auto key = reinterpret_cast<uintptr_t>(hook.get());
    auto& hooks = accumulator->post_hooks();
    hooks.insert(hooks.begin(), std::move(hook));
    watches_.push_back({std::move(accumulator), key});
  }
  if (watches_.size() != tensors_.size()) {  // every parameter, or none: the rest would
    unwatch();                               // look unused forever
    return 0;
  }
  had_gradient_->assign(tensors_.size(), 0);
  return watches_.size();
}

c10::intrusive_ptr<c10::ivalue::Future> DdpCommHook::exchange(
    const at::Tensor& buffer, const std::vector<int64_t>& keys,
    const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::string>& names,
    bool is_last) {
  auto done = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
  pending_.push_back({buffer, done});
  try {
    take_bucket(buffer, keys, shapes, names);
  } catch (const std::exception& e) {
    if (step_failure_.empty()) step_failure_ = e.what();
  }
  if (!is_last) return done;
  if (!strategy_) {
    // The first step: the strategy is made from what every bucket showed (no collective).
    // A rank that could not take it fails alone: without a strategy it has nothing to
    // exchange (the ranks run the same model, so the others fail alike).
    try {
      if (!step_failure_.empty()) throw ConfigError(step_failure_);
      if (broken_.empty()) create_strategy();
    } catch (...) {
      if (!strategy_) {  // the next step collects anew
        tensors_.clear();
        index_of_.clear();
        spans_.clear();
      }
      first_step_buckets_.clear();
      step_failure_.clear();
      fail_step(std::current_exception());
      return done;
    }
  }
  finish_step();
  return done;
}

void DdpCommHook::take_bucket(const at::Tensor& buffer, const std::vector<int64_t>& keys,
                              const std::vector<std::vector<int64_t>>& shapes,
                              const std::vector<std::string>& names) {
  if (!strategy_) first_step_buckets_.push_back(0);
  if (!buffer.device().is_cpu()) {
    throw ConfigError(
        "gradwire's DDP hook runs on CPU tensors only; this model's gradients are on " +
        buffer.device().str() + " (CUDA models are not supported yet)");
  }
  if (buffer.scalar_type() != at::kFloat || !buffer.is_contiguous()) {
    throw ConfigError("gradwire's DDP hook needs contiguous float32 gradients; a bucket holds " +
                      std::string(c10::toString(buffer.scalar_type())));
  }
  if (keys.size() != shapes.size() || (!names.empty() && names.size() != shapes.size())) {
    throw ConfigError("a bucket of " + std::to_string(shapes.size()) + " shapes, " +
                      std::to_string(keys.size()) + " parameters and " +
                      std::to_string(names.size()) + " names");
  }
  size_t total = 0;
  for (const auto& shape : shapes) total += numel_of(shape);
  if (total != static_cast<size_t>(buffer.numel())) {
    throw ConfigError("a bucket of " + std::to_string(buffer.numel()) +
                      " elements whose parameters' shapes hold " + std::to_string(total));
  }
  float* data = buffer.data_ptr<float>();
  for (size_t j = 0; j < keys.size(); ++j) {
    const size_t n = numel_of(shapes[j]);
    const std::span<float> grad(data, n);
    data += n;
    auto found = index_of_.find(keys[j]);
    if (!strategy_) {
      // The first step: the parameters in the order DDP shows them.
      if (found != index_of_.end()) continue;  // seen twice: DDP never does
      index_of_.emplace(keys[j], tensors_.size());
      compress::TensorInfo info;
      info.name = names.empty() ? "param" + std::to_string(tensors_.size()) : names[j];
      info.shape = shapes[j];
      info.kind = compress::classify_parameter(info.name, info.shape);
      tensors_.push_back(std::move(info));
      spans_.push_back(grad);
      ++first_step_buckets_.back();
      continue;
    }
    if (found == index_of_.end()) {
      throw ConfigError("parameter '" + (names.empty() ? std::string("?") : names[j]) +
                        "' was not in the first step's buckets; gradwire's DDP hook exchanges "
                        "the parameters DDP showed it in its first step");
    }
    const size_t k = found->second;
    if (tensors_[k].shape != shapes[j]) {
      throw ConfigError("parameter '" + tensors_[k].name + "' was " +
                        shape_text(tensors_[k].shape) + " and is now " + shape_text(shapes[j]));
    }
    if (reported_[k]) continue;  // shown twice: the first one stands
    spans_[k] = grad;
    reported_[k] = 1;
    // Without a gradient here (DDP's zeros for a parameter backward did not reach): handed
    // over at the step's end, after its codec state is held (finish_step()).
    const auto& had = *had_gradient_;
    if (had.size() == tensors_.size() && !had[k]) continue;
    if (broken_.empty()) {
      try {
        strategy_->gradient_ready(k, grad);
      } catch (const std::exception& e) {
        broken_ = e.what();
      }
    }
  }
}

void DdpCommHook::create_strategy() {
  // Registration order: the first step's buckets last to first, each as listed (the
  // header says why).
  const size_t n = tensors_.size();
  std::vector<size_t> order;  // order[new index] = index in the first step
  order.reserve(n);
  size_t end = n;
  for (auto count = first_step_buckets_.rbegin(); count != first_step_buckets_.rend(); ++count) {
    for (size_t k = end - *count; k < end; ++k) order.push_back(k);
    end -= *count;
  }
  std::vector<size_t> new_index(n);
  for (size_t k = 0; k < n; ++k) new_index[order[k]] = k;
  std::vector<compress::TensorInfo> tensors(n);
  strategy::FloatSpans spans(n);
  for (size_t k = 0; k < n; ++k) {
    tensors[k] = std::move(tensors_[order[k]]);
    spans[k] = spans_[order[k]];
  }
  tensors_ = std::move(tensors);
  spans_ = std::move(spans);
  for (auto& [key, index] : index_of_) index = new_index[index];
  first_step_buckets_.clear();
  // Kept only once started: a creation that throws leaves none, and the next step retries.
  auto created = strategy::create_allreduce_strategy(*collectives_, strategy_options(options_));
  created->start(tensors_, spans_);  // issues no collective, touches no span
  strategy_ = std::move(created);
  status_.assign(1 + n + strategy::StepLedger::kWords, 0.0f);
  status_carried_ = collectives_->size() > 1 && strategy_->carry_status(status_);
  reported_.assign(n, 1);  // this step showed every one of them
  if (loaded_) {
    const Bytes bytes = std::move(*loaded_);
    loaded_.reset();
    load_state(bytes);
  }
}

std::exception_ptr DdpCommHook::finish_step(bool make_up) {
  const size_t n = tensors_.size();
  std::string local_failure = std::move(step_failure_);
  step_failure_.clear();
  if (local_failure.empty()) local_failure = std::exchange(refused_, {});
  std::exception_ptr error;
  try {
    if (!broken_.empty()) throw Error("an earlier exchange of this hook failed: " + broken_);
    // What this rank could not take contributes zeros, so that every collective of the
    // step still runs on every rank, and the failure word says why.
    size_t missing = 0;
    for (size_t k = 0; k < n; ++k) {
      if (!reported_[k]) missing += tensors_[k].numel();
    }
    if (missing > 0 && local_failure.empty()) {
      for (size_t k = 0; k < n; ++k) {
        if (reported_[k]) continue;
        local_failure = "parameter '" + tensors_[k].name +
                        "' was in no bucket of this step; gradwire's DDP hook needs every "
                        "parameter of the first step in every step";
        break;
      }
    }
    zeros_.assign(missing, 0.0f);
    for (size_t k = 0, at = 0; k < n; ++k) {
      if (reported_[k]) continue;
      spans_[k] = std::span<float>(zeros_.data() + at, tensors_[k].numel());
      at += tensors_[k].numel();
    }
    // The status: [failed, had a gradient per parameter, the ledger's words]. A parameter
    // without a gradient keeps its codec state (put back below where no rank had one); a
    // make-up keeps every one.
    std::vector<uint8_t>& had = *had_gradient_;
    const bool watching = had.size() == n;
    std::fill(status_.begin(), status_.begin() + static_cast<ptrdiff_t>(1 + n), 0.0f);
    status_[0] = local_failure.empty() ? 0.0f : 1.0f;  // read by the strategy's last collective
    for (size_t k = 0; k < n; ++k) {
      const bool used = !make_up && (!watching || had[k]);
      status_[1 + k] = used ? 1.0f : 0.0f;
      if (!used) strategy_->hold_codec_state(k);
    }
    if (watching) std::fill(had.begin(), had.end(), 0);
    const std::span<float> ledger_words(status_.data() + 1 + n, strategy::StepLedger::kWords);
    const uint64_t sequence = ledger_.begin_exchange(ledger_words, make_up);
    bool any_failed = false;
    try {
      strategy_->synchronize(spans_);
      if (local_failure.empty()) local_failure = strategy_->take_local_failure();
      if (!local_failure.empty()) status_[0] = 1.0f;  // the strategy sets it for its own
      if (!status_carried_ && collectives_->size() > 1) {
        collectives_->allreduce_max(status_.data(), status_.size());
      }
    } catch (const std::exception& e) {
      broken_ = e.what();  // a collective failed: the ranks may no longer be in step
      strategy_->restore_codec_states({});
      ledger_.end_exchange(ledger_words, /*failed=*/true);
      throw;
    }
    const bool out_of_step = strategy::StepLedger::out_of_step(ledger_words);
    any_failed = status_[0] > 0 || out_of_step;
    std::vector<uint8_t> unused_everywhere(n);
    for (size_t k = 0; k < n; ++k) unused_everywhere[k] = status_[1 + k] == 0.0f || make_up;
    strategy_->restore_codec_states(unused_everywhere);
    ledger_.end_exchange(ledger_words, any_failed);
    if (any_failed) {
      throw Error(strategy::StepLedger::failure_message(*collectives_, sequence, local_failure,
                                                        out_of_step) +
                  ". No rank's gradients hold the average of this step");
    }
  } catch (...) {
    error = std::current_exception();
    fail_step(error);
    return error;
  }
  std::fill(reported_.begin(), reported_.end(), 0);
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& p : pending) p.done->markCompleted(c10::IValue(p.buffer));
  return nullptr;
}

void DdpCommHook::fail_step(std::exception_ptr error) {
  std::fill(reported_.begin(), reported_.end(), 0);
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& p : pending) p.done->setError(error);
}

void DdpCommHook::count_loop(uint64_t zero_grads, uint64_t steps) {
  for (uint64_t i = 0; i < zero_grads; ++i) ledger_.count_zero_grad();
  for (uint64_t i = 0; i < steps; ++i) ledger_.count_step();
}

void DdpCommHook::zero_grad() {
  if (!strategy_) {  // no exchange yet, so none to make up for
  } else if (!pending_.empty()) {
    // A backward that handed over some buckets and threw before the last: its exchange is
    // ended now, so that the others, waiting in it, learn the step was abandoned.
    step_failure_ =
        "its backward ended before every gradient was final (an exception in "
        "backward or in a gradient hook); the step was abandoned";
    finish_step();
  } else if (ledger_.skipped_a_step()) {
    // No exchange since the last step began: this rank skipped it (its backward threw
    // before any gradient was final, and the loop went on). It takes part in the exchange
    // the others made of that step: every rank's step fails alike, the next ones pair.
    step_failure_ = strategy::StepLedger::kSkippedStep;
    finish_step(/*make_up=*/true);
  }
  // The agreed failure is the others' to raise (this rank knows); a failed collective is
  // this rank's too (broken_).
  if (!broken_.empty()) throw Error("an exchange of this hook failed: " + broken_);
  ledger_.count_zero_grad();
}

void DdpCommHook::set_learning_rate(double lr) {
  if (strategy_ && lr > 0) strategy_->set_learning_rate(lr);
}

strategy::TrafficStats DdpCommHook::traffic() const {
  return strategy_ ? strategy_->traffic() : strategy::TrafficStats{};
}

std::vector<std::string> DdpCommHook::take_decisions() {
  std::vector<std::string> lines;
  if (!strategy_) return lines;
  for (const auto& d : strategy_->take_decisions()) {
    lines.push_back("step " + std::to_string(d.step) + ": " + d.plan + " (" + d.reason + ")");
  }
  return lines;
}

std::string DdpCommHook::bucket_layout() const {
  return strategy_ ? strategy_->bucket_layout_summary() : std::string();
}

Bytes DdpCommHook::save_state() const {
  if (!strategy_ && loaded_) return *loaded_;
  Bytes out;
  ByteWriter writer(out);
  writer.put<uint32_t>(kStateMagic);
  writer.put<uint32_t>(kStateVersion);
  writer.put<int32_t>(collectives_->rank());
  writer.put<int32_t>(collectives_->size());
  writer.put_string(codec_);
  writer.put<uint32_t>(static_cast<uint32_t>(strategy_ ? tensors_.size() : 0));
  if (!strategy_) return out;
  for (const auto& t : tensors_) {
    writer.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    writer.put_array<int64_t>(t.shape);
  }
  Bytes state;
  strategy_->save_state(state);
  put_section(out, state);
  return out;
}

namespace {

// The state's header up to its rank and world size.
std::pair<int, int> read_owner(ByteReader& in) {
  if (in.get<uint32_t>("hook state magic") != kStateMagic) {
    throw PayloadError("not a gradwire DDP hook state");
  }
  if (const auto version = in.get<uint32_t>("hook state version"); version != kStateVersion) {
    throw PayloadError(
        "a DDP hook state of version " + std::to_string(version) +
        "; this gradwire reads version " + std::to_string(kStateVersion) +
        (version < 3 ? " (earlier states do not say which rank saved them: each rank's error "
                       "feedback differs, so a state cannot be resumed without it)"
                     : ""));
  }
  const auto rank = in.get<int32_t>("hook state rank");
  const auto size = in.get<int32_t>("hook state world size");
  return {rank, size};
}

}  // namespace

std::pair<int, int> DdpCommHook::saved_rank(const Bytes& state) {
  ByteReader in(state);
  return read_owner(in);
}

void DdpCommHook::load_state(const Bytes& bytes) {
  ByteReader in(bytes);
  const auto [rank, size] = read_owner(in);
  if (rank != collectives_->rank() || size != collectives_->size()) {
    throw MismatchError(
        "the hook state is rank " + std::to_string(rank) + "'s of " + std::to_string(size) +
        " ranks; this is rank " + std::to_string(collectives_->rank()) + " of " +
        std::to_string(collectives_->size()) +
        ": each rank saves and loads its own hook state (error feedback's residuals differ "
        "from rank to rank)");
  }
  const std::string codec = in.get_string("hook state codec");
  if (codec != codec_) {
    throw MismatchError("the hook state was saved with codec '" + codec + "'; this hook runs '" +
                        codec_ + "'");
  }
  std::vector<std::vector<int64_t>> shapes(in.get<uint32_t>("hook state parameters"));
  for (auto& shape : shapes) {
    shape.resize(in.get<uint32_t>("parameter dimensions"));
    in.get_array<int64_t>(shape, "parameter shape");
  }
  if (shapes.empty()) {  // saved before its first step: nothing to restore
    in.expect_end("a DDP hook state");
    return;
  }
  ByteReader section = get_section(in, "hook strategy state");
  in.expect_end("a DDP hook state");
  if (!strategy_) {
    loaded_ = std::make_unique<Bytes>(bytes);  // restored when the first step made it
    return;
  }
  check_state_fits(shapes);
  try {
    strategy_->load_state(section);
    section.expect_end("a DDP hook's strategy state");
  } catch (const std::exception& e) {
    // A strategy whose state did not load must not be used (Strategy::load_state).
    broken_ = std::string("its state did not load: ") + e.what();
    throw;
  }
  broken_.clear();
}

void DdpCommHook::check_state_fits(const std::vector<std::vector<int64_t>>& shapes) const {
  if (shapes.size() != tensors_.size()) {
    throw MismatchError("the hook state holds " + std::to_string(shapes.size()) +
                        " parameters; this model has " + std::to_string(tensors_.size()));
  }
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k] != tensors_[k].shape) {
      throw MismatchError("the hook state's parameter " + std::to_string(k) + " is " +
                          shape_text(shapes[k]) + "; this model's ('" + tensors_[k].name +
                          "') is " + shape_text(tensors_[k].shape));
    }
  }
}

}  // namespace gradwire
