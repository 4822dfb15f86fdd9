// Data parallelism over allreduce, with buckets (fusion buffers) and pluggable codecs.
//
// Tensors are packed into buckets in reverse registration order (the order backward
// produces gradients, as in PyTorch DDP), each at most bucket_bytes of fp32 gradient
// (a tensor larger than that gets a bucket of its own). Per bucket:
//  * additive codecs (none, fp16): every tensor is written to the bucket's wire buffer
//    pre-scaled by 1/world, one allreduce sums it, and the sum is the average;
//  * int8 (shared-scale codecs): the ranks agree on every block's scale with an
//    allreduce-max, quantize to levels whose sum over the ranks fits int8, and one int8
//    allreduce sums them (compress::SharedScaleFace);
//  * fp16, bf16, int8 and int4 may instead take the reduce-scatter of
//    strategy/codec_reduce_scatter.h (each rank's range of the bucket decoded and summed
//    in fp32 by its owner, the mean encoded once more and allgathered): every level of the
//    codec at any world size, and 2(W-1)/W payloads per rank where bf16's and int4's
//    allgather puts W-1 on the wire. Per bucket, by `quantized_path` (the rule:
//    allreduce_reduce_scatter.cc);
//  * other codecs: every tensor is encoded (with error feedback when the codec has it),
//    the bucket's payloads are allgathered as one message, and every rank decodes all
//    ranks' payloads in rank order, sums and divides by world. Decoding its own payload
//    too (instead of using its raw gradient) keeps all ranks bitwise equal.
//    Buckets of sparse codecs (compress::sends_sparse) may instead take the split or dense
//    path of sparse_exchange.h, whose traffic does not grow with the world: with
//    sparse_aggregation "auto", each step takes the path the cost model
//    (comm/cost_model.h, over `link`) predicts cheapest for the previous step's totals
//    (the first step: allgather); every rank has the same totals, so all take the same.
// Tensors whose codec has a low-rank face (PowerSGD) go in low-rank groups instead, in the
// same reverse registration order: the first closes once it holds half of their elements,
// the others hold at most bucket_bytes of fp32 gradient. Two allreduces per group and step,
// every tensor's P, then every tensor's Q (in its dense start: one fp32 allreduce).
//
// Overlap: with `overlap`, a bucket or group is exchanged as soon as backward has produced
// all its gradients (gradient_ready), on the InOrderExecutor's thread, in one order on every
// rank (buckets and groups by the position of their last tensor in reverse registration
// order, the order backward finishes them); synchronize() reports the gradients no hook
// reported and waits for the exchange. Without it synchronize() reports them all: the same
// work in the same order, so both paths give bitwise-identical results. The first bucket
// (the last layers, finished first) is kept small so that the tail of backward overlaps.
//
// Measured layout: that first layout is a guess. With overlap on, after `layout_after`
// steps the next `layout_steps` are timed (how long before backward's end each gradient
// was final; how long the buckets' exchanges took against what the cost model predicts),
// the ranks agree on the measurements (the latest readiness and the shortest exchange of
// any rank, one allreduce-max), time a message step's latency (three one-float
// allreduces, then the slowest rank's figure agreed), and plan_bucket_layout()
// (bucket_layout.h) proposes the boundaries that hide the most of the exchange under the
// rest of backward. The model cannot see everything (an exchange during backward takes
// cores from it where ranks share a host), so the proposal and the first layout then take
// turns for `layout_pairs` pairs of steps (proposal, first), and the proposal stays only
// if, on the rank where it gains least, the median over the pairs of the difference in
// time from the step's first gradient to the end of synchronize() is at least 1% of the
// first layout's median; else the first layout comes back. Pairs of adjacent steps, so
// that the machine's drift hits a pair's two steps alike and a stalled step (where ranks
// share cores, a step in ten runs 12 ms or more over the median) spoils one pair only. Every
// decision rests on agreed figures: the same layout on every rank. Buckets of sparse or message
// codecs keep the first layout (their paths' statistics are per bucket).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/cost_model.h"
#include "gradwire/strategy/in_order_executor.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy {

