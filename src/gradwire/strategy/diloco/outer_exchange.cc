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
  } else {
    version_2_layout_ = false;
    reduce_scatter_ = std::make_unique<CodecReduceScatter>(collectives_, codec, name, numel);
    wire_bytes_ = reduce_scatter_->wire_bytes();
  }
}

double OuterExchange::predicted_seconds(const comm::LinkModel& link) const {
  if (reduce_scatter_) return reduce_scatter_->predicted_seconds(link);
  return comm::ring_allreduce_seconds(link, static_cast<double>(numel_ * sizeof(float)),
                                      collectives_.size());
}

void OuterExchange::average(std::span<float> values) {
  if (values.size() != numel_) {
    throw Error("outer exchange of " + std::to_string(numel_) + " elements was given " +
                std::to_string(values.size()));
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

void OuterExchange::save_state(Bytes& out) const {
  // fp32 (none) keeps no state.
  if (reduce_scatter_) reduce_scatter_->save_state(out);
}

void OuterExchange::load_state(ByteReader& in) {
  if (reduce_scatter_) reduce_scatter_->load_state(in);
}

}  // namespace gradwire::strategy::diloco
