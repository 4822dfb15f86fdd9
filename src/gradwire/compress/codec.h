// The codec contract: float spans in, self-describing bytes out. No torch, no sockets.
//
// Notation (docs/ALGORITHMS.md): g local gradient, r error-feedback residual, a = g + r,
// C the encoder, D the decoder. A Codec instance serves exactly one tensor for the whole
// run (codecs and their decorators may keep per-tensor state: residuals, random streams,
// warm-started factors); create one per tensor with compress::create_codec().
//
// Two faces:
//  * Message face (every codec): encode() appends a payload that starts with a
//    PayloadHeader; decode_add() validates a payload completely before touching memory and
//    adds D(payload) into an accumulator, so aggregation of P peers is P decode_add calls
//    into one buffer.
//  * Additive face (only when additive_wire() is set): the codec's wire values can be
//    summed elementwise by an allreduce (fp32, fp16). to_wire()/from_wire() convert without
//    headers, so a bucket of several tensors can be one allreduce.
//  * Shared-scale face (shared_scale(), int8): int8 wire values summed by an allreduce
//    after the ranks agreed on each block's scale (an allreduce-max); see below.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradwire/core/bytes.h"

namespace gradwire::compress {

// Stable on the wire: never renumber.
enum class CodecId : uint8_t {
  kNone = 1,
  kFp16 = 2,
  kTopK = 3,
  kTwoBit = 4,
  kLaplaceTopK = 5,
  kGaussianK = 6,
  kRandomK = 7,
  kDgc = 8,
  kQsgd = 9,
  kTernGrad = 10,
  kSignSgd = 11,
  kBf16 = 12,
  kSpectral = 13,
  kPowerSgd = 14,
  kFilterTopK = 15,
  kInt8 = 16,
  kInt4 = 17,
  kSparseLoCo = 18,
};

// Element type of an additive codec's wire values.
enum class WireType : uint8_t { kFloat32, kFloat16 };
size_t wire_type_size(WireType type);

// What kind of parameter a tensor is; layer-aware codecs and policies decide by it.
enum class LayerKind : uint8_t { kConvWeight, kFcWeight, kBias, kNorm, kOther };
const char* layer_kind_name(LayerKind kind);  // "conv_weight", "fc_weight", "bias", ...
const char* layer_kind_key(
    LayerKind kind);  // as --compressor KIND=SPEC spells it: "conv", "fc", ...

struct TensorInfo {
  std::string name;            // e.g. "conv1.weight"
  std::vector<int64_t> shape;  // e.g. {32, 1, 5, 5}
  LayerKind kind = LayerKind::kOther;
  size_t numel() const;
};

// First bytes of every payload (8 bytes, little-endian):
//   u8 magic 'G' | u8 codec id | u8 format version | u8 reserved (0) | u32 element count
// Codec parameters needed to decode (k, threshold, scale...) follow in the body.
struct PayloadHeader {
  static constexpr uint8_t kMagic = 0x47;
  static constexpr size_t kSize = 8;
  CodecId codec = CodecId::kNone;
  uint8_t version = 1;
  uint32_t count = 0;

  void write(ByteWriter& writer) const;
  // Reads and checks magic, codec id, version and count against what the caller expects;
  // throws PayloadError (or MismatchError for a different codec) with a precise message.
  static PayloadHeader read_expected(ByteReader& reader, CodecId expected_codec,
                                     uint8_t expected_version, size_t expected_count);
};

const char* codec_id_name(CodecId id);
// True for the codecs whose payload is a subset of the coordinates with their values
// (topk, laplace-topk, gaussiank, randomk, dgc, filter-topk): decoded, it is zero
// elsewhere, so ranks' payloads can be summed by index range (strategy/allreduce).
bool sends_sparse(CodecId id);

class LowRankFace;
class SharedScaleFace;

class Codec {
 public:
  virtual ~Codec() = default;

  virtual CodecId id() const = 0;
  // The canonical spec with every parameter spelled out (defaults included), e.g.
  // "topk:density=0.01,ef=1". Two ranks whose specs differ cannot talk to each other.
  virtual std::string spec() const = 0;

  // Set when wire values can be summed elementwise by allreduce; nullopt otherwise.
  virtual std::optional<WireType> additive_wire() const { return std::nullopt; }

  // Appends a self-describing payload for `input` to `out`. Never reads `out`'s old bytes.
  virtual void encode(std::span<const float> input, Bytes& out) = 0;

  // Encodes `a` like encode(), then replaces `a` with its compression error a - D(C(a)).
  // This is what error feedback needs; codecs override it when the error is cheaper to
  // compute directly (top-k zeroes the sent positions). Default: encode, then decode.
  virtual void encode_residual(std::span<float> a, Bytes& out);