class CodecReduceScatter;

struct AllreduceOptions {
  std::string codec = "none";       // a layer policy (compress/policy.h): one spec, per kind, hylo
  size_t bucket_bytes = 25u << 20;  // DDP's default bucket_cap_mb = 25
  size_t first_bucket_bytes = 1u << 20;  // DDP's first bucket (capped by bucket_bytes)
  bool overlap = true;                   // exchange buckets during backward
  // The first layout by DDP's own rule: a tensor joins the open bucket, which closes once
  // it holds at least its cap (the first bucket's, then bucket_bytes), so a tensor larger
  // than the first bucket closes it with the smaller ones before it. Where DDP hands the
  // gradients over (the comm hook), its buckets are built so: ours then never split what
  // arrives at once, which would only add a collective. Off: the rule below.
  bool ddp_bucket_rule = false;
  // Buckets of sparse codecs: "auto", or always "allgather", "split" or "dense".
  std::string sparse_aggregation = "auto";
  // Buckets of fp16, bf16, int8 and int4: "auto" (per bucket, allreduce_reduce_scatter.cc:
  // int8 where its shared scale has too few levels for the world, bf16 and int4 where the
  // cost model over `link` predicts it faster than their allgather, fp16 from 3 ranks on
  // a `link` of 1 Gbit/s or faster), or always
  // "reduce-scatter", or never ("ring": fp16's and int8's allreduce, bf16's and int4's
  // allgather).
  std::string quantized_path = "auto";
  comm::LinkModel link;  // what "auto" predicts with (its default: 1 Gbit/s, 50 us)
  // The measured layout (see above): steps before the measurement, and steps measured
  // (0: keep the first layout; then a layout depends on nothing measured, and a run
  // repeats bit for bit, whereas two measured layouts may sum in different orders).
  size_t layout_after = 1;
  size_t layout_steps = 5;
  // The trial of a proposal: pairs of steps (proposal, first). 20: with 10, 2 of 6 auto
  // runs on 2 hosts undid int8's proposal that every other run kept (its gain, 2-4 ms of
  // a 40 ms step, is about the spread of 10 pairs' median difference).
  size_t layout_pairs = 20;
  // start() checks the ranks' configuration and broadcasts rank 0's parameters (an
  // adaptive strategy's start() does both once for all its plans, and turns it off in
  // theirs). Off, start() issues no collective and leaves the parameters alone: DDP's
  // comm hook (torch/ddp_comm_hook.h) checks the configuration once for all its buckets,
  // and its "parameters" are gradients.
  bool agree_at_start = true;
};

class AllreduceStrategy : public Strategy {
 public:
  AllreduceStrategy(comm::Collectives& collectives, AllreduceOptions options);
  ~AllreduceStrategy() override;

  std::string name() const override { return "allreduce"; }
  void start(std::span<const compress::TensorInfo> tensors, const FloatSpans& params) override;
  // Any thread (autograd's). Throws if tensor `index` was already reported this step.
  void gradient_ready(size_t index, std::span<float> grad) override;
  bool overlaps() const override { return options_.overlap; }
  void synchronize(const FloatSpans& grads) override;
  TrafficStats traffic() const override { return traffic_; }
  // Carried by the step's last slot (which then waits for synchronize(), which its tensors
  // end anyway: they are backward's last): the last bucket when it is additive or int8,
  // else the last low-rank group's P; not on a sparse or message bucket.
  bool carry_status(std::span<float> status) override;
  std::string take_local_failure() override { return std::exchange(local_failure_, {}); }
  void hold_codec_state(size_t index) override;
  void restore_codec_states(std::span<const uint8_t> unused_everywhere) override;
  void save_state(Bytes& out) const override;
  void load_state(ByteReader& in) override;

