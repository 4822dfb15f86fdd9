// `bf16`: bfloat16 cast, round to nearest even, NaN kept (src/gradwire/core/bf16.h;
// ALGORITHMS.md 2.5). Float's exponent range with 8 significant bits: nothing overflows
// that float would not, so unlike fp16 no pre-scaling is needed.
//
// Message face only: Gloo has no bfloat16 sum, so this build cannot allreduce bf16 values
// (additive_wire() is unset); payloads go by allgather and decode_add. Error feedback is off
// by default (the cast error is at most half a bf16 ulp, 2^-9 relative).
//
// Body: u16 bf16[N].
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/quantize/quantizers.h"
#include "gradwire/core/bf16.h"

namespace gradwire::compress {
namespace {

// wire = bf16(a); a <- a - float(wire).
[[gnu::noinline]] void bf16_residual_kernel(float* __restrict a, uint8_t* __restrict wire,
                                            size_t n) {
  vector_loop(n, [=](size_t i) {
    const uint16_t h = float_to_bf16(a[i]);
    store_u16(wire, i, h);
    a[i] -= bf16_to_float(h);
  });
}

class Bf16Codec final : public Codec {
 public:
  CodecId id() const override { return CodecId::kBf16; }
  std::string spec() const override { return bare_spec("bf16", {}); }

  void encode(std::span<const float> input, Bytes& out) override {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kBf16, kBf16Version, checked_count(input.size(), id())}.write(writer);
    float_to_bf16(input, writer.reserve_tail(2 * input.size()));
  }

  // r <- a - D(C(a)) in the same pass as the cast.
  void encode_residual(std::span<float> a, Bytes& out) override {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kBf16, kBf16Version, checked_count(a.size(), id())}.write(writer);
    bf16_residual_kernel(a.data(), writer.reserve_tail(2 * a.size()), a.size());
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kBf16, kBf16Version, accum.size());
    const auto values = reader.get_bytes(2 * accum.size(), "bf16 values");
    reader.expect_end("'bf16' payload");
    bf16_to_float_add(values.data(), accum);
  }
};

}  // namespace

std::unique_ptr<Codec> make_bf16_codec(SpecReader&, const TensorInfo&) {
  return std::make_unique<Bf16Codec>();
}

}  // namespace gradwire::compress
