// Error feedback (EF-SGD): a decorator that keeps, per tensor, what its codec has not sent
// yet and adds it to the next gradient, so compression error is delayed, never lost.
//
//   a = g + r;  send C(a);  r <- a - D(C(a))
//
// Over any number of steps, sum of decoded payloads + r == sum of gradients (up to float
// rounding). The residual is allocated, zeroed, on first use and is tied to that size.
//
// With momentum m > 0 (spec key `momentum`), momentum is applied before compression
// (DGC's momentum correction; EF-SGDM of Zheng et al. 2019):
//
//   u = m u + g;  a = u + r;  send C(a);  r <- a - D(C(a));  u_i <- 0 where sent (masking)
//
// and the optimizer must then run without momentum: the aggregate of D(C(a)) over ranks is
// already the momentum update. Heavy-ball momentum applied after aggregation amplifies the
// delay error feedback gives to large coordinates; with quantizers that send one shared
// magnitude (2bit, signSGD) that loop diverges (docs/ALGORITHMS.md 2.1).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire::compress {

// Implemented (besides Codec) by a codec that can fold error feedback's r += g into its own
// first pass over r, saving a pass over memory (2bit: the pass that sums |a| for its
// threshold). add_encode_residual(g, r, out) must leave r and out exactly as r[i] += g[i]
// followed by encode_residual(r, out) would. ErrorFeedback uses it when momentum is off.
class FusedAccumulate {
 public:
  virtual void add_encode_residual(std::span<const float> gradient, std::span<float> residual,
                                   Bytes& out) = 0;

 protected:
  ~FusedAccumulate() = default;
};

class ErrorFeedback final : public Codec, public SharedScaleFace {
 public:
  // mask_momentum: zero u at the coordinates a payload sent (DGC's momentum factor
  // masking; for codecs that send a subset of the coordinates). numel: the tensor's size,
  // which checkpoint states record and load_state() checks (create_codec() passes it;
  // without it a state fits any size, and the residual's size is recorded).
  explicit ErrorFeedback(std::unique_ptr<Codec> inner, float momentum = 0.0f,
                         bool mask_momentum = true, std::optional<size_t> numel = std::nullopt);

  CodecId id() const override { return inner_->id(); }
  // The inner codec's canonical spec with ef=1 (and momentum=m when set).
  std::string spec() const override { return spec_; }
  std::optional<WireType> additive_wire() const override { return inner_->additive_wire(); }

  // r += g; inner->encode_residual(r, out), which leaves r = a - D(C(a)).
  void encode(std::span<const float> gradient, Bytes& out) override;
  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override;

  // Additive face: r += g; wire = scale * a (in the wire type); r <- a - from_wire(wire) / scale.
  void to_wire(std::span<const float> gradient, float scale, void* wire) override;
  void from_wire(const void* wire, std::span<float> out) const override;
  // As to_wire(), then `a` <- a - from_wire(wire) / scale (the error relative to `a`).
  void to_wire_residual(std::span<float> a, float scale, void* wire) override;

  // Shared-scale face, when the inner codec has one: local_maxima() accumulates a = g + r
  // (once per step) and reports a's maxima; quantize() quantizes a, leaving r = a - D.
  SharedScaleFace* shared_scale() override { return inner_face_ ? this : nullptr; }
  size_t blocks() const override;
  void local_maxima(std::span<const float> gradient, std::span<float> maxima) override;
  void quantize(std::span<const float> gradient, std::span<const float> maxima, int levels,
                int8_t* wire) override;
  void quantize_residual(std::span<float> a, std::span<const float> maxima, int levels,
                         int8_t* wire) override;
  void dequantize(const int8_t* summed, std::span<const float> maxima, int levels, int world,
                  std::span<float> out) const override;

  // The residual r (empty before the first encode/to_wire).
  std::span<const float> residual() const { return residual_; }

  // Checkpoints: r and u (empty before the first step), then the inner codec's state in a
  // section. load_state() leaves this codec and the inner one as they were when it throws.
  void save_state(Bytes& out) const override;
  void load_state(ByteReader& in) override;
  const Codec& inner() const { return *inner_; }

 private:
  // r += g (or u = m u + g; r += u), allocating r and u on first use.
  void accumulate(std::span<const float> gradient);
  // After the inner codec refused its input (non-finite values), which it does after
  // a = g + r was formed (accumulate(), or the fused add): r, and u with momentum, back to
  // what they were where that can be recovered (r - u, (u - g) / m), 0 where it cannot (a
  // coordinate g made non-finite). A refused step so leaves no non-finite state behind:
  // the next finite gradient encodes as if the refused one had not come.
  void undo_accumulate(std::span<const float> gradient);
  // Runs `encode` (which accumulates then may throw), undoing the accumulation on a throw.
  template <typename Encode>
  void undo_on_throw(std::span<const float> gradient, Encode&& encode);
  // Allocates r (and u) on first use; throws if `n` differs from their size.
  void reserve(size_t n);

  std::unique_ptr<Codec> inner_;
  FusedAccumulate* fused_ = nullptr;       // inner_ as FusedAccumulate, when it is one
  SharedScaleFace* inner_face_ = nullptr;  // inner_'s shared-scale face, when it has one
  std::string spec_;
  std::optional<size_t> numel_;
  std::vector<float> residual_;
  std::vector<float> velocity_;  // u, only with momentum
  std::vector<float> before_;    // a before encoding, to find the sent coordinates
  float momentum_;
  bool mask_momentum_;
  bool started_ = false;
};

}  // namespace gradwire::compress