  // Bucket layout, for tests and diagnostics: tensor indices per bucket.
  std::vector<std::vector<size_t>> bucket_layout() const;
  // The measured layout's inputs and prediction, one line ("" until it is made).
  const std::string& layout_summary() const { return layout_summary_; }
  // "[fc2.bias fc2.weight] [conv2.weight ...]" and layout_summary().
  std::string bucket_layout_summary() const override;
  // Between steps: a proposal is being compared with the first layout, and the next step
  // runs the proposal (the two take turns until judge_layout()).
  bool layout_comparing() const { return layout_trial_; }
  bool next_step_on_proposal() const { return layout_trial_ && trial_on_proposal_; }
  // For the next step only: it is a lead-in of auto's trial (plan_trial.h), which pays the
  // previous plan's leftovers. It runs on the layout of the step after it and is none of
  // the layout's measured steps.
  void mark_next_step_lead_in() { lead_in_ = true; }
  // While comparing: what the calibrated model predicts the proposal saves of the wait
  // after backward (from agreed figures). It predicted more than the check then measured
  // in every run of docs/results/overlap-layout/.
  double layout_predicted_saving_s() const { return layout_predicted_saving_s_; }
  // The path bucket b's last exchange took (allgather for buckets that are not sparse).
  comm::SparsePath last_sparse_path(size_t b) const;
  // Bucket b's path: "allreduce" (additive), "shared-scale allreduce" (int8),
  // "reduce-scatter", or "messages" (an allgather, or a sparse bucket's paths).
  std::string bucket_path(size_t b) const;
  // The exchange time of one step that the cost model predicts over `link` at this world:
  // every bucket's collectives (additive: a ring allreduce of its wire bytes; int8: an
  // allreduce of the block maxima and one of the levels; sparse: the path "auto" would
  // take for the last step's totals, or allgather of the last message) and the low-rank
  // tensors' P and Q allreduces (PowerSGD after its dense start; a Q that rides a bucket
  // counted in the bucket's bytes). nullopt while a
  // message bucket's payload size is unknown (before its first step). Call between steps.
  std::optional<double> predicted_exchange_seconds(const comm::LinkModel& link) const;
  // The same per bucket, in bucket_layout()'s order (the low-rank groups, which are not
  // buckets, are left out).
  std::optional<std::vector<double>> predicted_bucket_seconds(const comm::LinkModel& link) const;

