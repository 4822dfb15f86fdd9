#include "gradwire/torch/diloco_model.h"

#include <ATen/ATen.h>

#include <cstring>

#include "gradwire/compress/layer_classification.h"
#include "gradwire/core/error.h"

namespace gradwire {
namespace {

void check_float_cpu(const at::Tensor& t, const std::string& what) {
  if (!t.device().is_cpu()) {
    throw ConfigError("gradwire.DiLoCo runs on CPU tensors only; " + what + " is on " +
                      t.device().str() + " (CUDA models are not supported yet)");
  }
  if (t.scalar_type() != at::kFloat || !t.is_contiguous()) {
    throw ConfigError("gradwire.DiLoCo needs contiguous float32 tensors; " + what + " is " +
                      std::string(c10::toString(t.scalar_type())) +
                      (t.is_contiguous() ? "" : " (not contiguous)"));
  }
}

size_t total_bytes(const std::vector<at::Tensor>& tensors) {
  size_t n = 0;
  for (const auto& t : tensors) n += static_cast<size_t>(t.numel()) * sizeof(float);
  return n;
}

void pack(const std::vector<at::Tensor>& tensors, Bytes& out) {
  out.resize(total_bytes(tensors));
  uint8_t* at = out.data();
  for (const auto& t : tensors) {
    const size_t n = static_cast<size_t>(t.numel()) * sizeof(float);
    std::memcpy(at, t.data_ptr<float>(), n);
    at += n;
  }
}

void unpack(const Bytes& in, const std::vector<at::Tensor>& tensors) {
  if (in.size() != total_bytes(tensors)) {
    throw PayloadError("rank 0's buffers are " + std::to_string(in.size()) +
                       " bytes; this rank's are " + std::to_string(total_bytes(tensors)));
  }
  const uint8_t* at = in.data();
  for (const auto& t : tensors) {
    const size_t n = static_cast<size_t>(t.numel()) * sizeof(float);
    std::memcpy(t.data_ptr<float>(), at, n);
    at += n;
  }
}

}  // namespace

DiLoCoModel::DiLoCoModel(std::unique_ptr<comm::Collectives> collectives,
                         strategy::diloco::DiLoCoOptions options, std::vector<std::string> names,
                         const std::vector<at::Tensor>& params,
                         const std::vector<at::Tensor>& buffers)
    : collectives_(std::move(collectives)) {
  options.check();
  if (names.size() != params.size()) {
    throw ConfigError(std::to_string(names.size()) + " names for " + std::to_string(params.size()) +
                      " parameters");
  }
  std::vector<compress::TensorInfo> tensors;
  for (size_t k = 0; k < params.size(); ++k) {
    check_float_cpu(params[k], "parameter '" + names[k] + "'");
    compress::TensorInfo info;
    info.name = names[k];
    info.shape = params[k].sizes().vec();
    info.kind = compress::classify_parameter(info.name, info.shape);
    shapes_.push_back(info.shape);
    tensors.push_back(std::move(info));
  }
  set_buffers(buffers);
  strategy_ = std::make_unique<strategy::diloco::DiLoCoStrategy>(*collectives_, std::move(options));
  strategy_->start(tensors, spans(params, "start"));  // agreement, rank 0's parameters
  pack(buffers_, agreed_buffers_);
  if (!buffers_.empty() && collectives_->size() > 1) {
    collectives_->broadcast(agreed_buffers_.data(), agreed_buffers_.size(), 0);
    unpack(agreed_buffers_, buffers_);
    strategy_->carry_broadcast([this](Bytes& out) { pack(buffers_, out); },
                               [this](const Bytes& in) {
                                 unpack(in, buffers_);
                                 agreed_buffers_ = in;
                               });
  }
}

DiLoCoModel::~DiLoCoModel() = default;

strategy::FloatSpans DiLoCoModel::spans(const std::vector<at::Tensor>& tensors,
                                        const char* what) const {
  if (tensors.size() != shapes_.size()) {
    throw ConfigError(std::string(what) + ": " + std::to_string(tensors.size()) +
                      " tensors for a model of " + std::to_string(shapes_.size()) + " parameters");
  }
  strategy::FloatSpans out;
  for (size_t k = 0; k < tensors.size(); ++k) {
    check_float_cpu(tensors[k], "parameter " + std::to_string(k));
    if (tensors[k].sizes().vec() != shapes_[k]) {
      throw ConfigError(std::string(what) + ": parameter " + std::to_string(k) +
                        " changed shape since the start");
    }
    out.emplace_back(tensors[k].data_ptr<float>(), static_cast<size_t>(tensors[k].numel()));
  }
  return out;
}

void DiLoCoModel::set_buffers(const std::vector<at::Tensor>& buffers) {
  if (!buffers_.empty() && buffers.size() != buffers_.size()) {
    throw ConfigError("the model has " + std::to_string(buffers.size()) +
                      " floating-point buffers; it had " + std::to_string(buffers_.size()));
  }
  for (size_t k = 0; k < buffers.size(); ++k) {
    check_float_cpu(buffers[k], "buffer " + std::to_string(k));
    if (!buffers_.empty() && buffers[k].numel() != buffers_[k].numel()) {
      throw ConfigError("buffer " + std::to_string(k) + " changed size since the start");
    }
  }
  buffers_ = buffers;
}

void DiLoCoModel::after_step(const std::vector<at::Tensor>& params,
                             const std::vector<at::Tensor>& buffers) {
  set_buffers(buffers);
  strategy_->after_update(spans(params, "step"));
}

void DiLoCoModel::finish(const std::vector<at::Tensor>& params,
                         const std::vector<at::Tensor>& buffers) {
  set_buffers(buffers);
  strategy_->follow_parameters(spans(params, "finish"));
  strategy_->finish();
  pack(buffers_, agreed_buffers_);
  if (!buffers_.empty() && collectives_->size() > 1) {
    collectives_->broadcast(agreed_buffers_.data(), agreed_buffers_.size(), 0);
    unpack(agreed_buffers_, buffers_);
  }
}

void DiLoCoModel::agreed_buffers(const std::vector<at::Tensor>& out) const {
  if (out.size() != buffers_.size()) {
    throw ConfigError("agreed_buffers: " + std::to_string(out.size()) + " tensors for " +
                      std::to_string(buffers_.size()) + " buffers");
  }
  for (size_t k = 0; k < out.size(); ++k) check_float_cpu(out[k], "buffer " + std::to_string(k));
  unpack(agreed_buffers_, out);
}

void DiLoCoModel::set_agreed_buffers(const std::vector<at::Tensor>& in) {
  if (in.size() != buffers_.size()) {
    throw PayloadError("the checkpoint has " + std::to_string(in.size()) +
                       " agreed buffers; this model " + std::to_string(buffers_.size()));
  }
  for (size_t k = 0; k < in.size(); ++k) {
    check_float_cpu(in[k], "buffer " + std::to_string(k));
    if (in[k].numel() != buffers_[k].numel()) {
      throw PayloadError("the checkpoint's agreed buffer " + std::to_string(k) +
                         " has another size than this model's");
    }
  }
  pack(in, agreed_buffers_);
}

void DiLoCoModel::global_parameters(const std::vector<at::Tensor>& out) const {
  strategy_->global_parameters(spans(out, "global_parameters"));
}

std::vector<std::string> DiLoCoModel::take_decisions() {
  std::vector<std::string> lines;
  for (const auto& d : strategy_->take_decisions()) {
    lines.push_back("step " + std::to_string(d.step) + ": " + d.plan + " (" + d.reason + ")");
  }
  return lines;
}

Bytes DiLoCoModel::save_state() const {
  Bytes out;
  strategy_->save_state(out);
  return out;
}

void DiLoCoModel::load_state(const Bytes& bytes) {
  ByteReader in(bytes);
  strategy_->load_state(in);
  in.expect_end("a DiLoCo state");
}

}  // namespace gradwire
