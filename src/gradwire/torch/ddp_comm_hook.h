// DdpCommHook: gradwire's data-parallel exchange behind PyTorch DDP's communication hook
// (the Python module's gradwire.ddp.hook; python/gradwire/ddp.py is the function DDP calls).
//
// DDP hands the hook one bucket at a time (a flat fp32 buffer holding the gradients of the
// bucket's parameters), on autograd's thread, in bucket order, and wants a future of the
// bucket's average. DDP's buckets are only where the gradients are: the exchange is one
// allreduce strategy over all the model's parameters (strategy/allreduce, or the adaptive
// strategy for `auto`), exactly as DistributedOptimizer runs it for a libtorch program:
// its own buckets (the measured layout), overlap, codec state per parameter. So a DDP that
// rebuilds its buckets after the first iteration (or a new DDP built to resume) changes
// nothing in the exchange, and `auto` makes the C++ strategy's decisions from the same
// measurements, agreed by every rank.
//
// A step: each hook call reports its parameters' gradients to the strategy
// (gradient_ready, which starts the strategy's buckets as they fill, on its exchange
// thread, in one order on every rank) and returns a future; the call for DDP's last bucket
// runs the strategy's synchronize(), which waits for the step's exchange, then completes
// every future of the step. Parameters are known by the key the caller gives (Python's
// id() of the parameter) and numbered in the model's registration order, as
// DistributedOptimizer numbers them (the strategy fills its buckets from the highest index
// down, the order backward roughly finishes them). DDP's first iteration shows that order:
// its initial buckets hold the parameters in registration order, the buckets themselves in
// reverse (one bucket for the whole model unless find_unused_parameters=True), so the
// first step's buckets read last to first give it, the same on every rank and in every run
// of the program. The first step only collects: its last call creates the strategy over
// every parameter seen (start() issues no collective) and exchanges them all at once.
//
// Order on the wire. DDP issues collectives of its own on the same group from autograd's
// thread right after the last bucket's hook (the unused-parameter map with
// find_unused_parameters=True and static_graph's first iteration) and from the program's
// thread between steps (buffers, the bucket rebuild); the strategy's collectives all end
// inside the last bucket's call, so DDP's always come after them, on every rank.
//
// Parameters without a gradient. With find_unused_parameters=True DDP hands over zeros for
// a parameter this rank's backward did not reach, and throws the average away where no
// rank reached it. The hook learns which parameters got a gradient from a hook of its own on
// each (watch_gradients(), from the second step on), carries those flags on the step's last
// collective and, as DistributedOptimizer does, keeps the codec state of a parameter
// without a gradient as it was and puts it back where no rank had one: error feedback's
// residual is not "sent" into an average DDP discards.
//
// Failures. A codec that refuses one rank's gradient (int8 on non-finite values), or a
// bucket this rank cannot take (a parameter the first step did not show, a shape that
// changed, a buffer that is not contiguous fp32), fails every rank's futures of that step
// with the same message naming the rank and the cause: the failing rank still issues every
// collective of the step (zeros in place of what it could not take) and raises the failure
// word the strategy carries on its last collective (the causes are then allgathered). A
// collective that fails (a peer died, a timeout) fails the step's futures, and every later
// step at once with the same cause. DDP rethrows the error from backward(). Every future of
// a step is completed when its last bucket's call returns, whatever failed.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/function.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/cost_model.h"
#include "gradwire/compress/codec.h"
#include "gradwire/core/bytes.h"
#include "gradwire/strategy/step_ledger.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire {

struct CommHookOptions {
  // A codec spec, a layer policy ("fc=powersgd:rank=8,conv=int8,default=none") or an
  // adaptive codec ("auto").
  std::string codec = "auto";
  // Buckets of sparse codecs: "auto", "allgather", "split" or "dense" (strategy/allreduce).
  std::string sparse_aggregation = "auto";
  // Buckets of fp16, bf16, int8 and int4: "auto", "ring" or "reduce-scatter" (strategy/allreduce).
  std::string quantized_path = "auto";
  // The strategy's bucket sizes (DDP's defaults) and whether it exchanges during backward.
  size_t bucket_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  bool overlap = true;
  // The link the cost model predicts exchanges with (the C++ path's --link-bandwidth;
  // default 1 Gbit/s, 50 us): auto's, and the "auto" of quantized_path and
  // sparse_aggregation. Every rank must give the same.
  comm::LinkModel link;
};

class DdpCommHook {
 public:
  // ConfigError for a codec the registry does not know or a bad option, on this rank
  // alone (no collective): the Python state checks its options when it is made, binds to
  // the ranks at its first bucket.
  static void check_options(const CommHookOptions& options);
  // The rank and world size a save_state() was taken on; PayloadError for bytes that are
  // not a hook state.
  static std::pair<int, int> saved_rank(const Bytes& state);

  // Checks on every rank that the configuration is the same (a collective on the caller's
  // thread: MismatchError naming the first difference); ConfigError as check_options().
  DdpCommHook(std::unique_ptr<comm::Collectives> collectives, CommHookOptions options);
  ~DdpCommHook();
  DdpCommHook(const DdpCommHook&) = delete;
  DdpCommHook& operator=(const DdpCommHook&) = delete;

  // One DDP bucket of this step: `buffer` (contiguous fp32 on the CPU) holds the gradients
  // of the parameters `keys`, shaped `shapes`, named `names` (for layer policies and the
  // log; empty: "param<N>"), in order. Returns a future completed with `buffer` itself
  // holding the average over the ranks, or with the step's failure; the call for the last
  // bucket (`is_last`) returns once the step's exchange is over, every future of the step
  // completed. Never throws: a bucket that is not contiguous fp32 on the CPU, sizes that
  // do not add up, a parameter the first step did not show fail the step (see above).
  c10::intrusive_ptr<c10::ivalue::Future> exchange(const at::Tensor& buffer,
                                                   const std::vector<int64_t>& keys,
                                                   const std::vector<std::vector<int64_t>>& shapes,
                                                   const std::vector<std::string>& names,
                                                   bool is_last);

  // The parameters behind `keys`: from the next backward on, a hook on each one's gradient
  // accumulator marks it as having a gradient on this rank (see "Parameters without a
  // gradient"); until then, and when not every parameter of the first step is among them,
  // every parameter counts as having one. Returns how many it watches (0: none). Once the
  // strategy exists, between backward passes or at the end of one (an autograd final
  // callback): registering while autograd runs a parameter's hooks is not safe. A second
  // call replaces the first's hooks; destruction removes them.
  size_t watch_gradients(const std::vector<int64_t>& keys, const std::vector<at::Tensor>& params);

  // The program's optimizer, where the Python state knows it: each zero_grad() (before it
  // zeroes) and each step() (after). They keep the ranks in step when one skips a batch
  // (strategy/step_ledger.h): a zero_grad() with no exchange since the last one takes part
  // in the exchange the others made of the skipped step, as a failed contribution (every
  // rank's backward of that step raises, naming this rank; this one, which knows, does not);
  // a zero_grad() after a backward that threw between buckets ends that step's exchange as
  // abandoned. Throws only for a failed collective.
  void zero_grad();
  void count_step() { ledger_.count_step(); }
  // The calls the program made before this hook existed (the Python state binds at its
  // first bucket), so that a rank that skipped its first step arrives out of step.
  void count_loop(uint64_t zero_grads, uint64_t steps);
  // This rank cannot take part as asked (a hook state it was given does not fit): its next
  // exchange fails on every rank, naming it and `why`, instead of this rank failing alone.
  void refuse_next_step(std::string why) { refused_ = std::move(why); }

  // The optimizer's learning rate, before a step's last bucket (as DistributedOptimizer
  // passes it to the strategy every step): `auto` takes a decay to half or less as the
  // start of a critical regime and measures its plans again. Ignored until the first
  // step has made the strategy, and when not positive.
  void set_learning_rate(double lr);

