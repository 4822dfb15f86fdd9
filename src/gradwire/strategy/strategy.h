// Strategy: how one step's gradients (or models) are exchanged between ranks.
//
// A Strategy sees the model as float spans plus per-tensor metadata; it knows nothing of
// torch, the CLI or datasets. DistributedOptimizer drives it:
//
//   start(params)               once: ranks agree on configuration and start equal
//   loop:
//     backward                  gradient_ready(i, grad) as each gradient becomes final
//     synchronize(grads)        grads become the step's aggregated gradients
//     optimizer.step()          (skipped when applies_update(): the strategy updated params)
//     after_update(params)      e.g. gossip mixes models here, DiLoCo its outer step
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"
#include "gradwire/core/bytes.h"
#include "gradwire/core/error.h"

namespace gradwire::strategy {

using FloatSpans = std::vector<std::span<float>>;

// Traffic of this rank since start(). Contributed bytes are what its codecs produced;
// bytes on the wire are what its sends put on the network (comm/wire_bytes.h: for an
// allreduce about 2(W-1)/W times the contribution, for an allgather (W-1) times the padded
// contribution; for a parameter-server push, the message). The dense figures are the same
// for fp32 gradients exchanged by allreduce (by push, for a parameter server).
struct TrafficStats {
  uint64_t steps = 0;
  uint64_t bytes_contributed = 0;
  uint64_t bytes_on_wire = 0;
  uint64_t bytes_dense = 0;
  uint64_t bytes_dense_on_wire = 0;
};

// Job-wide counters as a parameter server keeps them (other strategies have none).
struct JobProgress {
  uint64_t samples = 0;  // samples trained by all workers (a resumed job's included)
  double loss_sum = 0;   // their summed training loss
  uint64_t bytes_sent = 0;
  uint64_t bytes_dense = 0;
  uint64_t bytes_received = 0;  // weights pulled back by all workers
  int live_workers = 0;
  bool done = false;  // the job's sample budget is spent
};

// A codec choice a strategy made by itself (the adaptive codecs: auto, accordion), for the
// log, the metrics file and the timeline.
struct CodecDecision {
  uint64_t step = 0;        // the first step that uses it (steps counted from 0)
  std::string plan;         // "fp16"
  std::string reason;       // one line: why, with the measurements it rests on
  std::string inputs_json;  // the same as a JSON object
};

struct JobSummary {
  JobProgress progress;
  uint64_t version = 0;  // updates the servers applied (server 0's count)
  // Staleness of every push over all servers: count, mean, p50, p99, max.
  uint64_t staleness_count = 0;
  double staleness_mean = 0;
  uint64_t staleness_p50 = 0, staleness_p99 = 0, staleness_max = 0;
  std::vector<std::string> checksums;  // per worker; empty for a lost worker
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  virtual std::string name() const = 0;

  // Checks that every rank has the same configuration and tensor shapes (MismatchError
  // naming the first difference otherwise) and makes params equal on all ranks.
  // `tensors[i]` describes `params[i]`. Buffers (BatchNorm's statistics) are not a
  // strategy's concern: DistributedOptimizer keeps them equal.
  virtual void start(std::span<const compress::TensorInfo> tensors, const FloatSpans& params) = 0;

  // Gradient i of this step is final and lives at `grad` until synchronize() returns
  // (called from autograd's thread during backward). Strategies may start exchanging it
  // from here; the default waits for synchronize(). Gradients that were not reported
  // are taken from synchronize()'s argument.
  virtual void gradient_ready(size_t index, std::span<float> grad) {}
  // True when gradient_ready() starts exchanges (the caller must then have finished each
  // reported gradient, weight decay included, before reporting it).
  virtual bool overlaps() const { return false; }

  // Replaces grads with the aggregated gradients of this step (all ranks equal).
  virtual void synchronize(const FloatSpans& grads) = 0;
  // False for strategies that leave every rank its own gradients (DiLoCo: the ranks
  // exchange parameters in after_update()); the caller then hands synchronize() nothing
  // and keeps .grad as backward left it.
  virtual bool exchanges_gradients() const { return true; }

  // Carries the caller's `status` words on this strategy's own collectives
  // (DistributedOptimizer's status: [failed, had-a-gradient per parameter, the exchange's
  // sequence number in bits], each 0 or 1): every synchronize() reads them just before its
  // last collective and leaves in them the OR over the ranks (1 where any rank had a
  // nonzero word), saving the caller a collective of its own per step. Word 0 is the
  // failure flag: the strategy sets it on a rank whose own encoding failed this step (see
  // take_local_failure()). False when the strategy cannot (then the caller exchanges them).
  // After start(); `status` must stay valid while the strategy lives. Words a strategy
  // carries are not counted in traffic().
  virtual bool carry_status(std::span<float> status) { return false; }

