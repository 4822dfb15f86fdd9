#include "gradwire/strategy/allreduce/allreduce_strategy.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/core/half.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/agreement.h"
#include "gradwire/strategy/allreduce/allreduce_bucket.h"
#include "gradwire/strategy/allreduce/sparse_exchange.h"

namespace gradwire::strategy {

AllreduceStrategy::AllreduceStrategy(comm::Collectives& collectives, AllreduceOptions options)
    : collectives_(collectives), options_(std::move(options)) {
  if (options_.bucket_bytes == 0) throw ConfigError("bucket size must be positive");
  const std::string& path = options_.sparse_aggregation;
  if (path == "allgather") {
    sparse_path_ = comm::SparsePath::kAllgather;
  } else if (path == "split") {
    sparse_path_ = comm::SparsePath::kSplit;
  } else if (path == "dense") {
    sparse_path_ = comm::SparsePath::kDense;
  } else if (path != "auto") {
    throw ConfigError("unknown sparse aggregation '" + path +
                      "'; it is one of auto, allgather, split, dense");
  }
  const std::string& quantized = options_.quantized_path;
  if (quantized != "auto" && quantized != "ring" && quantized != "reduce-scatter") {
    throw ConfigError("unknown quantized path '" + quantized +
                      "'; it is one of auto, ring, reduce-scatter");
  }
}

AllreduceStrategy::~AllreduceStrategy() = default;

void AllreduceStrategy::start(std::span<const compress::TensorInfo> tensors,
                              const FloatSpans& params) {
  if (started_) throw Error("AllreduceStrategy::start called twice");
  if (tensors.size() != params.size()) {
    throw Error("start: " + std::to_string(tensors.size()) + " tensor descriptions for " +
                std::to_string(params.size()) + " parameters");
  }
  const auto policy = compress::CodecPolicy::parse(options_.codec);
  if (options_.agree_at_start) {
    auto lines = configuration_lines(name(), policy, tensors);
    lines.push_back("sparse aggregation " + options_.sparse_aggregation);
    lines.push_back("quantized path " + options_.quantized_path);
    check_same_configuration(collectives_, lines);
    broadcast_from_rank0(collectives_, params);
  }
  policy.check_tensors(tensors);  // the same model everywhere: every rank throws alike

  tensors_.assign(tensors.begin(), tensors.end());
  for (const auto& t : tensors_) codecs_.push_back(policy.create(t));

  // Reverse registration order approximates the order backward finishes gradients. A
  // tensor of at least the first bucket's size closes its bucket: its own bytes amortize a
  // collective's latency, and the smaller tensors backward finishes after it would only
  // hold its exchange back (DDP lets them join up to the cap). With ddp_bucket_rule,
  // DDP's own rule instead (the option says why). The measured layout may later move the
  // boundaries, never the order.
  const size_t big = std::min(options_.first_bucket_bytes, options_.bucket_bytes);
  std::vector<size_t> ends;  // of the buckets so far, in fill_order_
  bool closed = false;       // the last bucket takes no more tensors
  size_t elements = 0;       // in the last bucket
  for (size_t k = tensors_.size(); k-- > 0;) {
    if (codecs_[k]->low_rank() != nullptr) {
      low_rank_.push_back(k);
      continue;
    }
    const size_t n = tensors_[k].numel();
    const size_t cap = ends.empty() ? big : options_.bucket_bytes;
    const bool same_kind = !fill_order_.empty() &&
                           bucket_kind(*codecs_[k]) == bucket_kind(*codecs_[fill_order_.back()]);
    const bool fits = !fill_order_.empty() && !closed && same_kind &&
                      (options_.ddp_bucket_rule || (elements + n) * sizeof(float) <= cap);
    if (!fits) {
      if (!fill_order_.empty()) ends.push_back(fill_order_.size());
      elements = 0;
    }
    fill_order_.push_back(k);
    elements += n;
    closed = options_.ddp_bucket_rule
                 ? elements * sizeof(float) >= (ends.empty() ? big : options_.bucket_bytes)
                 : n * sizeof(float) >= big;
  }
  if (!fill_order_.empty()) ends.push_back(fill_order_.size());
  if (!ends.empty() && compress::shared_scale_levels(collectives_.size()) == 0 &&
      options_.quantized_path == "ring") {
    for (size_t k : fill_order_) {
      if (codecs_[k]->shared_scale()) {
        throw ConfigError(
            "the int8 codec's ring path sums the ranks' values in int8, which overflows "
            "beyond 127 ranks; this job has " +
            std::to_string(collectives_.size()) + ": use quantized path auto or reduce-scatter");
      }
    }
  }
  group_low_rank();
  ready_at_.assign(tensors_.size(), Clock::time_point());
  ready_samples_.assign(tensors_.size(), {});
  assign_buckets(ends);
  // The measured layout: with overlap, over buckets that are all additive or int8.
  layout_done_ = options_.layout_steps == 0 || !options_.overlap || collectives_.size() == 1 ||
                 buckets_.empty() ||
                 std::any_of(buckets_.begin(), buckets_.end(),
                             [](const Bucket& b) { return !b.wire && !b.int8; });
  executor_ = std::make_unique<InOrderExecutor>(collectives_, [this](size_t s) { run_slot(s); });
  started_ = true;
}

void AllreduceStrategy::assign_buckets(const std::vector<size_t>& ends) {
  buckets_.clear();
  buckets_.resize(ends.size());
  size_t first = 0;
  for (size_t b = 0; b < ends.size(); ++b) {
    Bucket& bucket = buckets_[b];
    compress::Codec& codec = *codecs_[fill_order_[first]];
    bucket.wire = codec.additive_wire();
    bucket.int8 = codec.shared_scale() != nullptr;
    bucket.sparse_codecs = !bucket.wire && !bucket.int8 && compress::sends_sparse(codec.id());
    for (size_t i = first; i < ends[b]; ++i) {
      const size_t k = fill_order_[i];
      bucket.tensors.push_back(k);
      bucket.offsets.push_back(bucket.elements);
      bucket.elements += tensors_[k].numel();
    }
    if (takes_reduce_scatter(bucket.tensors, bucket.elements)) {
      bucket.wire.reset();
      bucket.int8 = false;
      bucket.sparse_codecs = false;
      bucket.reduce_scatter = std::make_unique<CodecReduceScatter>(
          collectives_, codec.spec(), "bucket " + std::to_string(b), bucket.elements);
    }
    if (bucket.int8) {
      for (size_t k : bucket.tensors) {
        bucket.block_offsets.push_back(bucket.maxima.size());
        bucket.maxima.resize(bucket.maxima.size() + codecs_[k]->shared_scale()->blocks());
      }
    }
    if (bucket.reduce_scatter) {
      bucket.flat.resize(bucket.elements);
    } else if (bucket.wire) {
      bucket.wire_buffer.resize(bucket.elements * compress::wire_type_size(*bucket.wire));
    } else if (bucket.int8) {
      bucket.wire_buffer.resize(bucket.elements);
    } else if (bucket.sparse_codecs) {
      bucket.sparse = std::make_unique<SparseExchange>(bucket.elements);
    }
    first = ends[b];
  }
  order_slots();
  if (!status_.empty() && !status_on_low_rank_) {
    status_bucket_ = kNoBucket;
    if (!attach_status()) throw Error("the new bucket layout cannot carry the status");
  }
}

void AllreduceStrategy::count_dense(size_t bytes) {
  step_dense_.bytes_dense += bytes;
  step_dense_.bytes_dense_on_wire += comm::ring_allreduce_wire_bytes(bytes, collectives_.size());
}

bool AllreduceStrategy::carry_status(std::span<float> status) {
  if (!started_) throw Error("AllreduceStrategy::carry_status called before start");
  if (status.empty()) return false;
  if (!status_.empty()) return status_.data() == status.data() && status_.size() == status.size();
  status_ = status;
  if (attach_status()) return true;
  status_ = {};
  return false;
}

bool AllreduceStrategy::attach_status() {
  // The step's last slot carries them: it waits for synchronize() anyway, and no slot
  // after it waits for the status. A bucket that cannot (sparse messages) leaves them to
  // the last group.
  const bool last_is_bucket =
      !slots_.empty() && !slots_.back().low_rank && (buckets_.back().wire || buckets_.back().int8);
  if (!low_rank_groups_.empty() && !last_is_bucket) {
    // The last group's P (or dense) allreduce takes them.
    p_buffer_.resize(p_buffer_.size() + status_.size());
    status_on_low_rank_ = true;
    status_bytes_ = status_.size() * sizeof(float);
  } else if (!buckets_.empty() && buckets_.back().wire) {
    Bucket& last = buckets_.back();
    const size_t element_size = compress::wire_type_size(*last.wire);
    last.wire_buffer.resize((last.elements + last.q_floats + status_.size()) * element_size);
    status_bucket_ = buckets_.size() - 1;
    status_bytes_ = status_.size() * element_size;
  } else if (!buckets_.empty() && buckets_.back().int8) {
    buckets_.back().maxima.resize(buckets_.back().maxima.size() + status_.size());
    status_bucket_ = buckets_.size() - 1;
    status_bytes_ = status_.size() * sizeof(float);
  } else {
    return false;
  }
  return true;
}

void AllreduceStrategy::put_status(float* tail) const {
  for (size_t i = 0; i < status_.size(); ++i) tail[i] = status_[i] != 0.0f ? 1.0f : 0.0f;
  if (!local_failure_.empty()) tail[0] = 1.0f;  // the failure word (carry_status)
}

void AllreduceStrategy::take_status(const float* tail) {
  for (size_t i = 0; i < status_.size(); ++i) status_[i] = tail[i] > 0.0f ? 1.0f : 0.0f;
}

void AllreduceStrategy::put_status(uint8_t* wire_tail, compress::WireType wire) const {
  if (wire == compress::WireType::kFloat32) {
    put_status(reinterpret_cast<float*>(wire_tail));
    return;
  }
  const uint16_t one = float_to_half(1.0f);
  for (size_t i = 0; i < status_.size(); ++i) {
    const bool set = status_[i] != 0.0f || (i == 0 && !local_failure_.empty());
    const uint16_t word = set ? one : 0;
    std::memcpy(wire_tail + i * sizeof word, &word, sizeof word);
  }
}

void AllreduceStrategy::take_status(const uint8_t* wire_tail, compress::WireType wire) {
  if (wire == compress::WireType::kFloat32) {
    take_status(reinterpret_cast<const float*>(wire_tail));
    return;
  }
  // A sum of halves that are 0 or 1 is +0 (all bits clear) exactly when every one was 0.
  for (size_t i = 0; i < status_.size(); ++i) {
    uint16_t word;
    std::memcpy(&word, wire_tail + i * sizeof word, sizeof word);
    status_[i] = word != 0 ? 1.0f : 0.0f;
  }
}

void AllreduceStrategy::hold_codec_state(size_t index) {
  if (index >= codecs_.size()) throw Error("hold_codec_state: no tensor " + std::to_string(index));
  Bytes state;
  if (const auto [rs, offset] = reduce_scatter_of(index); rs != nullptr) {
    const auto residual = rs->residual(offset, tensors_[index].numel());
    ByteWriter(state).put_array<float>(residual);
  } else {
    codecs_[index]->save_state(state);
  }
  held_states_.emplace_back(index, std::move(state));
}

void AllreduceStrategy::restore_codec_states(std::span<const uint8_t> unused_everywhere) {
  for (auto& [k, state] : held_states_) {
    if (k >= unused_everywhere.size() || !unused_everywhere[k]) continue;
    if (const auto [rs, offset] = reduce_scatter_of(k); rs != nullptr) {
      std::vector<float> residual(state.size() / sizeof(float));
      std::memcpy(residual.data(), state.data(), residual.size() * sizeof(float));
      rs->restore_residual(offset, residual);
      continue;
    }
    ByteReader reader(state);
    codecs_[k]->load_state(reader);
  }
  held_states_.clear();
}

void AllreduceStrategy::open_step() {
  local_failure_.clear();  // the executor is idle between steps
  step_grads_.assign(tensors_.size(), std::span<float>());
  reported_.assign(tensors_.size(), 0);
  step_start_ = collectives_.traffic();  // the executor is idle between steps
  step_dense_ = TrafficStats{};
  measuring_ = layout_measuring();
  step_exchange_s_ = 0;
  if (measuring_) step_opened_ = Clock::now();
  std::vector<size_t> counts = slot_tensors_;
  const size_t carrier = carrier_slot();
  if (carrier != kNoBucket) ++counts[carrier];  // released by synchronize()
  executor_->begin_step(std::move(counts));
}

void AllreduceStrategy::report(size_t k, std::span<float> grad) {
  if (grad.size() != tensors_[k].numel()) {
    throw Error("gradient of '" + tensors_[k].name + "' has " + std::to_string(grad.size()) +
                " elements, the parameter " + std::to_string(tensors_[k].numel()));
  }
  step_grads_[k] = grad;
  reported_[k] = 1;
  if (measuring_) ready_at_[k] = Clock::now();
  executor_->tensor_ready(slot_of_[k]);
}

void AllreduceStrategy::gradient_ready(size_t index, std::span<float> grad) {
  if (!options_.overlap || !started_ || index >= tensors_.size()) return;
  std::lock_guard<std::mutex> lock(step_mutex_);
  if (!executor_->in_step()) open_step();
  if (reported_[index]) {
    throw Error("the gradient of '" + tensors_[index].name +
                "' was produced twice before the step that exchanges it; buckets are "
                "exchanged as backward finishes them, so accumulating several backward "
                "passes per step needs overlap off (DistributedOptions::overlap = false)");
  }
  report(index, grad);
}

std::string AllreduceStrategy::timeline_args(const Bucket& bucket) const {
  if (!Timeline::global().enabled()) return {};
  return "{\"bucket\":" + std::to_string(&bucket - buckets_.data()) +
         ",\"tensors\":" + std::to_string(bucket.tensors.size()) +
         ",\"fp32_bytes\":" + std::to_string(bucket.elements * sizeof(float)) + "}";
}

void AllreduceStrategy::run_slot(size_t s) {
  const Slot slot = slots_[s];
  if (!slot.low_rank) {
    run_bucket(slot.index);
    return;
  }
  // Category "exchange": the group's own spans (communicate, encode, decode) lie inside.
  TimelineSpan span("low-rank exchange", "exchange");
  synchronize_low_rank(low_rank_groups_[slot.index], s == carrier_slot(), step_grads_);
}

void AllreduceStrategy::run_bucket(size_t b) {
  const Clock::time_point begin = measuring_ ? Clock::now() : Clock::time_point();
  Bucket& bucket = buckets_[b];
  if (bucket.reduce_scatter) {
    synchronize_reduce_scatter(bucket, step_grads_);
  } else if (bucket.wire) {
    synchronize_additive(bucket, step_grads_);
  } else if (bucket.int8) {
    synchronize_int8(bucket, step_grads_);
  } else {
    synchronize_messages(bucket, step_grads_);
  }
  count_dense(bucket.elements * sizeof(float));
  if (measuring_) step_exchange_s_ += std::chrono::duration<double>(Clock::now() - begin).count();
}

comm::SparsePath AllreduceStrategy::next_sparse_path(const Bucket& bucket,
                                                     const comm::LinkModel& link) const {
  // Every rank has the same totals, so every rank takes the same path.
  if (sparse_path_) return *sparse_path_;
  const SparseStepTotals& totals = bucket.sparse->totals();
  if (!totals.known) return comm::SparsePath::kAllgather;
  const int world = collectives_.size();
  return comm::cheapest_sparse_path(link, totals.load(bucket.elements, world), world);
}

comm::SparsePath AllreduceStrategy::last_sparse_path(size_t b) const {
  if (b >= buckets_.size()) throw Error("no bucket " + std::to_string(b));
  return buckets_[b].last_path;
}

std::string AllreduceStrategy::bucket_path(size_t b) const {
  if (b >= buckets_.size()) throw Error("no bucket " + std::to_string(b));
  const Bucket& bucket = buckets_[b];
  if (bucket.reduce_scatter) return "reduce-scatter";
  if (bucket.wire) return "allreduce";
  return bucket.int8 ? "shared-scale allreduce" : "messages";
}

std::optional<std::vector<double>> AllreduceStrategy::predicted_bucket_seconds(
    const comm::LinkModel& link) const {
  if (!started_) throw Error("AllreduceStrategy::predicted_bucket_seconds called before start");
  const int world = collectives_.size();
  const auto ring = [&](size_t bytes) {
    return comm::ring_allreduce_seconds(link, static_cast<double>(bytes), world);
  };
  std::vector<double> seconds;
  for (const Bucket& bucket : buckets_) {
    if (bucket.reduce_scatter) {
      seconds.push_back(bucket.reduce_scatter->predicted_seconds(link));
    } else if (bucket.wire) {
      seconds.push_back(ring(bucket.wire_buffer.size()));
    } else if (bucket.int8) {
      seconds.push_back(ring(bucket.maxima.size() * sizeof(float)) +
                        ring(bucket.wire_buffer.size()));
    } else if (bucket.sparse && bucket.sparse->totals().known) {
      seconds.push_back(
          comm::sparse_path_seconds(link, next_sparse_path(bucket, link),
                                    bucket.sparse->totals().load(bucket.elements, world), world));
    } else if (!bucket.message.empty()) {
      seconds.push_back(
          comm::allgather_seconds(link, static_cast<double>(bucket.message.size()), world));
    } else {
      return std::nullopt;
    }
  }
  return seconds;
}

std::optional<double> AllreduceStrategy::predicted_exchange_seconds(
    const comm::LinkModel& link) const {
  if (!started_) throw Error("AllreduceStrategy::predicted_exchange_seconds called before start");
  const auto buckets = predicted_bucket_seconds(link);
  if (!buckets) return std::nullopt;
  double total = 0;
  for (double s : *buckets) total += s;
  const int world = collectives_.size();
  for (const LowRankGroup& group : low_rank_groups_) {
    total += comm::ring_allreduce_seconds(link, static_cast<double>(group.p_size * sizeof(float)),
                                          world);
    // A Q that rides a bucket is in that bucket's bytes.
    if (group.q_bucket == kNoBucket) {
      total += comm::ring_allreduce_seconds(link, static_cast<double>(group.q_size * sizeof(float)),
                                            world);
    }
  }
  return total;
}

std::vector<std::vector<size_t>> AllreduceStrategy::bucket_layout() const {
  std::vector<std::vector<size_t>> layout;
  for (const Bucket& bucket : buckets_) layout.push_back(bucket.tensors);
  return layout;
}

void AllreduceStrategy::synchronize(const FloatSpans& grads) {
  if (!started_) throw Error("AllreduceStrategy::synchronize called before start");
  if (grads.size() != tensors_.size()) {
    throw Error("synchronize: expected " + std::to_string(tensors_.size()) + " gradients, got " +
                std::to_string(grads.size()));
  }
  const Clock::time_point backward_end = Clock::now();
  {
    // What backward did not report (overlap off, a parameter without a gradient, a
    // gradient no hook could see) is reported now; the slots run in order as before.
    std::lock_guard<std::mutex> lock(step_mutex_);
    if (!executor_->in_step()) open_step();
    for (size_t k = 0; k < tensors_.size(); ++k) {
      if (!reported_[k]) report(k, grads[k]);
    }
    // The carrier goes now, with the status the caller has just set.
    const size_t carrier = carrier_slot();
    if (carrier != kNoBucket) executor_->tensor_ready(carrier);
  }
  {
    TimelineSpan wait("wait for the exchange", "wait");
    executor_->finish_step();  // rethrows what stopped a bucket
  }
  // The carried status is the caller's bookkeeping, not gradient traffic: left out (on
  // the wire as if it were an allreduce of its own; it adds under 0.01% to a bucket's).
  const comm::CollectiveTraffic& after = collectives_.traffic();
  traffic_.bytes_contributed += after.contributed - step_start_.contributed - status_bytes_;
  traffic_.bytes_on_wire += after.on_wire - step_start_.on_wire -
                            comm::ring_allreduce_wire_bytes(status_bytes_, collectives_.size());
  traffic_.bytes_dense += step_dense_.bytes_dense;
  traffic_.bytes_dense_on_wire += step_dense_.bytes_dense_on_wire;
  ++traffic_.steps;
  if (!std::exchange(lead_in_, false) && !layout_done_) measure_layout_step(backward_end);
}

void AllreduceStrategy::synchronize_additive(Bucket& bucket, const FloatSpans& grads) {
  const size_t element_size = compress::wire_type_size(*bucket.wire);
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  const std::string args = timeline_args(bucket);
  {
    TimelineSpan span("encode", "compute");
    span.set_args(args);
    for (size_t j = 0; j < bucket.tensors.size(); ++j) {
      const size_t k = bucket.tensors[j];
      codecs_[k]->to_wire(grads[k], scale,
                          bucket.wire_buffer.data() + bucket.offsets[j] * element_size);
    }
  }
  const size_t b = static_cast<size_t>(&bucket - buckets_.data());
  // The Q of the group before this bucket (order_slots), if it waits: fp32 after elements.
  const bool q_rides =
      pending_q_group_ != kNoBucket && low_rank_groups_[pending_q_group_].q_bucket == b;
  const size_t q_floats = q_rides ? pending_q_ : 0;
  float* q_tail = reinterpret_cast<float*>(bucket.wire_buffer.data()) + bucket.elements;
  if (q_floats) std::copy_n(q_buffer_.data(), q_floats, q_tail);
  const bool carrier = status_bucket_ == b;
  uint8_t* status_tail = bucket.wire_buffer.data() + (bucket.elements + q_floats) * element_size;
  if (carrier) put_status(status_tail, *bucket.wire);
  {
    TimelineSpan span("communicate", "communicate");
    if (span.on() && q_rides) {
      span.set_args(args.substr(0, args.size() - 1) +
                    ",\"low_rank\":\"Q\",\"floats\":" + std::to_string(q_floats) + "}");
    } else {
      span.set_args(args);
    }
    collectives_.allreduce_sum(
        bucket.wire_buffer.data(), bucket.elements + q_floats + (carrier ? status_.size() : 0),
        *bucket.wire == compress::WireType::kFloat16 ? comm::DataType::kFloat16
                                                     : comm::DataType::kFloat32);
  }
  if (carrier) take_status(status_tail, *bucket.wire);
  if (q_rides) {
    const LowRankGroup& group = low_rank_groups_[pending_q_group_];
    pending_q_group_ = kNoBucket;
    end_low_rank(group, std::span<float>(q_tail, q_floats), grads);
  }
  TimelineSpan span("decode", "compute");
  span.set_args(args);
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const size_t k = bucket.tensors[j];
    codecs_[k]->from_wire(bucket.wire_buffer.data() + bucket.offsets[j] * element_size, grads[k]);
  }
}

// The shared-scale protocol of compress::SharedScaleFace: every rank's block maxima, an
// allreduce-max, int8 quantization with the agreed scales, an int8 allreduce-sum.
void AllreduceStrategy::synchronize_int8(Bucket& bucket, const FloatSpans& grads) {
  const int world = collectives_.size();
  const int levels = compress::shared_scale_levels(world);
  const std::string args = timeline_args(bucket);
  auto* wire = reinterpret_cast<int8_t*>(bucket.wire_buffer.data());
  const auto maxima_of = [&](size_t j) {
    auto* face = codecs_[bucket.tensors[j]]->shared_scale();
    return std::span<float>(bucket.maxima).subspan(bucket.block_offsets[j], face->blocks());
  };
  // A tensor the codec refuses (non-finite values) sends zero maxima and zero levels: the
  // step's collectives go on, and its status says it failed.
  std::vector<uint8_t>& refused = bucket.refused;
  refused.assign(bucket.tensors.size(), 0);
  {
    TimelineSpan span("encode", "compute");
    span.set_args(args);
    for (size_t j = 0; j < bucket.tensors.size(); ++j) {
      const size_t k = bucket.tensors[j];
      if (!encode_or_fail(
              k, [&] { codecs_[k]->shared_scale()->local_maxima(grads[k], maxima_of(j)); })) {
        refused[j] = 1;
        std::fill(maxima_of(j).begin(), maxima_of(j).end(), 0.0f);
      }
    }
  }
  const bool carrier = status_bucket_ == static_cast<size_t>(&bucket - buckets_.data());
  float* status_tail = bucket.maxima.data() + (bucket.maxima.size() - status_.size());
  if (carrier) put_status(status_tail);
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    collectives_.allreduce_max(bucket.maxima.data(), bucket.maxima.size());
  }
  if (carrier) take_status(status_tail);
  {
    TimelineSpan span("encode", "compute");
    span.set_args(args);
    for (size_t j = 0; j < bucket.tensors.size(); ++j) {
      const size_t k = bucket.tensors[j];
      if (refused[j]) {
        std::fill_n(wire + bucket.offsets[j], tensors_[k].numel(), int8_t{0});
        continue;
      }
      codecs_[k]->shared_scale()->quantize(grads[k], maxima_of(j), levels,
                                           wire + bucket.offsets[j]);
    }
  }
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    collectives_.allreduce_sum(wire, bucket.elements, comm::DataType::kInt8);
  }
  TimelineSpan span("decode", "compute");
  span.set_args(args);
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const size_t k = bucket.tensors[j];
    codecs_[k]->shared_scale()->dequantize(wire + bucket.offsets[j], maxima_of(j), levels, world,
                                           grads[k]);
  }
}

}  // namespace gradwire::strategy
