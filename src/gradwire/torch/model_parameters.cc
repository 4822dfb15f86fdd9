#include "gradwire/torch/model_parameters.h"

#include <mutex>
#include <unordered_set>

#include "gradwire/core/error.h"

namespace gradwire {

std::string shape_string(const torch::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

std::string describe_tensor(const torch::Tensor& t) {
  std::string out = std::string(c10::toString(t.scalar_type())) + " on " + t.device().str();
  if (t.layout() != torch::kStrided) return out + ", not dense";
  return out + (t.is_contiguous() ? "" : ", non-contiguous");
}

bool dense_cpu(const torch::Tensor& t) {
  return t.layout() == torch::kStrided && t.device().is_cpu() && t.is_contiguous();
}

bool exchangeable(const torch::Tensor& t) {
  return dense_cpu(t) && t.scalar_type() == torch::kFloat;
}

ModelParameters collect_model_parameters(const torch::nn::Module& model) {
  ModelParameters out;
  std::unordered_set<const void*> seen;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;  // tied: exchanged once
    if (!p.requires_grad()) {
      if (!dense_cpu(p)) {
        throw ConfigError("frozen parameter '" + item.key() + "' is " + describe_tensor(p) +
                          "; DistributedOptimizer keeps contiguous CPU parameters equal");
      }
      out.frozen.emplace_back(item.key(), p);
      continue;
    }
    if (!exchangeable(p)) {
      throw ConfigError("parameter '" + item.key() + "' is " + describe_tensor(p) +
                        "; DistributedOptimizer exchanges contiguous float32 CPU parameters "
                        "only (keep the model on the CPU in float32)");
    }
    out.exchanged.emplace_back(item.key(), p);
  }
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    if (!dense_cpu(item.value())) {
      throw ConfigError("buffer '" + item.key() + "' is " + describe_tensor(item.value()) +
                        "; buffers must be contiguous CPU tensors");
    }
    out.buffers.emplace_back(item.key(), item.value());
  }
  return out;
}

void require_same_parameters(const ModelParameters& model, torch::optim::Optimizer& optimizer) {
  std::unordered_set<const void*> in_optimizer, in_model;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) in_optimizer.insert(p.unsafeGetTensorImpl());
  }
  for (const auto& [name, p] : model.exchanged) {
    in_model.insert(p.unsafeGetTensorImpl());
    if (!in_optimizer.count(p.unsafeGetTensorImpl())) {
      throw ConfigError("parameter '" + name +
                        "' of the model is not in the optimizer: build the optimizer on the "
                        "model's parameters (every parameter that requires grad is exchanged)");
    }
  }
  for (const auto& [name, p] : model.frozen) in_model.insert(p.unsafeGetTensorImpl());
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

namespace {
std::mutex g_claims_mutex;
std::unordered_set<const void*> g_claimed;
}  // namespace

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

std::vector<std::string> model_state_lines(const ModelParameters& model) {
  std::vector<std::string> lines{"buffers " + std::to_string(model.buffers.size())};
  for (const auto& [name, b] : model.buffers) {
    lines.push_back("buffer " + name + " " + c10::toString(b.scalar_type()) + " " +
                    shape_string(b));
  }
  lines.push_back("frozen parameters " + std::to_string(model.frozen.size()));
  for (const auto& [name, p] : model.frozen) {
    lines.push_back("frozen " + name + " " + c10::toString(p.scalar_type()) + " " +
                    shape_string(p));
  }
  return lines;
}

}  // namespace gradwire
