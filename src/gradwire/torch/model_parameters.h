// What DistributedOptimizer takes from the model and the optimizer, checked before any
// collective: the parameters it exchanges, those it only keeps equal (frozen), the buffers,
// and the claims that let one DistributedOptimizer at a time hold a parameter.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <string>
#include <utility>
#include <vector>

namespace gradwire {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// "Double on cpu", "Float on cuda:0, non-contiguous": what a user needs to fix a tensor.
std::string describe_tensor(const torch::Tensor& t);
std::string shape_string(const torch::Tensor& t);
bool dense_cpu(const torch::Tensor& t);
bool exchangeable(const torch::Tensor& t);  // dense contiguous float32 on the CPU

struct ModelParameters {
  // Parameters that require grad, each tensor once in the order of the model's
  // named_parameters() (a weight tied to two modules appears there twice, under two
  // names: it is exchanged once, under its first name). Each is exchangeable.
  NamedTensors exchanged;
  // Parameters that do not require grad at construction: checked across ranks and taken
  // from rank 0 like the buffers, never exchanged. Dense CPU tensors of any dtype.
  NamedTensors frozen;
  NamedTensors buffers;  // dense CPU tensors of any dtype
};

// Throws ConfigError naming the first parameter or buffer that cannot be handled.
ModelParameters collect_model_parameters(const torch::nn::Module& model);

// The optimizer must update every exchanged parameter, and no tensor outside the model
// that requires grad (its gradient would never be exchanged). Frozen parameters may be in
// it or not. ConfigError naming the first offender.
void require_same_parameters(const ModelParameters& model, torch::optim::Optimizer& optimizer);

// One DistributedOptimizer at a time holds a parameter (each registers a gradient hook that
// feeds its own strategy). claim: ConfigError naming one already held; release: on
// destruction.
void claim_parameters(const NamedTensors& params);
void release_parameters(const std::vector<torch::Tensor>& params);

// Lines compared across ranks (strategy/agreement.h) before anything moves: the buffers
// and the frozen parameters, by name, dtype and shape.
std::vector<std::string> model_state_lines(const ModelParameters& model);

}  // namespace gradwire
