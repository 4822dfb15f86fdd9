// CodecReduceScatter: the mean over the ranks of one flat vector through a codec's message
// face, summed in fp32 at any world size.
//
// The vector is cut into W ranges, range r owned by rank r. Every rank encodes each range
// with that range's codec and sends range r's payload to rank r (an alltoall); the owner
// decodes the W payloads of its range into fp32, sums them, divides by W, encodes that
// mean once more and allgathers it; every rank decodes every range's mean, its own too, so
// all end bitwise equal. Per rank 2(W-1)/W payloads of the whole vector on the wire, as a
// ring allreduce of the codec's wire values, but the sum is fp32 and the codec keeps all
// its levels: int8's shared-scale allreduce (compress::SharedScaleFace) has floor(127/W)
// per sign, and 4-bit codes or bfloat16 have no allreduce at all (an allgather of payloads
// puts W-1 of them on the wire). The messages: W-1 per rank in each collective.
//
// Error feedback, where the codec's spec has it (ef=1), is the reduce-scatter's own, over
// the flat vector: r1 keeps what this rank's first encodings left out (every range), r2 on
// the owner what the second encoding (of its range's mean) left out:
//   a = v + r1;  send C(a);  r1 <- a - D(C(a));   owner: b = mean + r2;  r2 <- b - D(C(b))
// so a caller can keep part of them (a tensor without a gradient this step: residual() and
// restore_residual()). The range codecs themselves run without (ef=0); a spec with
// momentum correction (momentum=m), which needs the codec's own, is refused.
//
// A rank whose codec refuses its values (non-finite) sends every owner an empty payload and
// the collectives go on: each owner tells every rank in the allgather which ranks sent it
// nothing, so every rank learns the same list and the caller decides (an error naming them,
// or a step's status).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/cost_model.h"
#include "gradwire/compress/codec.h"
#include "gradwire/core/bytes.h"

namespace gradwire::strategy {

// The payload a fresh codec of `spec` writes for n zeros: the size of every payload of a
// codec whose size depends on the element count only (the quantizers, sparseloco).
size_t codec_payload_size(const std::string& spec, size_t n);

class CodecReduceScatter {
 public:
  // `name` names the vector in the codecs' states and errors. ConfigError for a codec
  // that does not exist or is malformed. Each range is a flat vector to the codec (a
  // low-rank codec would send it as it is).
  CodecReduceScatter(comm::Collectives& collectives, const std::string& codec,
                     const std::string& name, size_t numel);
  ~CodecReduceScatter();

  // values <- the mean of every rank's values (a collective sequence: every rank calls it
  // with a vector of the same size). Returns the ranks whose codec refused their values,
  // in ascending order, the same list on every rank; when it is not empty, `values` is
  // left zero on every rank and refused_here() says why where this rank is one of them.
  std::vector<int> average(std::span<float> values);
  const std::string& refused_here() const { return refused_; }

  // Elements of rank r's range: [range_begin(r), range_begin(r + 1)).
  size_t range_begin(int r) const;
  // The bytes one average() puts on the wire from this rank (exact for the quantizers,
  // whose payload size depends on the size only), and its time over `link`.
  uint64_t wire_bytes() const { return wire_bytes_; }
  double predicted_seconds(const comm::LinkModel& link) const;

  // Error feedback's residuals at elements [begin, begin + n) of the vector: 2n floats, r1
  // there, then r2 there (0 outside this rank's range; all 0 without error feedback or
  // before the first call). restore_residual() puts back what residual() returned.
  std::vector<float> residual(size_t begin, size_t n) const;
  void restore_residual(size_t begin, std::span<const float> saved);

  // The state (the residuals and the range codecs'), for checkpoints.
  void save_state(Bytes& out) const;
  void load_state(ByteReader& in);

 private:
  comm::Collectives& collectives_;
  size_t numel_ = 0;
  // Per range, this rank's first encoding; the second one, of the mean of its own range.
  std::vector<std::unique_ptr<compress::Codec>> first_;
  std::unique_ptr<compress::Codec> second_;
  bool error_feedback_ = false;
  std::vector<float> r1_, r2_;  // error feedback: numel and this rank's range, or empty
  double payload_bytes_ = 0;    // the largest range's payload
  uint64_t wire_bytes_ = 0;
  std::string refused_;
  // Scratch, reused from call to call.
  std::vector<float> sum_, scratch_;
  std::vector<Bytes> to_, from_, gathered_;
  Bytes own_;
};

}  // namespace gradwire::strategy
