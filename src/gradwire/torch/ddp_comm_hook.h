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
// Failures. A codec that refuses one rank's gradient (int8 on non-finite values) fails
// every rank's futures of that step with the same message naming the rank and the cause
// (the strategy carries a failure word on its last collective; the causes are then
// allgathered). A collective that fails (a peer died, a timeout) fails the step's futures,
// and every later step at once with the same cause. DDP rethrows the error from backward().
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/compress/codec.h"
#include "gradwire/core/bytes.h"
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
};

class DdpCommHook {
 public:
  // Checks on every rank that the configuration is the same (a collective on the caller's
  // thread: MismatchError naming the first difference); ConfigError for a codec the
  // registry does not know or a bad option.
  DdpCommHook(std::unique_ptr<comm::Collectives> collectives, CommHookOptions options);
  ~DdpCommHook();
  DdpCommHook(const DdpCommHook&) = delete;
  DdpCommHook& operator=(const DdpCommHook&) = delete;

  // One DDP bucket of this step: `buffer` (contiguous fp32 on the CPU) holds the gradients
  // of the parameters `keys`, shaped `shapes`, named `names` (for layer policies and the
  // log; empty: "param<N>"), in order. Returns a future completed with `buffer` itself
  // holding the average over the ranks, or with the step's failure; the call for the last
  // bucket (`is_last`) returns once the step's exchange is over. ConfigError (thrown here)
  // for a buffer that is not contiguous fp32 on the CPU, sizes that do not add up, or a
  // parameter the first step did not show.
  c10::intrusive_ptr<c10::ivalue::Future> exchange(const at::Tensor& buffer,
                                                   const std::vector<int64_t>& keys,
                                                   const std::vector<std::vector<int64_t>>& shapes,
                                                   const std::vector<std::string>& names,
                                                   bool is_last);

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

  // Checkpoints, between steps: the parameters' shapes and the strategy's state (codec
  // states, auto's choice and measurements, the layout). load_state() before the first
  // step keeps it until the first step has shown the parameters. MismatchError for another
  // codec's state or other shapes, PayloadError for bytes that are not a hook state.
  Bytes save_state() const;
  void load_state(const Bytes& bytes);

 private:
  struct Pending {  // a DDP bucket of the step, until the step is over
    at::Tensor buffer;
    c10::intrusive_ptr<c10::ivalue::Future> done;
  };
  // The first step's last call: the strategy over every parameter seen.
  void create_strategy();
  // The step's end: synchronize(), the agreed failure, every future completed.
  void finish_step();
  // "" when every rank encoded, else the message naming every rank's cause.
  std::string agreed_failure(const std::string& local_failure);
  void fail_step(std::exception_ptr error);
  void check_state_fits(const std::vector<std::vector<int64_t>>& shapes) const;

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
  std::vector<float> status_;                     // [failed], carried by the strategy
  bool status_carried_ = false;
  std::unique_ptr<Bytes> loaded_;  // a state loaded before the strategy existed
  std::string broken_;             // a failed collective: every later step fails with it
};

}  // namespace gradwire
