// OuterExchange: the mean over the ranks of one fragment's outer gradient, through a codec.
//
// DiLoCo exchanges rarely and much at a time, so each fragment is one flat vector and one
// exchange; which collectives carry it depends on the codec's faces (compress/codec.h):
//   additive (none, fp16)    the values pre-scaled by 1/W in the wire type, one ring
//                            allreduce: 2(W-1)/W x n x (4 or 2) bytes on the wire per rank;
//   shared scale (int8)      an allreduce-max of the block maxima, then an int8 allreduce of
//                            floor(127/W) levels: 2(W-1)/W x n bytes, plus the maxima;
//   messages (int4, bf16...) a reduce-scatter of payloads: the vector cut into W ranges,
//                            range r encoded and sent to rank r (an alltoall), which decodes
//                            and sums the W payloads of its range, encodes that mean again
//                            and allgathers it; every rank decodes every range, its own too,
//                            so all end bitwise equal. 2(W-1)/W x the payload per rank: 4-bit
//                            codes cost an eighth of fp32's allreduce, not W-1 times a
//                            payload as an allgather of payloads would.
// Error feedback, where the codec has it, keeps per rank what its first encoding left out
// (per range, for messages) and, on the owner of a range, what the second one left out.
// Codecs with a low-rank face (PowerSGD) are refused: an outer gradient is exchanged once,
// with no next step to warm-start from.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/cost_model.h"
#include "gradwire/compress/codec.h"
#include "gradwire/core/bytes.h"

namespace gradwire::strategy::diloco {

class OuterExchange {
 public:
  // `name` names the fragment in errors and codec states. ConfigError for a codec that
  // cannot be used (unknown, malformed, low-rank).
  OuterExchange(comm::Collectives& collectives, const std::string& codec, const std::string& name,
                size_t numel);

  // values <- the mean of every rank's values, through the codec (a collective sequence;
  // every rank calls it with a vector of the same size). Equal on every rank afterwards.
  void average(std::span<float> values);

  // The bytes one average() puts on the wire from this rank, and its time over `link`
  // (payload sizes as for an input of this size; exact for the quantizers).
  uint64_t wire_bytes() const { return wire_bytes_; }
  double predicted_seconds(const comm::LinkModel& link) const;

  // The codecs' states (error feedback's residuals), for checkpoints.
  void save_state(Bytes& out) const;
  void load_state(ByteReader& in);

 private:
  enum class Path { kAdditive, kSharedScale, kMessages };
  void average_additive(std::span<float> values);
  void average_shared_scale(std::span<float> values);
  void average_messages(std::span<float> values);
  size_t range_begin(int r) const;  // of rank r's range, in elements

  comm::Collectives& collectives_;
  Path path_ = Path::kAdditive;
  size_t numel_ = 0;
  std::unique_ptr<compress::Codec> codec_;  // additive and shared scale: the whole vector
  // Messages: per range, this rank's first encoding; and the second one, of its own range.
  std::vector<std::unique_ptr<compress::Codec>> first_;
  std::unique_ptr<compress::Codec> second_;
  // The predicted figures (constructor): per collective, bytes per rank.
  uint64_t wire_bytes_ = 0;
  double payload_bytes_ = 0;  // additive / shared scale: the wire buffer; messages: a range
  double maxima_bytes_ = 0;   // shared scale
  // Scratch, reused from call to call.
  std::vector<uint8_t> wire_;
  std::vector<float> maxima_, sum_;
  std::vector<Bytes> to_, from_, gathered_;
  Bytes own_;
};

}  // namespace gradwire::strategy::diloco
