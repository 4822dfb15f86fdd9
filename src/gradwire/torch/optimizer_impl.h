// DistributedOptimizer's private state, shared by the files that implement it:
// distributed_optimizer.cc (construction, the public calls), gradient_exchange.cc (the
// gradient hooks, the exchange at the end of backward, failed steps), optimizer_checkpoint.cc
// (save_checkpoint, load_checkpoint).
//
// The exchange of an allreduce job, as DDP's Reducer does it:
//   first hook of a backward   check the parameters, queue an autograd final callback
//   each hook                  (overlap) hand the gradient to the strategy: its bucket
//                              starts once complete
//   final callback             report what no hook reported, wait for every bucket, the
//                              low-rank tensors; the step's last collective carries the
//                              status: which ranks failed, which parameters got a
//                              gradient on some rank (a collective of its own where the
//                              strategy cannot carry it).
//                              When backward() returns, .grad holds the aggregate.
// A backward inside no_sync() only accumulates; step() exchanges what no backward did.
// Parameter-server and gossip jobs exchange in step() (their workers do not step
// together).
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradwire/core/bytes.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/strategy/step_ledger.h"
#include "gradwire/strategy/strategy.h"
#include "gradwire/torch/momentum_correction.h"

namespace gradwire::strategy::gossip {
class GossipStrategy;
}
namespace gradwire::strategy::diloco {
class DiLoCoStrategy;
}

namespace gradwire {

struct DistributedOptimizer::Impl {
  std::shared_ptr<Context> context;
  std::shared_ptr<torch::optim::Optimizer> optimizer;  // owned, or the caller's (no deleter)
  // Exchanged parameters, each tensor once (a tied weight under its first name).
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::vector<int64_t> numels;       // per parameter, at construction
  std::vector<double> weight_decay;  // per parameter, under momentum correction
  // Frozen at construction: kept equal (taken from rank 0, checkpointed), never exchanged.
  std::vector<torch::Tensor> frozen;
  std::vector<std::string> frozen_names;
  std::vector<uint8_t> frozen_in_optimizer;  // per frozen parameter: the optimizer holds it
  std::vector<torch::Tensor> buffers;
  Bytes staging;  // rank 0's buffers (and frozen parameters) for one broadcast
  bool broadcast_buffers = true;
  // The strategy broadcasts the buffers inside its own synchronizations (DiLoCo's round
  // exchange: Strategy::carry_broadcast), so step() does not.
  bool buffers_carried = false;
  std::unique_ptr<strategy::Strategy> strategy;
  // The same strategy, kept typed where it is one of these (their summaries and finish).
  strategy::gossip::GossipStrategy* gossip = nullptr;
  strategy::diloco::DiLoCoStrategy* diloco = nullptr;
  std::string codec_spec;
  MomentumCorrection correction;
  bool claimed = false;
  std::optional<GossipSummary> gossip_final;  // rank 0, after a gossip finish
  // hooks[i]: the post-hook on params[i]'s gradient accumulator (runs once .grad holds the
  // backward's gradient), as DDP's Reducer registers them.
  struct GradientHook {
    std::shared_ptr<torch::autograd::Node> accumulator;
    uintptr_t key = 0;
  };
  std::vector<GradientHook> hooks;

