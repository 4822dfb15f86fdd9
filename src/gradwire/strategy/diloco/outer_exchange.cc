#include "gradwire/strategy/diloco/outer_exchange.h"

#include "gradwire/comm/wire_bytes.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"

namespace gradwire::strategy::diloco {
namespace {

// "rank 1, rank 3"
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "rank " : ", rank ") + std::to_string(r);
  return out;
}

}  // namespace

OuterExchange::OuterExchange(comm::Collectives& collectives, const std::string& codec,
                             const std::string& name, size_t numel)
    : collectives_(collectives), numel_(numel) {
  auto whole = compress::create_codec(
      codec, {name, {static_cast<int64_t>(numel)}, compress::LayerKind::kOther});
  if (whole->additive_wire() == compress::WireType::kFloat32) {
    fp32_ = std::move(whole);
    wire_bytes_ = comm::ring_allreduce_wire_bytes(numel * sizeof(float), collectives_.size());
  } else if (whole->id() == compress::CodecId::kSparseLoCo) {
    version_2_layout_ = false;
    payload_bytes_ = codec_payload_size(codec, numel);
    wire_bytes_ = comm::ring_allgather_wire_bytes(sizeof(int64_t), collectives_.size()) +
                  comm::ring_allgather_wire_bytes(payload_bytes_, collectives_.size());
    gathered_ = std::move(whole);
  } else {
    version_2_layout_ = false;
    reduce_scatter_ = std::make_unique<CodecReduceScatter>(collectives_, codec, name, numel);
    wire_bytes_ = reduce_scatter_->wire_bytes();
  }
}

double OuterExchange::predicted_seconds(const comm::LinkModel& link) const {
  if (reduce_scatter_) return reduce_scatter_->predicted_seconds(link);
  if (gathered_) {
    return comm::allgather_seconds(link, static_cast<double>(payload_bytes_), collectives_.size());
  }
  return comm::ring_allreduce_seconds(link, static_cast<double>(numel_ * sizeof(float)),
                                      collectives_.size());
}

void OuterExchange::average(std::span<float> values) {
  if (values.size() != numel_) {
    throw Error("outer exchange of " + std::to_string(numel_) + " elements was given " +
                std::to_string(values.size()));
  }
  if (gathered_) {
    average_gathered(values);
    return;
  }
  if (reduce_scatter_) {
    const auto refusing = reduce_scatter_->average(values);
    if (refusing.empty()) return;
    const std::string& mine = reduce_scatter_->refused_here();
    throw RefusedOuterGradient(
        "the outer exchange failed: the codec refused the outer gradient of " +
        rank_list(refusing) + (mine.empty() ? "" : " (here: " + mine + ")") +
        "; a rank's local model has diverged (non-finite values)");
  }
  wire_.resize(numel_ * sizeof(float));
  fp32_->to_wire(values, 1.0f / static_cast<float>(collectives_.size()), wire_.data());
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.allreduce_sum(wire_.data(), numel_, comm::DataType::kFloat32);
  }
  fp32_->from_wire(wire_.data(), values);
}

void OuterExchange::average_gathered(std::span<float> values) {
  // A rank whose codec refuses its values (non-finite: it changes nothing then) sends an
  // empty payload; every rank sees the same list and throws alike.
  mine_.clear();
  std::string refused;
  {
    TimelineSpan span("encode", "compute");
    try {
      gathered_->encode(values, mine_);
    } catch (const std::exception& e) {
      refused = e.what();
      mine_.clear();
    }
  }
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.allgather_bytes(mine_, all_);
  }
  std::vector<int> refusing;
  for (size_t r = 0; r < all_.size(); ++r) {
    if (all_[r].empty()) refusing.push_back(static_cast<int>(r));
  }
  if (!refusing.empty()) {
    std::fill(values.begin(), values.end(), 0.0f);
    throw RefusedOuterGradient(
        "the outer exchange failed: the codec refused the outer gradient of " +
        rank_list(refusing) + (refused.empty() ? "" : " (here: " + refused + ")") +
        "; a rank's local model has diverged (non-finite values)");
  }
  TimelineSpan span("decode", "compute");
  // A corrupt payload throws PayloadError on every rank alike (all decode the same bytes),
  // before `values` is touched.
  sum_.assign(numel_, 0.0f);
  for (const Bytes& payload : all_) gathered_->decode_add(payload, sum_);
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  for (size_t i = 0; i < numel_; ++i) values[i] = sum_[i] * scale;
}

void OuterExchange::save_state(Bytes& out) const {
  // fp32 (none) keeps no state; sparseloco its codec's accumulator, this rank's.
  if (reduce_scatter_) reduce_scatter_->save_state(out);
  if (gathered_) gathered_->save_state(out);
}

void OuterExchange::load_state(ByteReader& in) {
  if (reduce_scatter_) reduce_scatter_->load_state(in);
  if (gathered_) gathered_->load_state(in);
}

}  // namespace gradwire::strategy::diloco
