#include "gradwire/strategy/diloco/outer_exchange.h"

#include <algorithm>

#include "gradwire/comm/wire_bytes.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"

namespace gradwire::strategy::diloco {
namespace {

compress::TensorInfo flat(const std::string& name, size_t n) {
  return {name, {static_cast<int64_t>(n)}, compress::LayerKind::kOther};
}

// The payload a fresh codec of `spec` writes for n zeros.
size_t payload_size(const std::string& spec, size_t n) {
  auto codec = compress::create_codec(spec, flat("<size probe>", n));
  std::vector<float> zeros(n, 0.0f);
  Bytes out;
  codec->encode(zeros, out);
  return out.size();
}

}  // namespace

OuterExchange::OuterExchange(comm::Collectives& collectives, const std::string& codec,
                             const std::string& name, size_t numel)
    : collectives_(collectives), numel_(numel) {
  const int world = collectives_.size();
  codec_ = compress::create_codec(codec, flat(name, numel));
  if (codec_->low_rank() != nullptr) {
    throw ConfigError("codec '" + codec_->spec() +
                      "' is low-rank: DiLoCo's outer gradient is exchanged once a round, with "
                      "nothing to warm-start from; use none, fp16, bf16, int8 or int4");
  }
  if (auto wire = codec_->additive_wire()) {
    path_ = Path::kAdditive;
    payload_bytes_ = static_cast<double>(numel * compress::wire_type_size(*wire));
    wire_bytes_ = comm::ring_allreduce_wire_bytes(static_cast<uint64_t>(payload_bytes_), world);
  } else if (auto* face = codec_->shared_scale()) {
    if (compress::shared_scale_levels(world) == 0) {
      throw ConfigError("codec '" + codec_->spec() + "' sums in int8, which " +
                        std::to_string(world) + " ranks cannot: at most 127");
    }
    path_ = Path::kSharedScale;
    payload_bytes_ = static_cast<double>(numel);
    maxima_bytes_ = static_cast<double>(face->blocks() * sizeof(float));
    wire_bytes_ = comm::ring_allreduce_wire_bytes(numel, world) +
                  comm::ring_allreduce_wire_bytes(face->blocks() * sizeof(float), world);
  } else {
    path_ = Path::kMessages;
    codec_.reset();
    for (int r = 0; r < world; ++r) {
      const size_t n = range_begin(r + 1) - range_begin(r);
      first_.push_back(
          compress::create_codec(codec, flat(name + " range " + std::to_string(r), n)));
    }
    const int me = collectives_.rank();
    second_ = compress::create_codec(codec, flat(name + " mean of range " + std::to_string(me),
                                                 range_begin(me + 1) - range_begin(me)));
    // The largest range's payload (the ranges differ by one element at most).
    payload_bytes_ = static_cast<double>(payload_size(codec, range_begin(1) - range_begin(0)));
    const auto w = static_cast<uint64_t>(world);
    wire_bytes_ = world < 2 ? 0 : 2 * (w - 1) * (8 + static_cast<uint64_t>(payload_bytes_));
  }
}

size_t OuterExchange::range_begin(int r) const {
  const auto w = static_cast<size_t>(collectives_.size());
  return numel_ * static_cast<size_t>(r) / w;
}

double OuterExchange::predicted_seconds(const comm::LinkModel& link) const {
  const int world = collectives_.size();
  switch (path_) {
    case Path::kAdditive:
      return comm::ring_allreduce_seconds(link, payload_bytes_, world);
    case Path::kSharedScale:
      return comm::ring_allreduce_seconds(link, maxima_bytes_, world) +
             comm::ring_allreduce_seconds(link, payload_bytes_, world);
    case Path::kMessages:
      return comm::alltoall_seconds(link, payload_bytes_, world) +
             comm::allgather_seconds(link, payload_bytes_, world);
  }
  return 0;
}

void OuterExchange::average(std::span<float> values) {
  if (values.size() != numel_) {
    throw Error("outer exchange of " + std::to_string(numel_) + " elements was given " +
                std::to_string(values.size()));
  }
  switch (path_) {
    case Path::kAdditive:
      return average_additive(values);
    case Path::kSharedScale:
      return average_shared_scale(values);
    case Path::kMessages:
      return average_messages(values);
  }
}

void OuterExchange::average_additive(std::span<float> values) {
  const auto wire = *codec_->additive_wire();
  wire_.resize(numel_ * compress::wire_type_size(wire));
  codec_->to_wire(values, 1.0f / static_cast<float>(collectives_.size()), wire_.data());
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.allreduce_sum(
        wire_.data(), numel_,
        wire == compress::WireType::kFloat16 ? comm::DataType::kFloat16 : comm::DataType::kFloat32);
  }
  codec_->from_wire(wire_.data(), values);
}

void OuterExchange::average_shared_scale(std::span<float> values) {
  auto* face = codec_->shared_scale();
  const int world = collectives_.size();
  const int levels = compress::shared_scale_levels(world);
  maxima_.resize(face->blocks());
  wire_.resize(numel_);
  auto* q = reinterpret_cast<int8_t*>(wire_.data());
  face->local_maxima(values, maxima_);
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.allreduce_max(maxima_.data(), maxima_.size());
  }
  face->quantize(values, maxima_, levels, q);
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.allreduce_sum(q, numel_, comm::DataType::kInt8);
  }
  face->dequantize(q, maxima_, levels, world, values);
}

void OuterExchange::average_messages(std::span<float> values) {
  const int world = collectives_.size();
  const int me = collectives_.rank();
  to_.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    to_[r].clear();
    const size_t begin = range_begin(r);
    first_[r]->encode(values.subspan(begin, range_begin(r + 1) - begin), to_[r]);
  }
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.alltoall_bytes(to_, from_);
  }
  const size_t mine = range_begin(me), mine_n = range_begin(me + 1) - mine;
  sum_.assign(mine_n, 0.0f);
  for (int r = 0; r < world; ++r) first_[me]->decode_add(from_[r], sum_);
  const float scale = 1.0f / static_cast<float>(world);
  for (float& v : sum_) v *= scale;
  own_.clear();
  second_->encode(sum_, own_);
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.allgather_bytes(own_, gathered_);
  }
  std::fill(values.begin(), values.end(), 0.0f);
  for (int r = 0; r < world; ++r) {
    const size_t begin = range_begin(r);
    // Range r's codec decodes what rank r's second one sent: same spec, same size.
    first_[r]->decode_add(gathered_[r], values.subspan(begin, range_begin(r + 1) - begin));
  }
}

void OuterExchange::save_state(Bytes& out) const {
  const auto save = [&](const compress::Codec& codec) {
    Bytes section;
    codec.save_state(section);
    put_section(out, section);
  };
  if (codec_) save(*codec_);
  for (const auto& c : first_) save(*c);
  if (second_) save(*second_);
}

void OuterExchange::load_state(ByteReader& in) {
  const auto load = [&](compress::Codec& codec) {
    ByteReader section = get_section(in, "outer exchange codec state");
    codec.load_state(section);
    section.expect_end("outer exchange codec state");
  };
  if (codec_) load(*codec_);
  for (auto& c : first_) load(*c);
  if (second_) load(*second_);
}

}  // namespace gradwire::strategy::diloco
