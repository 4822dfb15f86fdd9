// DistributedOptimizer: data-parallel training by wrapping any torch::optim::Optimizer.
//
//   auto dist = gradwire::init();
//   gradwire::DistributedOptimizer optimizer(
//       dist, torch::optim::SGD(model->parameters(), 0.05), *model, {.compressor = "fp16"});
//   ... optimizer.zero_grad(); loss.backward(); optimizer.step();
//
// The contract, as PyTorch DDP users know it:
// - What is accepted: every parameter of `model` that requires grad takes part and must be
//   a contiguous float32 CPU tensor; the optimizer must update every such parameter and no
//   tensor outside the model that requires grad. A weight tied to two modules (listed
//   twice by named_parameters()) is one parameter, exchanged once. Parameters that do not
//   require grad (frozen) may be in the optimizer or not; they are checked across ranks
//   and taken from rank 0 like the buffers, checkpointed, never exchanged; one that later
//   requires grad or gets a gradient while the optimizer holds it is an error naming it
//   (rebuild the DistributedOptimizer after unfreezing). Construction fails (ConfigError)
//   naming the first parameter that breaks a rule. Buffers (BatchNorm's statistics) may
//   be of any dtype but must be contiguous CPU tensors.
// - Construction checks that every rank has the same strategy, codec, parameters, frozen
//   parameters, buffers (names, shapes, dtypes) and the options that decide the sequence
//   of collectives (strategy, overlap, momentum correction, bucket sizes, measured
//   buckets, the link model, sparse aggregation, broadcast_buffers, DiLoCo's) before any
//   of them moves (MismatchError naming both sides otherwise), then makes every rank start
//   from rank 0's parameters and buffers.
// - When .grad is final (allreduce jobs): when backward() returns. The gradient hooks start
//   each bucket's exchange during backward (overlap), and an autograd final callback
//   waits for all of them, so after `loss.backward()` every parameter's .grad holds the
//   average over the ranks, equal on every rank: clip it, log it or replace it before
//   step(), as with DDP. step() then only steps the wrapped optimizer. Several backward
//   passes before a step each exchange what .grad holds then (the average accumulates,
//   as in DDP; not under momentum correction, see below); inside a `no_sync()` scope
//   backward only accumulates locally, and the next backward outside it (or step(), or
//   synchronize()) exchanges the accumulated gradient.
//   Collectives a program issues between backward and step (Context::allgather) come
//   after the exchange on every rank.
// - Parameters without a gradient: a parameter whose .grad is undefined on this rank at the
//   exchange contributes zeros; the ranks agree (on the exchange's last collective)
//   which parameters had a gradient anywhere. One that had none on every rank keeps an
//   undefined .grad, so the optimizer skips it, as in single-process libtorch; one used
//   on some ranks gets the average (DDP's find_unused_parameters). The codec state of one
//   unused on every rank (error feedback's residual, the corrected momentum) stays as it
//   was. zero_grad() sets gradients to undefined by default (set_to_none, libtorch 2's
//   and PyTorch's default).
// - Checks at every step: a parameter whose dtype, device, layout or size changed, or
//   whose gradient hook is gone (Module::to(), set_data() or set_() replaced its data, as
//   torch::load() does), and a gradient that is not dense float32, fail naming the
//   parameter, before this rank issues a collective.
// - A failed step. Every rank throws an Error naming the failing rank and the cause, from
//   backward(), synchronize() or step(), in the same step and without waiting out the
//   timeout, when on one rank:
//     * a gradient cannot be exchanged (not dense float32), or the codec refuses it (int8
//       and the other quantizers refuse non-finite values: a diverged rank): that rank
//       still takes part in every collective of the step, with zeros, and says so in the
//       step's status;
//     * backward threw after some gradients were final: that rank ends the abandoned
//       exchange at its next call (zero_grad(), backward, step());
//     * backward threw before any gradient was final (a hook on the loss or the logits),
//       so that this rank opened no exchange, and the program went on with zero_grad()
//       and the next batch: the exchange that rank's next backward pairs with fails on
//       every rank, naming each rank's count of zero_grad(), step() and exchanges since
//       the last failure ("the ranks are out of step"), instead of averaging gradients of
//       different steps. A rank that goes on without calling zero_grad() or step() cannot
//       be told from one that never ran the failed batch: call zero_grad() (as a loop
//       that drops a batch does anyway).
//   After a failed step .grad holds no aggregate: backward() (at its first gradient) and
//   step() refuse, on every rank, until zero_grad(); then the next batch goes on normally
//   and the ranks are in step again. A failed collective (a rank gone, a broken link)
//   throws on every rank whose collective fails; a rank that waits for its turn on the
//   communicator waits as long as the turn's holder makes progress and fails after the
//   timeout (GRADWIRE_TIMEOUT) without progress, and the communicator serves later calls.
// - Under momentum correction (below) a step has one exchange: a second backward before
//   step() outside no_sync() is refused (ConfigError, on every rank, before any
//   collective), since its input would hold the first exchange's averaged velocity.
// - synchronize() is the exchange alone, for programs that set .grad without backward or
//   backward inside no_sync(); it does nothing when backward already exchanged.
// - Buffers: with broadcast_buffers (the default, as DDP's), rank 0's buffers are copied to
//   every rank at the end of each step(): all ranks hold equal buffers after every step.
// - Parameter-server and gossip jobs, whose workers do not step together, exchange in
//   step() (synchronize()), not at the end of backward.
// - Lifetime: the optimizer registers a gradient hook on every parameter and removes them
//   when destroyed; a backward pass afterwards runs no gradwire code. A parameter belongs
//   to one DistributedOptimizer at a time: building a second one on a parameter the first
//   still holds fails with ConfigError (destroy the first, then build the next). An
//   optimizer given as an lvalue stays the caller's (it must outlive the
//   DistributedOptimizer; LR schedulers built on it act on the optimizer that steps); one
//   given as an rvalue is moved in and owned.
//
// Momentum correction: codecs with error feedback (topk, 2bit) and heavy-ball momentum
// applied after aggregation do not mix: the residual delays large coordinates and momentum
// turns that delay into divergence (2bit) or lost accuracy (topk). So when the codec uses
// error feedback on the allgather path and the optimizer is torch::optim::SGD with plain
// heavy-ball momentum m (no Nesterov, no dampening, the same m in every group), the momentum
// moves into the codec (`momentum=m`: u = m u + g is compressed, with DGC's momentum factor
// masking) and the SGD's groups get momentum 0, once every check across ranks has passed;
// the destructor gives them back. Weight decay moves with it: each rank adds wd x w to its
// gradient before the exchange (inside the corrected momentum, as in the user's SGD, where
// it is added before momentum), and the groups get weight_decay 0. Then .grad after the
// exchange holds the average of the corrected momentum updates u, not of the gradients.
// codec_spec() shows the result; set DistributedOptions::momentum_correction = false to
// keep the optimizer untouched.
//
// Other optimizers (Adam, AdamW, RMSprop, Adagrad: each coordinate scaled by statistics of
// its own gradient) are never changed: a codec with error feedback compresses the gradient
// plus its residual, and the optimizer steps on the decompressed average, as it would on
// the exact one. Under AdamW (gpt, 3 seeds) fp16, int8 and PowerSGD of rank 16 ended
// within 2% of none's validation loss; top-k at 1%, 2bit and signSGD 33-69% above it,
// PowerSGD of rank 4 15-19%: Adam's per-coordinate step turns a residual released late into a step
// as large as any other, and its second moment, fed bursts, no longer estimates the gradient's
// scale (docs/CODECS.md, "Under Adam"). So `auto` under these optimizers runs its PowerSGD
// plan at rank 16 (strategy/registry.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "gradwire/context.h"
#include "gradwire/diloco_options.h"

