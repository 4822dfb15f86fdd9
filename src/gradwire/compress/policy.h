// Layer policies: which codec each tensor gets, from one --compressor string.
//
//   SPEC                                every tensor uses SPEC ("topk:density=0.01")
//   KIND=SPEC[,KIND=SPEC...]            per layer kind; KIND is conv, fc, bias, norm or
//                                       other; kinds not named use `other` (default none)
//                                       ("conv=laplace-topk:density=0.01,fc=2bit,other=none")
//   @NAME=SPEC among the items          per tensor, by its name, before its kind
//                                       ("@fc1.weight=int8,other=none": auto's `fit`)
//   hylo[:t_size=..,p_max=..,p_min=..,gamma=..,alpha=..]
//                                       Hylo (ALGORITHMS.md 4): tensors under t_size
//                                       elements, biases and norms go as f32 (none);
//                                       convolution weights filter-topk with Hylo's adaptive
//                                       rate; fully-connected weights 2bit with threshold
//                                       alpha mean|a|
//
// A policy is parsed once, then asked per tensor; spec_for() is canonical, so ranks can
// compare policies tensor by tensor.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire::compress {

class CodecPolicy {
 public:
  // Throws ConfigError for malformed text, unknown kinds, codecs or keys.
  static CodecPolicy parse(const std::string& text);

  // The canonical codec spec for `tensor`.
  std::string spec_for(const TensorInfo& tensor) const;
  std::unique_ptr<Codec> create(const TensorInfo& tensor) const;

  // Throws ConfigError when the policy names a tensor (@NAME) that `tensors` lacks (a
  // typo would otherwise leave that tensor to its kind's codec, unnoticed).
  void check_tensors(std::span<const TensorInfo> tensors) const;
  // The tensors the policy names (@NAME), in name order.
  std::vector<std::string> named_tensors() const;

  // The policy itself, canonical ("hylo:alpha=1,...", "conv=...,fc=...", or one spec).
  std::string canonical() const;

  // Every tensor's codec also gets error feedback with momentum `m` (momentum correction;
  // see error_feedback.h).
  CodecPolicy with_momentum(double momentum) const;

 private:
  enum class Mode { kUniform, kPerKind, kHylo };
  Mode mode_ = Mode::kUniform;
  std::string uniform_;                         // kUniform
  std::map<LayerKind, std::string> by_kind_;    // kPerKind: canonical spec per kind
  std::map<std::string, std::string> by_name_;  // kPerKind: per tensor name, before its kind
  // kHylo
  double t_size_ = 8000, p_max_ = 0.3, p_min_ = 0.02, gamma_ = 0.5, alpha_ = 1.0;
  double momentum_ = 0;  // kHylo with momentum correction
};

}  // namespace gradwire::compress
