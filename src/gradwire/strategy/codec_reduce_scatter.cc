#include "gradwire/strategy/codec_reduce_scatter.h"

#include <algorithm>

#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/core/timeline.h"

namespace gradwire::strategy {
namespace {

compress::TensorInfo flat(const std::string& name, size_t n) {
  return {name, {static_cast<int64_t>(n)}, compress::LayerKind::kOther};
}

// The allgather's message: u8 0 and the encoded mean of the sender's range, or u8 1 and
// the ranks (u32 each) whose first encoding failed, as the sender saw.
constexpr uint8_t kRangeMean = 0, kRangeRefused = 1;
constexpr uint32_t kStateTag = 0x31535243;  // "CRS1"

}  // namespace

size_t codec_payload_size(const std::string& spec, size_t n) {
  auto codec = compress::create_codec(spec, flat("<size probe>", n));
  std::vector<float> zeros(n, 0.0f);
  Bytes out;
  codec->encode(zeros, out);
  return out.size();
}

CodecReduceScatter::CodecReduceScatter(comm::Collectives& collectives, const std::string& codec,
                                       const std::string& name, size_t numel)
    : collectives_(collectives), numel_(numel) {
  Spec spec = Spec::parse(compress::canonical_spec(codec));
  if (spec.params.count("momentum") && std::stod(spec.params.at("momentum")) > 0) {
    throw ConfigError("codec '" + codec +
                      "': momentum correction needs the codec's own error feedback, which a "
                      "reduce-scatter of ranges cannot keep per tensor");
  }
  error_feedback_ = compress::uses_error_feedback(codec);
  spec.params.erase("momentum");
  spec.params["ef"] = "0";
  const std::string inner = spec.to_string();
  const int world = collectives_.size();
  for (int r = 0; r < world; ++r) {
    const size_t n = range_begin(r + 1) - range_begin(r);
    first_.push_back(compress::create_codec(inner, flat(name + " range " + std::to_string(r), n)));
  }
  const int me = collectives_.rank();
  second_ = compress::create_codec(inner, flat(name + " mean of range " + std::to_string(me),
                                               range_begin(me + 1) - range_begin(me)));
  // Out of this rank: the alltoall's payload of every other rank's range, and the
  // allgather's message to every other rank, one byte more than a payload (kRangeMean), as
  // long as the largest (an allgather's messages count at the largest size); each message
  // with its 8-byte length. The ranges differ by one element at most: two sizes.
  std::vector<uint64_t> payload(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const size_t n = range_begin(r + 1) - range_begin(r);
    payload[r] = r > 0 && n == range_begin(r) - range_begin(r - 1) ? payload[r - 1]
                                                                   : codec_payload_size(inner, n);
    payload_bytes_ = std::max(payload_bytes_, static_cast<double>(payload[r]));
  }
  for (int r = 0; r < world; ++r) {
    if (r != me) wire_bytes_ += 8 + payload[r] + 8 + 1 + static_cast<uint64_t>(payload_bytes_);
  }
}

CodecReduceScatter::~CodecReduceScatter() = default;

size_t CodecReduceScatter::range_begin(int r) const {
  const auto w = static_cast<size_t>(collectives_.size());
  return numel_ * static_cast<size_t>(r) / w;
}

double CodecReduceScatter::predicted_seconds(const comm::LinkModel& link) const {
  const int world = collectives_.size();
  return comm::alltoall_seconds(link, payload_bytes_, world) +
         comm::allgather_seconds(link, payload_bytes_, world);
}

std::vector<int> CodecReduceScatter::average(std::span<float> values) {
  if (values.size() != numel_) {
    throw Error("reduce-scatter of " + std::to_string(numel_) + " elements was given " +
                std::to_string(values.size()));
  }
  const int world = collectives_.size();
  const int me = collectives_.rank();
  if (error_feedback_ && r1_.empty()) {
    r1_.assign(numel_, 0.0f);
    r2_.assign(range_begin(me + 1) - range_begin(me), 0.0f);
  }
  to_.resize(static_cast<size_t>(world));
  refused_.clear();
  {
    TimelineSpan span("encode", "compute");
    // With error feedback a = v + r1 is encoded from scratch and r1 takes its error only
    // once every range has encoded: a refusal leaves r1 as it was.
    if (error_feedback_) scratch_.resize(numel_);
    for (int r = 0; r < world && refused_.empty(); ++r) {
      to_[r].clear();
      const size_t begin = range_begin(r), n = range_begin(r + 1) - begin;
      try {
        if (error_feedback_) {
          std::span<float> a(scratch_.data() + begin, n);
          for (size_t i = 0; i < n; ++i) a[i] = values[begin + i] + r1_[begin + i];
          first_[r]->encode_residual(a, to_[r]);
        } else {
          first_[r]->encode(values.subspan(begin, n), to_[r]);
        }
      } catch (const std::exception& e) {
        refused_ = e.what();
      }
    }
    if (!refused_.empty()) {
      for (auto& payload : to_) payload.clear();
    } else if (error_feedback_) {
      r1_.swap(scratch_);
    }
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
    TimelineSpan span("decode", "compute");
    const size_t mine = range_begin(me), mine_n = range_begin(me + 1) - mine;
    sum_.assign(mine_n, 0.0f);
    for (int r = 0; r < world; ++r) first_[me]->decode_add(from_[r], sum_);
    const float scale = 1.0f / static_cast<float>(world);
    own_.push_back(kRangeMean);
    try {
      if (error_feedback_) {
        for (size_t i = 0; i < mine_n; ++i) sum_[i] = sum_[i] * scale + r2_[i];
        second_->encode_residual(sum_, own_);
        r2_.swap(sum_);
      } else {
        for (float& v : sum_) v *= scale;
        second_->encode(sum_, own_);
      }
    } catch (const std::exception& e) {
      // Finite payloads whose sum overflowed: this rank refuses its mean, as a rank whose
      // own values were non-finite refuses them.
      refused_ = e.what();
      own_.assign(1, kRangeRefused);
      ByteWriter(own_).put<uint32_t>(static_cast<uint32_t>(me));
    }
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
    if (reader.get<uint8_t>("reduce-scatter message") != kRangeRefused) continue;
    while (reader.remaining() > 0) {
      const int rank = static_cast<int>(reader.get<uint32_t>("refusing rank"));
      if (std::find(refusing.begin(), refusing.end(), rank) == refusing.end()) {
        refusing.push_back(rank);
      }
    }
  }
  std::fill(values.begin(), values.end(), 0.0f);
  if (!refusing.empty()) {
    std::sort(refusing.begin(), refusing.end());
    return refusing;
  }
  TimelineSpan span("decode", "compute");
  for (int r = 0; r < world; ++r) {
    const size_t begin = range_begin(r);
    // Range r's codec decodes what rank r's second one sent: same spec, same size.
    first_[r]->decode_add(std::span<const uint8_t>(gathered_[r]).subspan(1),
                          values.subspan(begin, range_begin(r + 1) - begin));
  }
  return refusing;
}

std::vector<float> CodecReduceScatter::residual(size_t begin, size_t n) const {
  if (begin > numel_ || n > numel_ - begin) throw Error("reduce-scatter residual out of range");
  std::vector<float> out(2 * n, 0.0f);
  if (r1_.empty()) return out;
  std::copy_n(r1_.begin() + static_cast<ptrdiff_t>(begin), n, out.begin());
  const size_t mine = range_begin(collectives_.rank());
  for (size_t i = 0; i < n; ++i) {
    const size_t at = begin + i;
    if (at >= mine && at - mine < r2_.size()) out[n + i] = r2_[at - mine];
  }
  return out;
}

void CodecReduceScatter::restore_residual(size_t begin, std::span<const float> saved) {
  const size_t n = saved.size() / 2;
  if (saved.size() % 2 != 0 || begin > numel_ || n > numel_ - begin) {
    throw Error("reduce-scatter residual to restore out of range");
  }
  if (r1_.empty()) return;  // nothing encoded yet: the residuals are still zero
  std::copy_n(saved.begin(), n, r1_.begin() + static_cast<ptrdiff_t>(begin));
  const size_t mine = range_begin(collectives_.rank());
  for (size_t i = 0; i < n; ++i) {
    const size_t at = begin + i;
    if (at >= mine && at - mine < r2_.size()) r2_[at - mine] = saved[n + i];
  }
}

// State: tag | u64 r1 size, r1 | u64 r2 size, r2 | a section per range codec, then one
// for the second codec.
void CodecReduceScatter::save_state(Bytes& out) const {
  ByteWriter w(out);
  w.put<uint32_t>(kStateTag);
  w.put<uint64_t>(r1_.size());
  w.put_array<float>(r1_);
  w.put<uint64_t>(r2_.size());
  w.put_array<float>(r2_);
  const auto save = [&](const compress::Codec& codec) {
    Bytes section;
    codec.save_state(section);
    put_section(out, section);
  };
  for (const auto& c : first_) save(*c);
  save(*second_);
}

void CodecReduceScatter::load_state(ByteReader& in) {
  if (in.get<uint32_t>("reduce-scatter state tag") != kStateTag) {
    throw PayloadError("the checkpoint holds no reduce-scatter state where one was expected");
  }
  const size_t own = range_begin(collectives_.rank() + 1) - range_begin(collectives_.rank());
  const auto r1_size = in.get<uint64_t>("reduce-scatter residual size");
  if (r1_size != 0 && (!error_feedback_ || r1_size != numel_)) {
    throw PayloadError("a reduce-scatter residual of " + std::to_string(r1_size) +
                       " elements in the checkpoint, for " + std::to_string(numel_) + " here" +
                       (error_feedback_ ? "" : " without error feedback"));
  }
  std::vector<float> r1(static_cast<size_t>(r1_size));
  in.get_array<float>(r1, "reduce-scatter residual");
  const auto r2_size = in.get<uint64_t>("reduce-scatter mean residual size");
  if (r2_size != (r1_size == 0 ? 0 : own)) {
    throw PayloadError("a reduce-scatter mean residual of " + std::to_string(r2_size) +
                       " elements in the checkpoint, for a range of " + std::to_string(own) +
                       " here (another world size?)");
  }
  std::vector<float> r2(static_cast<size_t>(r2_size));
  in.get_array<float>(r2, "reduce-scatter mean residual");
  const auto load = [&](compress::Codec& codec) {
    ByteReader section = get_section(in, "reduce-scatter codec state");
    codec.load_state(section);
    section.expect_end("reduce-scatter codec state");
  };
  for (auto& c : first_) load(*c);
  load(*second_);
  r1_ = std::move(r1);
  r2_ = std::move(r2);
}

}  // namespace gradwire::strategy