namespace gradwire {

// Strategy "ps" (a job started with parameter servers, see context.h): the servers apply
// the updates with the wrapped optimizer's hyperparameters, which must be torch::optim::SGD
// (momentum, weight_decay of its first group at construction; its lr at every step, so LR
// schedules work); the optimizer itself never steps.
struct ParameterServerOptions {
  std::string consistency = "bsp";  // bsp | ssp:S | asp
  std::string updater = "sgd";      // sgd | asgd-staleness | dc-asgd | dc-asgd-a | ddc-asgd[:keys]
  std::string pull = "none";        // none | fp16 | bf16 | delta:SPEC
  bool continue_on_worker_loss = false;  // BSP; SSP and ASP always go on without a lost worker
  double worker_timeout_s = 60;          // silence after which a worker is presumed lost
  std::string checkpoint_dir;            // servers' checkpoints; a job on it resumes
  uint64_t checkpoint_every = 0;         // updates between checkpoints (0: none)
  uint64_t sample_budget = 0;            // > 0: job_progress().done once this many samples
};

// Strategy "gossip" (docs/ALGORITHMS.md 7): no server, no collective while training; each
// worker averages its model with one peer when its trigger says so. The workers listen on
// InitOptions::ps_bind (GRADWIRE_PS_BIND, 127.0.0.1 by default).
struct GossipOptions {
  std::string topology = "ring";  // ring | exponential | random[:seed=S]
  std::string trigger =
      "adaptive";                  // every | period:K | adaptive[:calibration=..,kappa=..,t_max=..]
  std::string merge = "pairwise";  // pairwise | push-sum
  double peer_timeout_s = 30;      // a peer silent this long after an offer is dropped
  // The offering worker waits for its answer before its step ends (synchronous pairwise
  // gossip); by default it goes on training and merges the answer at a later step.
  bool wait = false;
};

// What gossip workers did (DistributedOptimizer::gossip_summary(), gossip_report()): one
// worker's counters, or on rank 0 at a report or after finish() the job's (summed over the
// workers that reported).
struct GossipSummary {
  uint64_t offers = 0;  // exchanges started
  uint64_t merges = 0;  // merges applied to the models
  uint64_t busy = 0;    // exchanges a peer declined
  uint64_t dropped_messages = 0;
  uint64_t bytes_sent = 0;         // the exchanges' messages
  uint64_t bytes_bookkeeping = 0;  // reports to rank 0, the consensus, heartbeats
  double steps_between_mean = 0;   // local steps between a worker's offers
  uint64_t steps_between_p50 = 0, steps_between_max = 0;
  std::vector<int> dropped_peers;  // peers some worker stopped offering to
  // Job views only (rank 0): the workers whose models are in the average, those presumed
  // lost (silent for the peer timeout), and the mean over the former of ||x_i - average||.
  std::vector<int> reported, lost;
  double consensus_distance = 0;
};

// Rank 0's view at a gossip report (DistributedOptimizer::gossip_report()).
struct GossipReport {
  GossipSummary summary;
  std::vector<torch::Tensor> average;  // per parameter: the average of the reported models
  std::vector<std::string> notes;      // per rank: its note ("" if it did not report)
};

// Strategy "diloco" (docs/ALGORITHMS.md, DiLoCo; Douillard et al. 2023, Streaming DiLoCo
// 2025): local SGD with an outer optimizer, for links of 10-100 Mbit/s. The wrapped
// optimizer is the inner one: every rank steps on its own gradients (.grad is never
// exchanged: clip it, log it as in single-process training) and nothing goes over the
// network until, every inner_steps steps, the ranks average their outer gradient (the
// parameters at the round's start minus the current ones) through the codec
// (DistributedOptions::compressor: none, fp16, bf16, int8, int4 or sparseloco; the 4-bit
// codes go by a reduce-scatter and an allgather of payloads, SparseLoCo's sparse 2-bit ones
// by an allgather) and every rank applies the same outer step,
// SGD with Nesterov momentum. Buffers follow rank 0 once every fragment has synchronized:
// rank 0's, as they were when the round's last fragment was sent, travel in that
// fragment's exchange and replace every rank's when it lands (so no broadcast of step()
// waits for an exchange in flight).
// With fragments > 1 the model is cut by layer into that many parts, synchronized in turn
// at evenly spaced inner steps of the round; with delay > 0 each part's exchange runs while
// `delay` more inner steps go on, and the merge keeps what those steps did locally (the
// next round carries it to the others). Between synchronizations the ranks' models differ:
// call DistributedOptimizer::finish() after the last step, which averages what every part
// did since its last synchronization, and every rank holds the same model (through the
// codec: exact with none, a quantized mean with int8 or int4, within its error; with
// sparseloco the mean of what the ranks' accumulators send, the rest staying unsent).
// Failures: an exchange that fails (a collective, or the codec refusing a rank's outer
// gradient: int8, int4 and sparseloco on non-finite values; with none or fp16 a non-finite
// mean) fails that step() on every rank, naming the rank where the codec refused it, and is not
// merged; every later step() and finish() throws the same error (the ranks' models are no longer
// kept together: restart from a checkpoint). The model may be loaded (torch::load) or its
// parameters given new storage of the same shape between steps: each step takes the
// parameters where they are; a parameter of another size is named at the next step.
// The options are gradwire::DiLoCoOptions (<gradwire/diloco_options.h>).

// What a DiLoCo worker did (DistributedOptimizer::diloco_summary()).
struct DiLoCoSummary {
  uint64_t inner_steps = 0;  // H in force (0 while auto is still timing steps)
  uint64_t delay = 0;
  int fragments = 1;
  uint64_t steps = 0;          // inner steps taken
  uint64_t exchanges = 0;      // fragment exchanges merged
  uint64_t outer_steps = 0;    // rounds: exchanges / fragments
  uint64_t bytes_on_wire = 0;  // this rank's sends, every exchange and finish() included
  // The inner step at which a round's last fragment last landed (or finish() ran). The
  // ranks' models are all equal there only with fragments = 1 and delay 0, and after
  // finish(); with fragments or a delay each part differs by what the ranks did since it
  // landed.
  uint64_t last_sync_step = 0;
};

struct DistributedOptions {
  std::string strategy = "allreduce";  // "allreduce", "ps", "gossip" or "diloco"
  // A codec spec ("topk:density=0.01"), a layer policy ("conv=...,fc=..."), or an adaptive
  // codec: "auto" measures none, fp16, int8 and PowerSGD in this job and picks (docs/CODECS.md).
  // Empty (the default): "auto" for allreduce, "int4" for diloco (its outer gradients; what
  // its tuning chose), "none" for ps and gossip. auto's choice
  // rests on measured step times, so two runs of one job may pick differently; a fixed
  // codec ("none") repeats a run bit for bit.
  std::string compressor;
  size_t bucket_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;  // the last layers' bucket, small so it starts early
  // Lay the buckets out anew after a few steps (allreduce with overlap), from when each
  // gradient was final and how long the exchanges took on this job's link, measured and
  // agreed by the ranks: the boundaries that hide the most of the exchange under backward
  // (docs/ARCHITECTURE.md), kept only if measured faster than the first layout, the two
  // taking turns. The sizes above then only give the first layout and the cap.
  // Off, the layout is fixed at construction, and a run with a fixed codec repeats bit for
  // bit (measured layouts may differ from run to run, and with them the order of sums).
  bool measured_buckets = true;
  // Exchange each bucket as soon as backward has produced its gradients (as DDP does);
  // off, every bucket is exchanged at the end of backward, in the same order with the
  // same results bit for bit. Either way .grad is final when backward() returns.
  bool overlap = true;
  // Buckets of sparse codecs (topk and the other sparsifiers) are summed by "allgather"
  // (every rank receives every payload), "split" (a sparse reduce-scatter by index range,
  // then an allgather of the reduced ranges: traffic that does not grow with the world) or
  // "dense" (an allreduce of the decoded payloads); "auto" picks per bucket and step by
  // an alpha-beta cost model (docs/SCALING.md).
  std::string sparse_aggregation = "auto";
  // Buckets of fp16, bf16, int8 and int4 are averaged by their ring (fp16's and int8's
  // allreduce, bf16's and int4's allgather) or by a reduce-scatter that sums in fp32 and
  // keeps every level of the codec at any world size (int8's ring has floor(127 / W)
  // levels per sign): "ring", "reduce-scatter", or "auto" (per bucket: int8 where its ring
  // has under 31 levels, beyond 4 ranks; bf16 and int4 where the cost model predicts it
  // faster than their allgather; fp16 keeps its ring).
  std::string quantized_path = "auto";
  // The link the cost model assumes (sparse aggregation "auto", and the codec "auto",
  // which predicts each plan's exchange with it): bits per second through one rank's link,
  // and the seconds one message step costs. 1 Gbit/s and 50 us by default.
  double link_bits_per_s = 1e9;
  double link_latency_s = 50e-6;
  bool momentum_correction = true;  // see above (not for gossip and diloco: their codecs
                                    // carry models)
  // Copy rank 0's buffers to every rank after each step() (DDP's broadcast_buffers); false
  // leaves each rank its own after construction. Strategies "ps" and "gossip" never do:
  // their workers do not step together; "diloco" does when a round's models meet.
  bool broadcast_buffers = true;
  ParameterServerOptions ps;
  GossipOptions gossip;
  DiLoCoOptions diloco;
};

// This rank's traffic since construction. Contributed: what its codecs produced for the
// exchange. On the wire: what its sends put on the network, from the algorithm's pattern
// (a ring allreduce sends about 2(W-1)/W times its contribution, an allgather W-1 times
// it, padded to the largest rank's; a parameter-server push, the message itself; TCP/IP
// headers excluded). The dense figures are the same for fp32 gradients exchanged by
// allreduce: compare on the wire with on the wire.
struct TrafficCounters {
  uint64_t steps = 0;
  uint64_t bytes_contributed = 0;
  uint64_t bytes_on_wire = 0;
  uint64_t bytes_dense = 0;
  uint64_t bytes_dense_on_wire = 0;
};

// A choice the adaptive codecs (auto, accordion) made: from `step` on (steps counted from 0
// on every rank alike), the codec plan `plan` ("none", "fp16", "powersgd"...), because of
// `reason` (one line, with the measurements it rests on; the same as JSON in `inputs_json`).
struct CodecDecision {
  uint64_t step = 0;
  std::string plan;
  std::string reason;
  std::string inputs_json;
};

// Parameter-server jobs: what the servers counted over all workers.
struct JobProgress {
  uint64_t samples = 0;  // a resumed job's included
  double loss_sum = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_dense = 0;
  uint64_t bytes_received = 0;  // weights pulled back
  int live_workers = 0;
  bool done = false;  // ParameterServerOptions::sample_budget is spent
};

struct JobSummary {
  JobProgress progress;
  uint64_t version = 0;  // updates server 0 applied
  uint64_t staleness_count = 0;
  double staleness_mean = 0;
  uint64_t staleness_p50 = 0, staleness_p99 = 0, staleness_max = 0;
  std::vector<std::string> checksums;  // per worker (its last model); empty: lost
};

class DistributedOptimizer {
  struct Impl;