  // Why this rank could not encode its part of the last synchronize() (a codec refused a
  // gradient: int8 and the other quantizers refuse non-finite values), "" when it could;
  // cleared by the call. A rank that fails so still issues every collective of the step,
  // with zeros in place of what it could not encode, so no rank waits for it, and raises
  // the carried status's failure word: the caller learns of it on every rank in the same
  // step, and the step's aggregate must not be used.
  virtual std::string take_local_failure() { return {}; }

  // Tensor `index` has no gradient on this rank in the coming synchronize() (it contributes
  // zeros): its codec's state (error feedback's residual, the corrected momentum, low-rank
  // factors) is kept as it is now, and restore_codec_states() puts it back where the ranks
  // found that no rank had a gradient for it. An exchange whose output is thrown away (the
  // tensor's .grad stays undefined, the optimizer skips it) then advances no codec state:
  // the residual is not "sent" into nothing, the velocity does not decay. Between steps.
  virtual void hold_codec_state(size_t index) {}
  // After synchronize(): `unused_everywhere[k]` nonzero puts back tensor k's held state;
  // every held state is then dropped.
  virtual void restore_codec_states(std::span<const uint8_t> unused_everywhere) {}

  // True when synchronize() already updated the parameters (e.g. a parameter server
  // applies the update); the optimizer must not step then.
  virtual bool applies_update() const { return false; }

  // Called after the optimizer stepped.
  virtual void after_update(const FloatSpans& params) {}
  // True when the last after_update() (or finish()) ended a synchronization of the whole
  // model: every step for allreduce (every rank then holds the same model); for DiLoCo when
  // a round's last fragment lands (the same model on every rank only with one fragment and
  // no delay; otherwise each part differs by what was done since it landed) and after
  // finish() (the same model). The caller then copies rank 0's buffers to every rank, if
  // it does.
  virtual bool just_synchronized() const { return true; }
  // The caller's state that follows rank 0 whenever the whole model synchronizes
  // (DistributedOptimizer's buffers: BatchNorm's statistics), for a strategy whose
  // synchronizations run on an exchange thread of its own (DiLoCo): it broadcasts the state
  // from rank 0 inside the round's exchange, so the broadcast waits for nothing. `pack`
  // writes this rank's state (called on every rank, on the caller's thread, when the
  // round's last part is sent; only rank 0's bytes travel), `unpack` reads rank 0's back
  // (every rank, the caller's thread, when that part lands). False when the strategy does
  // not carry it: the caller then broadcasts after a step that just_synchronized().
  virtual bool carry_broadcast(std::function<void(Bytes&)> pack,
                               std::function<void(const Bytes&)> unpack) {
    return false;
  }

  virtual TrafficStats traffic() const = 0;

  // The optimizer's learning rate, passed by DistributedOptimizer before every
  // synchronize(): strategies that apply the update themselves (applies_update()) follow
  // it, adaptive codecs take a change as the start of a critical regime.
  virtual void set_learning_rate(double lr) {}

  // The codec decisions made since the last call (adaptive codecs; others make none).
  virtual std::vector<CodecDecision> take_decisions() { return {}; }
  // The buckets in exchange order, by tensor name, and how they were chosen (strategies
  // with buckets; others: empty). Between steps.
  virtual std::string bucket_layout_summary() const { return {}; }

  // Checkpoints (DistributedOptimizer::save_checkpoint): this rank's state carried from
  // step to step (its codecs' states, its traffic counters, an adaptive codec's choices and
  // measurements), appended to `out`. load_state(), after start(), restores what a
  // strategy of the same configuration saved, so that the following steps are the saved
  // strategy's; PayloadError when the bytes do not fit (another configuration's), after
  // which the strategy must not be used. Between steps only. The defaults refuse: parameter
  // servers checkpoint on the servers, and gossip keeps no checkpoint.
  virtual void save_state(Bytes& out) const { refuse_checkpoints(); }
  virtual void load_state(ByteReader& in) { refuse_checkpoints(); }

  // Parameter-server jobs only (the defaults do nothing): samples and their summed loss
  // of the step about to be synchronized, counted job-wide by the servers;
  virtual void count_samples(size_t samples, double loss_sum) {}
  // the job-wide counters as of the last synchronize();
  virtual std::optional<JobProgress> job_progress() const { return std::nullopt; }
  // tells the servers this worker is done. Worker 0 waits until every worker is, then
  // receives the servers' final model into its parameters and the job's summary.
  // DiLoCo: a collective that leaves every rank with the same model (nullopt).
  virtual std::optional<JobSummary> finish() { return std::nullopt; }
  // The parameters where they are now, before finish(): a program may have given a
  // parameter new storage of the same shape since start() (set_() under NoGradGuard, a
  // checkpoint loaded into it), and a strategy that writes the model in finish() writes
  // there. The default keeps nothing.
  virtual void follow_parameters(const FloatSpans& params) {}

 protected:
  [[noreturn]] void refuse_checkpoints() const {
    throw ConfigError("checkpoints through DistributedOptimizer are for allreduce jobs; " + name() +
                      " jobs have none" +
                      (name() == "ps" ? " (the servers checkpoint: --checkpoint-dir)" : ""));
  }
};

}  // namespace gradwire::strategy
