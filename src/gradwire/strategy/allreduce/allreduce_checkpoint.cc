// AllreduceStrategy's checkpoint state (Strategy::save_state, load_state).
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

#include "gradwire/core/error.h"
#include "gradwire/strategy/agreement.h"
#include "gradwire/strategy/allreduce/allreduce_bucket.h"

namespace gradwire::strategy {

// State: tag, tensor count, the traffic counters, one section per tensor with its codec's
// state (compress::Codec::save_state), then the last step's totals of every sparse bucket
// (they choose the next step's path).
namespace {
constexpr uint32_t kAllreduceStateTag = 0x32525741;  // "AWR2"
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
  for (const Bucket& bucket : buckets_) {
    if (bucket.sparse) bucket.sparse->totals().save(out);
  }
}

void AllreduceStrategy::load_state(ByteReader& in) {
  if (!started_) throw Error("AllreduceStrategy::load_state called before start");
  if (in.get<uint32_t>("allreduce state tag") != kAllreduceStateTag) {
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
  for (Bucket& bucket : buckets_) {
    if (bucket.sparse) bucket.sparse->set_totals(SparseStepTotals::load_from(in));
  }
  traffic_ = traffic;
}

}  // namespace gradwire::strategy