 public:
  DistributedOptimizer(std::shared_ptr<Context> context,
                       std::shared_ptr<torch::optim::Optimizer> optimizer,
                       const torch::nn::Module& model, const DistributedOptions& options = {});

  // Takes ownership of an optimizer given as an rvalue: DistributedOptimizer(ctx, SGD(...), ...).
  template <typename OptimizerT,
            typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, OptimizerT>>>
  DistributedOptimizer(std::shared_ptr<Context> context, OptimizerT&& optimizer,
                       const torch::nn::Module& model, const DistributedOptions& options = {})
      : DistributedOptimizer(std::move(context), std::make_shared<OptimizerT>(std::move(optimizer)),
                             model, options) {}
  // Wraps the caller's optimizer, which must outlive this object: schedulers built on it
  // (torch::optim::StepLR sched(sgd, ...)) act on the optimizer that steps.
  template <typename OptimizerT,
            typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, OptimizerT>>>
  DistributedOptimizer(std::shared_ptr<Context> context, OptimizerT& optimizer,
                       const torch::nn::Module& model, const DistributedOptions& options = {})
      : DistributedOptimizer(std::move(context),
                             std::shared_ptr<torch::optim::Optimizer>(
                                 std::shared_ptr<torch::optim::Optimizer>(), &optimizer),
                             model, options) {}

