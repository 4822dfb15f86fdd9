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

// "rank 1, rank 3"
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "rank " : ", rank ") + std::to_string(r);
  return out;
}

// The error every rank throws when some ranks' codec refused their outer gradient.
Error refused_error(const std::vector<int>& ranks, const std::string& mine) {
  return Error("the outer exchange failed: the codec refused the outer gradient of " +
               rank_list(ranks) + (mine.empty() ? "" : " (here: " + mine + ")") +
               "; a rank's local model has diverged (non-finite values)");
}

// The allgather's message of the messages path: u8 0 and the encoded mean of the sender's
// range, or u8 1 and the ranks (u32 each) whose first encoding failed, as the sender saw.
constexpr uint8_t kRangeMean = 0, kRangeRefused = 1;

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
    wire_bytes_ =
        world < 2 ? 0 : 2 * (w - 1) * (8 + static_cast<uint64_t>(payload_bytes_)) + (w - 1);
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
  // The block maxima, then one word per rank: 1 where that rank's codec refused its values
  // (non-finite), which then sends zero maxima; after the allreduce-max every rank knows,
  // and every rank skips the levels' allreduce alike.
  const size_t blocks = face->blocks();
  maxima_.assign(blocks + static_cast<size_t>(world), 0.0f);
  wire_.resize(numel_);
  auto* q = reinterpret_cast<int8_t*>(wire_.data());
  std::string refused;
  try {
    face->local_maxima(values, std::span<float>(maxima_).first(blocks));
  } catch (const std::exception& e) {
    refused = e.what();
    std::fill_n(maxima_.begin(), blocks, 0.0f);
    maxima_[blocks + static_cast<size_t>(collectives_.rank())] = 1.0f;
  }
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.allreduce_max(maxima_.data(), maxima_.size());
  }
  std::vector<int> refusing;
  for (int r = 0; r < world; ++r) {
    if (maxima_[blocks + static_cast<size_t>(r)] > 0) refusing.push_back(r);
  }
  if (!refusing.empty()) throw refused_error(refusing, refused);
  maxima_.resize(blocks);
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
  // A rank whose codec refuses its values (non-finite) sends every owner an empty payload
  // instead, and the collectives go on: each owner tells every rank, in the allgather, which
  // ranks sent it nothing, and every rank throws the same error naming them.
  to_.resize(static_cast<size_t>(world));
  std::string refused;
  for (int r = 0; r < world; ++r) {
    to_[r].clear();
    const size_t begin = range_begin(r);
    if (!refused.empty()) continue;
    try {
      first_[r]->encode(values.subspan(begin, range_begin(r + 1) - begin), to_[r]);
    } catch (const std::exception& e) {
      refused = e.what();
    }
  }
  if (!refused.empty()) {
    for (auto& payload : to_) payload.clear();
  }
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.alltoall_bytes(to_, from_);
  }
  std::vector<int> empty_from;
  for (int r = 0; r < world; ++r) {
    if (from_[r].empty()) empty_from.push_back(r);
  }
  own_.clear();
  if (empty_from.empty()) {
    const size_t mine = range_begin(me), mine_n = range_begin(me + 1) - mine;
    sum_.assign(mine_n, 0.0f);
    for (int r = 0; r < world; ++r) first_[me]->decode_add(from_[r], sum_);
    const float scale = 1.0f / static_cast<float>(world);
    for (float& v : sum_) v *= scale;
    own_.push_back(kRangeMean);
    second_->encode(sum_, own_);
  } else {
    own_.push_back(kRangeRefused);
    ByteWriter w(own_);
    for (int r : empty_from) w.put<uint32_t>(static_cast<uint32_t>(r));
  }
  {
    TimelineSpan span("communicate", "communicate");
    collectives_.allgather_bytes(own_, gathered_);
  }
  std::vector<int> refusing;
  for (int r = 0; r < world; ++r) {
    ByteReader reader(gathered_[r]);
    if (reader.get<uint8_t>("outer exchange message") != kRangeRefused) continue;
    while (reader.remaining() > 0) {
      const int rank = static_cast<int>(reader.get<uint32_t>("refusing rank"));
      if (std::find(refusing.begin(), refusing.end(), rank) == refusing.end()) {
        refusing.push_back(rank);
      }
    }
  }
  if (!refusing.empty()) {
    std::sort(refusing.begin(), refusing.end());
    throw refused_error(refusing, refused);
  }
  std::fill(values.begin(), values.end(), 0.0f);
  for (int r = 0; r < world; ++r) {
    const size_t begin = range_begin(r);
    // Range r's codec decodes what rank r's second one sent: same spec, same size.
    first_[r]->decode_add(std::span<const uint8_t>(gathered_[r]).subspan(1),
                          values.subspan(begin, range_begin(r + 1) - begin));
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
