// OuterExchange: the mean over the ranks of one fragment's outer gradient, through a codec.
//
// DiLoCo exchanges rarely and much at a time, so each fragment is one flat vector and one
// exchange:
//   fp32 (none)          one ring allreduce of the values pre-scaled by 1/W: 2(W-1)/W x 4n
//                        bytes on the wire per rank;
//   sparseloco           an allgather of every rank's payload (SparseLoCo's sparse, few-bit
//                        codes, each rank's own error feedback inside its codec); every
//                        rank decodes all W payloads in rank order into zeros and scales by
//                        1/W, so all hold the same bits: (W-1) payloads on the wire per rank,
//                        each about 0.7% of fp32's bytes at its defaults;
//   any other codec      the reduce-scatter of codec_reduce_scatter.h (the one the
//                        allreduce strategy's quantized buckets use): 2(W-1)/W payloads per
//                        rank, summed in fp32, every level of the codec kept at any W; 4-bit
//                        codes cost an eighth of fp32's allreduce.
// Error feedback, where the codec has it, is the reduce-scatter's (per range, and on the
// owner of a range for the mean). A rank whose codec refuses its outer gradient
// (non-finite values) makes every rank throw the same error naming it. Low-rank codecs
// (PowerSGD) are refused by DiLoCoOptions::check(): an outer gradient is exchanged once,
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
#include "gradwire/core/error.h"
#include "gradwire/strategy/codec_reduce_scatter.h"

namespace gradwire::strategy::diloco {

// average()'s error when a codec refused some rank's outer gradient: every rank completed
// the exchange's collectives and throws it alike (the ranks are still in step).
struct RefusedOuterGradient : Error {
  using Error::Error;
};

class OuterExchange {
 public:
  // `name` names the fragment in errors and codec states. ConfigError for a codec that
  // does not exist or is malformed.
  OuterExchange(comm::Collectives& collectives, const std::string& codec, const std::string& name,
                size_t numel);

  // values <- the mean of every rank's values, through the codec (a collective sequence;
  // every rank calls it with a vector of the same size). Equal on every rank afterwards.
  void average(std::span<float> values);
  // sparseloco: the allgather path of average().
  void average_gathered(std::span<float> values);

  // The bytes one average() puts on the wire from this rank, and its time over `link`
  // (payload sizes as for an input of this size; exact for the quantizers).
  uint64_t wire_bytes() const { return wire_bytes_; }
  double predicted_seconds(const comm::LinkModel& link) const;

  // The codecs' states (error feedback's residuals), for checkpoints.
  void save_state(Bytes& out) const;
  void load_state(ByteReader& in);
  // Whether states of DiLoCo's version 2 and before read here: fp32's (no state) only;
  // every other codec's is now the reduce-scatter's (its residuals, not the codecs').
  bool reads_version_2_state() const { return version_2_layout_; }

 private:
  comm::Collectives& collectives_;
  size_t numel_ = 0;
  // fp32: the codec's additive face and its wire buffer; else the reduce-scatter.
  std::unique_ptr<compress::Codec> fp32_;
  std::vector<uint8_t> wire_;
  std::unique_ptr<CodecReduceScatter> reduce_scatter_;
  // sparseloco: this rank's codec, its payload, and what the allgather brought.
  std::unique_ptr<compress::Codec> gathered_;
  Bytes mine_;
  std::vector<Bytes> all_;
  std::vector<float> sum_;
  uint64_t payload_bytes_ = 0;
  uint64_t wire_bytes_ = 0;
  bool version_2_layout_ = true;
};

}  // namespace gradwire::strategy::diloco