  // --- the step in progress. Hooks, the final callback and the public calls all run on
  // the thread that calls backward() and step().
  // Allreduce jobs: the exchange completes at the end of every backward (outside no_sync).
  bool exchange_in_backward = true;
  // Open no_sync() scopes; shared with their guards, which may outlive the optimizer.
  std::shared_ptr<int> no_sync_depth = std::make_shared<int>(0);
  // A backward opened an exchange and its final callback has not run yet: while it runs,
  // or after it threw (the exchange is then abandoned at the next call, see below).
  bool exchange_open = false;
  std::vector<uint8_t> hooked;    // per parameter: its hook ran in the open exchange
  std::vector<uint8_t> reported;  // per parameter: handed to the strategy (overlap)
  // Per parameter: the tensor exchanged (its .grad, or zeros for a parameter without
  // one), referenced until the exchange ends, so the strategy's spans stay valid.
  std::vector<torch::Tensor> exchange_grads;
  std::string local_failure;     // why this rank's open exchange cannot be completed
  std::vector<uint8_t> decayed;  // per parameter: weight decay added since the last step
  // .grad holds the aggregate and no gradient was produced since: step() exchanges nothing.
  bool exchanged = false;
  // Exchanges since the last step() or zero_grad(): under momentum correction a second one
  // is refused (its input would hold the first's averaged velocity, fed into the velocity
  // again: momentum counted twice).
  int exchanges_this_step = 0;
  // Throws ConfigError, on every rank alike and before any collective, when this exchange
  // would be the step's second under momentum correction.
  void check_one_exchange_per_step() const;
  // The last exchange failed on some rank (the message): .grad is not the aggregate, and
  // step() refuses until zero_grad().
  std::string failed;
  // [failed, had-a-gradient per parameter, the step ledger's words]: sized once at
  // construction (the strategy may hold a span of it), OR-reduced over the ranks at every
  // exchange, by the strategy's last collective when it carries it (status_carried), else
  // by a collective of its own.
  std::vector<float> status;
  // The loop's calls, which keep the ranks in step when one skips a batch
  // (strategy/step_ledger.h): zero_grad() makes up for a step this rank skipped.
  strategy::StepLedger ledger;
  bool status_carried = false;
  strategy::FloatSpans spans;  // the exchange's gradients, as the strategy sees them

  ~Impl();
  // The status's size for n exchanged parameters.
  static size_t status_words(size_t n) { return n + 1 + strategy::StepLedger::kWords; }
  // What checkpoints hold besides the exchanged parameters: the buffers, then the frozen
  // parameters.
  std::vector<torch::Tensor> state_tensors() const {
    std::vector<torch::Tensor> out = buffers;
    out.insert(out.end(), frozen.begin(), frozen.end());
    return out;
  }
  // The hook: backward has accumulated params[i]'s gradient into .grad.
  void on_gradient(size_t i);
  // The first hook of a backward: checks the parameters, queues the final callback.
  void open_exchange();
  // Ends the open exchange at the end of backward (the autograd final callback); throws
  // what exchange() returns, out of backward().
  void on_backward_end();
  // The exchange of whatever .grad holds: what no hook reported is reported, the strategy
  // finishes, the ranks agree on failures and on the parameters without a gradient.
  // Returns the failure, the same on every rank ("" when none), also kept in `failed`.
  // A failed collective throws instead (on every rank). `make_up`: this rank skipped the
  // step the others are exchanging (StepLedger): it contributes zeros with its failure
  // word raised (local_failure says why), its codec states left as they were.
  std::string exchange(bool make_up = false);
  // Under momentum correction: wd x w into params[i]'s gradient, once per step.
  void add_weight_decay(size_t i, torch::Tensor& grad);
  // Ends an exchange whose backward threw before its final callback: completes its
  // collectives (every rank issues the same ones) and tells the others it failed, with
  // `local_failure` as the cause. .grad does not hold an aggregate afterwards.
  void abandon_open_exchange();
  // For parameter-server and gossip jobs: the exchange as step() runs it.
  void exchange_in_step();
  // ConfigError naming the first parameter changed since construction (dtype, device,
  // layout, a new gradient accumulator: its hook would be gone) or frozen one that now
  // requires grad or has a gradient. Before any collective of a step.
  void check_parameters_unchanged() const;
  // Rank 0's buffers (and, with `frozen_too`, frozen parameters) to every rank, in one
  // broadcast.
  void broadcast_from_rank0(bool frozen_too);
  // The tensors' bytes, one after the other; and back (Error if the sizes differ).
  static void pack_tensors(const std::vector<torch::Tensor>& tensors, Bytes& out);
  static void unpack_tensors(const Bytes& in, const std::vector<torch::Tensor>& tensors);
};

}  // namespace gradwire