 private:
  struct Bucket;
  // Low-rank tensors exchanged together: P of every tensor in one allreduce, then Q.
  struct LowRankGroup {
    std::vector<size_t> tensors;  // indices into tensors_, in reverse registration order
    size_t p_size = 0, q_size = 0;
    // The fp32 bucket of the next slot, whose allreduce carries this group's Q (one
    // collective fewer), or kNoBucket: Q has an allreduce of its own.
    size_t q_bucket = static_cast<size_t>(-1);
  };
  // What the executor runs, in its order: bucket `index` or low-rank group `index`.
  struct Slot {
    bool low_rank = false;
    size_t index = 0;
  };
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kNoBucket = static_cast<size_t>(-1);  // no bucket, or no slot
  // Makes the buckets: bucket b holds fill_order_[ends[b-1], ends[b]); their buffers, the
  // executor's slots and the carried status. Between steps only.
  void assign_buckets(const std::vector<size_t>& ends);
  // Groups low_rank_ (allreduce_low_rank.cc).
  void group_low_rank();
  // Orders the buckets and low-rank groups into slots_ and indexes them (slot_of_,
  // slot_tensors_); puts the Q of a group followed by an fp32 bucket on that bucket's
  // allreduce.
  void order_slots();
  // The slot released by synchronize() (the carried status's), or kNoBucket.
  size_t carrier_slot() const;
  // The inverse: each bucket's end in fill_order_.
  std::vector<size_t> bucket_ends() const;
  // Puts the carried status (status_) on the step's last collective; false if there is none
  // that can take it.
  bool attach_status();
  // The measured layout (allreduce_layout.cc). True while this step is timed.
  bool layout_measuring() const;
  // After a step's exchange: keeps its timings; after the last measured step, agrees on
  // them (collectives) and proposes the layout they predict best; then alternates the two
  // layouts and keeps the faster (a collective). `backward_end`: when synchronize() was
  // called.
  void measure_layout_step(Clock::time_point backward_end);
  // Lays the buckets out by the agreed measurements; false if the layout stays.
  bool relayout();
  void judge_layout();  // keeps the proposal or goes back to first_ends_ (a collective)
  void end_layout();
  // Seconds of one message step, timed on tiny allreduces and agreed (collectives).
  double measure_alpha();
  // The layout part of load_state (allreduce_checkpoint.cc).
  void load_layout(ByteReader& in);
  // Starts a step: nothing reported yet. Holds step_mutex_.
  void open_step();
  // Marks tensor k's gradient `grad` ready for this step. Holds step_mutex_.
  void report(size_t k, std::span<float> grad);
  // The executor's work: slot s's exchange over step_grads_.
  void run_slot(size_t s);
  void run_bucket(size_t b);
  // The path sparse bucket `bucket` takes next: the forced one, else allgather before its
  // first step, else the cheapest over `link` for its last step's totals.
  comm::SparsePath next_sparse_path(const Bucket& bucket, const comm::LinkModel& link) const;
  // {"bucket":b,...} for the timeline's spans; empty when the timeline is off.
  std::string timeline_args(const Bucket& bucket) const;
  void synchronize_additive(Bucket& bucket, const FloatSpans& grads);
  void synchronize_messages(Bucket& bucket, const FloatSpans& grads);
  // The split and dense paths of a sparse bucket; `payloads` holds this rank's.
  void synchronize_sparse(Bucket& bucket, const FloatSpans& grads, comm::SparsePath path,
                          const std::string& args);
  void synchronize_int8(Bucket& bucket, const FloatSpans& grads);
  // The reduce-scatter path (allreduce_reduce_scatter.cc): whether a bucket of these
  // tensors takes it, and its exchange.
  bool takes_reduce_scatter(const std::vector<size_t>& tensors, size_t elements);
  void synchronize_reduce_scatter(Bucket& bucket, const FloatSpans& grads);
  // The reduce-scatter of the bucket that holds tensor k and k's offset in its vector, or
  // {nullptr, 0} where k's bucket takes another path.
  std::pair<CodecReduceScatter*, size_t> reduce_scatter_of(size_t k) const;
  // A group's exchange up to Q = M^T P; then Q's allreduce and the decode, unless Q rides
  // the next bucket (pending_q_), whose synchronize_additive ends it.
  void synchronize_low_rank(const LowRankGroup& group, bool carrier, const FloatSpans& grads);
  // The decode of the group whose Q sums (averaged in place) lie in `q_sum`.
  void end_low_rank(const LowRankGroup& group, std::span<float> q_sum, const FloatSpans& grads);
  // Adds `bytes` of fp32 gradient to the step's dense figures (as one ring allreduce).
  void count_dense(size_t bytes);
  // The carried status (carry_status) in a bucket's or buffer's tail: written before its
  // collective, the OR over the ranks read back after it (a sum or a max of words that are
  // 0 or positive is nonzero exactly where some rank's word was).
  void put_status(float* tail) const;
  void take_status(const float* tail);
  void put_status(uint8_t* wire_tail, compress::WireType wire) const;
  void take_status(const uint8_t* wire_tail, compress::WireType wire);
  // Runs a codec's encoding of tensor k; on an exception keeps the first one's cause in
  // local_failure_ (the step still issues its collectives, with zeros) and returns false.
  template <typename Encode>
  bool encode_or_fail(size_t k, Encode&& encode);