  // Removes the gradient hooks and releases the parameters (see the contract above).
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Clears the gradients of the optimizer's parameters: undefined (set_to_none, the
  // default) or zero. Also ends a step a failed backward left open (see the contract).
  void zero_grad(bool set_to_none = true);
  // Exchanges what no backward exchanged (synchronize()), steps the wrapped optimizer,
  // then broadcasts rank 0's buffers.
  torch::Tensor step();
  // Only the exchange of what .grad holds, if no backward exchanged it since the last
  // step: afterwards every parameter's .grad holds the aggregated gradient.
  void synchronize();

  // Inside the scope of the returned guard, backward accumulates gradients locally and
  // exchanges nothing (DDP's no_sync()); the first backward after it exchanges the
  // accumulated gradients:
  //   { auto guard = optimizer.no_sync(); loss1.backward(); }  loss2.backward(); step();
  // A guard that outlives its optimizer is harmless (it holds a share of the scope count,
  // not the optimizer).
  class NoSync {
   public:
    NoSync(NoSync&& other) noexcept;
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;
    ~NoSync();

   private:
    friend class DistributedOptimizer;
    explicit NoSync(std::shared_ptr<int> depth);
    std::shared_ptr<int> depth_;  // the optimizer's no_sync() scope count
  };
  [[nodiscard]] NoSync no_sync();