  const std::string& codec() const { return codec_; }
  int rank() const { return collectives_->rank(); }
  int world_size() const { return collectives_->size(); }
  // This rank's traffic since construction (zero before the first step).
  strategy::TrafficStats traffic() const;
  // The codec decisions made since the last call (auto), "step S: plan (reason)".
  std::vector<std::string> take_decisions();
  // The strategy's buckets by parameter name, and how they were chosen.
  std::string bucket_layout() const;

  // Checkpoints, between steps: this rank's state (error feedback's residuals differ per
  // rank): its rank and the world size, the parameters' shapes and the strategy's state
  // (codec states, auto's choice and measurements, the layout). load_state() before the
  // first step keeps it until the first step has shown the parameters. MismatchError for
  // another rank's or world size's state, another codec's, other shapes; PayloadError for
  // bytes that are not a hook state.
  Bytes save_state() const;
  void load_state(const Bytes& bytes);

 private:
  struct Pending {  // a DDP bucket of the step, until the step is over
    at::Tensor buffer;
    c10::intrusive_ptr<c10::ivalue::Future> done;
  };
  struct Watch {  // a hook of watch_gradients(), on a parameter's gradient accumulator
    std::shared_ptr<torch::autograd::Node> accumulator;
    uintptr_t key = 0;
  };
  // One bucket's parameters: checked, then (first step) collected or reported to the
  // strategy. Throws what makes this rank unable to take the bucket.
  void take_bucket(const at::Tensor& buffer, const std::vector<int64_t>& keys,
                   const std::vector<std::vector<int64_t>>& shapes,
                   const std::vector<std::string>& names);
  // The first step's last call: the strategy over every parameter seen.
  void create_strategy();
  // The step's end: synchronize() (zeros for what this rank could not take), the agreed
  // failure, the codec states of parameters without a gradient, every future completed.
  // Returns the step's failure (null when none). `make_up`: a step this rank skipped
  // (StepLedger): zeros, its failure word raised, every codec state left as it was.
  std::exception_ptr finish_step(bool make_up = false);
  void fail_step(std::exception_ptr error);
  void check_state_fits(const std::vector<std::vector<int64_t>>& shapes) const;
  void unwatch();

  std::unique_ptr<comm::Collectives> collectives_;
  CommHookOptions options_;
  std::string codec_;  // canonical
  std::unique_ptr<strategy::Strategy> strategy_;
  std::vector<compress::TensorInfo> tensors_;     // in registration order (see above)
  std::vector<size_t> first_step_buckets_;        // the first step: parameters per call
  std::unordered_map<int64_t, size_t> index_of_;  // parameter key -> index in tensors_
  strategy::FloatSpans spans_;                    // this step's gradient of each parameter
  std::vector<uint8_t> reported_;                 // this step: parameter reported
  std::vector<Pending> pending_;                  // this step's buckets
  std::string step_failure_;  // why this rank cannot take this step's buckets ("" if it can)
  std::string refused_;       // refuse_next_step()
  std::vector<float> zeros_;  // what a parameter this rank could not take contributes
  // [failed, had a gradient per parameter, the ledger's words], carried by the strategy (or
  // allreduced).
  std::vector<float> status_;
  strategy::StepLedger ledger_;  // counts the program's loop (zero_grad(), count_step())
  bool status_carried_ = false;
  // Per parameter: a gradient reached it on this rank since the last exchange. Written by
  // the hooks of watch_gradients() (autograd's thread, which runs the hook's calls too).
  std::shared_ptr<std::vector<uint8_t>> had_gradient_;
  std::vector<Watch> watches_;
  std::unique_ptr<Bytes> loaded_;  // a state loaded before the strategy existed
  std::string broken_;             // a failed collective: every later step fails with it
};

}  // namespace gradwire
