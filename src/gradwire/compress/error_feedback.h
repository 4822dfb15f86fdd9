// Error feedback (EF-SGD): a decorator that keeps, per tensor, what its codec has not sent
// yet and adds it to the next gradient, so compression error is delayed, never lost.
//
//   a = g + r;  send C(a);  r <- a - D(C(a))
//
// Over any number of steps, sum of decoded payloads + r == sum of gradients (up to float
// rounding). The residual is allocated, zeroed, on first use and is tied to that size.
//
// With momentum m > 0 (spec key `momentum`), momentum is applied before compression
// (DGC's momentum correction without masking; EF-SGDM of Zheng et al. 2019):
//
//   u = m u + g;  a = u + r;  send C(a);  r <- a - D(C(a))
//
// and the optimizer must then run without momentum: the aggregate of D(C(a)) over ranks is
// already the momentum update. Heavy-ball momentum applied after aggregation amplifies the
// delay error feedback gives to large coordinates; with quantizers that send one shared
// magnitude (2bit, signSGD) that loop diverges (docs/ALGORITHMS.md 2.1).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire::compress {

class ErrorFeedback final : public Codec {
 public:
  explicit ErrorFeedback(std::unique_ptr<Codec> inner, float momentum = 0.0f);

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

  // The residual r (empty before the first encode/to_wire).
  std::span<const float> residual() const { return residual_; }
  const Codec& inner() const { return *inner_; }

 private:
  // r += g (or u = m u + g; r += u), allocating r and u on first use.
  void accumulate(std::span<const float> gradient);

  std::unique_ptr<Codec> inner_;
  std::string spec_;
  std::vector<float> residual_;
  std::vector<float> velocity_;  // u, only with momentum
  std::vector<float> before_;    // a before encoding, to find the sent coordinates
  float momentum_;
  bool started_ = false;
};

}  // namespace gradwire::compress
