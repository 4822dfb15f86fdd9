// AllreduceStrategy's low-rank (PowerSGD) groups, and the executor's order of groups and
// buckets.
#include <algorithm>

#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/allreduce/allreduce_bucket.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::strategy {

void AllreduceStrategy::group_low_rank() {
  // A group's factors are small (r(n+m) floats for n x m): its exchange costs its two
  // collectives' latency and the products M Q and M^T P more than bytes. The first group
  // closes once it holds half of the low-rank elements, so that the larger part of that
  // work (on cnn: fc1, 71% of the parameters) runs under the backward that remains (on
  // cnn: the convolutions); the rest go in groups of at most bucket_bytes of fp32
  // gradient, the last finished with backward.
  size_t total = 0;
  for (size_t k : low_rank_) total += tensors_[k].numel();
  size_t elements = 0;  // in the last group
  size_t p_max = 0, q_max = 0;
  for (size_t k : low_rank_) {
    const size_t n = tensors_[k].numel();
    const bool first_full = low_rank_groups_.size() == 1 && 2 * elements >= total;
    if (low_rank_groups_.empty() || first_full ||
        (elements + n) * sizeof(float) > options_.bucket_bytes) {
      low_rank_groups_.emplace_back();
      elements = 0;
    }
    LowRankGroup& group = low_rank_groups_.back();
    const auto* face = codecs_[k]->low_rank();
    group.tensors.push_back(k);
    group.p_size += face->p_size();
    group.q_size += face->q_size();
    p_max = std::max(p_max, group.p_size);
    q_max = std::max(q_max, group.q_size);
    elements += n;
  }
  p_buffer_.resize(p_max);
  q_buffer_.resize(q_max);
}

void AllreduceStrategy::order_slots() {
  // Backward finishes a bucket or group with its last tensor in reverse registration order
  // (the highest position): slots go by that position, the same on every rank.
  const size_t n = tensors_.size();
  const auto last = [n](const std::vector<size_t>& tensors) {
    size_t position = 0;
    for (size_t k : tensors) position = std::max(position, n - 1 - k);
    return position;
  };
  std::vector<std::pair<size_t, Slot>> order;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    order.push_back({last(buckets_[b].tensors), Slot{false, b}});
  }
  for (size_t g = 0; g < low_rank_groups_.size(); ++g) {
    order.push_back({last(low_rank_groups_[g].tensors), Slot{true, g}});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  slots_.clear();
  slot_of_.assign(n, kNoBucket);
  slot_tensors_.clear();
  for (const auto& [position, slot] : order) {
    const auto& tensors =
        slot.low_rank ? low_rank_groups_[slot.index].tensors : buckets_[slot.index].tensors;
    for (size_t k : tensors) slot_of_[k] = slots_.size();
    slot_tensors_.push_back(tensors.size());
    slots_.push_back(slot);
  }
  // A group's Q goes on the allreduce of the fp32 bucket that runs next, when there is
  // one: the same sums, one collective fewer. (Under DDP's min_compression_rate a model's
  // last layers are mostly small dense tensors: PowerSGD's last group is then followed
  // by the bucket that ends backward, and after backward one collective remains, not
  // three.) The bucket then holds elements, Q, status.
  for (LowRankGroup& group : low_rank_groups_) group.q_bucket = kNoBucket;
  for (Bucket& bucket : buckets_) bucket.q_floats = 0;
  for (size_t s = 0; s + 1 < slots_.size(); ++s) {
    if (!slots_[s].low_rank || slots_[s + 1].low_rank) continue;
    Bucket& bucket = buckets_[slots_[s + 1].index];
    if (bucket.wire != compress::WireType::kFloat32) continue;
    LowRankGroup& group = low_rank_groups_[slots_[s].index];
    group.q_bucket = slots_[s + 1].index;
    bucket.q_floats = group.q_size;
    bucket.wire_buffer.resize((bucket.elements + bucket.q_floats) * sizeof(float));
  }
}

size_t AllreduceStrategy::carrier_slot() const {
  for (size_t s = slots_.size(); s-- > 0;) {
    const Slot& slot = slots_[s];
    if (status_on_low_rank_ ? slot.low_rank && slot.index + 1 == low_rank_groups_.size()
                            : !slot.low_rank && slot.index == status_bucket_) {
      return s;
    }
  }
  return kNoBucket;
}

// PowerSGD: P = M Q for every tensor of the group, one allreduce; orthonormalise,
// Q = M^T P, one allreduce; the averaged factors give every rank the same P Q^T. Tensors
// in their codec's dense start go in one fp32 allreduce-mean of their own instead. The
// carrier takes the status on its P allreduce, or on the dense one when every tensor of
// the group is still in its dense start.
void AllreduceStrategy::synchronize_low_rank(const LowRankGroup& group, bool carrier,
                                             const FloatSpans& grads) {
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  const std::vector<size_t>& members = group.tensors;
  pending_q_group_ = kNoBucket;
  pending_q_ = 0;
  // Decided once for the step: counting a dense step may end the dense start.
  dense_now_.resize(members.size());
  dense_buffer_.clear();
  size_t p_needed = 0;
  for (size_t j = 0; j < members.size(); ++j) {
    const size_t k = members[j];
    dense_now_[j] = codecs_[k]->low_rank()->dense_now() ? 1 : 0;
    if (dense_now_[j]) {
      dense_buffer_.insert(dense_buffer_.end(), grads[k].begin(), grads[k].end());
    } else {
      p_needed += codecs_[k]->low_rank()->p_size();
    }
  }
  const bool status_on_dense = carrier && p_needed == 0;
  const size_t dense_size = dense_buffer_.size();
  if (status_on_dense) dense_buffer_.resize(dense_size + status_.size());
  if (status_on_dense) put_status(dense_buffer_.data() + dense_size);
  if (!dense_buffer_.empty()) {
    TimelineSpan span("communicate", "communicate");
    span.set_args("{\"low_rank\":\"dense\"}");
    collectives_.allreduce_sum(dense_buffer_.data(), dense_buffer_.size(),
                               comm::DataType::kFloat32);
    if (status_on_dense) take_status(dense_buffer_.data() + dense_size);
    size_t offset = 0;
    for (size_t j = 0; j < members.size(); ++j) {
      if (!dense_now_[j]) continue;
      const size_t k = members[j];
      for (float& v : grads[k]) v = dense_buffer_[offset++] * scale;
      codecs_[k]->low_rank()->count_dense_step();
      count_dense(grads[k].size_bytes());
    }
  }
  size_t p_used = 0;
  {
    TimelineSpan span("encode", "compute");  // P = M Q
    for (size_t j = 0; j < members.size(); ++j) {
      if (dense_now_[j]) continue;
      auto* face = codecs_[members[j]]->low_rank();
      face->begin(grads[members[j]], std::span<float>(p_buffer_).subspan(p_used, face->p_size()));
      p_used += face->p_size();
    }
  }
  if (p_used == 0) return;  // every tensor of the group is still in its dense start
  const size_t carried = carrier ? status_.size() : 0;
  if (carried) put_status(p_buffer_.data() + p_used);
  {
    TimelineSpan span("communicate", "communicate");
    if (span.on())
      span.set_args("{\"low_rank\":\"P\",\"floats\":" + std::to_string(p_used + carried) + "}");
    collectives_.allreduce_sum(p_buffer_.data(), p_used + carried, comm::DataType::kFloat32);
  }
  if (carried) take_status(p_buffer_.data() + p_used);
  for (size_t i = 0; i < p_used; ++i) p_buffer_[i] *= scale;
  size_t p_offset = 0, q_used = 0;
  {
    TimelineSpan span("encode", "compute");  // orthonormal P, Q = M^T P
    for (size_t j = 0; j < members.size(); ++j) {
      if (dense_now_[j]) continue;
      auto* face = codecs_[members[j]]->low_rank();
      face->middle(std::span<const float>(p_buffer_).subspan(p_offset, face->p_size()),
                   std::span<float>(q_buffer_).subspan(q_used, face->q_size()));
      p_offset += face->p_size();
      q_used += face->q_size();
    }
  }
  if (group.q_bucket != kNoBucket) {
    pending_q_group_ = static_cast<size_t>(&group - low_rank_groups_.data());
    pending_q_ = q_used;
    return;
  }
  {
    TimelineSpan span("communicate", "communicate");
    if (span.on()) span.set_args("{\"low_rank\":\"Q\",\"floats\":" + std::to_string(q_used) + "}");
    collectives_.allreduce_sum(q_buffer_.data(), q_used, comm::DataType::kFloat32);
  }
  end_low_rank(group, std::span<float>(q_buffer_).first(q_used), grads);
}

void AllreduceStrategy::end_low_rank(const LowRankGroup& group, std::span<float> q_sum,
                                     const FloatSpans& grads) {
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  for (float& v : q_sum) v *= scale;
  const std::vector<size_t>& members = group.tensors;
  TimelineSpan span("decode", "compute");  // M = P Q^T
  size_t q_offset = 0;
  for (size_t j = 0; j < members.size(); ++j) {
    if (dense_now_[j]) continue;
    const size_t k = members[j];
    auto* face = codecs_[k]->low_rank();
    face->end(q_sum.subspan(q_offset, face->q_size()), grads[k]);
    q_offset += face->q_size();
    count_dense(grads[k].size_bytes());
  }
}

}  // namespace gradwire::strategy