  torch::optim::Optimizer& optimizer();
  // The codec spec in use, canonical (after momentum correction, if any).
  const std::string& codec_spec() const;
  TrafficCounters traffic() const;
  const Context& context() const;
  // Gossip only (nullopt otherwise): this worker's counters, and on rank 0 after finish()
  // the job's. Not collective.
  std::optional<GossipSummary> gossip_summary() const;
  // Gossip only: every worker calls it at the same step (an evaluation point). The others
  // send their model, counters and `note` to rank 0 and return nullopt at once; rank 0
  // waits for them (a worker silent for the peer timeout is presumed lost and left out) and
  // gets the average model, the consensus distance and the job's counters. No collective:
  // the job goes on when a worker dies.
  std::optional<GossipReport> gossip_report(const std::string& note = "");
  // Gossip only: finish() with a note to rank 0, which gets the final report (its
  // `average` is the model every worker now holds).
  std::optional<GossipReport> finish_gossip(const std::string& note = "");
  // The adaptive codecs' decisions since the last call, the same on every rank (empty for
  // a fixed codec). Log them from one rank.
  std::vector<CodecDecision> take_codec_decisions();
  // Allreduce: the buckets in exchange order, by parameter name, and, once the measured
  // layout is made (DistributedOptions::measured_buckets), what it rests on and predicts.
  // Empty for the other strategies. Between steps.
  std::string bucket_layout() const;