  // Validates `payload` and adds D(payload) into `accum`. The payload must hold exactly
  // accum.size() elements of this codec with compatible parameters: anything else throws
  // PayloadError or MismatchError and leaves `accum` untouched.
  virtual void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const = 0;

  // Additive face; only called when additive_wire() is set. `wire` holds input.size()
  // elements of the wire type. to_wire stores scale * input; from_wire stores wire values
  // as floats (so a summed-then-converted bucket is scale * sum).
  virtual void to_wire(std::span<const float> input, float scale, void* wire);
  virtual void from_wire(const void* wire, std::span<float> out) const;
  // Like to_wire, and replaces `a` with a - from_wire(wire) / scale.
  virtual void to_wire_residual(std::span<float> a, float scale, void* wire);

  // Low-rank face (PowerSGD): non-null when the codec can run the allreduce-friendly
  // three-phase protocol of LowRankFace below. Strategies without allreduce ignore it and
  // use the message face.
  virtual LowRankFace* low_rank() { return nullptr; }

  // Shared-scale face (int8): non-null when the codec can run the allreduce protocol of
  // SharedScaleFace below. Strategies without allreduce use the message face.
  virtual SharedScaleFace* shared_scale() { return nullptr; }

  // Checkpoints (DistributedOptimizer's save and load): the state this codec carries from one
  // step to the next (error feedback's residual and momentum, PowerSGD's Q, warm-up and step
  // counters, random generators' states), appended to `out`. load_state() restores what
  // save_state() wrote into a codec built from the same spec for the same tensor, so that
  // it then encodes every following step exactly (bit for bit) as the saved one would have.
  // Stateless codecs write nothing. load_state() throws PayloadError for bytes that do not
  // fit (truncated, another codec's, another tensor size's) and then leaves the codec as it was.
  virtual void save_state(Bytes& out) const {}
  virtual void load_state(ByteReader& in) {}
};

// PowerSGD's exchange (ALGORITHMS.md 3), driven by a strategy that owns the allreduces:
//   begin(g, p):   M = g + E;  p = M Q                      -> allreduce-mean p
//   middle(p, q):  P = orthonormalise(p);  q = M^T P        -> allreduce-mean q
//   end(q, g):     Q = q (warm start);  g = P Q^T;  E = M - g
// Factors are row-major: P is rows x rank, Q is stored transposed (rank x cols) so that
// every loop runs over contiguous memory.
class LowRankFace {
 public:
  virtual ~LowRankFace() = default;
  // True during the codec's dense start: this step the strategy exchanges the gradient
  // itself (an fp32 allreduce-mean) instead of the factors, then calls count_dense_step().
  virtual bool dense_now() const { return false; }
  virtual void count_dense_step() {}
  virtual size_t p_size() const = 0;
  virtual size_t q_size() const = 0;
  virtual void begin(std::span<const float> gradient, std::span<float> p) = 0;
  virtual void middle(std::span<const float> p_mean, std::span<float> q) = 0;
  virtual void end(std::span<const float> q_mean, std::span<float> gradient) = 0;
};

// int8 values that W ranks can sum in int8 (ALGORITHMS.md, int8): every rank quantizes
// block b of its gradient a with the same step s_b = M_b / L, where M_b is the largest
// |a| of block b over all ranks and L = floor(127 / W) levels per sign, so that a sum of W
// values in [-L, L] never leaves [-127, 127]. Driven by a strategy that owns the
// allreduces, once per step and in this order:
//   local_maxima(g, m):               m[b] = max |a| in block b      -> allreduce-max m
//   quantize(g, m, L, q):             q = round(a / s_b), |q| <= L   -> allreduce-sum q (int8)
//   dequantize(q_sum, m, L, W, out):  out = q_sum * s_b / W
// With error feedback a = g + r and quantize leaves r = a - q s_b; without it a = g.
class SharedScaleFace {
 public:
  virtual ~SharedScaleFace() = default;
  virtual size_t blocks() const = 0;  // for this tensor
  virtual void local_maxima(std::span<const float> gradient, std::span<float> maxima) = 0;
  virtual void quantize(std::span<const float> gradient, std::span<const float> maxima, int levels,
                        int8_t* wire) = 0;
  // quantize() of `a` itself, leaving a <- a - q s_b (error feedback's residual).
  virtual void quantize_residual(std::span<float> a, std::span<const float> maxima, int levels,
                                 int8_t* wire) = 0;
  virtual void dequantize(const int8_t* summed, std::span<const float> maxima, int levels,
                          int world, std::span<float> out) const = 0;
};

// The levels per sign that W ranks can sum in int8 (0 when W > 127: not possible).
inline int shared_scale_levels(int world) { return world >= 1 ? 127 / world : 0; }

}  // namespace gradwire::compress
