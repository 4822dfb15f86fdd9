#include "gradwire/compress/error_feedback.h"

#include "gradwire/compress/codecs.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"

namespace gradwire::compress {
namespace {

[[gnu::noinline]] void add_kernel(const float* __restrict g, float* __restrict r, size_t n) {
  vector_loop(n, [=](size_t i) { r[i] += g[i]; });
}

// u_i = 0 where r_i changed (was sent)
[[gnu::noinline]] void mask_kernel(const float* __restrict before, const float* __restrict r,
                                   float* __restrict u, size_t n) {
  vector_loop(n, [=](size_t i) { u[i] = before[i] != r[i] ? 0.0f : u[i]; });
}

// u = m u + g;  r += u
[[gnu::noinline]] void momentum_kernel(const float* __restrict g, float* __restrict u,
                                       float* __restrict r, size_t n, float m) {
  vector_loop(n, [=](size_t i) {
    u[i] = m * u[i] + g[i];
    r[i] += u[i];
  });
}

}  // namespace

ErrorFeedback::ErrorFeedback(std::unique_ptr<Codec> inner, float momentum, bool mask_momentum)
    : inner_(std::move(inner)), momentum_(momentum), mask_momentum_(mask_momentum) {
  if (!inner_) throw Error("ErrorFeedback needs a codec to wrap (got null)");
  fused_ = dynamic_cast<FusedAccumulate*>(inner_.get());
  inner_face_ = inner_->shared_scale();
  if (!(momentum >= 0.0f && momentum < 1.0f)) {
    throw ConfigError("error feedback momentum=" + format_number(momentum) + " must be in [0, 1)");
  }
  Spec spec = Spec::parse(inner_->spec());
  spec.params["ef"] = std::string("1");  // not = "1": GCC 12 -O3 -Wrestrict false positive
  if (momentum > 0.0f) spec.params["momentum"] = format_number(momentum);
  spec_ = spec.to_string();
}

namespace {
constexpr uint32_t kErrorFeedbackStateTag = 0x31534645;  // "EFS1"
}  // namespace

void ErrorFeedback::save_state(Bytes& out) const {
  ByteWriter writer(out);
  writer.put<uint32_t>(kErrorFeedbackStateTag);
  writer.put_string(spec_);
  writer.put<uint8_t>(started_);
  writer.put<uint64_t>(residual_.size());
  writer.put_array<float>(residual_);
  writer.put<uint64_t>(velocity_.size());
  writer.put_array<float>(velocity_);
  Bytes inner;
  inner_->save_state(inner);
  put_section(out, inner);
}

void ErrorFeedback::load_state(ByteReader& in) {
  if (in.get<uint32_t>("error feedback state tag") != kErrorFeedbackStateTag) {
    throw PayloadError("no error-feedback state where codec '" + spec_ + "' expects one");
  }
  const std::string spec = in.get_string("codec spec");
  if (spec != spec_) {
    throw PayloadError("error-feedback state of codec '" + spec + "' given to codec '" + spec_ +
                       "'");
  }
  const bool started = in.get<uint8_t>("started") != 0;
  std::vector<float> residual(static_cast<size_t>(in.get<uint64_t>("residual size")));
  if (residual.size() * sizeof(float) > in.remaining()) {
    throw PayloadError("truncated error-feedback state of codec '" + spec_ + "'");
  }
  in.get_array<float>(std::span<float>(residual), "residual");
  std::vector<float> velocity(static_cast<size_t>(in.get<uint64_t>("momentum size")));
  if (velocity.size() * sizeof(float) > in.remaining()) {
    throw PayloadError("truncated error-feedback state of codec '" + spec_ + "'");
  }
  in.get_array<float>(std::span<float>(velocity), "momentum");
  const bool with_momentum = momentum_ > 0.0f;
  const bool velocity_fits = with_momentum ? velocity.size() == residual.size() : velocity.empty();
  if (started && !velocity_fits) {
    throw PayloadError("error-feedback state of codec '" + spec_ +
                       "' does not match its momentum setting");
  }
  ByteReader inner = get_section(in, "inner codec state");
  inner_->load_state(inner);
  inner.expect_end("inner codec state");
  started_ = started;
  residual_ = std::move(residual);
  velocity_ = std::move(velocity);
}

void ErrorFeedback::reserve(size_t n) {
  if (!started_) {
    residual_.assign(n, 0.0f);
    if (momentum_ > 0.0f) velocity_.assign(n, 0.0f);
    started_ = true;
  } else if (n != residual_.size()) {
    throw Error("error feedback for codec '" + spec_ + "' holds a residual of " +
                std::to_string(residual_.size()) + " elements but was given " + std::to_string(n) +
                "; a codec serves exactly one tensor (create one per tensor)");
  }
}

void ErrorFeedback::accumulate(std::span<const float> gradient) {
  reserve(gradient.size());
  if (momentum_ > 0.0f) {
    // u = m u + g; a = u + r, kept in r.
    momentum_kernel(gradient.data(), velocity_.data(), residual_.data(), gradient.size(),
                    momentum_);
  } else {
    // a = g + r, kept in r.
    add_kernel(gradient.data(), residual_.data(), gradient.size());
  }
}

void ErrorFeedback::encode(std::span<const float> gradient, Bytes& out) {
  if (fused_ && momentum_ == 0.0f) {
    // a = g + r and r <- a - D(C(a)), the add folded into the codec's first pass.
    reserve(gradient.size());
    fused_->add_encode_residual(gradient, residual_, out);
    return;
  }
  accumulate(gradient);
  const bool mask = momentum_ > 0.0f && mask_momentum_;
  if (mask) before_.assign(residual_.begin(), residual_.end());
  // r <- a - D(C(a))
  inner_->encode_residual(residual_, out);
  // Momentum factor masking: coordinates that were sent restart their momentum.
  if (mask) mask_kernel(before_.data(), residual_.data(), velocity_.data(), residual_.size());
}

void ErrorFeedback::decode_add(std::span<const uint8_t> payload, std::span<float> accum) const {
  inner_->decode_add(payload, accum);
}

void ErrorFeedback::to_wire(std::span<const float> gradient, float scale, void* wire) {
  if (!inner_->additive_wire()) throw_not_additive(id(), "to_wire");
  check_residual_scale(scale, id());
  accumulate(gradient);
  // wire = scale * a; r <- a - from_wire(wire) / scale
  inner_->to_wire_residual(residual_, scale, wire);
}

void ErrorFeedback::from_wire(const void* wire, std::span<float> out) const {
  inner_->from_wire(wire, out);
}

void ErrorFeedback::to_wire_residual(std::span<float> a, float scale, void* wire) {
  to_wire(a, scale, wire);
  std::vector<float> sent(a.size());
  inner_->from_wire(wire, sent);
  for (size_t i = 0; i < a.size(); ++i) a[i] -= sent[i] / scale;
}

size_t ErrorFeedback::blocks() const { return inner_face_ ? inner_face_->blocks() : 0; }

void ErrorFeedback::local_maxima(std::span<const float> gradient, std::span<float> maxima) {
  if (!inner_face_) throw Error("codec '" + spec_ + "' has no shared-scale face");
  accumulate(gradient);  // a = g + r, kept in r
  inner_face_->local_maxima(residual_, maxima);
}

void ErrorFeedback::quantize(std::span<const float>, std::span<const float> maxima, int levels,
                             int8_t* wire) {
  if (!inner_face_ || !started_) {
    throw Error("codec '" + spec_ + "': quantize() before local_maxima() of the same step");
  }
  inner_face_->quantize_residual(residual_, maxima, levels, wire);  // r <- a - D(q)
}

void ErrorFeedback::quantize_residual(std::span<float>, std::span<const float>, int, int8_t*) {
  throw Error("codec '" + spec_ + "' keeps its own residual: use quantize()");
}

void ErrorFeedback::dequantize(const int8_t* summed, std::span<const float> maxima, int levels,
                               int world, std::span<float> out) const {
  if (!inner_face_) throw Error("codec '" + spec_ + "' has no shared-scale face");
  inner_face_->dequantize(summed, maxima, levels, world, out);
}

}  // namespace gradwire::compress
