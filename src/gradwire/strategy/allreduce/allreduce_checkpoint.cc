// AllreduceStrategy's checkpoint state (Strategy::save_state, load_state).
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

#include <algorithm>

#include "gradwire/core/error.h"
#include "gradwire/strategy/agreement.h"
#include "gradwire/strategy/allreduce/allreduce_bucket.h"

namespace gradwire::strategy {

// State: tag, tensor count, the traffic counters, one section per tensor with its codec's
// state (compress::Codec::save_state), the bucket layout (whether the measured one is made,
// and every bucket's end in the fill order), then the last step's totals of every sparse
// bucket (they choose the next step's path). A layout still being measured is measured
// anew after a resume (the timings are not kept); a made one is restored, so a resumed run
// sums in the same order as the run it continues; then a section per reduce-scatter
// bucket with its state (error feedback's residuals). "AWR2" states (before the measured
// layout) hold no layout: the first layout stays, measured again; "AWR2" and "AWR3"
// states (before the reduce-scatter path) leave its residuals zero.
namespace {
constexpr uint32_t kAllreduceStateTagV2 = 0x32525741;  // "AWR2"
constexpr uint32_t kAllreduceStateTagV3 = 0x33525741;  // "AWR3"
constexpr uint32_t kAllreduceStateTag = 0x34525741;    // "AWR4"
}  // namespace

void AllreduceStrategy::save_state(Bytes& out) const {
  if (!started_) throw Error("AllreduceStrategy::save_state called before start");
  ByteWriter writer(out);
  writer.put<uint32_t>(kAllreduceStateTag);
  writer.put<uint64_t>(codecs_.size());
  for (const uint64_t counter : {traffic_.steps, traffic_.bytes_contributed, traffic_.bytes_on_wire,
                                 traffic_.bytes_dense, traffic_.bytes_dense_on_wire}) {
    writer.put<uint64_t>(counter);
  }
  Bytes codec_state;
  for (const auto& codec : codecs_) {
    codec_state.clear();
    codec->save_state(codec_state);
    put_section(out, codec_state);
  }
  writer.put<uint8_t>(layout_done_ ? 1 : 0);
  writer.put<uint64_t>(buckets_.size());
  for (const size_t end : bucket_ends()) writer.put<uint64_t>(end);
  for (const Bucket& bucket : buckets_) {
    if (bucket.sparse) bucket.sparse->totals().save(out);
  }
  for (const Bucket& bucket : buckets_) {
    if (!bucket.reduce_scatter) continue;
    Bytes section;
    bucket.reduce_scatter->save_state(section);
    put_section(out, section);
  }
}

void AllreduceStrategy::load_state(ByteReader& in) {
  if (!started_) throw Error("AllreduceStrategy::load_state called before start");
  const auto tag = in.get<uint32_t>("allreduce state tag");
  if (tag != kAllreduceStateTag && tag != kAllreduceStateTagV3 && tag != kAllreduceStateTagV2) {
    throw PayloadError("the checkpoint holds no allreduce strategy state where one was expected");
  }
  const auto count = in.get<uint64_t>("tensor count");
  if (count != codecs_.size()) {
    throw PayloadError("the checkpoint's exchange state is for " + std::to_string(count) +
                       " tensors; this model has " + std::to_string(codecs_.size()));
  }
  TrafficStats traffic;
  for (uint64_t* counter : {&traffic.steps, &traffic.bytes_contributed, &traffic.bytes_on_wire,
                            &traffic.bytes_dense, &traffic.bytes_dense_on_wire}) {
    *counter = in.get<uint64_t>("traffic counter");
  }
  for (size_t k = 0; k < codecs_.size(); ++k) {
    ByteReader section = get_section(in, "codec state");
    codecs_[k]->load_state(section);
    section.expect_end(("codec state of tensor " + std::to_string(k)).c_str());
  }
  if (tag != kAllreduceStateTagV2) load_layout(in);
  for (Bucket& bucket : buckets_) {
    if (bucket.sparse) bucket.sparse->set_totals(SparseStepTotals::load_from(in));
  }
  if (tag == kAllreduceStateTag) {
    for (Bucket& bucket : buckets_) {
      if (!bucket.reduce_scatter) continue;
      ByteReader section = get_section(in, "reduce-scatter state");
      bucket.reduce_scatter->load_state(section);
      section.expect_end("reduce-scatter state");
    }
  }
  traffic_ = traffic;
}

void AllreduceStrategy::load_layout(ByteReader& in) {
  const bool done = in.get<uint8_t>("layout made") != 0;
  const auto count = in.get<uint64_t>("bucket count");
  if (count > fill_order_.size()) {
    throw PayloadError("the checkpoint's bucket layout has " + std::to_string(count) +
                       " buckets for " + std::to_string(fill_order_.size()) + " tensors");
  }
  std::vector<size_t> ends;
  for (uint64_t b = 0; b < count; ++b) {
    const auto end = in.get<uint64_t>("bucket end");
    const size_t first = ends.empty() ? 0 : ends.back();
    if (end <= first || end > fill_order_.size()) {
      throw PayloadError("the checkpoint's bucket layout is not one of this model's");
    }
    for (size_t i = first + 1; i < end; ++i) {
      if (bucket_kind(*codecs_[fill_order_[i]]) != bucket_kind(*codecs_[fill_order_[first]])) {
        throw PayloadError("the checkpoint's bucket layout mixes codecs in one bucket");
      }
    }
    ends.push_back(end);
  }
  if (!ends.empty() && ends.back() != fill_order_.size()) {
    throw PayloadError("the checkpoint's bucket layout leaves tensors out");
  }
  const std::vector<size_t> current = bucket_ends();
  if (ends != current) {
    if (std::any_of(buckets_.begin(), buckets_.end(),
                    [](const Bucket& b) { return !b.wire && !b.int8; })) {
      throw PayloadError(
          "the checkpoint's bucket layout differs from this strategy's, whose buckets keep "
          "their first layout (sparse or message codecs)");
    }
    assign_buckets(ends);
  }
  if (done) {
    layout_done_ = true;
  } else if (!layout_done_) {
    layout_seen_ = 0;  // measured anew
    ready_samples_.assign(tensors_.size(), {});
    exchange_samples_.clear();
  }
}

}  // namespace gradwire::strategy