  // Checkpoints of allreduce jobs; both calls are collective (every rank, between steps).
  // save_checkpoint(): every rank's exchange state (error feedback's residuals and
  // momentum, PowerSGD's factors, the adaptive codecs' measurements and choice, the traffic
  // counters) goes to rank 0, which writes it with the parameters, the buffers, the wrapped
  // optimizer's state and `user_state` (the caller's own: epoch, position in the data) to
  // `path`, atomically: the previous file stays whole until the new one is. A write that
  // fails (a full disk) throws SystemError on every rank; training may go on.
  // load_checkpoint(): rank 0 reads `path` (no shared file system needed) and every rank
  // restores all of it and gets `user_state` back; nullopt, with nothing changed, when rank
  // 0 finds no file. The job then goes on as the saved one would have: bit for bit where
  // its computation is deterministic. PayloadError for a corrupt file or one saved by
  // another number of ranks, another codec or another model (nothing changed), or an
  // exchange state that does not fit (the optimizer must then not be used). Strategies
  // "ps" and "gossip": ConfigError (servers checkpoint themselves; gossip does not).
  void save_checkpoint(const std::string& path, const std::string& user_state = "");
  std::optional<std::string> load_checkpoint(const std::string& path);

  // Parameter-server jobs only (nullopt otherwise). Count the samples of the coming step
  // and their summed loss before step(); job_progress() is the servers' count after it.
  void count_samples(size_t samples, double loss_sum);
  std::optional<JobProgress> job_progress() const;
  // Tells the servers this worker is done. Worker 0 waits for every worker, then holds the
  // servers' final model and gets the job's summary; other workers return at once. A
  // DistributedOptimizer destroyed without finish() says goodbye without waiting.
  // Gossip: ends the exchanges and makes every worker's model the average of all the
  // workers' models, through rank 0 (no collective; a lost worker is left out). Throws on a
  // worker that rank 0 does not answer within the peer timeout.
  // DiLoCo: lands the exchange in flight and averages what every rank did since the last
  // synchronization (collective), so every rank holds the same model; nullopt.
  std::optional<JobSummary> finish();
  // DiLoCo only (nullopt otherwise): this worker's outer loop so far. Not collective.
  std::optional<DiLoCoSummary> diloco_summary() const;
  // Runs `use` with the model the ranks agree on in the model's parameters, then puts this
  // rank's own back (also when `use` throws): what a program evaluates and keeps. DiLoCo:
  // every part of the model as it was last synchronized (theta_g, the same on every rank;
  // between synchronizations each rank's own model differs from it, and it is what the
  // papers evaluate); after finish() it is the model itself. Buffers (BatchNorm's
  // statistics) stay this rank's own. The other strategies: `use` runs on the model as it
  // is. Not collective; between steps.
  void with_synchronized_model(const std::function<void()>& use);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradwire
