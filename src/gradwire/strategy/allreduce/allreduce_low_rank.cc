// AllreduceStrategy's exchange of the low-rank (PowerSGD) tensors, after the buckets.
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

#include "gradwire/core/error.h"

namespace gradwire::strategy {

// PowerSGD: P = M Q for every tensor, one allreduce; orthonormalise, Q = M^T P, one
// allreduce; the averaged factors give every rank the same P Q^T. Tensors in their codec's
// dense start go in one fp32 allreduce-mean of their own instead.
void AllreduceStrategy::synchronize_low_rank(const FloatSpans& grads) {
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  // Decided once for the step: counting a dense step may end the dense start.
  dense_now_.resize(low_rank_.size());
  dense_buffer_.clear();
  size_t p_needed = 0;
  for (size_t j = 0; j < low_rank_.size(); ++j) {
    const size_t k = low_rank_[j];
    dense_now_[j] = codecs_[k]->low_rank()->dense_now() ? 1 : 0;
    if (dense_now_[j]) {
      dense_buffer_.insert(dense_buffer_.end(), grads[k].begin(), grads[k].end());
    } else {
      p_needed += codecs_[k]->low_rank()->p_size();
    }
  }
  // A carried status goes with the P allreduce, or with the dense one when every tensor is
  // still in its dense start.
  const bool status_on_dense = status_on_low_rank_ && p_needed == 0;
  const size_t dense_size = dense_buffer_.size();
  if (status_on_dense) dense_buffer_.resize(dense_size + status_.size());
  if (status_on_dense) put_status(dense_buffer_.data() + dense_size);
  if (!dense_buffer_.empty()) {
    collectives_.allreduce_sum(dense_buffer_.data(), dense_buffer_.size(),
                               comm::DataType::kFloat32);
    if (status_on_dense) take_status(dense_buffer_.data() + dense_size);
    size_t offset = 0;
    for (size_t j = 0; j < low_rank_.size(); ++j) {
      if (!dense_now_[j]) continue;
      const size_t k = low_rank_[j];
      for (float& v : grads[k]) v = dense_buffer_[offset++] * scale;
      codecs_[k]->low_rank()->count_dense_step();
      count_dense(grads[k].size_bytes());
    }
  }
  size_t p_used = 0;
  for (size_t j = 0; j < low_rank_.size(); ++j) {
    if (dense_now_[j]) continue;
    auto* face = codecs_[low_rank_[j]]->low_rank();
    face->begin(grads[low_rank_[j]], std::span<float>(p_buffer_).subspan(p_used, face->p_size()));
    p_used += face->p_size();
  }
  if (p_used == 0) return;  // every low-rank tensor is still in its dense start
  const size_t carried = status_on_low_rank_ ? status_.size() : 0;
  if (carried) put_status(p_buffer_.data() + p_used);
  collectives_.allreduce_sum(p_buffer_.data(), p_used + carried, comm::DataType::kFloat32);
  if (carried) take_status(p_buffer_.data() + p_used);
  for (size_t i = 0; i < p_used; ++i) p_buffer_[i] *= scale;
  size_t p_offset = 0, q_used = 0;
  for (size_t j = 0; j < low_rank_.size(); ++j) {
    if (dense_now_[j]) continue;
    auto* face = codecs_[low_rank_[j]]->low_rank();
    face->middle(std::span<const float>(p_buffer_).subspan(p_offset, face->p_size()),
                 std::span<float>(q_buffer_).subspan(q_used, face->q_size()));
    p_offset += face->p_size();
    q_used += face->q_size();
  }
  collectives_.allreduce_sum(q_buffer_.data(), q_used, comm::DataType::kFloat32);
  for (size_t i = 0; i < q_used; ++i) q_buffer_[i] *= scale;
  size_t q_offset = 0;
  for (size_t j = 0; j < low_rank_.size(); ++j) {
    if (dense_now_[j]) continue;
    const size_t k = low_rank_[j];
    auto* face = codecs_[k]->low_rank();
    face->end(std::span<const float>(q_buffer_).subspan(q_offset, face->q_size()), grads[k]);
    q_offset += face->q_size();
    count_dense(grads[k].size_bytes());
  }
}

}  // namespace gradwire::strategy
