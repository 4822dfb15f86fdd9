// Strategy: how one step's gradients (or models) are exchanged between ranks.
//
// A Strategy sees the model as float spans plus per-tensor metadata; it knows nothing of
// torch, the CLI or datasets. DistributedOptimizer drives it:
//
//   start(params, buffers)      once: ranks agree on configuration and start equal
//   loop:
//     backward                  gradient_ready(i) as each gradient becomes final
//     synchronize(grads)        grads become the step's aggregated gradients
//     optimizer.step()          (skipped when applies_update(): the strategy updated params)
//     after_update(params)      e.g. gossip mixes models here
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire::strategy {

using FloatSpans = std::vector<std::span<float>>;

// Traffic of this rank since start(), counted where bytes are handed to the network.
struct TrafficStats {
  uint64_t steps = 0;
  uint64_t bytes_sent = 0;   // handed to collectives/transport for exchange
  uint64_t bytes_dense = 0;  // what fp32 dense exchange would have handed for the same steps
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  virtual std::string name() const = 0;

  // Checks that every rank has the same configuration and tensor shapes (MismatchError
  // naming the first difference otherwise) and makes params and buffers equal on all ranks.
  // `tensors[i]` describes `params[i]`.
  virtual void start(std::span<const compress::TensorInfo> tensors, const FloatSpans& params,
                     const FloatSpans& buffers) = 0;

  // Gradient i is final for this step. Strategies may start exchanging from here; the
  // default waits for synchronize().
  virtual void gradient_ready(size_t index) {}

  // Replaces grads with the aggregated gradients of this step (all ranks equal).
  virtual void synchronize(const FloatSpans& grads) = 0;

  // True when synchronize() already updated the parameters (e.g. a parameter server
  // applies the update); the optimizer must not step then.
  virtual bool applies_update() const { return false; }

  // Called after the optimizer stepped.
  virtual void after_update(const FloatSpans& params) {}

  virtual TrafficStats traffic() const = 0;
};

}  // namespace gradwire::strategy
