#include "gradwire/compress/error_feedback.h"

#include <cmath>

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

ErrorFeedback::ErrorFeedback(std::unique_ptr<Codec> inner, float momentum, bool mask_momentum,
                             std::optional<size_t> numel)
    : inner_(std::move(inner)), numel_(numel), momentum_(momentum), mask_momentum_(mask_momentum) {
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

constexpr uint8_t kStateVersion = 1;

// A u64 count that must be `expected`, then that many floats (r or u of a state).
std::vector<float> read_state_floats(ByteReader& in, uint64_t expected, const char* field,
                                     const std::string& spec) {
  const auto size = in.get<uint64_t>(field);
  if (size != expected) {
    throw PayloadError("corrupt error-feedback state of codec '" + spec + "': " + field + " of " +
                       std::to_string(size) + " values where " + std::to_string(expected) +
                       " were expected");
  }
  if (size > in.remaining() / sizeof(float)) {
    throw PayloadError("truncated error-feedback state of codec '" + spec + "': " + field + " of " +
                       std::to_string(size) + " values in " + std::to_string(in.remaining()) +
                       " bytes");
  }
  std::vector<float> values(static_cast<size_t>(size));
  in.get_array<float>(std::span<float>(values), field);
  return values;
}

}  // namespace

void ErrorFeedback::save_state(Bytes& out) const {
  write_state_header(out, *this, kStateVersion, numel_.value_or(residual_.size()));
  ByteWriter writer(out);
  writer.put<uint8_t>(started_ ? 1 : 0);
  writer.put<uint64_t>(residual_.size());
  writer.put_array<float>(residual_);
  writer.put<uint64_t>(velocity_.size());
  writer.put_array<float>(velocity_);
  Bytes inner;
  inner_->save_state(inner);
  put_section(out, inner);
}

void ErrorFeedback::load_state(ByteReader& in) {
  const uint64_t count = read_state_header(in, *this, kStateVersion, numel_);
  const auto flag = in.get<uint8_t>("error feedback started flag");
  if (flag > 1) {
    throw PayloadError("corrupt error-feedback state of codec '" + spec_ + "': started flag " +
                       std::to_string(flag) + " (must be 0 or 1)");
  }
  // Before the first step r and u are empty; from it on r holds the tensor, u too when
  // momentum is on.
  const bool started = flag == 1;
  std::vector<float> residual = read_state_floats(in, started ? count : 0, "residual", spec_);
  std::vector<float> velocity =
      read_state_floats(in, started && momentum_ > 0.0f ? count : 0, "momentum", spec_);
  ByteReader inner = get_section(in, "inner codec state");
  // The inner codec's load changes nothing when it throws, but the section may still hold
  // more than the inner codec read: then its previous state goes back.
  Bytes inner_before;
  inner_->save_state(inner_before);
  inner_->load_state(inner);
  try {
    inner.expect_end("inner codec state");
  } catch (const PayloadError&) {
    ByteReader back(inner_before);
    inner_->load_state(back);
    throw;
  }
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

void ErrorFeedback::undo_accumulate(std::span<const float> g) {
  if (g.size() != residual_.size()) return;  // refused before any state was touched
  const auto finite = [](float v) { return std::isfinite(v); };
  if (momentum_ > 0.0f) {
    for (size_t i = 0; i < g.size(); ++i) {
      const float u = velocity_[i];
      const float r = residual_[i] - u, u0 = (u - g[i]) / momentum_;
      const bool ok = finite(g[i]) && finite(r) && finite(u0);
      residual_[i] = ok ? r : 0.0f;
      velocity_[i] = ok ? u0 : 0.0f;
    }
  } else {
    for (size_t i = 0; i < g.size(); ++i) {
      const float r = residual_[i] - g[i];
      residual_[i] = finite(g[i]) && finite(r) ? r : 0.0f;
    }
  }
}

template <typename Encode>
void ErrorFeedback::undo_on_throw(std::span<const float> gradient, Encode&& encode) {
  try {
    encode();
  } catch (...) {
    undo_accumulate(gradient);
    throw;
  }
}

void ErrorFeedback::encode(std::span<const float> gradient, Bytes& out) {
  if (fused_ && momentum_ == 0.0f) {
    // a = g + r and r <- a - D(C(a)), the add folded into the codec's first pass.
    reserve(gradient.size());
    undo_on_throw(gradient, [&] { fused_->add_encode_residual(gradient, residual_, out); });
    return;
  }
  accumulate(gradient);
  const bool mask = momentum_ > 0.0f && mask_momentum_;
  if (mask) before_.assign(residual_.begin(), residual_.end());
  // r <- a - D(C(a))
  undo_on_throw(gradient, [&] { inner_->encode_residual(residual_, out); });
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
  undo_on_throw(gradient, [&] { inner_->to_wire_residual(residual_, scale, wire); });
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
  undo_on_throw(gradient, [&] { inner_face_->local_maxima(residual_, maxima); });
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