  comm::Collectives& collectives_;
  AllreduceOptions options_;
  std::optional<comm::SparsePath> sparse_path_;  // forced; unset: "auto"
  std::vector<compress::TensorInfo> tensors_;
  std::vector<std::unique_ptr<compress::Codec>> codecs_;  // one per tensor
  std::vector<size_t> fill_order_;  // the bucketed tensors, in the order buckets take them
  std::vector<Bucket> buckets_;
  std::vector<size_t> low_rank_;  // tensors exchanged by synchronize_low_rank
  std::vector<LowRankGroup> low_rank_groups_;
  std::vector<float> p_buffer_, q_buffer_;  // a group's concatenated P and Q factors
  std::vector<float> dense_buffer_;         // those in their dense start, concatenated
  std::vector<uint8_t> dense_now_;          // per tensor of the group: dense this step
  // This step: the group whose Q waits for its q_bucket's allreduce, and its Q's floats.
  size_t pending_q_group_ = kNoBucket;
  size_t pending_q_ = 0;
  std::vector<Slot> slots_;           // the executor's order
  std::vector<size_t> slot_of_;       // per tensor: its slot
  std::vector<size_t> slot_tensors_;  // per slot: how many tensors it holds
  TrafficStats traffic_;
  bool started_ = false;
  // carry_status(): the caller's words, and the bucket that carries them (kNoBucket: none,
  // or the last low-rank group when status_on_low_rank_); its bytes, left out of traffic_.
  std::span<float> status_;
  size_t status_bucket_ = kNoBucket;
  bool status_on_low_rank_ = false;
  size_t status_bytes_ = 0;
  // This step's local failure (take_local_failure()): written on the executor's thread,
  // read after finish_step().
  std::string local_failure_;
  // hold_codec_state(): per held tensor, its codec's state before the step (in a
  // reduce-scatter bucket: the reduce-scatter's residuals at its elements).
  std::vector<std::pair<size_t, Bytes>> held_states_;

  // The step in progress. Reports (step_grads_, reported_) happen under step_mutex_; the
  // executor reads step_grads_ of a bucket only after all its tensors were reported, and
  // step_dense_ is read only after finish_step().
  std::mutex step_mutex_;
  FloatSpans step_grads_;          // per tensor: the gradient exchanged this step
  std::vector<uint8_t> reported_;  // per tensor: reported this step
  comm::CollectiveTraffic step_start_;
  TrafficStats step_dense_;

  // The measured layout. ready_at_ is written under step_mutex_, step_exchange_s_ on the
  // executor's thread; both are read after finish_step().
  uint64_t layout_seen_ = 0;                        // steps synchronized while it is pending
  bool layout_done_ = false;                        // made (or not to be made)
  bool measuring_ = false;                          // this step is timed
  std::vector<Clock::time_point> ready_at_;         // per tensor: reported, this step
  double step_exchange_s_ = 0;                      // the buckets' exchange, this step
  std::vector<std::vector<double>> ready_samples_;  // per tensor: s before backward's end
  std::vector<double> exchange_samples_;            // per step: the buckets' seconds
  // From the step's first report to synchronize()'s end: what the layout changes of a
  // step, under the first layout and under the proposal (the bucket ends of each).
  Clock::time_point step_opened_;
  std::vector<double> spans_before_, spans_after_;
  std::vector<size_t> first_ends_, proposal_ends_;
  bool layout_trial_ = false;                    // the two layouts are being compared
  bool trial_on_proposal_ = false;               // this step runs the proposal
  bool lead_in_ = false;                         // this step is not measured (auto's lead-in)
  static constexpr double kLayoutMargin = 0.01;  // what it must save to be kept
  static constexpr double kProposalGain = 0.9;   // the predicted wait, at most, to propose
  // What a bucket costs beyond the model's alpha (an executor wake-up, a rendezvous of the
  // ranks, the skew between them): layouts predicted within it of each other go to the
  // one with fewer buckets. 1 ms: on 2 hosts at 100 Mbit the model's 4 int8 buckets for cnn
  // (50 us ties) ran slower than its 2 (docs/results/overlap-layout/, 3 seeds).
  static constexpr double kBucketTie = 1e-3;
  double layout_predicted_saving_s_ = 0;
  std::string layout_summary_;
  std::unique_ptr<InOrderExecutor> executor_;  // last: destroyed (joined) first
};

}  // namespace gradwire::strategy
